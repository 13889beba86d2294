"""The fusion delegate: claim elementwise regions, compile one kernel per partition.

Data flows one way: the runtime's nodes -> claims (which nodes, and why not the others) ->
partitions (kept only if their kernel builds and the cost model says it pays) -> one
FusionKernel each, which in prepare builds the partition's IR for the current shapes, renders
its schedule of loop nests to source and gets a compiled kernel from the cache; invoke is that
kernel's native entry point, called by the runtime without Python.
"""
from __future__ import annotations

import ctypes
import logging
import math
import sys
from dataclasses import dataclass, replace

from codegen.compile import DEFAULT_DIR, CompileError, Kernel, KernelCache, max_parallel_threads
from codegen.composites import COMPOSITES
from codegen.ir import KernelIR, Op, Value, broadcast_shapes, reduced_shape
from codegen.ops import OPS, REDUCTIONS
from codegen.pipeline import Built, NotBuildable, build
from codegen.quant_ops import CONVERSIONS, XNNPACK_INT8
from codegen.render import TensorTableLayout
from codegen.schedule import Schedule, plan

from . import abi
from .claims import (FusedNode, default_path_reason, fused_node, integer_exponent, op_name,
                     qparams, reduction_axes, unsupported_reason)
from .context import Context, NodeInfo, Partition
from .errors import KernelBuildError, KernelCompileError
from .options import FusionOptions
from .simple_delegate import SimpleDelegate, SimpleDelegateKernel
from .worth import UNKNOWN, Cut, Prediction, broadcast_run, predict

log = logging.getLogger("fusion_delegate")

LAYOUT = TensorTableLayout(context_tensors_offset=abi.CONTEXT_TENSORS_OFFSET,
                           tensor_size=abi.TENSOR_SIZE, tensor_data_offset=abi.TENSOR_DATA_OFFSET)

_CACHES: dict[str, KernelCache] = {}

#: Partition tensors of this many bytes or more are advised into huge pages (x86-64's 2 MB),
#: on the first invoke after each prepare: TFLite's arena is on 4 KiB pages (it never
#: madvises), which cost memory-bound kernels 1.2-1.35x at 4M elements
#: (docs/chain_performance.md, diagnosis 5).
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25          # Linux; COLLAPSE (6.1+) makes them now
_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64)
#: Ops XNNPACK runs element by element, in place where it can: cutting its partition next to
#: one costs the cost model's `split`, next to others (convolutions, matmuls) `split_heavy`.
ELEMENTWISE = frozenset(OPS) | CONVERSIONS


def advise_huge_pages(address: int, nbytes: int) -> None:
    """madvise the whole huge pages inside [address, address + nbytes) into huge pages, now
    if the kernel can. Advice only: every error (other systems, old kernels, THP off, a
    range that is not anonymous memory) is ignored."""
    start = -(-address // HUGE_PAGE) * HUGE_PAGE
    end = (address + nbytes) // HUGE_PAGE * HUGE_PAGE
    if not sys.platform.startswith("linux") or end <= start:
        return
    try:
        madvise = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for advice in (MADV_HUGEPAGE, MADV_COLLAPSE):
        madvise(start, end - start, advice)


def kernel_cache(cache_dir: str) -> KernelCache:
    """One cache per directory per process, shared by every delegate that uses it."""
    if cache_dir not in _CACHES:
        directory = {"default": DEFAULT_DIR, "": None}.get(cache_dir, cache_dir)
        _CACHES[cache_dir] = KernelCache(directory)
    return _CACHES[cache_dir]


@dataclass
class NodeClaim:
    """What the delegate decided for one node of the execution plan."""
    index: int
    op: str
    reason: str | None            # None: delegated
    partition: int | None = None


@dataclass
class PreparedKernel:
    """A partition's kernel as last prepared: what `inspect` and reports show."""
    partition: int
    ir: KernelIR
    kernel: Kernel


class FusionDelegate(SimpleDelegate):
    """Fuses chains of float32 elementwise ops into one compiled loop nest per partition.

    `FusionDelegate(cache_dir="", min_nodes_per_partition=1)`, or `FusionDelegate(options)`;
    see FusionOptions for the keys.
    """

    name = "fusion_delegate"

    def __init__(self, options: FusionOptions | None = None, **kwargs) -> None:
        self.options = options if options is not None else FusionOptions.from_kwargs(**kwargs)
        super().__init__(max_delegated_partitions=self.options.max_delegated_partitions,
                         min_nodes_per_partition=self.options.min_nodes_per_partition)
        self.cache = kernel_cache(self.options.cache_dir)

    @property
    def claims(self) -> dict[int, NodeClaim]:
        """The main graph's decision for each node."""
        return self.main_graph.claims

    @property
    def kernels(self) -> dict[int, PreparedKernel]:
        """The main graph's kernels by partition number, as last prepared."""
        return self.main_graph.kernels

    @property
    def predictions(self) -> dict[tuple[int, ...], Prediction]:
        """The cost model's verdict on each of the main graph's candidate partitions."""
        return self.main_graph.predictions

    def is_node_supported(self, context: Context, node: NodeInfo) -> bool:
        if node.index in self.options.excluded_nodes:
            reason = "excluded by the exclude_nodes option"
        else:
            reason = unsupported_reason(context, node)
            if reason is None and self.options.min_speedup > 0:
                reason = default_path_reason(context, node)
        self.graph.claims[node.index] = NodeClaim(node.index, op_name(node), reason)
        return reason is None

    def select_partitions(self, context: Context, partitions: list[Partition]) -> list[Partition]:
        """TFLite's selection (largest first, limits) among the partitions whose kernel builds
        and is predicted to pay."""
        unbuildable, predictions, claims = {}, self.graph.predictions, self.graph.claims
        neighbours = plan_nodes(context)
        for number, partition in enumerate(partitions):
            try:
                nodes = [fused_node(context.node(n)) for n in sorted(partition.nodes)]
                built = build(partition_ir(context, nodes, partition, number,
                                           self.kernel_threads(context), self.options.precision),
                              LAYOUT)
            except NotBuildable as error:
                unbuildable[partition.nodes] = f"kernel cannot be built: {error}"
                continue
            except Exception as error:  # noqa: BLE001 - our bug: leave the partition to LiteRT
                log.warning("partition %s: %s", partition.nodes, error, exc_info=True)
                unbuildable[partition.nodes] = (f"kernel cannot be built: internal error "
                                                f"{type(error).__name__}: {error}")
                continue
            predictions[partition.nodes] = self.predict(
                built, context.num_threads, cut_around(partition, neighbours),
                builtin_input(partition, neighbours))
        paying = [p for p in partitions if p.nodes in predictions
                  and predictions[p.nodes].pays(self.options.min_speedup)]
        chosen = super().select_partitions(context, paying)
        minimum = self.min_nodes_per_partition
        for partition in partitions:
            if partition in chosen:
                continue
            if partition.nodes in unbuildable:
                reason = unbuildable[partition.nodes]
            elif partition not in paying:
                prediction = predictions[partition.nodes]
                reason = (f"not worth it (predicted {prediction.speedup:.2f}x LiteRT, "
                          f"{prediction.saving_us:+.1f} us)")
            elif len(partition.nodes) < minimum:
                reason = f"partition too small ({len(partition.nodes)} < {minimum} nodes)"
            else:
                reason = "over max_delegated_partitions"
            for node in partition.nodes:
                claims[node].reason = reason
        for number, partition in enumerate(chosen):
            for node in partition.nodes:
                claims[node].partition = number
        return chosen

    def predict(self, built: Built, interpreter_threads: int, cut: Cut,
                builtin_input: bool = False) -> Prediction:
        """The measured cost model's verdict on fusing a partition at its current shapes. Its
        costs are those measured at the interpreter's thread count (what XNNPACK runs on), not
        the kernel's: XNNPACK on 2 threads is up to twice faster than on 1."""
        if self.options.min_speedup <= 0:
            return UNKNOWN
        return predict(cost_keys(built.ir), nest_traffic(built.ir, built.schedule),
                       interpreter_threads, cut, builtin_input)

    def kernel_threads(self, context: Context) -> int:
        """The `num_threads` option, else the interpreter's, within what numba can run."""
        requested = self.options.num_threads or context.num_threads
        return min(requested, max_parallel_threads()) if requested > 1 else 1

    def create_kernel(self) -> SimpleDelegateKernel:
        return FusionKernel(self)

    def summary(self) -> str:
        delegated = sum(1 for c in self.claims.values() if c.reason is None)
        return (f"{delegated} of {len(self.last_plan)} nodes delegated in "
                f"{len(self.last_partitions)} partitions")


@dataclass(frozen=True)
class PlanNode:
    """A node of the execution plan as cut_around sees it."""
    inputs: set[int]           # its tensors computed at run time
    outputs: set[int]
    elementwise: bool
    position: int              # in the plan
    builtin: bool = False      # run by LiteRT's builtin kernel, on one thread, not by XNNPACK


def plan_nodes(context: Context) -> dict[int, PlanNode]:
    """Each node of the plan that reads a tensor computed at run time (a DEQUANTIZE of float16
    weights does not: XNNPACK folds it into the weights once)."""
    nodes = {}
    for position, index in enumerate(context.execution_plan()):
        node = context.node(index)
        inputs = {t for t in node.inputs if t >= 0 and not context.tensor(t).is_constant}
        if inputs:
            name = op_name(node)
            builtin = (name in ELEMENTWISE and name not in XNNPACK_INT8 and any(
                qparams(context.tensor(t)) is not None for t in node.outputs))
            nodes[index] = PlanNode(inputs, set(node.outputs), name in ELEMENTWISE, position,
                                    builtin)
    return nodes


def cut_around(partition: Partition, nodes: dict[int, PlanNode]) -> Cut:
    """What is beside the partition (`nodes`: plan_nodes): the nodes outside it that make one
    of its inputs or read one of its outputs. An elementwise one runs right before or after
    the partition (Cut.ELEMENTWISE), or apart from it (Cut.APART: a squeeze-excite's gate MUL
    reads the swish its partition computes, but after the excite's convolutions)."""
    positions = [nodes[n].position for n in partition.nodes if n in nodes]
    ends = (min(positions, default=-2) - 1, max(positions, default=-2) + 1)
    inputs, outputs = set(partition.inputs), set(partition.outputs)
    beside = [node for index, node in nodes.items() if index not in partition.nodes
              and (node.outputs & inputs or node.inputs & outputs)]
    if not beside:
        return Cut.NONE
    if any(node.elementwise and node.position in ends for node in beside):
        return Cut.ELEMENTWISE
    return Cut.APART if any(node.elementwise for node in beside) else Cut.HEAVY


def builtin_input(partition: Partition, nodes: dict[int, PlanNode]) -> bool:
    """Whether a builtin kernel (one thread) makes one of the partition's inputs: an int8
    squeeze-excite gate's after a HARD_SWISH, which XNNPACK does not run."""
    inputs = set(partition.inputs)
    return any(node.builtin and node.outputs & inputs
               for index, node in nodes.items() if index not in partition.nodes)


def cost_keys(ir: KernelIR) -> list[tuple[str, int, int, int]]:
    """(cost model key, output elements, broadcast run, whole inputs) of each node the
    partition replaces: the op, for a quantized one `OP/int8` (its costs are measured apart:
    LiteRT often runs it on the builtin kernels, and a chain of them is one table lookup
    fused), and for one precision="fast" approximates `OP/fast` (same LiteRT cost, cheaper
    fused). A reduction or a composite row op (SOFTMAX, lowered to several ops: counted once)
    by its input's elements. The run (worth.broadcast_run) is what XNNPACK's kernel covers per
    call: all the elements but for a binary op with a broadcast operand. Whole inputs: its
    operands of its output's size, which LiteRT's kernel reads from memory (a residual ADD's
    two, swish's MUL's x and LOGISTIC(x), made inside a SWISH op)."""
    keys, seen = [], set()
    for op in ir.ops:
        values = [ir.value(t) for t in (*op.inputs, op.output)]
        quantized = [v.dtype for v in values if v.quantized]
        whole = sum(math.prod(v.shape) == math.prod(values[-1].shape) for v in values[:-1])
        for node, name in op.sources:
            if (node, name) in seen:
                continue
            seen.add((node, name))
            elements = math.prod(values[0 if name in REDUCTIONS or name in COMPOSITES
                                        else -1].shape)
            inputs = 1
            if name in OPS and OPS[name].arity == 2 and node == op.node:
                # the root of a chain op (SWISH) reads x and a value made inside, of x's size
                inputs = whole + (len(op.inputs) == 1 == whole)
            if quantized:
                name = f"{name}/{quantized[0]}"
            elif ir.precision == "fast" and name in OPS and OPS[name].approximated:
                name = f"{name}/fast"
            run = (broadcast_run(values[-1].shape, [v.shape for v in values[:-1]])
                   if len(op.inputs) == 2 else elements)
            keys.append((name, elements, run, inputs))
    return keys


def nest_traffic(ir: KernelIR, schedule: Schedule | None = None) -> list[tuple[int, int]]:
    """(elements, extra streams) of each loop nest of the partition's schedule: the tensors of
    its size it reads beyond one and writes beyond one. The fused cost line was measured on a
    one-op partition, which reads one and writes one; a residual ADD's nest reads two."""
    def beyond_one(tensors: tuple[int, ...], elements: int) -> int:
        return max(0, sum(math.prod(ir.value(t).shape) == elements for t in tensors) - 1)
    return [(nest.elements, beyond_one(nest.reads, nest.elements)
             + beyond_one(nest.writes, nest.elements)) for nest in (schedule or plan(ir)).nests]


def partition_ir(context: Context, nodes: list[FusedNode], partition: Partition, number: int,
                 threads: int, precision: str = "exact") -> KernelIR:
    """The partition's IR at the context's current shapes, as its nodes say (codegen.pipeline
    lowers it). (`nodes` are read once, before kernel prepare, where the runtime forbids
    reading nodes.)"""
    used = {t for node in nodes for t in node.inputs}   # not a reduction's axis tensor
    literals = {}
    for t in partition.inputs:
        info = context.tensor(t)
        if t in used and info.is_constant and math.prod(info.shape) == 1:
            literals[t] = context.view(t).reshape(-1)[0].item()
    shapes = {t: context.tensor(t).shape for t in partition.inputs if t in used}
    nodes = list(nodes)
    for position, node in enumerate(nodes):
        node = nodes[position] = _reduction(context, node, shapes)
        params = dict(node.params)
        shapes[node.output] = (reduced_shape(shapes[node.inputs[0]], params["axes"],
                                             params["keep_dims"]) if node.op in REDUCTIONS
                               else broadcast_shapes(*(shapes[t] for t in node.inputs)))
    infos = {t: context.tensor(t) for t in shapes}
    return KernelIR(
        partition=number,
        values=tuple(Value(t, infos[t].name, shapes[t], literals.get(t),
                           infos[t].type_name.lower(), qparams(infos[t]))
                     for t in sorted(shapes)),
        ops=tuple(Op(n.index, n.op, n.inputs, n.output, _params(n, shapes, literals))
                  for n in nodes),
        inputs=tuple(t for t in partition.inputs if t in used and t not in literals),
        outputs=partition.outputs,
        threads=threads,
        precision=precision)


def _reduction(context: Context, node: FusedNode, shapes: dict) -> FusedNode:
    """A reduction with its axes resolved from its constant axis tensor (claims checked it)."""
    params = dict(node.params)
    if node.op not in REDUCTIONS:
        return node
    axes = reduction_axes(context.view(params.pop("axis_tensor")), len(shapes[node.inputs[0]]))
    return replace(node, params=(("axes", axes), ("keep_dims", bool(params["keep_dims"]))))


def _params(node: FusedNode, shapes: dict, literals: dict) -> tuple:
    """Params that depend on the current shapes (POW's integer path)."""
    if node.op != "POW":
        return node.params
    base, exponent = node.inputs
    n = integer_exponent(shapes[base], shapes[exponent], literals.get(exponent))
    return tuple(sorted({**dict(node.params), "integer_exponent": n}.items()))


class FusionKernel(SimpleDelegateKernel):
    def __init__(self, delegate: FusionDelegate) -> None:
        self.delegate = delegate

    def init(self, context: Context, nodes: list[NodeInfo], inputs: tuple[int, ...],
             outputs: tuple[int, ...]) -> None:
        self.nodes = [fused_node(n) for n in sorted(nodes, key=lambda n: n.index)]
        self.partition = Partition(tuple(n.index for n in self.nodes), inputs, outputs)
        self.graph = self.delegate.graph      # the subgraph being prepared
        first = self.graph.claims.get(self.partition.nodes[0])
        self.number = first.partition if first else 0

    def prepare(self, context: Context) -> None:
        nodes = ",".join(map(str, self.partition.nodes))
        hint = (f"partition {self.number} (nodes {nodes}): {{}}; to run the model without it, "
                f"pass exclude_nodes=\"{nodes}\" to FusionDelegate")
        try:
            built = build(partition_ir(context, self.nodes, self.partition, self.number,
                                       self.delegate.kernel_threads(context),
                                       self.delegate.options.precision), LAYOUT)
        except NotBuildable as error:
            raise KernelBuildError(hint.format(error)) from error
        ir, source = built.ir, built.source
        for t in ir.outputs:
            if context.tensor(t).shape != ir.value(t).shape:
                context.resize(t, ir.value(t).shape)
        try:
            kernel = self.delegate.cache.get(ir.name, source)
        except CompileError as error:
            raise KernelCompileError(hint.format(error), error.source_path) from error
        self.kernel = kernel
        # The arena is allocated after prepare: large tensors are advised on the first invoke,
        # in Python, which then hands the runtime the native entry point.
        self.large = [t for t in (*ir.inputs, *ir.outputs) if not context.tensor(t).is_constant
                      and math.prod(ir.value(t).shape) * context.tensor(t).dtype.itemsize
                      >= HUGE_PAGE]
        self.native_invoke_address = 0 if self.large else kernel.address
        self.graph.kernels[self.number] = PreparedKernel(self.number, ir, kernel)

    def invoke(self, context: Context) -> None:
        """The first invoke after a prepare that left large tensors: advise their memory into
        huge pages, run the kernel, and from now on let the runtime call it natively."""
        for t in dict.fromkeys(self.large):
            view = context.view(t)
            advise_huge_pages(view.ctypes.data, view.nbytes)
        if _ENTRY(self.kernel.address)(context.address(), 0) != abi.kTfLiteOk:
            raise RuntimeError(f"kernel {self.kernel.name} failed")
        self.native_invoke_address = self.kernel.address
