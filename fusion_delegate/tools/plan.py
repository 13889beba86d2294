"""What the delegate decided for a model, as plain data: every node with its claim or the reason
it was left alone, and every partition with its kernel. `inspect`, `demo` and `report` all show
this one description, as text or as JSON."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from codegen.schedule import plan
from codegen.target import numba_target

from ..fusion import FusionDelegate
from ..model import Model, Quantization, dtype_name
from .text import node_ranges, shape, table


@dataclass
class TensorRef:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    constant: bool
    quantization: str | None = None   # "scale 0.05 zp 3", "per-channel (48)"

    def __str__(self) -> str:
        quantized = f" {self.quantization}" if self.quantization else ""
        return f"{self.dtype}{shape(self.shape)}{quantized}"


def quantization_text(q: Quantization | None) -> str | None:
    if q is None:
        return None
    if len(q.scale) > 1:
        return f"per-channel ({len(q.scale)})"
    return f"scale {float(q.scale[0]):.4g} zp {int(q.zero_point[0])}"


@dataclass
class NodeRow:
    index: int
    op: str
    inputs: list[TensorRef]
    outputs: list[TensorRef]
    reason: str | None           # None: delegated
    partition: int | None
    tuned: bool = False          # decided by `fusion-delegate tune`


@dataclass
class PartitionRow:
    index: int
    nodes: tuple[int, ...]
    ops: list[str]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    kernel: str | None = None    # the rest is known once the kernel was prepared
    nests: list[tuple[int, ...]] | None = None    # each loop nest's domain
    bytes_moved: int | None = None
    compile_seconds: float | None = None
    cache_hit: str | None = None
    source_path: str | None = None
    source: str | None = None

    @property
    def compile_note(self) -> str:
        if self.kernel is None:
            return "not prepared"
        if self.cache_hit:
            return f"{self.cache_hit} cache"
        return f"compiled {self.compile_seconds:.2f} s"


@dataclass
class Plan:
    summary: str
    delegated: int
    nodes: list[NodeRow]
    partitions: list[PartitionRow]

    @property
    def op_histogram(self) -> list[tuple[str, int, int]]:
        """(op, nodes, delegated nodes), most frequent first."""
        total = Counter(n.op for n in self.nodes)
        fused = Counter(n.op for n in self.nodes if n.reason is None)
        return [(op, count, fused[op]) for op, count in total.most_common()]

    @property
    def left_alone(self) -> list[tuple[str, str, int]]:
        """(op, reason, nodes) for the nodes LiteRT keeps, most frequent first."""
        counts = Counter((n.op, n.reason) for n in self.nodes if n.reason is not None)
        return [(op, reason, count) for (op, reason), count in counts.most_common()]

    def to_json(self, source: bool = True) -> dict:
        data = asdict(self)
        for row, partition in zip(self.partitions, data["partitions"]):
            partition["compile"] = row.compile_note
            if not source:
                partition.pop("source")
        return data


def describe(model: Model, delegate: FusionDelegate) -> Plan:
    """Read the delegate's claims and kernels after the interpreter allocated tensors."""
    graph = model.subgraphs[0]

    def ref(index: int) -> TensorRef:
        t = graph.tensors[index]
        return TensorRef(index, t.name, tuple(t.shape), dtype_name(t.dtype), t.data is not None,
                         quantization_text(t.quantization))

    nodes = []
    for index in delegate.last_plan:
        operator = graph.operators[index]
        claim = delegate.claims.get(index)
        nodes.append(NodeRow(
            index=index, op=claim.op if claim else operator.op,
            inputs=[ref(t) for t in operator.inputs if t >= 0],
            outputs=[ref(t) for t in operator.outputs],
            reason=claim.reason if claim else "not offered to the delegate",
            partition=claim.partition if claim else None,
            tuned=bool(claim and claim.tuned)))
    ops = {n.index: n.op for n in nodes}
    partitions = []
    for number, partition in enumerate(delegate.last_partitions):
        row = PartitionRow(number, partition.nodes, [ops[n] for n in partition.nodes],
                           partition.inputs, partition.outputs)
        prepared = delegate.kernels.get(number)
        if prepared is not None:
            kernel = prepared.kernel
            row.kernel = kernel.name
            row.nests = [nest.domain for nest in plan(prepared.ir, numba_target()).nests]
            row.bytes_moved = prepared.ir.bytes_moved()
            row.compile_seconds = kernel.compile_seconds
            row.cache_hit = kernel.cache_hit
            row.source_path = str(kernel.path)
            row.source = f"{prepared.legend}\n{kernel.source}"
        partitions.append(row)
    delegated = sum(1 for n in nodes if n.reason is None)
    return Plan(delegate.summary(), delegated, nodes, partitions)


def node_lines(plan: Plan) -> list[str]:
    rows = [(n.index, n.op, ", ".join(map(str, n.inputs)), ", ".join(map(str, n.outputs)),
             (f"partition {n.partition}" if n.reason is None else f"no: {n.reason}")
             + (" (tuned)" if n.tuned and n.reason is None else ""))
            for n in plan.nodes]
    return table(("node", "op", "inputs", "outputs", "delegated"), rows, align="r")


def partition_lines(plan: Plan, indent: int = 0) -> list[str]:
    rows = [(p.index, node_ranges(p.nodes), len(p.nodes),
             nest_shapes(p.nests), p.kernel or "-",
             p.compile_note, " ".join(p.ops))
            for p in plan.partitions]
    return table(("partition", "nodes", "#", "loop nests", "kernel", "compile", "fused ops"),
                 rows, align="rlr", indent=indent)


def nest_shapes(nests: list[tuple[int, ...]] | None) -> str:
    """`[16] [56,56,16]`: the domain of each loop nest, or ? before the kernel is prepared."""
    return " ".join(shape(domain) for domain in nests) if nests else "?"


def nothing_claimed_note(plan: Plan) -> str:
    """Said wherever a model has nothing the delegate fuses: the run is plain LiteRT."""
    reasons = Counter(n.reason for n in plan.nodes if n.reason)
    common = "; ".join(f"{count} node{'s' if count > 1 else ''}: {reason}"
                       for reason, count in reasons.most_common(3))
    return f"nothing to fuse: no node was delegated; {common or 'the model has no nodes'}"
