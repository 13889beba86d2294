"""TFLite's SimpleDelegate, in Python, plugged into the official interpreter through ctypes.

`SimpleDelegate` mirrors SimpleDelegateInterface (tflite/delegates/utils/simple_delegate.h): say
which nodes are supported, and create one kernel per partition. `SimpleDelegateKernel` mirrors
SimpleDelegateKernelInterface: init with the partition, prepare (again after every resize),
invoke. Any `SimpleDelegate` can be passed in `experimental_delegates`: the interpreter only calls
`_get_native_delegate_pointer()`.

Every C callback goes through `_guarded`: no Python exception escapes into C. The error is
reported through the context (the user sees a RuntimeError naming the cause), kept on the
delegate as `last_error`, and the callback returns kTfLiteError.

Invoke and free are native (see native.py): invoke reads the kernel's slot (`node->user_data`)
and calls the address stored there, a compiled kernel's own entry point or the Python invoke
callback for kernels written in Python.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
import traceback
import weakref
from ctypes import POINTER, c_int64, c_void_p
from dataclasses import dataclass, field

from . import abi, native, runtime
from .context import Context, NodeInfo, Partition
from .errors import DelegateOptionError

log = logging.getLogger("fusion_delegate")

_INIT_FAILED = ctypes.c_void_p(-1).value  # TfLiteKernelInitFailed() in common.cc


class SimpleDelegateKernel:
    """One delegate kernel per partition (SimpleDelegateKernelInterface)."""

    #: Set in prepare to the address of a native `TfLiteStatus invoke(context, node)` to skip
    #: Python on every invoke; 0 means `invoke()` is called (which may set it, for the
    #: invokes after it).
    native_invoke_address: int = 0
    #: The address of the kernel's TfLiteNode while `prepare()` and `invoke()` run (a native
    #: invoke takes it as its second argument).
    node_address: int = 0

    def set_pool_block(self, values: tuple[int, int, int]) -> None:
        """Fill the pool block of the kernel's slot (fusion_delegate.native), which its native
        invoke reads: call in prepare()."""
        node = abi.TfLiteNode.from_address(self.node_address)
        _slot(node.user_data)[native.SLOT_POOL_OFFSET // 8:native.SLOT_DATA_OFFSET // 8] = \
            list(values)

    def set_data(self, address: int) -> None:
        """Put the address of the partition's data in the kernel's slot, where its native
        invoke reads it (codegen.kernel_data): call in prepare(), and keep the data alive."""
        node = abi.TfLiteNode.from_address(self.node_address)
        _slot(node.user_data)[native.SLOT_DATA_OFFSET // 8] = address

    def init(self, context: Context, nodes: list[NodeInfo], inputs: tuple[int, ...],
             outputs: tuple[int, ...]) -> None:
        """Remember the partition (its nodes, and its input and output tensor ids)."""

    def prepare(self, context: Context) -> None:
        """Check shapes, set output shapes; runs again whenever inputs are resized."""

    def invoke(self, context: Context) -> None:
        raise NotImplementedError(f"{type(self).__name__} has neither invoke() nor a native one")


@dataclass
class Graph:
    """What one delegate Prepare saw and chose for one subgraph: its execution plan, the
    partitions chosen, and what a subclass keeps about them (claims by node, kernels,
    predictions and built kernels by partition)."""
    plan: tuple[int, ...] = ()
    partitions: list[Partition] = field(default_factory=list)
    claims: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    predictions: dict = field(default_factory=dict)
    built: dict = field(default_factory=dict)
    pool: object = None          # the interpreter's thread pool, where kernels may use it
    tuning_key: object = None    # what tuned decisions for this graph are stored under
    tuned: object = None         # the tuned decision in force, if any


def largest_first(partitions: list[Partition]) -> list[Partition]:
    """The order TFLite's selection takes partitions in: by size, ties as they came."""
    return sorted(partitions, key=lambda p: len(p.nodes), reverse=True)


class SimpleDelegate:
    """A delegate defined by which nodes it supports and the kernel it creates.

    Options follow TFLite's SimpleDelegate: `max_delegated_partitions` (<= 0: no limit) keeps the
    largest partitions first; `min_nodes_per_partition` (<= 0: no minimum) stops at the first
    partition smaller than it.
    """

    name = "python_delegate"

    def __init__(self, *, max_delegated_partitions: int = 0,
                 min_nodes_per_partition: int = 0) -> None:
        for key, value in (("max_delegated_partitions", max_delegated_partitions),
                           ("min_nodes_per_partition", min_nodes_per_partition)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise DelegateOptionError(f"option {key} must be an integer, got {value!r}")
        runtime.check_supported()  # one clear error for an unsupported TFLite runtime
        self.max_delegated_partitions = max_delegated_partitions
        self.min_nodes_per_partition = min_nodes_per_partition
        self.last_error: BaseException | None = None
        #: Per subgraph (by its context's address) of the interpreter last given this delegate:
        #: a model may have several (the wake-word models' init graph), and the runtime
        #: prepares the delegate on each. `graph` is the one being prepared.
        self.graphs: dict[int, Graph] = {}
        self.graph = Graph()
        #: The nodes the running Prepare hands to kernels, as it read them: their kernels' init
        #: (called from within it) need not read them again.
        self.replacing: dict[int, NodeInfo] = {}
        self._name_bytes = self.name.encode()
        self._delegate = abi.TfLiteDelegate(
            data_=None, Prepare=_DELEGATE_PREPARE,
            flags=abi.kTfLiteDelegateFlagsAllowDynamicTensors)
        self._address = ctypes.addressof(self._delegate)
        _LIVE_DELEGATES[self._address] = self

    # --- the interface a delegate implements -------------------------------------------------
    def initialize(self, context: Context) -> None:
        """Called once per delegate Prepare, before any node is asked about."""

    def is_node_supported(self, context: Context, node: NodeInfo) -> bool:
        raise NotImplementedError

    def create_kernel(self) -> SimpleDelegateKernel:
        raise NotImplementedError

    def select_partitions(self, context: Context, partitions: list[Partition]) -> list[Partition]:
        """Largest first, at most `max_delegated_partitions`, stop below the minimum size
        (GetFirstNLargestPartitions in tflite/delegates/utils.cc)."""
        ordered = largest_first(partitions)
        limit = self.max_delegated_partitions if self.max_delegated_partitions > 0 else len(ordered)
        chosen = []
        for partition in ordered[:limit]:
            if len(partition.nodes) < self.min_nodes_per_partition:
                break
            chosen.append(partition)
        return chosen

    def choose(self, context: Context, plan: tuple[int, ...]) -> list[Partition]:
        """The partitions to delegate: of the supported nodes, as the runtime groups them, those
        select_partitions keeps."""
        context.prefetch(tensors=range(context.num_tensors), nodes=plan)
        supported = tuple(i for i in plan if self.is_node_supported(context, context.node(i)))
        return self.select_partitions(context, context.preview_partitions(supported))

    @property
    def main_graph(self) -> Graph:
        """The model's main graph: the subgraph with the most nodes, for tools and tests."""
        return max(self.graphs.values(), key=lambda g: len(g.plan), default=Graph())

    @property
    def last_plan(self) -> tuple[int, ...]:
        return self.main_graph.plan

    @property
    def last_partitions(self) -> list[Partition]:
        return self.main_graph.partitions

    # --- what the interpreter calls -----------------------------------------------------------
    def _get_native_delegate_pointer(self) -> int:
        self.graphs = {}                     # a new interpreter: its subgraphs follow
        return self._address

    def _prepare(self, context: Context) -> None:
        abi.check_runtime_layout(context.pointer)
        self.graph = self.graphs[context.address()] = Graph()
        self.initialize(context)
        plan = context.execution_plan()
        self.graph.plan = plan
        chosen = self.graph.partitions = self.choose(context, plan)
        nodes = sorted(n for partition in chosen for n in partition.nodes)
        log.info("%s: %d of %d nodes delegated in %d partitions",
                 self.name, len(nodes), len(plan), len(chosen))
        if not nodes:
            return
        registration = abi.TfLiteRegistration(
            init=_KERNEL_INIT, free=native.mark_freed.address, prepare=_KERNEL_PREPARE,
            invoke=native.invoke_trampoline.address, builtin_code=abi.kTfLiteBuiltinDelegate,
            custom_name=self._name_bytes, version=1)
        self.last_error = None
        self.replacing = {n: context.node(n) for n in nodes}
        try:
            context.replace_node_subsets(registration, tuple(nodes), self._delegate)
        except RuntimeError:
            if self.last_error is not None:
                raise self.last_error from None  # a kernel init failed: that is the cause
            raise
        finally:
            self.replacing = {}


# --- the C callbacks ----------------------------------------------------------------------------
# Delegates and kernels are found by address: the TfLiteDelegate struct's, and the kernel slot's.
# Weak: the interpreter keeps its delegates alive (interpreter._delegates), we must not.
_LIVE_DELEGATES: weakref.WeakValueDictionary[int, SimpleDelegate] = weakref.WeakValueDictionary()
_LIVE_KERNELS: dict[int, tuple[SimpleDelegateKernel, SimpleDelegate]] = {}
# Interpreters built in several threads may share a delegate, whose Prepare keeps the graph's
# claims on the delegate object, and sweeps _LIVE_KERNELS: one at a time.
_GRAPH_LOCK = threading.RLock()


def _slot(address: int) -> ctypes.Array:
    return (c_int64 * native.SLOT_WORDS).from_address(address)


def sweep_freed_kernels() -> None:
    """Release the kernels whose node the runtime has freed (see native.mark_freed): once per
    delegate Prepare, which may follow hundreds of kernels' frees."""
    freed = native.SLOT_FREED_OFFSET
    for address in [a for a in _LIVE_KERNELS if c_int64.from_address(a + freed).value]:
        del _LIVE_KERNELS[address]
        abi.free(address)


def _guarded(where: str, failure, delegate_of=None):
    """Wrap a C callback: report any exception through the context and return `failure`."""
    def wrap(callback):
        @functools.wraps(callback)
        def guarded(context_pointer, *args):
            try:
                return callback(Context(context_pointer), *args)
            except BaseException as error:  # noqa: BLE001 - nothing may escape into C
                _report(context_pointer, where, error, delegate_of, args)
                return failure
        return guarded
    return wrap


def _report(context_pointer, where: str, error: BaseException, delegate_of, args) -> None:
    try:
        delegate = delegate_of(*args) if delegate_of else None
        if delegate is not None:
            delegate.last_error = error
    except BaseException:  # noqa: BLE001 - the pointers we were given may be the problem
        pass
    message = f"{where}: {type(error).__name__}: {error}\n"
    log.debug("%s\n%s", message, "".join(traceback.format_exception(error)))
    try:
        Context(context_pointer).report_error(message)
    except BaseException:  # noqa: BLE001 - a broken context must not take the process down
        log.error("could not report through the context: %s", message)


def _delegate_at(delegate_pointer) -> SimpleDelegate | None:
    return _LIVE_DELEGATES.get(ctypes.cast(delegate_pointer, c_void_p).value)


def _kernel_of_node(node_pointer):
    return _LIVE_KERNELS.get(node_pointer.contents.user_data or 0)


def _delegate_of_node(node_pointer):
    record = _kernel_of_node(node_pointer)
    return record[1] if record else None


@_guarded("delegate Prepare", abi.kTfLiteError, delegate_of=_delegate_at)
def _delegate_prepare(context: Context, delegate_pointer) -> int:
    delegate = _delegate_at(delegate_pointer)
    if delegate is None:
        raise RuntimeError("delegate object is gone (was it garbage-collected?)")
    with _GRAPH_LOCK:
        sweep_freed_kernels()
        delegate._prepare(context)
    return abi.kTfLiteOk


def _delegate_of_params(buffer, length):
    params = ctypes.cast(buffer, POINTER(abi.TfLiteDelegateParams)).contents
    return _delegate_at(params.delegate)


@_guarded("kernel init", _INIT_FAILED, delegate_of=_delegate_of_params)
def _kernel_init(context: Context, buffer, length) -> int:
    params = ctypes.cast(buffer, POINTER(abi.TfLiteDelegateParams)).contents
    delegate = _delegate_at(params.delegate)
    if delegate is None:
        raise RuntimeError("kernel init for a delegate object that is gone")
    with _GRAPH_LOCK:
        kernel = delegate.create_kernel()
        indices = abi.int_array(params.nodes_to_replace)
        context.adopt([delegate.replacing[i] for i in indices if i in delegate.replacing])
        context.prefetch(nodes=indices)
        nodes = [context.node(i) for i in indices]
        kernel.init(context, nodes, abi.int_array(params.input_tensors),
                    abi.int_array(params.output_tensors))
        address = abi.malloc(native.SLOT_BYTES)
        _slot(address)[:] = [0] * native.SLOT_WORDS
        _LIVE_KERNELS[address] = (kernel, delegate)
        return address


@_guarded("kernel prepare", abi.kTfLiteError, delegate_of=_delegate_of_node)
def _kernel_prepare(context: Context, node_pointer) -> int:
    record = _kernel_of_node(node_pointer)
    if record is None:
        raise RuntimeError("prepare of a kernel whose init failed")
    kernel, _ = record
    slot = _slot(node_pointer.contents.user_data)
    slot[0] = 0
    kernel.node_address = ctypes.addressof(node_pointer.contents)
    kernel.prepare(context)
    slot[0] = kernel.native_invoke_address or _PY_INVOKE_ADDRESS
    return abi.kTfLiteOk


@_guarded("kernel invoke", abi.kTfLiteError, delegate_of=_delegate_of_node)
def _kernel_invoke(context: Context, node_pointer) -> int:
    kernel, _ = _kernel_of_node(node_pointer)
    kernel.node_address = ctypes.addressof(node_pointer.contents)
    kernel.invoke(context)
    if kernel.native_invoke_address:         # from now on, the runtime calls it natively
        _slot(node_pointer.contents.user_data)[0] = kernel.native_invoke_address
    return abi.kTfLiteOk


_DELEGATE_PREPARE = abi.DelegatePrepareFn(_delegate_prepare)
_KERNEL_INIT = abi.InitFn(_kernel_init)
_KERNEL_PREPARE = abi.PrepareFn(_kernel_prepare)
_KERNEL_INVOKE = abi.InvokeFn(_kernel_invoke)
_PY_INVOKE_ADDRESS = ctypes.cast(_KERNEL_INVOKE, c_void_p).value
# The thunks must outlive every interpreter, even those finalized after module teardown.
for _thunk in (_DELEGATE_PREPARE, _KERNEL_INIT, _KERNEL_PREPARE, _KERNEL_INVOKE):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_thunk))
