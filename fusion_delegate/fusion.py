"""The fusion delegate: claim elementwise regions, compile one kernel per partition.

Data flows one way: the runtime's nodes -> claims.py (which nodes the kernel can reproduce,
and why not the others) -> partitions, each built once (codegen.pipeline) and kept only if the
claim policy (policy.py) says its features (features.py) pay -> one FusionKernel each, which in
prepare takes the kernel built for it, or builds anew at changed shapes, and gets it compiled
from the cache; invoke is that kernel's native entry point, called by the runtime without
Python. This module only orchestrates: each decision and its reason is made in those modules.
"""
from __future__ import annotations

import ctypes
import logging
import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from codegen.compile import DEFAULT_DIR, CompileError, Kernel, KernelCache
from codegen.ir import KernelIR, Op, Value, broadcast_shapes, matmul_output_shape, reduced_shape
from codegen.kept import keep_in
from codegen.ops import MATMULS, REDUCTIONS, STENCILS
from codegen.pipeline import Built, NotBuildable, build, island_kernels
from codegen.quant_conv import sum_bound
from codegen.render import TensorTableLayout
from codegen.target import numba_target, vector_shortfall
from codegen.window import conv_output_shape
from codegen.workers import compile_ahead

from . import abi, native
from .claims import (FusedNode, NotClaimed, fused_node, integer_exponent, op_name, qparams,
                     reduction_axes, unsupported_reason)
from .context import Context, NodeInfo, Partition
from .errors import KernelBuildError, KernelCompileError
from .features import partition_features, plan_nodes
from .options import FusionOptions
from .policy import ClaimPolicy
from .recall import PREPARED, Choice, graph_name, keep, recall
from .simple_delegate import Graph, SimpleDelegate, SimpleDelegateKernel, largest_first
from .threadpool import NoPool, ThreadPool, interpreter_pool
from .tuning import DecisionStore, TuningKey, graph_fingerprint, software_fingerprint
from .worth import Prediction, host_cpu_name

log = logging.getLogger("fusion_delegate")

LAYOUT = TensorTableLayout(context_tensors_offset=abi.CONTEXT_TENSORS_OFFSET,
                           tensor_size=abi.TENSOR_SIZE, tensor_data_offset=abi.TENSOR_DATA_OFFSET,
                           node_inputs_offset=abi.NODE_INPUTS_OFFSET,
                           node_outputs_offset=abi.NODE_OUTPUTS_OFFSET,
                           node_user_data_offset=abi.NODE_USER_DATA_OFFSET,
                           slot_pool_offset=native.SLOT_POOL_OFFSET,
                           slot_data_offset=native.SLOT_DATA_OFFSET)

_CACHES: dict[str, KernelCache] = {}
INTERNAL_ERROR = "kernel cannot be built: internal error {}: {}"
#: Why the interpreter's pool could not be used, each logged once per process.
_POOL_REFUSALS: set[str] = set()

#: Partition tensors of this many bytes or more are advised into huge pages (x86-64's 2 MB),
#: on the first invoke after each prepare: TFLite's arena is on 4 KiB pages (it never
#: madvises), which slows memory-bound kernels on large tensors
#: (docs/chain_performance.md, diagnosis 5).
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25          # Linux; COLLAPSE (6.1+) makes them now
_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64)


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


@dataclass(frozen=True)
class NodeClaim:
    """What the delegate decided for one node of the execution plan."""
    index: int
    op: str
    reason: NotClaimed | None     # None: delegated
    partition: int | None = None
    tuned: bool = False           # decided by `fusion-delegate tune`, not the cost model


@dataclass
class PreparedKernel:
    """A partition's kernel as last prepared: what `inspect` and reports show."""
    partition: int
    ir: KernelIR
    kernel: Kernel
    legend: str                     # how to read the kernel's source for this partition


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
        keep_in(self.cache)
        self.decisions = DecisionStore(self.cache.directory)
        self.policy = ClaimPolicy(self.options.min_speedup, vector_shortfall=vector_shortfall(),
                                  vector_bytes=numba_target().vector_bytes)

    @property
    def claims(self) -> dict[int, NodeClaim]:
        """The main graph's decision for each node."""
        return self.main_graph.claims

    @property
    def delegated_nodes(self) -> frozenset[int]:
        """The main graph's nodes its kernels run."""
        return frozenset(i for i, c in self.claims.items() if c.reason is None)

    @property
    def kernels(self) -> dict[int, PreparedKernel]:
        """The main graph's kernels by partition number, as last prepared."""
        return self.main_graph.kernels

    @property
    def predictions(self) -> dict[tuple[int, ...], Prediction]:
        """The cost model's verdict on each of the main graph's candidate partitions."""
        return self.main_graph.predictions

    def is_node_supported(self, context: Context, node: NodeInfo) -> bool:
        tuned = self.graph.tuned
        if node.index in self.options.excluded_nodes:
            reason = NotClaimed("excluded by the exclude_nodes option")
        else:
            reason = unsupported_reason(context, node)
            if reason is None:
                reason = (self.policy.node_reason(context, node) if tuned is None
                          else tuned.reason(node.index))
        self.graph.claims[node.index] = NodeClaim(node.index, op_name(node), reason,
                                                  tuned=tuned is not None)
        return reason is None

    def choose(self, context: Context, plan: tuple[int, ...]) -> list[Partition]:
        """The partitions chosen for this graph before, where it reads the same under the same
        settings (fusion_delegate.recall), else chosen now and kept."""
        graph, key = self.graph, self.recall_key(context)
        choice = recall(self.cache, key, context)
        if choice is not None:
            graph.claims, graph.predictions = choice.claims, choice.predictions
            return choice.partitions
        reads = context.record()
        chosen = super().choose(context, plan)
        if not any(c.reason is not None and c.reason.phrase == INTERNAL_ERROR
                   for c in graph.claims.values()):   # perhaps not the same next time
            keep(self.cache, key, reads, Choice(chosen, graph.claims, graph.predictions))
        return chosen

    def recall_key(self, context: Context) -> str:
        """What claims depend on besides the graph's reads: the graph's name, the settings (not
        cache_dir: a shipped cache is found anywhere), the thread counts, the CPU target and
        the host's cost model. No sets: their order varies by process."""
        graph, target = self.graph, numba_target()
        tuned = graph.tuned and (sorted(graph.tuned.claimed), graph.tuned.tuned_at)
        return repr((graph_name(context), replace(self.options, cache_dir=""), self.policy,
                     tuned, context.num_threads, self.kernel_threads(context, graph),
                     target.fingerprint, target.vector_bytes, host_cpu_name()))

    def select_partitions(self, context: Context, partitions: list[Partition]) -> list[Partition]:
        """TFLite's selection (largest first, limits) among the partitions whose kernel builds
        and is predicted to pay. Each is built once, and the kernels the cache lacks are
        compiled then, in worker processes: a kernel's prepare builds nothing where the shapes
        have not changed."""
        start = time.perf_counter()
        graph, refused = self.graph, {}
        plan = plan_nodes(context)
        irs = {p.nodes: self.candidate_ir(context, p) for p in partitions}
        compiled = compile_ahead(self.cache, tables_kernels(irs.values(), self.cache))
        for partition in largest_first(partitions):
            candidate = self.build_candidate(partition, irs[partition.nodes])
            if isinstance(candidate, NotClaimed):
                refused[partition.nodes] = candidate
                continue
            graph.built[partition.nodes] = candidate
            features = partition_features(candidate[1], partition, plan)
            prediction = graph.predictions[partition.nodes] = self.policy.predict(
                features, context.num_threads)
            reason = (self.policy.partition_reason(features, prediction)
                      if graph.tuned is None else None)
            if reason is not None:
                refused[partition.nodes] = reason
        chosen = super().select_partitions(
            context, [p for p in partitions if p.nodes not in refused])
        kernels = compile_ahead(self.cache, [(graph.built[p.nodes][1].name,
                                              graph.built[p.nodes][1].source) for p in chosen])
        seconds = time.perf_counter() - start
        if seconds > 1:
            log.info("%d partitions prepared in %.1f s: %d kernels compiled (and %d for "
                     "tables), %d from the cache", len(chosen), seconds, kernels, compiled,
                     len(chosen) - kernels)
        minimum = self.min_nodes_per_partition
        for partition in partitions:
            if partition in chosen:
                continue
            reason = refused.get(partition.nodes)
            if reason is None and len(partition.nodes) < minimum:
                reason = NotClaimed("partition too small ({} < {} nodes)",
                                    len(partition.nodes), minimum)
            elif reason is None:
                reason = NotClaimed("over max_delegated_partitions")
            for node in partition.nodes:
                graph.claims[node] = replace(graph.claims[node], reason=reason)
        for number, partition in enumerate(chosen):
            for node in partition.nodes:
                graph.claims[node] = replace(graph.claims[node], partition=number)
        graph.built = {p.nodes: graph.built[p.nodes] for p in chosen}
        return chosen

    def candidate_ir(self, context: Context, partition: Partition) -> KernelIR | NotClaimed:
        """The partition's IR (as partition_ir makes it) at the current shapes, or why there
        is none."""
        try:
            nodes = [fused_node(context, context.node(n)) for n in sorted(partition.nodes)]
            if not live_nodes(nodes, partition.outputs):
                return NotClaimed("nothing reads what it computes (XNNPACK drops such nodes)")
            return partition_ir(context, nodes, partition,
                                self.kernel_threads(context, self.graph), self.options.precision)
        except Exception as error:  # noqa: BLE001 - our bug: leave the partition to LiteRT
            return _internal_error(partition.nodes, error)

    def build_candidate(self, partition: Partition,
                        ir: KernelIR | NotClaimed) -> tuple[KernelIR, Built] | NotClaimed:
        """The candidate's IR and its kernel, or why it cannot be built. An error of ours
        leaves the partition to LiteRT with its reason, and never fails the model."""
        if isinstance(ir, NotClaimed):
            return ir
        try:
            return ir, build(ir, LAYOUT, cache=self.cache)
        except NotBuildable as error:
            return NotClaimed("kernel cannot be built: {}", error)
        except Exception as error:  # noqa: BLE001 - our bug: leave the partition to LiteRT
            return _internal_error(partition.nodes, error)

    def initialize(self, context: Context) -> None:
        graph = self.graph
        graph.pool = self.thread_pool(context)
        keep_in(self.cache)
        if not self.decisions.in_use:
            return
        graph.tuning_key = TuningKey(graph_fingerprint(context), numba_target().fingerprint,
                                     context.num_threads, self.kernel_threads(context, graph),
                                     self.options.precision, software_fingerprint())
        if self.options.use_tuned and self.options.min_speedup > 0:
            graph.tuned = self.decisions.find(graph.tuning_key)

    def thread_pool(self, context: Context) -> ThreadPool | None:
        """The interpreter's pool, for kernels that split their work (None: one thread, as
        the interpreter or the `num_threads` option asks, or no pool can be verified here)."""
        if self.requested_threads(context) <= 1:
            return None
        try:
            return interpreter_pool(context.address())
        except Exception as error:  # noqa: BLE001 - anything unverified: one thread
            reason = str(error) if isinstance(error, NoPool) else repr(error)
            if reason not in _POOL_REFUSALS:
                _POOL_REFUSALS.add(reason)
                log.info("fused kernels run on one thread: the interpreter's thread pool "
                         "cannot be used (%s)", reason)
            return None

    def requested_threads(self, context: Context) -> int:
        """The `num_threads` option, else the interpreter's."""
        return self.options.num_threads or context.num_threads

    def kernel_threads(self, context: Context, graph: Graph) -> int:
        """The requested threads, within the graph's pool."""
        if graph.pool is None:
            return 1
        return min(self.requested_threads(context), graph.pool.threads)

    def create_kernel(self) -> SimpleDelegateKernel:
        return FusionKernel(self)

    def summary(self) -> str:
        summary = (f"{len(self.delegated_nodes)} of {len(self.last_plan)} nodes delegated in "
                   f"{len(self.last_partitions)} partitions")
        tuned = self.main_graph.tuned
        if tuned is not None:
            summary += (f"; claims tuned by `fusion-delegate tune` on {tuned.tuned_at[:10]} "
                        f"(measured {tuned.speedup:.2f}x LiteRT)")
        return summary


def tables_kernels(irs, cache: KernelCache) -> list[tuple[str, str]]:
    """The kernels the candidates' builds will run to make their tables (codegen.islands), to
    compile side by side first; none where that fails (each build then finds out why)."""
    try:
        return [kernel for ir in irs if isinstance(ir, KernelIR)
                for kernel in island_kernels(ir, LAYOUT, cache=cache)]
    except Exception as error:  # noqa: BLE001 - our bug: the builds compile them one by one
        log.warning("tables not compiled ahead: %r", error, exc_info=True)
        return []


def _internal_error(nodes: tuple[int, ...], error: Exception) -> NotClaimed:
    """Why a partition is left to LiteRT when our code fails on it (logged with its trace)."""
    log.warning("partition %s: %s", nodes, error, exc_info=True)
    return NotClaimed(INTERNAL_ERROR, type(error).__name__, error)


def partition_ir(context: Context, nodes: list[FusedNode], partition: Partition,
                 threads: int, precision: str = "exact") -> KernelIR:
    """The partition's IR at the context's current shapes, as its nodes say (codegen.pipeline
    lowers it), of the nodes whose values reach its outputs (live_nodes). (`nodes` are read
    once, before kernel prepare, where the runtime forbids reading nodes.)"""
    nodes = live_nodes(nodes, partition.outputs)
    used = {t for node in nodes for t in node.inputs}   # not a reduction's axis tensor
    literals = {}
    for t in partition.inputs:
        info = context.tensor(t)
        if t in used and info.is_constant and math.prod(info.shape) == 1:
            literals[t] = context.view(t).reshape(-1)[0].item()
    shapes = {t: context.tensor(t).shape for t in partition.inputs if t in used}
    for position, node in enumerate(nodes):
        node = nodes[position] = _reduction(context, node, shapes)
        params = dict(node.params)
        if node.op in REDUCTIONS:
            shapes[node.output] = reduced_shape(shapes[node.inputs[0]], params["axes"],
                                                params["keep_dims"])
        elif node.op in STENCILS:
            shapes[node.output] = conv_output_shape(shapes[node.inputs[0]],
                                                    shapes[node.inputs[1]], params)
            nodes[position] = _filter_scales(context, node)
        elif node.op in MATMULS:
            shapes[node.output] = matmul_output_shape(*(shapes[t] for t in node.inputs),
                                                      params["adj_x"], params["adj_y"])
        else:
            shapes[node.output] = broadcast_shapes(*(shapes[t] for t in node.inputs))
    infos = {t: context.tensor(t) for t in shapes}
    return KernelIR(
        values=tuple(Value(t, shapes[t], literals.get(t), infos[t].type_name.lower(),
                           qparams(infos[t]))
                     for t in sorted(shapes)),
        ops=tuple(Op(n.index, n.op, n.inputs, n.output, _params(n, shapes, literals))
                  for n in nodes),
        inputs=tuple(t for t in partition.inputs if t in used and t not in literals),
        outputs=partition.outputs,
        node_inputs=partition.inputs,
        threads=threads,
        precision=precision)


def live_nodes(nodes: list[FusedNode], outputs: tuple[int, ...]) -> list[FusedNode]:
    """The nodes (in order) whose values reach `outputs`. A node whose value nothing reads is
    claimed and computed by no kernel: XNNPACK drops such nodes from its subgraph too, so
    pricing them as LiteRT's work claimed partitions that lost (perf/README.md, "Dead ops")."""
    needed, live = set(outputs), []
    for node in reversed(nodes):
        if node.output in needed:
            live.append(node)
            needed.update(node.inputs)
    return live[::-1]


def _reduction(context: Context, node: FusedNode, shapes: dict) -> FusedNode:
    """A reduction with its axes resolved from its constant axis tensor (claims checked it)."""
    params = dict(node.params)
    if node.op not in REDUCTIONS:
        return node
    axes = reduction_axes(context.view(params.pop("axis_tensor")), len(shapes[node.inputs[0]]))
    return replace(node, params=(("axes", axes), ("keep_dims", bool(params["keep_dims"]))))


def _filter_scales(context: Context, node: FusedNode) -> FusedNode:
    """An int8 convolution with its filter's scales (`filter_scales`: one, or one per output
    channel), which its Prepare reads, and the largest of its sums (`sum_bound`), which its
    constants bound (codegen.quant_conv)."""
    data = qparams(context.tensor(node.inputs[0]))
    if data is None:
        return node
    scales = context.affine_quantization(node.inputs[1])[0]
    bound = sum_bound(data, context.view(node.inputs[1]), context.view(node.inputs[2]))
    return replace(node, params=tuple(sorted({**dict(node.params), "filter_scales": scales,
                                              "sum_bound": bound}.items())))


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
        self.nodes = [fused_node(context, n) for n in sorted(nodes, key=lambda n: n.index)]
        self.partition = Partition(tuple(n.index for n in self.nodes), inputs, outputs)
        self.graph = self.delegate.graph      # the subgraph being prepared
        first = self.graph.claims.get(self.partition.nodes[0])
        self.number = first.partition if first else 0

    def prepare(self, context: Context) -> None:
        nodes = ",".join(map(str, self.partition.nodes))
        hint = (f"partition {self.number} (nodes {nodes}): {{}}; to run the model without it, "
                f"pass exclude_nodes=\"{nodes}\" to FusionDelegate")
        node = abi.TfLiteNode.from_address(self.node_address)
        if (abi.int_array(node.inputs), abi.int_array(node.outputs)) != (
                self.partition.inputs, self.partition.outputs):
            # The kernel finds its tensors at their places in the node's lists.
            raise KernelBuildError(hint.format("the runtime's node lists other tensors than "
                                               "the partition it was made for"))
        try:
            ir, built = self.prepared_build(context)
        except NotBuildable as error:
            raise KernelBuildError(hint.format(error)) from error
        self.graph.built[self.partition.nodes] = ir, built
        ir = built.ir
        for t in ir.outputs:
            if context.tensor(t).shape != ir.value(t).shape:
                context.resize(t, ir.value(t).shape)
        try:
            kernel = self.delegate.cache.get(built.name, built.source)
        except CompileError as error:
            raise KernelCompileError(hint.format(error), error.source_path) from error
        self.kernel = kernel
        # Kept as long as the kernel may run: its native invoke reads it (codegen.kernel_data).
        self.data = np.frombuffer(built.data, np.uint8) if built.data else None
        self.set_data(0 if self.data is None else self.data.ctypes.data)
        if kernel.part_address:
            pool = self.graph.pool
            self.set_pool_block((pool.parallelize, pool.pool, kernel.part_address))
        # The arena is allocated after prepare: large tensors are advised on the first invoke,
        # in Python, which then hands the runtime the native entry point.
        self.large = [t for t in (*ir.inputs, *ir.outputs) if not context.tensor(t).is_constant
                      and math.prod(ir.value(t).shape) * context.tensor(t).dtype.itemsize
                      >= HUGE_PAGE]
        self.native_invoke_address = 0 if self.large else kernel.address
        self.graph.kernels[self.number] = PreparedKernel(self.number, ir, kernel, built.legend)

    def prepared_build(self, context: Context) -> tuple[KernelIR, Built]:
        """The partition's IR at the context's shapes and its build: the one claiming built, or
        the one a kernel of the same partition prepared from the same reads (a second
        interpreter of a model; recall.PREPARED), else built now."""
        threads = self.delegate.kernel_threads(context, self.graph)
        precision = self.delegate.options.precision
        key = (tuple(self.nodes), self.partition, threads, precision)
        found = PREPARED.find(key, context)
        if found is not None:
            return found
        context.prefetch(tensors=[t for node in self.nodes for t in (*node.inputs, node.output)
                                  if t >= 0])
        reads = context.record()
        ir = partition_ir(context, self.nodes, self.partition, threads, precision)
        kept = self.graph.built.get(self.partition.nodes)
        built = (kept[1] if kept is not None and kept[0] == ir
                 else build(ir, LAYOUT, cache=self.delegate.cache))
        PREPARED.keep(key, reads, (ir, built))
        return ir, built

    def invoke(self, context: Context) -> None:
        """The first invoke after a prepare that left large tensors: advise their memory into
        huge pages, run the kernel, and from now on let the runtime call it natively."""
        for t in dict.fromkeys(self.large):
            view = context.view(t)
            advise_huge_pages(view.ctypes.data, view.nbytes)
        if _ENTRY(self.kernel.address)(context.address(), self.node_address) != abi.kTfLiteOk:
            raise RuntimeError(f"kernel {self.kernel.name} failed")
        self.native_invoke_address = self.kernel.address
