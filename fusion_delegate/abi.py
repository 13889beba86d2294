"""ctypes mirrors of the TFLite C structs a delegate touches, and their layout checks.

The structs follow `tflite/core/c/common.h` of google-ai-edge/LiteRT, field for field and in
header order (line numbers refer to the copy read for ai-edge-litert 2.3.0). A wrong layout does
not fail loudly, it corrupts memory: `check_layout()` compares every struct's size and the offsets
we use with the expected table at import, and `check_live_context()` checks a running
interpreter's tensors (the first each runtime library prepares) before anything is claimed.
"""
from __future__ import annotations

import ctypes
import math
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint64, c_void_p)
from struct import Struct, unpack
from typing import NamedTuple

import numpy as np

from .errors import AbiMismatchError

# TfLiteStatus (c_api_types.h).
kTfLiteOk = 0
kTfLiteError = 1
kTfLiteDelegateError = 2

# TfLiteDelegateFlags (common.h, "The flags used in `TfLiteDelegate`").
kTfLiteDelegateFlagsNone = 0
kTfLiteDelegateFlagsAllowDynamicTensors = 1
kTfLiteDelegateFlagsRequirePropagatedShapes = 2

# TfLiteAllocationType (common.h).
kTfLiteMmapRo = 1
kTfLiteDynamic = 4
kTfLitePersistentRo = 5

kTfLiteBuiltinDelegate = 51


class TfLiteIntArray(Structure):
    """`{int size; int data[];}`: read with `int_array()`, never by field."""
    _fields_ = [("size", c_int)]


class TfLiteFloatArray(Structure):
    _fields_ = [("size", c_int)]


class TfLiteQuantizationParams(Structure):
    _fields_ = [("scale", c_float), ("zero_point", c_int32)]


class TfLiteQuantization(Structure):
    _fields_ = [("type", c_int), ("params", c_void_p)]


class TfLiteAffineQuantization(Structure):
    _fields_ = [("scale", POINTER(TfLiteFloatArray)), ("zero_point", POINTER(TfLiteIntArray)),
                ("quantized_dimension", c_int32)]


class TfLiteTensor(Structure):
    _fields_ = [
        ("type", c_int),
        ("data", c_void_p),                 # TfLitePtrUnion
        ("dims", POINTER(TfLiteIntArray)),
        ("params", TfLiteQuantizationParams),
        ("allocation_type", c_int),
        ("bytes", c_size_t),
        ("allocation", c_void_p),
        ("name", c_char_p),
        ("delegate", c_void_p),
        ("buffer_handle", c_int),
        ("data_is_stale", c_bool),
        ("is_variable", c_bool),
        ("quantization", TfLiteQuantization),
        ("sparsity", c_void_p),
        ("dims_signature", POINTER(TfLiteIntArray)),
    ]


class TfLiteNode(Structure):
    _fields_ = [
        ("inputs", POINTER(TfLiteIntArray)),
        ("outputs", POINTER(TfLiteIntArray)),
        ("intermediates", POINTER(TfLiteIntArray)),
        ("temporaries", POINTER(TfLiteIntArray)),
        ("user_data", c_void_p),
        ("builtin_data", c_void_p),
        ("custom_initial_data", c_void_p),
        ("custom_initial_data_size", c_int),
        ("delegate", c_void_p),
        ("might_have_side_effect", c_bool),
    ]


class TfLiteContext(Structure):
    pass


class TfLiteDelegate(Structure):
    pass


class TfLiteRegistration(Structure):
    pass


InitFn = CFUNCTYPE(c_void_p, POINTER(TfLiteContext), c_void_p, c_size_t)
PrepareFn = CFUNCTYPE(c_int, POINTER(TfLiteContext), POINTER(TfLiteNode))
InvokeFn = PrepareFn
DelegatePrepareFn = CFUNCTYPE(c_int, POINTER(TfLiteContext), POINTER(TfLiteDelegate))

TfLiteRegistration._fields_ = [
    ("init", InitFn),
    ("free", c_void_p),                     # native: it runs while interpreters are destroyed
    ("prepare", PrepareFn),
    ("invoke", c_void_p),                   # a PrepareFn or a native (numba cfunc) address
    ("profiling_string", c_void_p),
    ("builtin_code", c_int32),
    ("custom_name", c_char_p),
    ("version", c_int),
    ("registration_external", c_void_p),
    ("async_kernel", c_void_p),
    ("inplace_operator", c_uint64),
]

TfLiteDelegate._fields_ = [
    ("data_", c_void_p),
    ("Prepare", DelegatePrepareFn),
    ("CopyFromBufferHandle", c_void_p),
    ("CopyToBufferHandle", c_void_p),
    ("FreeBufferHandle", c_void_p),
    ("flags", c_int64),
    ("opaque_delegate_builder", c_void_p),
]


class TfLiteDelegateParams(Structure):
    _fields_ = [
        ("delegate", POINTER(TfLiteDelegate)),
        ("nodes_to_replace", POINTER(TfLiteIntArray)),
        ("input_tensors", POINTER(TfLiteIntArray)),
        ("output_tensors", POINTER(TfLiteIntArray)),
    ]


_ctx = POINTER(TfLiteContext)
TfLiteContext._fields_ = [
    ("tensors_size", c_size_t),
    ("GetExecutionPlan", CFUNCTYPE(c_int, _ctx, POINTER(POINTER(TfLiteIntArray)))),
    ("tensors", POINTER(TfLiteTensor)),
    ("impl_", c_void_p),
    ("ResizeTensor", CFUNCTYPE(c_int, _ctx, POINTER(TfLiteTensor), POINTER(TfLiteIntArray))),
    # Variadic in C; we only ever pass ("%s", message).
    ("ReportError", CFUNCTYPE(None, _ctx, c_char_p, c_char_p)),
    ("AddTensors", c_void_p),
    ("GetNodeAndRegistration", CFUNCTYPE(c_int, _ctx, c_int, POINTER(POINTER(TfLiteNode)),
                                         POINTER(POINTER(TfLiteRegistration)))),
    ("ReplaceNodeSubsetsWithDelegateKernels",
     CFUNCTYPE(c_int, _ctx, TfLiteRegistration, POINTER(TfLiteIntArray),
               POINTER(TfLiteDelegate))),
    ("recommended_num_threads", c_int),
    ("GetExternalContext", c_void_p),
    ("SetExternalContext", c_void_p),
    ("allow_fp32_relax_to_fp16", c_bool),
    ("profiler", c_void_p),
    ("AllocatePersistentBuffer", c_void_p),
    ("AllocateBufferForEval", c_void_p),
    ("RequestScratchBufferInArena", c_void_p),
    ("GetScratchBuffer", c_void_p),
    ("ResizeTensorExplicit", CFUNCTYPE(c_int, _ctx, POINTER(TfLiteTensor), c_int,
                                       POINTER(c_int))),
    ("PreviewDelegatePartitioning",
     CFUNCTYPE(c_int, _ctx, POINTER(TfLiteIntArray), POINTER(POINTER(TfLiteDelegateParams)),
               POINTER(c_int))),
    ("GetTensor", CFUNCTYPE(POINTER(TfLiteTensor), _ctx, c_int)),
    ("GetEvalTensor", c_void_p),
    ("GetModelMetadata", c_void_p),
    ("AcquireSubgraphContext", c_void_p),
    ("ReleaseSubgraphContext", c_void_p),
]

# Builtin params of the ops we claim (tflite/core/c/builtin_op_data.h): node->builtin_data.
class TfLiteArithParams(Structure):
    """TfLiteAddParams / TfLiteSubParams / TfLiteMulParams / TfLiteDivParams: activation first."""
    _fields_ = [("activation", c_int)]


class TfLiteLeakyReluParams(Structure):
    _fields_ = [("alpha", c_float)]


class TfLiteGeluParams(Structure):
    _fields_ = [("approximate", c_bool)]


class TfLiteBatchMatMulParams(Structure):
    _fields_ = [("adj_x", c_bool), ("adj_y", c_bool), ("asymmetric_quantize_inputs", c_bool)]


class TfLiteReducerParams(Structure):
    """MEAN, SUM, REDUCE_MAX, REDUCE_MIN."""
    _fields_ = [("keep_dims", c_bool)]


class TfLiteSoftmaxParams(Structure):
    _fields_ = [("beta", c_float)]


class TfLiteL2NormParams(Structure):
    _fields_ = [("activation", c_int)]


class TfLiteDepthwiseConvParams(Structure):
    """padding is a TfLitePadding (kTfLitePaddingSame 1, kTfLitePaddingValid 2);
    depth_multiplier is redundant, LiteRT's kernel takes it from the shapes."""
    _fields_ = [("padding", c_int), ("stride_width", c_int), ("stride_height", c_int),
                ("depth_multiplier", c_int), ("activation", c_int),
                ("dilation_width_factor", c_int), ("dilation_height_factor", c_int)]


# Expected sizes and the offsets we rely on, x86-64 / aarch64 LP64 (numba kernels read
# TENSOR_DATA_OFFSET etc. directly, so these are also codegen inputs).
EXPECTED_LAYOUT: dict[str, tuple[int, dict[str, int]]] = {
    "TfLiteTensor": (112, {"type": 0, "data": 8, "dims": 16, "params": 24,
                           "allocation_type": 32, "bytes": 40, "name": 56, "quantization": 80,
                           "sparsity": 96, "dims_signature": 104}),
    "TfLiteNode": (80, {"inputs": 0, "outputs": 8, "user_data": 32, "builtin_data": 40,
                        "delegate": 64}),
    "TfLiteQuantization": (16, {"type": 0, "params": 8}),
    "TfLiteQuantizationParams": (8, {"scale": 0, "zero_point": 4}),
    "TfLiteRegistration": (88, {"init": 0, "invoke": 24, "builtin_code": 40,
                                "custom_name": 48, "version": 56, "inplace_operator": 80}),
    "TfLiteDelegate": (56, {"data_": 0, "Prepare": 8, "flags": 40,
                            "opaque_delegate_builder": 48}),
    "TfLiteDelegateParams": (32, {"nodes_to_replace": 8, "output_tensors": 24}),
    "TfLiteContext": (200, {"tensors_size": 0, "tensors": 16, "ReportError": 40,
                            "GetNodeAndRegistration": 56, "recommended_num_threads": 72,
                            "ResizeTensorExplicit": 144, "GetTensor": 160}),
    "TfLiteAffineQuantization": (24, {"scale": 0, "zero_point": 8,
                                      "quantized_dimension": 16}),
}
_STRUCTS = {s.__name__: s for s in (TfLiteTensor, TfLiteNode, TfLiteRegistration, TfLiteDelegate,
                                     TfLiteDelegateParams, TfLiteContext,
                                     TfLiteAffineQuantization, TfLiteQuantization,
                                     TfLiteQuantizationParams)}
TENSOR_SIZE = EXPECTED_LAYOUT["TfLiteTensor"][0]
TENSOR_DATA_OFFSET = EXPECTED_LAYOUT["TfLiteTensor"][1]["data"]
CONTEXT_TENSORS_OFFSET = EXPECTED_LAYOUT["TfLiteContext"][1]["tensors"]
NODE_USER_DATA_OFFSET = EXPECTED_LAYOUT["TfLiteNode"][1]["user_data"]
NODE_INPUTS_OFFSET = EXPECTED_LAYOUT["TfLiteNode"][1]["inputs"]
NODE_OUTPUTS_OFFSET = EXPECTED_LAYOUT["TfLiteNode"][1]["outputs"]

# TfLiteType -> numpy dtype (c_api_types.h). Types without a numpy equivalent map to None and are
# refused by name.
TFLITE_TYPES: dict[int, tuple[str, np.dtype | None]] = {
    0: ("NOTYPE", None), 1: ("FLOAT32", np.dtype(np.float32)), 2: ("INT32", np.dtype(np.int32)),
    3: ("UINT8", np.dtype(np.uint8)), 4: ("INT64", np.dtype(np.int64)), 5: ("STRING", None),
    6: ("BOOL", np.dtype(np.bool_)), 7: ("INT16", np.dtype(np.int16)),
    8: ("COMPLEX64", np.dtype(np.complex64)), 9: ("INT8", np.dtype(np.int8)),
    10: ("FLOAT16", np.dtype(np.float16)), 11: ("FLOAT64", np.dtype(np.float64)),
    12: ("COMPLEX128", np.dtype(np.complex128)), 13: ("UINT64", np.dtype(np.uint64)),
    14: ("RESOURCE", None), 15: ("VARIANT", None), 16: ("UINT32", np.dtype(np.uint32)),
    17: ("UINT16", np.dtype(np.uint16)), 18: ("INT4", None), 19: ("BFLOAT16", None),
    20: ("INT2", None), 21: ("UINT4", None), 22: ("FLOAT8E4M3FN", None),
    23: ("FLOAT8E5M2", None),
}
TFLITE_TYPE_OF_DTYPE: dict[np.dtype, int] = {
    dtype: code for code, (_, dtype) in TFLITE_TYPES.items() if dtype is not None}


def runtime_version() -> str:
    """The TFLite runtime we run inside and its version (runtime.py), for error messages."""
    try:
        from . import runtime
        return str(runtime.RUNTIME)
    except Exception:  # noqa: BLE001 - an error message must not fail for want of a runtime
        return "unknown TFLite runtime"


def type_name(tflite_type: int) -> str:
    return TFLITE_TYPES.get(tflite_type, (f"unknown type {tflite_type}", None))[0]


def numpy_dtype(tflite_type: int) -> np.dtype:
    """The numpy dtype of a TfLiteType, or a clear error naming the type."""
    name, dtype = TFLITE_TYPES.get(tflite_type, (f"unknown type {tflite_type}", None))
    if dtype is None:
        raise TypeError(f"TFLite type {name} has no numpy equivalent")
    return dtype


def check_layout() -> None:
    """Compare our ctypes structs with the expected header layout."""
    for name, (size, offsets) in EXPECTED_LAYOUT.items():
        struct = _STRUCTS[name]
        if ctypes.sizeof(struct) != size:
            raise AbiMismatchError(f"{name}: sizeof is {ctypes.sizeof(struct)}, expected {size} "
                                   f"({runtime_version()})")
        for field, offset in offsets.items():
            found = getattr(struct, field).offset
            if found != offset:
                raise AbiMismatchError(f"{name}.{field}: offset {found}, expected {offset} "
                                       f"({runtime_version()})")
    _check_fields_read_as_bytes()


def _check_fields_read_as_bytes() -> None:
    """tensor_fields (TENSOR_TABLE), node_fields and affine_fields read what the ctypes
    structs' fields hold."""
    tensor = TfLiteTensor(type=9, data=11, dims=ctypes.cast(13, POINTER(TfLiteIntArray)),
                          params=TfLiteQuantizationParams(0.5, -3), allocation_type=5,
                          bytes=17, name=ctypes.cast(19, c_char_p),
                          quantization=TfLiteQuantization(1, 23), sparsity=29)
    node = TfLiteNode(inputs=ctypes.cast(31, POINTER(TfLiteIntArray)),
                      outputs=ctypes.cast(37, POINTER(TfLiteIntArray)), builtin_data=41)
    registration = TfLiteRegistration(builtin_code=43, custom_name=ctypes.cast(47, c_char_p),
                                      version=53)
    affine = TfLiteAffineQuantization(scale=ctypes.cast(59, POINTER(TfLiteFloatArray)),
                                      zero_point=ctypes.cast(61, POINTER(TfLiteIntArray)),
                                      quantized_dimension=67)
    if (tensor_fields(ctypes.addressof(tensor), 1)
            != [(9, 11, 13, 0.5, -3, 5, 17, 19, 1, 23, 29)]
            or node_fields(ctypes.addressof(node), ctypes.addressof(registration))
            != (31, 37, 41, 43, 47, 53)
            or affine_fields(ctypes.addressof(affine)) != (59, 61, 67)):
        raise AbiMismatchError(f"the fields read as bytes are not where the structs have them "
                               f"({runtime_version()})")


class TensorFields(NamedTuple):
    """The TfLiteTensor fields read from Python (pointers as addresses, 0 for NULL)."""
    type: int
    data: int
    dims: int
    scale: float
    zero_point: int
    allocation_type: int
    bytes: int
    name: int
    quantization_type: int
    quantization_params: int
    sparsity: int


class NodeFields(NamedTuple):
    """The TfLiteNode and TfLiteRegistration fields read from Python."""
    inputs: int
    outputs: int
    builtin_data: int
    builtin_code: int
    custom_name: int
    version: int


def _tensor_table_dtype() -> np.dtype:
    """TfLiteTensor's fields of TensorFields at EXPECTED_LAYOUT's offsets, as a numpy record."""
    size, at = EXPECTED_LAYOUT["TfLiteTensor"]
    params, quantization = at["params"], at["quantization"]
    fields = {"type": ("<i4", at["type"]), "data": ("<u8", at["data"]),
              "dims": ("<u8", at["dims"]),
              "scale": ("<f4", params + EXPECTED_LAYOUT["TfLiteQuantizationParams"][1]["scale"]),
              "zero_point": ("<i4", params
                             + EXPECTED_LAYOUT["TfLiteQuantizationParams"][1]["zero_point"]),
              "allocation_type": ("<i4", at["allocation_type"]),
              "bytes": ("<u8", at["bytes"]), "name": ("<u8", at["name"]),
              "quantization_type": ("<i4", quantization
                                    + EXPECTED_LAYOUT["TfLiteQuantization"][1]["type"]),
              "quantization_params": ("<u8", quantization
                                      + EXPECTED_LAYOUT["TfLiteQuantization"][1]["params"]),
              "sparsity": ("<u8", at["sparsity"])}
    assert tuple(fields) == TensorFields._fields
    return np.dtype({"names": list(fields), "formats": [f for f, _ in fields.values()],
                     "offsets": [offset for _, offset in fields.values()], "itemsize": size})


#: A context's tensors array read as numpy records: one copy of the structs' bytes, its fields
#: as columns (a delegate Prepare reads hundreds of tensors; ctypes field access costs more).
TENSOR_TABLE = _tensor_table_dtype()
# Node, registration and affine quantization fields at EXPECTED_LAYOUT's offsets, unpacked
# from their bytes.
_NODE_FIELDS = Struct("<QQ24xQ")                 # inputs, outputs, builtin_data
_REGISTRATION_FIELDS = Struct("<40xi4xQi")       # builtin_code, custom_name, version
_AFFINE_FIELDS = Struct("<QQi4x")                # scale, zero_point, quantized_dimension


def tensor_table(address: int, count: int) -> np.ndarray:
    """`count` TfLiteTensors from `address` (a context's tensors array) as TENSOR_TABLE
    records, copied in one go."""
    if count == 0:
        return np.zeros(0, TENSOR_TABLE)
    return np.frombuffer(ctypes.string_at(address, count * TENSOR_SIZE), TENSOR_TABLE)


def tensor_fields(address: int, count: int) -> list[TensorFields]:
    """The fields of `count` TfLiteTensors from `address`."""
    return tensor_rows(tensor_table(address, count))


def tensor_rows(table: np.ndarray) -> list[TensorFields]:
    """TENSOR_TABLE records as TensorFields, one a tensor."""
    return list(map(TensorFields._make, table.tolist()))


def node_fields(node: int, registration: int) -> NodeFields:
    """The fields of a TfLiteNode and its TfLiteRegistration, at their addresses."""
    return NodeFields(*_NODE_FIELDS.unpack(ctypes.string_at(node, _NODE_FIELDS.size)),
                      *_REGISTRATION_FIELDS.unpack(
                          ctypes.string_at(registration, _REGISTRATION_FIELDS.size)))


def node_columns(nodes: list[tuple[int, int]]) -> NodeFields:
    """The fields of each (TfLiteNode, TfLiteRegistration) address pair, as a list per field,
    gathered per field."""
    if len(nodes) < _GATHER_ONE_BY_ONE:
        return NodeFields._make(map(list, zip(*(node_fields(*pair) for pair in nodes)))
                                if nodes else [[] for _ in NodeFields._fields])
    node_offsets, registration_offsets = (EXPECTED_LAYOUT[s][1] for s in ("TfLiteNode",
                                                                          "TfLiteRegistration"))
    at = np.array(nodes, np.uint64)

    def field(column: int, offsets: dict[str, int], name: str, dtype: str) -> list[int]:
        return gather(at[:, column] + np.uint64(offsets[name]), dtype)
    return NodeFields(
        field(0, node_offsets, "inputs", "<u8"), field(0, node_offsets, "outputs", "<u8"),
        field(0, node_offsets, "builtin_data", "<u8"),
        field(1, registration_offsets, "builtin_code", "<i4"),
        field(1, registration_offsets, "custom_name", "<u8"),
        field(1, registration_offsets, "version", "<i4"))


class _Memory:
    """`size` bytes of this process's memory from `start`, as a numpy buffer: nothing is read
    until an element is indexed."""
    __slots__ = ("__array_interface__",)

    def __init__(self, start: int, size: int, writable: bool = False) -> None:
        self.__array_interface__ = {"data": (start, not writable), "shape": (size,),
                                    "typestr": "|u1", "version": 3}


#: Fewer addresses than this are read one by one: numpy's fixed cost, about 12 us a gather, is
#: what 20-30 single reads cost.
_GATHER_ONE_BY_ONE = 32
_ONE_BY_ONE = {"<i4": c_int32, "<u8": c_uint64}


def gather(addresses, dtype: str) -> list[int]:
    """The value of `dtype` ("<i4" or "<u8") at each address, 0 for a NULL address: one read
    of each, made in C for many addresses at once."""
    if len(addresses) < _GATHER_ONE_BY_ONE:
        read = _ONE_BY_ONE[dtype].from_address
        if isinstance(addresses, np.ndarray):
            addresses = addresses.tolist()
        return [read(a).value if a else 0 for a in addresses]
    dtype = np.dtype(dtype)
    addresses = np.asarray(addresses, np.uint64)
    values = np.zeros(len(addresses), dtype)
    live = addresses != 0
    if live.any():
        wanted = addresses[live]
        start = int(wanted.min())
        memory = np.asarray(_Memory(start, int(wanted.max()) - start + dtype.itemsize))
        offsets = (wanted - np.uint64(start)).astype(np.intp)[:, None] + np.arange(dtype.itemsize)
        values[live] = memory[offsets].view(dtype)[:, 0]
    return values.tolist()


def int_arrays(pointers) -> list[tuple[int, ...]]:
    """Many TfLiteIntArray* (addresses) as tuples, their sizes and items each gathered in
    one go."""
    if len(pointers) < _GATHER_ONE_BY_ONE:
        return list(map(int_array, pointers.tolist() if isinstance(pointers, np.ndarray)
                        else pointers))
    sizes = gather(pointers, "<i4")
    if any(size < 0 or size > 1 << 24 for size in sizes):
        raise AbiMismatchError(f"TfLiteIntArray of size {min(sizes)} or {max(sizes)} "
                               f"({runtime_version()})")
    counts = np.array(sizes, np.intp)
    starts = np.repeat(np.asarray(pointers, np.uint64) + np.uint64(4), counts)
    within = np.arange(len(starts)) - np.repeat(np.cumsum(counts) - counts, counts)
    items = gather(starts + 4 * within.astype(np.uint64), "<i4")
    arrays, at = [], 0
    for size in sizes:
        arrays.append(tuple(items[at:at + size]))
        at += size
    return arrays


def c_string(address: int) -> bytes:
    """The NUL-terminated string at `address` (b"" for NULL)."""
    return ctypes.string_at(address) if address else b""


def int_array(ptr) -> tuple[int, ...]:
    """A TfLiteIntArray* (or its address) as a tuple (an empty tuple for NULL)."""
    return _array(ptr, "i", "TfLiteIntArray")


def float_array(ptr) -> tuple[float, ...]:
    """A TfLiteFloatArray* (or its address) as a tuple (an empty tuple for NULL)."""
    return _array(ptr, "f", "TfLiteFloatArray")


def _array(ptr, item: str, name: str) -> tuple:
    """The items of a TfLite array struct: an int size, then the items (4 bytes each, of
    struct format `item`). Read as bytes: a delegate Prepare reads a thousand of them."""
    if not ptr:
        return ()
    address = ptr if isinstance(ptr, int) else c_void_p.from_buffer(ptr).value
    size = c_int.from_address(address).value
    if size < 0 or size > 1 << 24:
        raise AbiMismatchError(f"{name} of size {size} ({runtime_version()})")
    return unpack(f"{size}{item}", ctypes.string_at(address + 4, 4 * size))


class IntArray:
    """A TfLiteIntArray we own (and keep alive for as long as C may read it)."""

    def __init__(self, values) -> None:
        values = [int(v) for v in values]
        self._buffer = (c_int * (len(values) + 1))(len(values), *values)
        self.ptr = ctypes.cast(self._buffer, POINTER(TfLiteIntArray))


_libc = ctypes.CDLL(None)
_libc.malloc.restype = c_void_p
_libc.malloc.argtypes = [c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [c_void_p]


def malloc(size: int) -> int:
    """Memory that C may still touch after Python's objects are gone (e.g. at exit)."""
    address = _libc.malloc(size)
    if not address:
        raise MemoryError(f"malloc({size}) failed")
    return address


def free(address: int) -> None:
    _libc.free(address)


def malloc_int_array(values) -> ctypes._Pointer:
    """A TfLiteIntArray allocated like TfLiteIntArrayCreate, for APIs that take ownership."""
    values = [int(v) for v in values]
    address = malloc(4 * (len(values) + 1))
    (c_int * (len(values) + 1)).from_address(address)[:] = [len(values), *values]
    return ctypes.cast(address, POINTER(TfLiteIntArray))


def tensor_view(tensor: TensorFields) -> np.ndarray:
    """A zero-copy numpy view of a tensor's data; build it afresh on every call (buffers move)."""
    dtype = numpy_dtype(tensor.type)
    shape = int_array(tensor.dims)
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype)
    if not tensor.data:
        raise RuntimeError(f"tensor {c_string(tensor.name)!r} has no data")
    if tensor.bytes < count * dtype.itemsize:
        raise AbiMismatchError(f"tensor {c_string(tensor.name)!r}: {tensor.bytes} bytes for "
                               f"shape {shape} {dtype} ({runtime_version()})")
    memory = _Memory(tensor.data, count * dtype.itemsize, writable=True)
    return np.asarray(memory).view(dtype).reshape(shape)


def affine_fields(address: int) -> tuple[int, int, int]:
    """The TfLiteAffineQuantization at `address`: its scale and zero_point arrays' addresses,
    and its quantized dimension."""
    return _AFFINE_FIELDS.unpack(ctypes.string_at(address, _AFFINE_FIELDS.size))


#: The runtime libraries whose live tensors passed check_live_context in this process, named by
#: the address of the GetExecutionPlan their contexts point to.
_CHECKED_LIBRARIES: set[int] = set()


def check_runtime_layout(context) -> None:
    """check_live_context on the first graph each runtime library (several may be loaded)
    prepares in this process: a struct layout is the library's, and a second interpreter need
    not pay for the check again."""
    library = ctypes.cast(context.contents.GetExecutionPlan, c_void_p).value
    if library not in _CHECKED_LIBRARIES:
        check_live_context(context)
        _CHECKED_LIBRARIES.add(library)


def check_live_context(context) -> None:
    """Check a running interpreter's tensors against our layout before claiming anything.

    (GetTensor is NULL while a delegate prepares, so the check is on the data itself.) Scalar
    fields come first, so that a wrong struct size is caught before any pointer is followed:
    every tensor's type must be a known TfLiteType and its allocation type a known one; then
    its dims must be a plausible shape, and for dense fixed-size types its byte size must hold
    prod(shape) * itemsize (a sparse tensor stores fewer bytes, and the delegate never claims
    a node that touches one; a constant's buffer may hold more, and LiteRT runs such a model).
    """
    ctx = context.contents
    count = ctx.tensors_size
    if count > 1 << 24 or (count and not ctx.tensors):
        raise AbiMismatchError(f"TfLiteContext.tensors_size is {count} ({runtime_version()})")
    table = tensor_table(ctypes.cast(ctx.tensors, c_void_p).value or 0, count)
    known = (np.isin(table["type"], list(TFLITE_TYPES)) & (table["allocation_type"] >= 0)
             & (table["allocation_type"] <= 8))
    if not known.all():
        index = int(np.argmin(known))
        raise AbiMismatchError(
            f"tensor {index}: TfLiteType {table['type'][index]}, allocation type "
            f"{table['allocation_type'][index]}: not a TfLiteTensor as we lay it out "
            f"({runtime_version()})")
    tensors = tensor_rows(table)
    for index, (tensor, shape) in enumerate(zip(tensors, int_arrays([t.dims for t in tensors]))):
        if len(shape) > 16 or any(d < 0 for d in shape):
            raise AbiMismatchError(f"tensor {index}: implausible shape {shape} "
                                   f"({runtime_version()})")
        dtype = TFLITE_TYPES[tensor.type][1]
        dense = not tensor.sparsity and tensor.allocation_type != kTfLiteDynamic
        if dtype is not None and tensor.dims and dense:
            expected = math.prod(shape) * dtype.itemsize
            if 0 < tensor.bytes < expected:
                raise AbiMismatchError(
                    f"tensor {index} ({c_string(tensor.name)!r}): {tensor.bytes} bytes for "
                    f"shape {shape} {type_name(tensor.type)}, expected {expected} "
                    f"({runtime_version()})")


check_layout()
