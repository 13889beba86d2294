"""Python views of the runtime's TfLiteContext, nodes and tensors, read afresh on every call.

A Context can record what is read through it (`record`), and check that another graph reads
the same (`reads_same`): claiming is a function of those reads (fusion_delegate.recall).
"""
from __future__ import annotations

import ctypes
import functools
from ctypes import POINTER, byref, c_int, c_void_p
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

from . import abi


class TensorInfo(NamedTuple):
    """What a delegate needs to know about one tensor to decide and to compile (a tuple: a
    Prepare reads hundreds, and a frozen dataclass takes three times as long to make)."""
    index: int
    type: int                      # TfLiteType
    shape: tuple[int, ...]
    allocation_type: int
    scale: float
    zero_point: int
    per_channel: bool              # affine quantization with more than one scale
    sparse: bool = False           # stored compressed (TfLiteSparsity): not a dense array

    @property
    def type_name(self) -> str:
        return abi.type_name(self.type)

    @property
    def dtype(self) -> np.dtype:
        return abi.numpy_dtype(self.type)

    @property
    def is_constant(self) -> bool:
        return self.allocation_type in (abi.kTfLiteMmapRo, abi.kTfLitePersistentRo)

    @property
    def is_dynamic(self) -> bool:
        return self.allocation_type == abi.kTfLiteDynamic


class NodeInfo(NamedTuple):
    """One node of the execution plan: its op, operands and builtin params address."""
    index: int
    builtin_code: int
    custom_name: str | None
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    builtin_data: int              # address of the op's TfLite*Params struct, 0 if none


@dataclass(frozen=True)
class Partition:
    """A group of supported nodes the runtime would replace with one delegate kernel."""
    nodes: tuple[int, ...]
    inputs: tuple[int, ...]        # sorted, de-duplicated tensor ids (constants included)
    outputs: tuple[int, ...]


_GET_NODE_AND_REGISTRATION = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, POINTER(c_void_p),
                                              POINTER(c_void_p))


class Context:
    """A TfLiteContext* seen from Python. Build one per callback; never keep tensor pointers."""

    def __init__(self, pointer) -> None:
        self.pointer = pointer
        self._ctx = pointer.contents
        self._tensors: dict[int, TensorInfo] = {}
        self._nodes: dict[int, NodeInfo] = {}
        self._reads: dict[str, dict[tuple, object]] | None = None
        self._address = ctypes.cast(pointer, c_void_p).value
        self._tensors_address = ctypes.cast(self._ctx.tensors, c_void_p).value or 0

    def record(self) -> dict[str, dict[tuple, object]]:
        """From now on, note each read and a comparable form of what it gave (pointers left
        out: another interpreter of the same model has its own) in the dict returned: by the
        method read, by its arguments."""
        self._reads = {}
        return self._reads

    def reads_same(self, reads: dict[str, dict[tuple, object]]) -> bool:
        """Whether every read of `reads` gives here what it gave where it was recorded (False
        where one fails: what is read anew then says why)."""
        try:
            tensors, nodes = reads.get("tensor", {}), reads.get("node", {})
            self.prefetch(tensors=[i for i, in tensors], nodes=[i for i, in nodes])
            # Most reads: tensors and nodes, read in bulk.
            if any(self._tensors[i] != value for (i,), value in tensors.items()) or any(
                    _comparable("node", self._nodes[i]) != value
                    for (i,), value in nodes.items()):
                return False
            for kind, kept in reads.items():
                if kind in ("tensor", "node"):
                    continue
                read = getattr(self, kind)
                for args, value in kept.items():
                    if _comparable(kind, read(*args) if callable(read) else read) != value:
                        return False
            return True
        except Exception:  # noqa: BLE001 - a read that fails here is not the same read
            return False

    def _note(self, kind: str, args: tuple, value):
        if self._reads is not None:
            self._reads.setdefault(kind, {})[args] = _comparable(kind, value)
        return value

    @property
    def num_tensors(self) -> int:
        return self._ctx.tensors_size

    @property
    def num_threads(self) -> int:
        return self._note("num_threads", (), self._ctx.recommended_num_threads)

    def _tensor_address(self, index: int) -> int:
        if not 0 <= index < self._ctx.tensors_size:
            raise IndexError(f"tensor index {index} out of range [0, {self._ctx.tensors_size})")
        return self._tensors_address + index * abi.TENSOR_SIZE

    def _raw_tensor(self, index: int) -> abi.TfLiteTensor:
        return abi.TfLiteTensor.from_address(self._tensor_address(index))

    def tensor_table(self) -> np.ndarray:
        """Every tensor's struct fields as abi.TENSOR_TABLE records, read in one go (not
        recorded)."""
        return abi.tensor_table(self._tensors_address, self._ctx.tensors_size)

    def prefetch(self, tensors: Iterable[int] = (), nodes: Iterable[int] = ()) -> None:
        """Read these tensors and nodes, those not read yet, in bulk (4-10 times quicker than
        one by one: a second interpreter checks a thousand recorded reads), for `tensor` and
        `node` to find (not recorded until they are asked for)."""
        tensors = sorted({t for t in tensors if t not in self._tensors})
        if tensors:
            self._tensors.update(zip(tensors, self._read_tensors(tensors)))
        nodes = list(dict.fromkeys(n for n in nodes if n not in self._nodes))
        if nodes:
            self._nodes.update(zip(nodes, self._read_nodes(nodes)))

    def adopt(self, nodes: Iterable[NodeInfo]) -> None:
        """Take nodes as another Context of the same graph read them within the same delegate
        Prepare (kernel init runs inside it; nodes do not change while it runs)."""
        self._nodes.update((node.index, node) for node in nodes)

    def tensor(self, index: int) -> TensorInfo:
        """What a tensor is, read once per Context (so once per callback) unless resized."""
        info = self._tensors.get(index)
        if info is None:
            info = self._tensors[index] = self._read_tensors([index])[0]
        return self._note("tensor", (index,), info)

    def tensor_name(self, index: int) -> str:
        """A tensor's name, for messages (not part of TensorInfo: a second interpreter checks
        every tensor it read, and few names are ever shown)."""
        name = abi.c_string(self._tensor_fields(index).name)
        return self._note("tensor_name", (index,), name.decode("utf-8", "replace"))

    def _read_tensors(self, indices: list[int]) -> list[TensorInfo]:
        """Tensors by index (sorted, in range), their structs read in one go and what they
        point to (shapes, affine quantization's scale count) gathered per field."""
        first = self._tensor_address(indices[0])
        self._tensor_address(indices[-1])
        table = abi.tensor_table(first, indices[-1] - indices[0] + 1)
        rows = table[[i - indices[0] for i in indices]]
        affine = np.where(rows["quantization_type"] == 1, rows["quantization_params"], 0)
        scales = abi.gather(abi.gather(affine, "<u8"), "<i4")    # affine->scale->size
        return list(map(TensorInfo._make, zip(
            indices, rows["type"].tolist(), abi.int_arrays(rows["dims"]),
            rows["allocation_type"].tolist(), rows["scale"].tolist(),
            rows["zero_point"].tolist(), [count > 1 for count in scales],
            (rows["sparsity"] != 0).tolist())))

    def affine_quantization(self, index: int) -> tuple[tuple[float, ...], tuple[int, ...], int]:
        """A tensor's affine quantization as the kernels' Prepare reads it: its scales, zero
        points and quantized dimension (no scales where it has none)."""
        fields = self._tensor_fields(index)
        if fields.quantization_type != 1 or not fields.quantization_params:
            return self._note("affine_quantization", (index,), ((), (), 0))
        scale, zero_point, dimension = abi.affine_fields(fields.quantization_params)
        return self._note("affine_quantization", (index,), (
            abi.float_array(scale), abi.int_array(zero_point), dimension))

    def view(self, index: int) -> np.ndarray:
        """Zero-copy numpy view of a tensor's data, valid only during this callback."""
        return self._note("view", (index,), abi.tensor_view(self._tensor_fields(index)))

    def _tensor_fields(self, index: int) -> abi.TensorFields:
        return abi.tensor_fields(self._tensor_address(index), 1)[0]

    def params(self, index: int, struct: type[ctypes.Structure]) -> ctypes.Structure:
        """A copy of node `index`'s builtin params, read as `struct` (the node must have
        them)."""
        address = self.node(index).builtin_data
        if not address:
            raise RuntimeError(f"node {index} has no builtin params")
        value = struct.from_buffer_copy(ctypes.string_at(address, ctypes.sizeof(struct)))
        return self._note("params", (index, struct), value)

    def _function(self, name: str):
        """A TfLiteContext function pointer; the runtime leaves some NULL at some stages."""
        function = getattr(self._ctx, name)
        if not function:
            raise RuntimeError(f"TfLiteContext.{name} is not available at this stage")
        return function

    def resize(self, index: int, shape: tuple[int, ...]) -> None:
        """Set a tensor's shape. ResizeTensor takes ownership of a malloc'd TfLiteIntArray
        (ResizeTensorExplicit, which would copy, is NULL in the Python runtime)."""
        self._tensors.pop(index, None)
        dims = abi.malloc_int_array(shape)
        status = self._function("ResizeTensor")(self.pointer,
                                                ctypes.pointer(self._raw_tensor(index)), dims)
        if status != abi.kTfLiteOk:
            raise RuntimeError(f"ResizeTensor of tensor {index} to {list(shape)} failed")

    def execution_plan(self) -> tuple[int, ...]:
        plan = POINTER(abi.TfLiteIntArray)()
        if self._function("GetExecutionPlan")(self.pointer, byref(plan)) != abi.kTfLiteOk:
            raise RuntimeError("GetExecutionPlan failed")
        return self._note("execution_plan", (), abi.int_array(plan))

    @functools.cached_property
    def makers(self) -> dict[int, NodeInfo]:
        """The node of the execution plan that writes each tensor, as the plan stands when first
        asked (a Context lives for one callback)."""
        return {t: node for node in map(self.node, self.execution_plan()) for t in node.outputs}

    def node(self, index: int) -> NodeInfo:
        """A node, read once per Context: a node's inputs, outputs and params do not change
        while a callback runs (replacing nodes by delegate kernels adds nodes, and leaves the
        replaced ones as they were)."""
        info = self._nodes.get(index)
        if info is None:
            info = self._nodes[index] = self._read_nodes([index])[0]
        return self._note("node", (index,), info)

    @functools.cached_property
    def _get_node_and_registration(self):
        """GetNodeAndRegistration, taking and giving plain addresses."""
        return ctypes.cast(self._function("GetNodeAndRegistration"), _GET_NODE_AND_REGISTRATION)

    def _read_nodes(self, indices: list[int]) -> list[NodeInfo]:
        """Nodes by index: each found through GetNodeAndRegistration, their fields and operand
        lists gathered per field."""
        node, registration = c_void_p(), c_void_p()
        node_ref, registration_ref = byref(node), byref(registration)
        found = []
        for index in indices:
            status = self._get_node_and_registration(self._address, index, node_ref,
                                                     registration_ref)
            if status != abi.kTfLiteOk or not node.value or not registration.value:
                raise RuntimeError(f"GetNodeAndRegistration({index}) failed")
            found.append((node.value, registration.value))
        fields = abi.node_columns(found)
        names = [abi.c_string(name).decode("utf-8", "replace") if name else None
                 for name in fields.custom_name]
        return list(map(NodeInfo._make, zip(
            indices, fields.builtin_code, names, fields.version, abi.int_arrays(fields.inputs),
            abi.int_arrays(fields.outputs), fields.builtin_data)))

    def preview_partitions(self, nodes: tuple[int, ...]) -> list[Partition]:
        """How the runtime would group `nodes` into kernels (PreviewDelegatePartitioning)."""
        if not nodes:
            return []
        params = POINTER(abi.TfLiteDelegateParams)()
        count = c_int(0)
        request = abi.IntArray(nodes)
        preview = self._function("PreviewDelegatePartitioning")
        status = preview(self.pointer, request.ptr, byref(params), byref(count))
        if status != abi.kTfLiteOk:
            raise RuntimeError("PreviewDelegatePartitioning failed")
        return [Partition(nodes=abi.int_array(params[i].nodes_to_replace),
                          inputs=abi.int_array(params[i].input_tensors),
                          outputs=abi.int_array(params[i].output_tensors))
                for i in range(count.value)]

    def replace_node_subsets(self, registration: abi.TfLiteRegistration,
                             nodes: tuple[int, ...], delegate: abi.TfLiteDelegate) -> None:
        """Hand `nodes` to the delegate: the runtime re-partitions them and inits one kernel per
        partition, copying `registration` by value."""
        request = abi.IntArray(nodes)
        status = self._function("ReplaceNodeSubsetsWithDelegateKernels")(
            self.pointer, registration, request.ptr, ctypes.pointer(delegate))
        if status != abi.kTfLiteOk:
            raise RuntimeError(f"ReplaceNodeSubsetsWithDelegateKernels failed (status {status})")

    def report_error(self, message: str) -> None:
        self._function("ReportError")(self.pointer, b"%s", message.encode("utf-8", "replace"))

    def address(self) -> int:
        return self._address


def _comparable(kind: str, value):
    """What a read gave, as recorded: without the addresses another interpreter of the same
    model has elsewhere (a node's params are read on their own), and a tensor's data as bytes."""
    if kind == "node":                  # NodeInfo but the address of its params
        return (*value[:-1], bool(value.builtin_data))
    if kind == "view":
        return value.dtype.str, value.shape, value.tobytes()
    if kind == "params":
        return bytes(value)
    return value
