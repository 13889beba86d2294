"""Property-based equivalence testing of your own model: the delegate against LiteRT.

    from hypothesis import given, settings
    from fusion_delegate.testing import assert_equivalent, tensor_inputs

    @settings(max_examples=50, deadline=None)
    @given(inputs=tensor_inputs("model.tflite"))
    def test_delegate_matches_litert(inputs):
        assert_equivalent("model.tflite", inputs)

`tensor_inputs` draws the inputs where fused kernels and LiteRT part ways (NaN, +-inf, -0.0,
subnormals, huge and tiny magnitudes, every int8/uint8 code, values on and between the model's
quantization steps, the tail elements of a vector block); `assert_equivalent` raises an
AssertionError that names the output or partition, the worst element, and its error against
the tolerance of fusion_delegate.tolerances.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from .comparison import Checker, Comparison, Edits, NotCheckable
from .model import Model, read_model
from .options import FusionOptions
from .tools.runner import RESOLVER_LABELS

__all__ = ["EDGE_VALUES", "NotCheckable", "assert_equivalent", "checker", "edge_probes",
           "input_specs", "partition_edits", "plain", "tensor_inputs"]

FLT_MAX = float(np.finfo(np.float32).max)
#: Float values where kernels take other paths: NaN, infinities, signed zeros, subnormals, the
#: float range's ends, the overflow and underflow edges of exp, the corners of the clamps.
EDGE_VALUES = np.array([
    np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38,
    -1.1754944e-38, FLT_MAX, -FLT_MAX, 3e38, -3e38, 1e30, -1e30, 1e-30, -1e-30, 88.72284,
    -87.33655, -103.97, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 6.0, -6.0, 1e-7],
    np.float32)
#: Magnitudes of the normal data edge values are mixed into.
SCALES = (1.0, 4.0, 30.0, 255.0, 1e-3, 1e4, 1e-38, 1e30)
#: Elements from the end of a tensor that count as its tail: past the last vector block.
TAIL = 64
MAX_EDITS = 24


@dataclass(frozen=True)
class InputSpec:
    """What a strategy needs to know of one model input."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    #: (scale, zero point) of the input if quantized, else of the tensors QUANTIZE makes of it.
    steps: tuple[tuple[float, int], ...] = ()

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _model(model: bytes | str | os.PathLike | Model) -> Model:
    return model if isinstance(model, Model) else read_model(model)


def input_specs(model: bytes | str | os.PathLike | Model) -> list[InputSpec]:
    """One InputSpec per input, or NotCheckable for a model whose inputs cannot be drawn:
    dynamic shapes, string, bool or other non-numeric inputs."""
    graph = _model(model).subgraphs[0]
    specs = []
    for t in graph.inputs:
        tensor = graph.tensors[t]
        dtype = np.dtype(tensor.dtype)
        if tensor.shape_signature is not None and any(d < 0 for d in tensor.shape_signature):
            raise NotCheckable(f"input '{tensor.name}' has a dynamic shape "
                               f"{list(tensor.shape_signature)}: give it a fixed shape")
        if dtype.kind not in "fiu":
            raise NotCheckable(f"input '{tensor.name}' has dtype {dtype.name}: only float and "
                               f"integer inputs can be checked")
        steps = []
        quantized = [tensor] if tensor.quantization is not None else [
            graph.tensors[op.outputs[0]] for op in graph.operators
            if op.op == "QUANTIZE" and op.inputs[0] == t]
        for q in quantized:
            if q.quantization is not None and q.quantization.scale.size:
                steps.append((float(q.quantization.scale[0]),
                              int(q.quantization.zero_point[0])))
        specs.append(InputSpec(tensor.name, tuple(tensor.shape), dtype, tuple(steps)))
    return specs


def float_values() -> st.SearchStrategy[float]:
    """Any float32, edge values most often."""
    return st.one_of(st.sampled_from(EDGE_VALUES.tolist()),
                     st.floats(width=32, allow_nan=True, allow_infinity=True))


@st.composite
def _array(draw, spec: InputSpec, seeds: Sequence[np.ndarray]) -> np.ndarray:
    """Base data (normal values at a drawn scale, the quantization grid, a seed, a constant,
    or for integers every code in turn) with single elements replaced, often in the tail."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kinds = ["normal", "steps", "constant"] + (["seed"] if seeds else [])
    kind = draw(st.sampled_from(kinds))
    integer = spec.dtype.kind in "iu"
    info = np.iinfo(spec.dtype) if integer else None
    values = st.integers(int(info.min), int(info.max)) if integer else float_values()
    if kind == "seed":
        data = np.array(seeds[draw(st.integers(0, len(seeds) - 1))], spec.dtype).reshape(-1)
    elif kind == "constant":
        data = np.full(spec.size, draw(values), spec.dtype)
    elif integer and kind == "steps":         # every code, from a drawn one on
        codes = np.arange(int(info.min), int(info.max) + 1)
        data = np.resize(np.roll(codes, -draw(st.integers(0, codes.size - 1))), spec.size)
    elif kind == "steps" and spec.steps:      # on a quantization step, half-way, or next to
        scale, zero = draw(st.sampled_from(spec.steps))
        codes = rng.integers(-128, 256, spec.size) - zero
        offset = draw(st.sampled_from([0.0, 0.5, -0.5, 0.25]))
        data = ((codes + offset) * scale).astype(spec.dtype)
        if draw(st.booleans()):
            data = np.nextafter(data, np.float32(np.inf) * draw(st.sampled_from([1, -1])))
    else:
        data = plain(spec, rng, draw(st.sampled_from(SCALES)))
    data = np.asarray(data).astype(spec.dtype)
    if spec.size:
        tail = st.integers(max(0, spec.size - TAIL), spec.size - 1)
        positions = st.one_of(tail, st.integers(0, spec.size - 1))
        for _ in range(draw(st.integers(0, min(MAX_EDITS, spec.size)))):
            data[draw(positions)] = draw(values)
    return data.reshape(spec.shape)


def plain(spec: InputSpec, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """Ordinary data: any integer code, or normal floats of magnitude `scale`."""
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        return rng.integers(int(info.min), int(info.max) + 1, spec.size).astype(spec.dtype)
    return (rng.standard_normal(spec.size) * scale).astype(spec.dtype)


def tensor_inputs(model, seeds: Sequence[Sequence[np.ndarray]] = ()
                  ) -> st.SearchStrategy[list[np.ndarray]]:
    """A strategy of input lists for `model` (bytes, path, a parsed Model, or an interpreter);
    `seeds`: input lists (your real data) to start from as well."""
    specs = interpreter_specs(model) if hasattr(model, "get_input_details") \
        else input_specs(model)
    per_input = [[np.asarray(s[i]) for s in seeds] for i in range(len(specs))]
    return st.tuples(*(_array(spec, seeds_i) for spec, seeds_i in zip(specs, per_input))
                     ).map(list)


def partition_edits(check: Checker) -> st.SearchStrategy[dict[int, Edits]]:
    """Per partition of `check`, elements of what it is fed to replace (edge values and codes,
    often in the tail): inputs of a partition that no model input may lead to, but on which
    its kernel must still agree with LiteRT's."""
    by_partition = {}
    for p in check.partitions:
        choices = []
        for k, t in enumerate(p.graph.inputs):
            tensor = p.graph.tensors[t]
            size, dtype = math.prod(tensor.shape), np.dtype(tensor.dtype)
            if not size or dtype.kind not in "fiu":
                continue
            info = np.iinfo(dtype) if dtype.kind in "iu" else None
            values = st.integers(int(info.min), int(info.max)) if info else float_values()
            index = st.one_of(st.integers(max(0, size - TAIL), size - 1),
                              st.integers(0, size - 1))
            choices.append(st.tuples(st.just(k), index, values))
        floats = [t for t in p.graph.inputs if np.dtype(p.graph.tensors[t].dtype).kind == "f"]
        if len(floats) > 1 and len(floats) == len(p.graph.inputs):
            size = max(math.prod(p.graph.tensors[t].shape) for t in floats)
            choices.append(st.tuples(st.just(-1), st.integers(0, max(size - 1, 0)),
                                     float_values()))
        if choices:
            by_partition[p.number] = st.lists(st.one_of(*choices), max_size=MAX_EDITS)
    return st.fixed_dictionaries(by_partition)


#: What the probes put where an op's operands meet: the values whose result's sign or class
#: a wrong kernel gets wrong (x + y is -0.0 only when both are; inf - inf is NaN).
PROBE_VALUES = (-0.0, 0.0, np.nan, np.inf, -np.inf, FLT_MAX, -FLT_MAX, 1e-40, -1e-40)


def edge_probes(check: Checker, inputs: list[np.ndarray]
                ) -> list[tuple[list[np.ndarray], dict[int, Edits]]]:
    """Fixed (inputs, edits) tried before any random search: per probe value, every float
    model input filled with it, and each delegated partition fed `inputs`' values with that
    value at the first and last element of every float input at once. Hitting one value at
    the same element of two operands is rare for random edits; these make it certain."""
    probes = []
    for value in PROBE_VALUES:
        probes.append(([np.full_like(a, value) if a.dtype.kind == "f" else a for a in inputs],
                       {}))
        edits = {}
        for p in check.partitions:
            floats = [k for k, t in enumerate(p.graph.inputs)
                      if np.dtype(p.graph.tensors[t].dtype).kind == "f"]
            edits[p.number] = [(k, index, value) for k in floats for index in (0, -1)]
        probes.append((inputs, edits))
    return probes


def interpreter_specs(interpreter) -> list[InputSpec]:
    """InputSpecs from an allocated interpreter (its quantization, not its graph)."""
    specs = []
    for detail in interpreter.get_input_details():
        dtype = np.dtype(detail["dtype"])
        if dtype.kind not in "fiu":
            raise NotCheckable(f"input '{detail['name']}' has dtype {dtype.name}: only float "
                               f"and integer inputs can be checked")
        if any(int(d) < 0 for d in detail.get("shape_signature", detail["shape"])):
            raise NotCheckable(f"input '{detail['name']}' has a dynamic shape "
                               f"{list(detail['shape_signature'])}: give it a fixed shape")
        scale, zero = detail.get("quantization", (0.0, 0))
        steps = ((float(scale), int(zero)),) if scale else ()
        specs.append(InputSpec(detail["name"], tuple(int(d) for d in detail["shape"]), dtype,
                               steps))
    return specs


def _bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    with open(model, "rb") as file:
        return file.read()


@functools.lru_cache(maxsize=8)
def _checker(data: bytes, reference: str, options: FusionOptions) -> Checker:
    return Checker(data, reference, options)


def checker(model, reference: str = "builtin",
            options: FusionOptions | dict | None = None) -> Checker:
    """The interpreters `assert_equivalent` compares, built once per model and options."""
    data = _bytes(model)
    if isinstance(options, dict):
        options = FusionOptions.from_kwargs(**options)
    input_specs(data)
    return _checker(data, reference, options or FusionOptions())


def assert_equivalent(model, inputs: Sequence[np.ndarray], reference: str = "builtin",
                      options: FusionOptions | dict | None = None) -> Comparison:
    """Raise AssertionError unless the delegate's outputs, and each delegated partition fed
    the reference's values, are within tolerance of the reference (LiteRT's "builtin" kernels
    or "xnnpack", its default path). `options`: the delegate's (FusionOptions or a dict).
    Returns the comparison, whose verdicts also say how close a pass was."""
    check = checker(model, reference, options)
    comparison = check.compare(inputs)
    if not comparison.ok:
        comparison.blame = check.blame(comparison)
        raise AssertionError("\n".join(report(check, comparison)))
    return comparison


def report(check: Checker, comparison: Comparison) -> list[str]:
    """numpy.testing-style lines: what is not equivalent, where, by how much."""
    lines = [f"Not equivalent to {RESOLVER_LABELS[check.reference]} "
             f"(precision={check.precision}):"]
    for verdict in comparison.verdicts:
        if not verdict.ok:
            lines += verdict.lines()
    if comparison.blame is not None:
        p = check.partition(comparison.blame)
        lines.append(f"{p.label} is responsible; to run without it pass "
                     f"exclude_nodes=\"{','.join(map(str, p.nodes))}\"")
        if comparison.edits.get(p.number):
            lines.append(f"  (fed LiteRT's values at its inputs with "
                         f"{len(comparison.edits[p.number])} elements replaced: (input, flat "
                         f"index, value) {comparison.edits[p.number]})")
    return lines
