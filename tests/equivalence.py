"""Random elementwise models, and LiteRT's intermediates to check the fused result against.

Tolerances and their propagation through a DAG are fusion_delegate.tolerances (error_bounds),
the statement `fusion-delegate check` and fusion_delegate.testing use too. Discontinuous ops
(FLOOR, CEIL, ROUND, SIGN) are only ever given exact inputs, so a tiny upstream difference can
never flip them: that is a property of the generated models, not a looser tolerance.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from fusion_delegate.runtime import Interpreter
from hypothesis import strategies as st

from codegen.ops import ACTIVATIONS, OPS
from conftest import BUILTIN
from fusion_delegate.model import ModelBuilder

DIMS = [1, 1, 2, 3, 5, 7]
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, 1e30, -1e-30, 1e-40,
                     -1e-45, 2.5, -0.5], np.float32)


@dataclass
class Graph:
    """A generated model and what the test needs to know about it; `structure`: what decides
    the paths its kernel takes (ops, wiring, which dims broadcast, size class, the kinds of
    its constants), not the sizes of its dims or the values of its constants."""
    model: bytes
    input_shapes: list[tuple[int, ...]]
    ops: list[tuple[str, tuple[int, ...], int, dict]] = field(default_factory=list)
    exact: dict[int, bool] = field(default_factory=dict)
    structure: tuple = ()


def dims_pattern(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Which dims of a shape are longer than 1: how it broadcasts against the others."""
    return tuple(d > 1 for d in shape)


def size_class(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Whether a shape holds a vector of 16 float32 and a vectorised loop iteration of 64 (a
    tile's minimum, codegen.schedule.TILE_MIN): past each, the kernel takes other paths."""
    elements = math.prod(shape)
    return elements >= 16, elements >= 64


@st.composite
def shapes(draw, max_rank=6, max_elements=1500):
    """A full shape, and derived input shapes that broadcast to it (dims set to 1, or dropped)."""
    rank = draw(st.integers(0, max_rank))
    full = [draw(st.sampled_from(DIMS)) for _ in range(rank)]
    while np.prod(full, dtype=np.int64) > max_elements:
        full[full.index(max(full))] = 1
    return tuple(full)


def broadcast_variant(draw, full: tuple[int, ...]) -> tuple[int, ...]:
    shape = [1 if draw(st.booleans()) and draw(st.booleans()) else d for d in full]
    drop = draw(st.integers(0, len(shape)))
    return tuple(shape[drop:])


@st.composite
def graphs(draw, op_names=tuple(OPS), max_ops=8):
    """A random DAG of fusable ops: shared operands, constants of every broadcast kind, fused
    activations, several outputs (some also consumed inside the graph)."""
    full = draw(shapes())
    b = ModelBuilder("random")
    n_inputs = draw(st.integers(1, 3))
    input_shapes = [full] + [broadcast_variant(draw, full) for _ in range(n_inputs - 1)]
    tensors = [(b.input(f"in{i}", s), s) for i, s in enumerate(input_shapes)]
    graph = Graph(model=b"", input_shapes=input_shapes)
    graph.exact = {t: True for t, _ in tensors}
    consumed: set[int] = set()
    constants: dict[int, np.ndarray] = {}
    constant_kinds: list[tuple] = []

    def operand():
        kind = draw(st.sampled_from(["tensor", "tensor", "tensor", "const"]))
        if kind == "tensor":
            return draw(st.sampled_from(tensors))
        shape = draw(st.sampled_from([(), (1,), full[-1:], broadcast_variant(draw, full)]))
        values = draw(st.sampled_from(["normal", "positive", "special"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        data = np.asarray(rng.standard_normal(shape) * 3, np.float32)
        if values == "positive":
            data = np.abs(data) + np.float32(0.25)
        elif values == "special" and data.size:
            data.reshape(-1)[0] = rng.choice(SPECIALS)
        t = b.const(f"c{len(graph.exact)}", data)
        special = data.reshape(-1)[:1].tobytes() if values == "special" else b""
        constant_kinds.append((t, dims_pattern(data.shape), values, special))
        graph.exact[t] = True
        constants[t] = data
        return t, tuple(data.shape)

    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(op_names))
        spec = OPS[name]
        args = [operand() for _ in range(spec.arity)]
        exact_in = all(graph.exact[t] for t, _ in args)
        if spec.discontinuous and not exact_in or not claimable(name, args, constants):
            continue
        params, options = op_params(draw, name)
        out = b.op(name, [t for t, _ in args], options or None)
        out_shape = tuple(np.broadcast_shapes(*(s for _, s in args)))
        graph.ops.append((name, tuple(t for t, _ in args), out, params))
        graph.exact[out] = exact_in and spec.tolerance.exact
        consumed.update(t for t, _ in args)
        tensors.append((out, out_shape))
    outputs = [t for _, _, t, _ in graph.ops if t not in consumed]
    extra = [t for _, _, t, _ in graph.ops if t in consumed]
    if extra and draw(st.booleans()):
        outputs.append(draw(st.sampled_from(extra)))  # an output also used inside
    if not graph.ops:
        outputs = [b.op("NEG", [tensors[0][0]])]
        graph.ops.append(("NEG", (tensors[0][0],), outputs[0], {}))
        graph.exact[outputs[0]] = True
    b.output(*sorted(set(outputs)))
    graph.model = b.to_bytes()
    graph.structure = (repr(graph.ops), tuple(map(dims_pattern, input_shapes)),
                       size_class(full), tuple(constant_kinds), tuple(sorted(set(outputs))))
    return graph


def claimable(name: str, args, constants) -> bool:
    """The few shape rules under which LiteRT itself behaves differently (and we don't claim)."""
    shapes = [s for _, s in args]
    if name == "PRELU":
        return tuple(np.broadcast_shapes(*shapes)) == shapes[0]
    if name == "POW":
        exponent, shape = args[1]
        return int(np.prod(shape)) != 1 or exponent in constants
    return True


def op_params(draw, name: str) -> tuple[dict, dict]:
    """(params as the kernel sees them, options as the model file stores them)."""
    spec = OPS[name]
    if spec.fused_activation:
        activation = draw(st.sampled_from(sorted(ACTIVATIONS)))
        return {"activation": activation}, {"fused_activation_function": activation}
    if name == "LEAKY_RELU":
        alpha = float(np.float32(draw(st.sampled_from([0.2, 0.01, -0.5, 1.5, 0.0]))))
        return {"alpha": alpha}, {"alpha": alpha}
    if name == "GELU":
        approximate = draw(st.booleans())
        return {"approximate": approximate}, {"approximate": approximate}
    return {}, {}


def random_inputs(rng: np.random.Generator, shapes, special_fraction=0.1) -> list[np.ndarray]:
    """Normal values at several scales, with NaN, +-Inf, -0.0, huge and tiny values mixed in."""
    arrays = []
    for shape in shapes:
        scale = rng.choice([1.0, 4.0, 30.0])
        a = np.asarray(rng.standard_normal(shape) * scale, np.float32)
        mask = np.asarray(rng.random(shape) < special_fraction)
        a[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
        arrays.append(a)
    return arrays


def oracle_tensors(model: bytes, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor's value as LiteRT's builtin kernels compute it."""
    interpreter = Interpreter(model_content=model, experimental_op_resolver_type=BUILTIN,
                              experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    for d, a in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], a)
    interpreter.invoke()
    return {d["index"]: interpreter.get_tensor(d["index"]).copy()
            for d in interpreter.get_tensor_details() if d["dtype"] == np.float32}
