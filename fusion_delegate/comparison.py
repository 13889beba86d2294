"""Run a model with the delegate and on a LiteRT reference, and judge every difference against
the tolerances of fusion_delegate.tolerances.

Two comparisons per set of inputs: the model's outputs, and each delegated partition on its
own (cut out of the model, fed the reference's values at its inputs, optionally with elements
replaced), because an error that then passes through a convolution or a matmul is no longer
bounded by the op table, while a partition fed exact inputs always is, and because edge values
at a partition's inputs are hard to reach from the model's. A partition that breaks its
tolerance is named; a model output that breaks it alone is blamed by re-running with each
partition excluded (the `exclude_nodes` option).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections.abc import Sequence

import numpy as np

from .errors import FusionDelegateError
from .model import Subgraph, dtype_name, read_model, write_model
from .options import FusionOptions
from .tolerances import beyond, distance, graph_bounds, ulp32
from .tools.cut import cut_partition
from .tools.runner import RESOLVER_LABELS, Runner, build, infer

REFERENCES = ("builtin", "xnnpack")


class NotCheckable(FusionDelegateError, ValueError):
    """The model or the inputs cannot be compared: the message says what to change."""


@dataclass
class TensorVerdict:
    """One tensor compared element by element: its worst element and how many broke the bound.

    `units` counts ulps of a float, LSBs of an integer. `bound` is absolute, infinite where
    the error passes through a LiteRT kernel the op table does not describe (then the
    difference is only reported)."""
    where: str
    dtype: str
    shape: tuple[int, ...]
    beyond: int
    index: tuple[int, ...]
    got: float
    want: float
    units: float
    abs_error: float
    bound: float

    @property
    def ok(self) -> bool:
        return self.beyond == 0

    @property
    def unit(self) -> str:
        return "ulp" if self.dtype.startswith("float") else "LSB"

    def tolerance(self) -> str:
        """The bound at the worst element, in the tensor's units and absolute."""
        if not np.isfinite(self.bound):
            return "not bounded there (the error passes through LiteRT kernels)"
        if self.bound == 0:
            return "0 (bit-exact)"
        if self.unit == "LSB":
            return f"{self.bound:g} LSB"
        ulps = self.bound / float(ulp32(np.float32(self.want))) if np.isfinite(self.want) \
            else np.inf
        return f"{ulps:.3g} ulp ({self.bound:.3g} absolute)"

    def lines(self) -> list[str]:
        shape = "x".join(map(str, self.shape)) or "scalar"
        head = f"{self.where} {self.dtype}[{shape}]: "
        if self.units == 0:
            return [head + "identical"]
        status = "ok" if self.ok else f"MISMATCH, {self.beyond} of " \
            f"{int(np.prod(self.shape))} elements beyond tolerance"
        return [head + status,
                f"  worst at {self.index}: got {self.got!r}, want {self.want!r}: "
                f"{self.units:g} {self.unit}, {self.abs_error:.3g} absolute; "
                f"tolerance {self.tolerance()}"]


def judge(where: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> TensorVerdict:
    """A verdict on `got` against `want` within `bound` (absolute, per element)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise NotCheckable(f"{where}: {got.dtype}{list(got.shape)} where the reference gives "
                           f"{want.dtype}{list(want.shape)}")
    bound = np.broadcast_to(bound, want.shape)
    units = distance(got, want)
    bad = beyond(got, want, bound)
    if got.size == 0:
        return TensorVerdict(where, dtype_name(want.dtype), want.shape, 0, (), 0.0, 0.0, 0.0,
                             0.0, 0.0)
    ranked = np.where(bad, units + 1, 0) if bad.any() else units
    flat = int(np.argmax(np.where(np.isnan(ranked), np.inf, ranked)))
    index = tuple(int(i) for i in np.unravel_index(flat, want.shape))
    g, w = got.flat[flat], want.flat[flat]
    with np.errstate(invalid="ignore"):
        error = 0.0 if units.flat[flat] == 0 else abs(float(g) - float(w))
    return TensorVerdict(where, dtype_name(want.dtype), want.shape, int(bad.sum()), index,
                         g.item(), w.item(), float(units.flat[flat]),
                         float(np.nan_to_num(error, nan=np.inf)), float(bound.flat[flat]))


@dataclass
class Comparison:
    """The verdicts for one set of inputs: model outputs first, then partitions fed exact
    inputs; `blame`: the partition a mismatch comes from, when known."""
    inputs: list[np.ndarray]
    outputs: list[TensorVerdict]
    partitions: dict[int, list[TensorVerdict]]
    blame: int | None = None
    edits: dict[int, Edits] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    @property
    def verdicts(self) -> list[TensorVerdict]:
        return self.outputs + [v for vs in self.partitions.values() for v in vs]

    @property
    def worst_units(self) -> float:
        """The largest error found, in ulps or LSBs (what the search steers towards)."""
        return max((v.units for v in self.verdicts), default=0.0)

    def failing_partitions(self) -> list[int]:
        return [p for p, vs in self.partitions.items() if not all(v.ok for v in vs)]


@dataclass
class Partition:
    """A delegated partition, and the same nodes cut out as a model of their own: run fused
    and on the builtin kernels keeping every tensor, fed what the model's reference computes
    at the partition's inputs (or that with elements replaced)."""
    number: int
    nodes: tuple[int, ...]
    ops: tuple[str, ...]
    inputs: list[int]                  # the non-constant ones, the cut model's inputs, in order
    outputs: tuple[int, ...]
    model: bytes                       # the cut
    graph: Subgraph                    # the cut's, in its own tensor and node numbering
    runner: Runner                     # the cut, delegated
    oracle: object                     # the cut on the builtin kernels, every tensor kept
    delegated: frozenset[int]          # the cut's nodes its delegate claimed
    chains: dict

    def producer(self, tensor: int) -> str:
        """The op writing the cut's `tensor`, and its node in the model: where a mismatch of
        the partition's output comes from."""
        for index, op in enumerate(self.graph.operators):   # the nodes, in order
            if tensor in op.outputs:
                return f"{op.op}, node {self.nodes[index]}"
        return "an input"

    @property
    def label(self) -> str:
        return f"partition {self.number} (nodes {','.join(map(str, self.nodes))}: " \
            f"{' '.join(self.ops)})"


#: Elements of a partition's inputs replaced before it runs: (input, flat index, value); input
#: -1: the same element of every input (an op's operands meet there).
Edits = list[tuple[int, int, float]]


def edited(arrays: list[np.ndarray], edits: Edits) -> list[np.ndarray]:
    """Copies of `arrays` with `edits` applied (indices wrap around each array's size)."""
    arrays = [a.copy() for a in arrays]
    for k, index, value in edits:
        for array in arrays if k < 0 else [arrays[k % len(arrays)]]:
            if array.size:
                array.reshape(-1)[index % array.size] = value
    return arrays


class Checker:
    """The interpreters a comparison needs, built once per model: the reference, the
    reference's builtin kernels keeping every intermediate (the values tolerances are
    propagated from), the delegated interpreter as users run it, and one per partition."""

    def __init__(self, model: bytes, reference: str = "builtin",
                 options: FusionOptions | None = None) -> None:
        if reference not in REFERENCES:
            raise NotCheckable(f"reference must be one of {', '.join(REFERENCES)}, "
                               f"got {reference!r}")
        self.data, self.reference = model, reference
        self.model = read_model(model)
        self.graph = self.model.subgraphs[0]
        self.options = options or FusionOptions()
        self.oracle = self._reference_run(lambda: build_oracle(model))
        self.plain = self.oracle if reference == "builtin" else \
            self._reference_run(lambda: build(model, resolver=reference).interpreter)
        self.test = build(model, fuse=self.options, resolver=reference)
        delegate = self.test.delegate
        self.delegated = delegate.delegated_nodes
        self.chains = chain_tolerances(delegate)
        self.partitions = [self._partition(number, p)
                           for number, p in enumerate(delegate.last_partitions)]
        self._by_number = {p.number: p for p in self.partitions}

    def _reference_run(self, make):
        try:
            return make()
        except (RuntimeError, ValueError) as error:
            raise NotCheckable(f"the reference ({RESOLVER_LABELS[self.reference]}) cannot "
                               f"run this model: {error}") from error

    def _partition(self, order: int, partition) -> Partition:
        nodes = tuple(sorted(partition.nodes))
        claim = self.test.delegate.claims.get(nodes[0])
        number = claim.partition if claim is not None and claim.partition is not None else order
        inputs = [t for t in partition.inputs if self.graph.tensors[t].data is None]
        cut = cut_partition(self.model, nodes, partition.inputs, partition.outputs)
        data = write_model(cut)
        alone = replace(self.options, min_speedup=0.0, exclude_nodes="",
                        max_delegated_partitions=0, min_nodes_per_partition=1)
        runner = build(data, fuse=alone, resolver="builtin")
        claimed = runner.delegate.delegated_nodes
        ops = tuple(self.graph.operators[n].op for n in nodes)
        return Partition(number, nodes, ops, inputs, tuple(partition.outputs), data,
                         cut.subgraphs[0], runner, build_oracle(data), claimed,
                         chain_tolerances(runner.delegate))

    def partition_inputs(self, comparison: Comparison, number: int) -> list[np.ndarray]:
        """What partition `number` was fed in `comparison`: its cut model's inputs."""
        p = self.partition(number)
        values = tensors(self.oracle, comparison.inputs)
        return edited([values[t] for t in p.inputs], comparison.edits.get(number, []))

    @property
    def precision(self) -> str:
        return self.options.precision

    def partition(self, number: int) -> Partition:
        """The partition `inspect` and the kernels' names number `number`."""
        return self._by_number[number]

    def compare(self, inputs: Sequence[np.ndarray],
                edits: dict[int, Edits] | None = None) -> Comparison:
        """Every verdict for these inputs; `edits`: elements to replace in what a partition
        (by number) is fed, which reaches inputs no model input leads to."""
        inputs = conform(self.test.interpreter, inputs)
        edits = {n: e for n, e in (edits or {}).items() if e}
        values = tensors(self.oracle, inputs)
        got = infer(self.test.interpreter, inputs)
        outputs = self._outputs(got, values, inputs, self.delegated, self.chains)
        partitions = {}
        for p in self.partitions:
            fed = edited([values[t] for t in p.inputs], edits.get(p.number, []))
            fused = infer(p.runner.interpreter, fed)
            cut_values = tensors(p.oracle, fed)
            bounds = graph_bounds(p.graph, cut_values, p.delegated, self.precision, p.chains)
            partitions[p.number] = [
                judge(f"partition {p.number} output '{p.graph.tensors[t].name}' "
                      f"({p.producer(t)})", g, cut_values[t], bounds.get(t, 0.0))
                for t, g in zip(p.graph.outputs, fused)]
        comparison = Comparison(list(inputs), outputs, partitions, edits=edits)
        failing = comparison.failing_partitions()
        comparison.blame = failing[0] if failing else None
        return comparison

    def _outputs(self, got, values, inputs, delegated, chains) -> list[TensorVerdict]:
        bounds = graph_bounds(self.graph, values, delegated, self.precision, chains)
        if self.reference != "builtin":
            # The reference is itself off the builtin kernels the tolerances are stated
            # against, and the test runs the nodes it leaves on the reference's kernels.
            wants = infer(self.plain, inputs)
        else:
            wants = [values[t] for t in self.graph.outputs]
        verdicts = []
        for t, g, want in zip(self.graph.outputs, got, wants):
            bound = np.broadcast_to(bounds.get(t, 0.0), want.shape)
            if self.reference != "builtin":
                bound = bound + 2 * own_difference(want, values[t])
            verdicts.append(judge(f"output '{self.graph.tensors[t].name}'", g, want, bound))
        return verdicts

    def blame(self, comparison: Comparison) -> int | None:
        """The partition whose exclusion makes the model's outputs match, if one does."""
        if comparison.blame is not None or all(v.ok for v in comparison.outputs):
            return comparison.blame
        inputs = comparison.inputs
        values = tensors(self.oracle, inputs)
        for p in self.partitions:
            excluded = ",".join(map(str, sorted(self.options.excluded_nodes | set(p.nodes))))
            runner = build(self.data, fuse=replace(self.options, exclude_nodes=excluded),
                           resolver=self.reference)
            delegated = runner.delegate.delegated_nodes
            got = infer(runner.interpreter, inputs)
            if all(v.ok for v in self._outputs(got, values, inputs, delegated,
                                               chain_tolerances(runner.delegate))):
                return p.number
        return None


def own_difference(reference: np.ndarray, builtin: np.ndarray) -> float:
    """How far a reference's output is from the builtin kernels' at worst (NaN on one side:
    inf): allowed on either side of the reference at every element, so that the rounding
    differences of its kernels (XNNPACK's int8 requantization, its float reductions) pass
    wherever they land after the delegate's partitions change which kernels run."""
    with np.errstate(invalid="ignore"):
        own = np.abs(reference.astype(np.float64) - builtin.astype(np.float64))
    return float(np.nan_to_num(own, nan=np.inf).max(initial=0.0))


def build_oracle(model: bytes):
    """LiteRT's builtin kernels keeping every tensor: the values tolerances start from."""
    from .runtime import Interpreter
    from .tools.runner import RESOLVERS
    interpreter = Interpreter(model_content=model, experimental_op_resolver_type=RESOLVERS[
        "builtin"], experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    return interpreter


def tensors(interpreter, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor's value after running `inputs` (those LiteRT keeps)."""
    infer(interpreter, inputs)
    values = {}
    for detail in interpreter.get_tensor_details():
        try:
            values[detail["index"]] = interpreter.get_tensor(detail["index"]).copy()
        except ValueError:           # a tensor without data (scratch, unused optional)
            pass
    return values


def chain_tolerances(delegate) -> dict:
    """The tolerance of each tensor a fused chain (codegen.chains) computes."""
    from codegen.ops import CHAIN_OPS
    return {op.output: op.spec.tolerance for k in delegate.kernels.values()
            for op in k.ir.ops if op.op in CHAIN_OPS}


def conform(interpreter, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`inputs` as the model's inputs, or NotCheckable naming the first that does not fit."""
    details = interpreter.get_input_details()
    if len(inputs) != len(details):
        raise NotCheckable(f"the model has {len(details)} inputs, got {len(inputs)} arrays")
    arrays = []
    for detail, array in zip(details, inputs):
        array = np.asarray(array)
        shape, dtype = tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"])
        if array.shape != shape or array.dtype != dtype:
            raise NotCheckable(f"input '{detail['name']}' must be {dtype.name}"
                               f"{list(shape)}, got {array.dtype.name}{list(array.shape)}")
        arrays.append(array)
    return arrays
