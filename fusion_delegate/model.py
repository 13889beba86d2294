"""Read .tflite files into plain Python objects, and build and write small models.

Tools, tests and demos need to inspect models and make new ones without TensorFlow. The
flatbuffers code generated from the TFLite schema (the runtime's, see runtime.py) does the
byte-level work; this module maps its object API onto small dataclasses and checks what it
reads, so that a corrupt file fails with one clear `ModelFormatError` instead of a crash.

Conventions callers must know:
- Constant data read from a file is a read-only view of the file's bytes (no copy).
- TFLite types numpy lacks (STRING, RESOURCE, VARIANT, INT4, BFLOAT16, ...) read as
  `np.dtype(object)` carrying the TFLite type name in `dtype.metadata["tflite_type"]`
  (see `tflite_dtype`); their constant data, if any, is the raw buffer as flat uint8.
- A CUSTOM operator's flexbuffer options travel as bytes in `options["custom_options"]`.
- A sparse constant keeps its stored bytes as flat uint8 and its schema sparsity parameters
  (`Tensor.sparsity`), so it round-trips unchanged.
- Signature defs, metadata, intermediates and other rarely used schema fields
  are not kept: a read -> write round trip drops them.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import NoReturn

import flatbuffers
import numpy as np
from numpy.typing import DTypeLike

from fusion_delegate.errors import ModelFormatError
from fusion_delegate.runtime import schema  # the running TFLite runtime's flatbuffers schema

_FILE_IDENTIFIER = b"TFL3"
_BUFFER_ALIGNMENT = 16  # lets kernels read constants in place with aligned vector loads


def _enum(cls: type) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


OP_CODES: dict[str, int] = _enum(schema.BuiltinOperator)
OP_NAMES: dict[int, str] = {code: name for name, code in OP_CODES.items()}

TENSOR_TYPE_NAMES: dict[int, str] = {code: name for name, code in _enum(schema.TensorType).items()}
_TENSOR_TYPE_CODES: dict[str, int] = {name: code for code, name in TENSOR_TYPE_NAMES.items()}

_NUMPY_TYPES: dict[str, np.dtype] = {
    name: np.dtype(spec)
    for name, spec in {
        "FLOAT32": "<f4", "FLOAT16": "<f2", "FLOAT64": "<f8",
        "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
        "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
        "BOOL": "?", "COMPLEX64": "<c8", "COMPLEX128": "<c16",
    }.items()
}
_TFLITE_TYPE_OF_NUMPY: dict[str, str] = {dt.name: name for name, dt in _NUMPY_TYPES.items()}

# Both option unions share one namespace: their member names do not overlap.
_OPTION_UNIONS: dict[str, tuple[str, int]] = {
    name: (slot, code)
    for slot, union in (("builtinOptions", schema.BuiltinOptions),
                        ("builtinOptions2", schema.BuiltinOptions2))
    for name, code in _enum(union).items() if name != "NONE"
}
_OPTION_NAMES: dict[tuple[str, int], str] = {v: k for k, v in _OPTION_UNIONS.items()}

# Most ops' options table is named after the op (CONV_2D -> Conv2DOptions); list the rest.
_OPTIONS_BY_KEY = {name.lower(): name for name in _OPTION_UNIONS}
_DEFAULT_OPTIONS: dict[str, str] = {
    op: _OPTIONS_BY_KEY[key]
    for op in OP_CODES
    if (key := op.replace("_", "").lower() + "options") in _OPTIONS_BY_KEY
} | {
    op: options
    for options, ops in {
        "ReducerOptions": ("MEAN", "SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN",
                           "REDUCE_ANY", "REDUCE_ALL"),
        "MaximumMinimumOptions": ("MAXIMUM", "MINIMUM"),
        "Pool2DOptions": ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"),
        "L2NormOptions": ("L2_NORMALIZATION",),
        "SequenceRNNOptions": ("UNIDIRECTIONAL_SEQUENCE_RNN",),
        "RandomOptions": ("RANDOM_STANDARD_NORMAL", "RANDOM_UNIFORM", "MULTINOMIAL"),
        "Conv3DOptions": ("CONV_3D_TRANSPOSE",),
    }.items()
    for op in ops
}


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _plain(value: object) -> object:
    """Turn generated-code values into ones that compare and print naturally."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")     # flatbuffer strings are bytes, any bytes
    return value


def dtype_name(dtype: DTypeLike) -> str:
    """Name a tensor type for messages and reports, also for types numpy lacks."""
    dtype = np.dtype(dtype)
    tflite_type = (dtype.metadata or {}).get("tflite_type")
    return tflite_type.lower() if tflite_type else dtype.name


def tflite_dtype(type_name: str) -> np.dtype:
    """The dtype used for a TFLite type name, a tagged object dtype when numpy lacks it."""
    if type_name in _NUMPY_TYPES:
        return _NUMPY_TYPES[type_name]
    if type_name not in _TENSOR_TYPE_CODES:
        raise ValueError(f"unknown TFLite tensor type {type_name!r}")
    return np.dtype(object, metadata={"tflite_type": type_name})


def _tflite_type_name(dtype: np.dtype) -> str:
    tflite_type = (dtype.metadata or {}).get("tflite_type")
    if tflite_type in _TENSOR_TYPE_CODES:
        return tflite_type
    if dtype.name not in _TFLITE_TYPE_OF_NUMPY:
        raise ValueError(f"no TFLite tensor type for numpy dtype {dtype}")
    return _TFLITE_TYPE_OF_NUMPY[dtype.name]


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@dataclass(eq=False)
class Quantization:
    """Affine quantization, per tensor (one scale) or per channel along `quantized_dimension`."""

    scale: np.ndarray
    zero_point: np.ndarray
    quantized_dimension: int = 0

    @classmethod
    def per_tensor(cls, scale: float, zero_point: int) -> "Quantization":
        return cls(np.array([scale], np.float32), np.array([zero_point], np.int64))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantization):
            return NotImplemented
        return (self.quantized_dimension == other.quantized_dimension
                and _same_array(self.scale, other.scale)
                and _same_array(self.zero_point, other.zero_point))


@dataclass(eq=False)
class Tensor:
    """A tensor of a subgraph; `data` is set for constants only."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None
    quantization: Quantization | None = None
    shape_signature: tuple[int, ...] | None = None
    is_variable: bool = False
    #: A sparse constant's schema SparsityParametersT; `data` then holds its stored bytes.
    sparsity: object | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return ((self.name, self.shape, dtype_name(self.dtype), self.quantization,
                 self.shape_signature, self.is_variable)
                == (other.name, other.shape, dtype_name(other.dtype), other.quantization,
                    other.shape_signature, other.is_variable)
                and _same_array(self.data, other.data))


@dataclass
class Operator:
    """One node; `op` is a schema.BuiltinOperator name, options use snake_case field names."""

    op: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, object] = field(default_factory=dict)
    options_type: str | None = None
    custom_code: str | None = None
    version: int = 1


@dataclass
class Subgraph:
    """Tensors and operators that index into them; `inputs`/`outputs` are tensor indices."""

    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    name: str = "main"


@dataclass
class Model:
    """The parts of a .tflite model the delegate and its tools use (see the module docstring)."""

    subgraphs: list[Subgraph]
    description: str = "fusion-delegate"
    version: int = 3


# ---------------------------------------------------------------------------------- reading


def read_model(source: str | os.PathLike | bytes) -> Model:
    """Parse a .tflite file or its bytes; anything malformed raises ModelFormatError."""
    label, buf = _load(source)
    try:
        model_t = schema.ModelT.InitFromObj(schema.Model.GetRootAs(buf, 0))
        return _Reader(label, buf, model_t).model()
    except ModelFormatError:
        raise
    except Exception as e:  # the generated code fails in arbitrary ways on corrupt input
        detail = f"{type(e).__name__}: {e}".splitlines()[0]
        raise ModelFormatError(f"{label}: truncated or corrupt TFLite flatbuffer ({detail})"
                               ) from None


def _load(source: str | os.PathLike | bytes) -> tuple[str, bytes]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        label, buf = "<bytes>", bytes(source)
    else:
        label = os.fsdecode(source)
        try:
            with open(source, "rb") as f:
                buf = f.read()
        except OSError as e:
            raise ModelFormatError(f"{label}: cannot read file ({e.strerror or e})") from None
    if not buf:
        raise ModelFormatError(f"{label}: empty file")
    if len(buf) < 8:
        raise ModelFormatError(f"{label}: truncated TFLite flatbuffer ({len(buf)} bytes)")
    if buf[4:8] != _FILE_IDENTIFIER:
        raise ModelFormatError(
            f"{label}: not a TFLite model (file identifier {buf[4:8]!r}, expected b'TFL3')")
    return label, buf


class _Reader:
    """Converts one unpacked ModelT, checking every index and size it relies on."""

    def __init__(self, label: str, buf: bytes, model_t: schema.ModelT):
        self.label, self.buf, self.model_t = label, buf, model_t
        self.buffers = [self._buffer(i, b) for i, b in enumerate(model_t.buffers or [])]
        self.opcodes = [self._opcode(i, c) for i, c in enumerate(model_t.operatorCodes or [])]

    def fail(self, message: str) -> NoReturn:
        raise ModelFormatError(f"{self.label}: {message}")

    def model(self) -> Model:
        m = self.model_t
        if not m.subgraphs:
            self.fail("model has no subgraphs")
        return Model([self._subgraph(sg) for sg in m.subgraphs],
                     description=_plain(m.description) or "", version=m.version)

    def _buffer(self, index: int, b: schema.BufferT | None) -> np.ndarray | None:
        if b is None:
            return None
        if b.offset > 1:  # stored after the flatbuffer (models over 2 GB)
            if b.offset + b.size > len(self.buf):
                self.fail(f"buffer {index} lies outside the file")
            return np.frombuffer(self.buf, np.uint8, count=b.size, offset=b.offset)
        return b.data

    def _opcode(self, index: int, c: schema.OperatorCodeT) -> tuple[str, str | None, int]:
        code = max(c.builtinCode, c.deprecatedBuiltinCode)
        if code not in OP_NAMES:
            self.fail(f"operator code {index} has unknown builtin code {code}")
        return OP_NAMES[code], _plain(c.customCode), c.version

    def _subgraph(self, sg: schema.SubGraphT) -> Subgraph:
        tensors = [self._tensor(i, t) for i, t in enumerate(sg.tensors or [])]
        inputs = self._indices(sg.inputs, len(tensors))
        outputs = self._indices(sg.outputs, len(tensors))
        if min(inputs + outputs, default=0) < 0:
            self.fail("subgraph input or output index is -1")
        operators = [self._operator(op, len(tensors)) for op in sg.operators or []]
        return Subgraph(tensors, operators, inputs, outputs, name=_plain(sg.name) or "")

    def _indices(self, values: object, n_tensors: int) -> list[int]:
        indices = [] if values is None else [int(v) for v in values]
        bad = [i for i in indices if not -1 <= i < n_tensors]
        if bad:
            self.fail(f"tensor index {bad[0]} out of range (subgraph has {n_tensors} tensors)")
        return indices

    def _tensor(self, index: int, t: schema.TensorT) -> Tensor:
        name = _plain(t.name) or ""
        shape = () if t.shape is None else tuple(int(d) for d in t.shape)
        if t.type not in TENSOR_TYPE_NAMES:
            self.fail(f"tensor {index} '{name}' has unknown type {t.type}")
        dtype = tflite_dtype(TENSOR_TYPE_NAMES[t.type])
        if not 0 <= t.buffer < len(self.buffers):
            self.fail(f"tensor {index} '{name}' uses buffer {t.buffer}, "
                      f"model has {len(self.buffers)}")
        raw = self.buffers[t.buffer]
        data = None
        if raw is not None and raw.size:  # like TFLite, an empty buffer means "no data"
            data = raw if t.sparsity is not None else self._constant(index, name, raw, shape,
                                                                      dtype)
        q = t.quantization
        quantization = None
        if q is not None and q.scale is not None and len(q.scale):
            zero_point = np.zeros(len(q.scale)) if q.zeroPoint is None else q.zeroPoint
            if len(zero_point) != len(q.scale):
                self.fail(f"tensor {index} '{name}' has {len(q.scale)} scales "
                          f"but {len(zero_point)} zero points")
            quantization = Quantization(np.array(q.scale, np.float32),
                                        np.array(zero_point, np.int64), q.quantizedDimension)
        signature = None if t.shapeSignature is None else tuple(int(d) for d in t.shapeSignature)
        return Tensor(name, shape, dtype, data, quantization, signature, bool(t.isVariable),
                      t.sparsity)

    def _constant(self, index: int, name: str, raw: np.ndarray, shape: tuple[int, ...],
                  dtype: np.dtype) -> np.ndarray:
        if dtype.metadata:  # no numpy equivalent: keep the raw bytes
            return raw
        expected = math.prod(shape) * dtype.itemsize if min(shape, default=0) >= 0 else -1
        if raw.size != expected:
            self.fail(f"tensor {index} '{name}': constant buffer has {raw.size} bytes, "
                      f"expected {expected} for shape {list(shape)} {dtype.name}")
        return raw.view(dtype).reshape(shape)

    def _operator(self, op_t: schema.OperatorT, n_tensors: int) -> Operator:
        if not 0 <= op_t.opcodeIndex < len(self.opcodes):
            self.fail(f"operator uses opcode {op_t.opcodeIndex}, model has {len(self.opcodes)}")
        op, custom_code, version = self.opcodes[op_t.opcodeIndex]
        inputs = self._indices(op_t.inputs, n_tensors)
        outputs = self._indices(op_t.outputs, n_tensors)
        if min(outputs, default=0) < 0:
            self.fail(f"{op} operator has output index -1")
        options_type, options = None, {}
        for slot in ("builtinOptions", "builtinOptions2"):
            code = getattr(op_t, slot + "Type")
            if code:
                options_type = _OPTION_NAMES.get((slot, code))
                obj = getattr(op_t, slot)
                if options_type is None or obj is None:
                    self.fail(f"{op} operator has unknown options type {code}")
                options = {_snake(k): _plain(v) for k, v in vars(obj).items()}
        if op_t.customOptions is not None and len(op_t.customOptions):
            options["custom_options"] = bytes(op_t.customOptions)
        return Operator(op, inputs, outputs, options, options_type, custom_code, version)


# ---------------------------------------------------------------------------------- writing


def write_model(model: Model) -> bytes:
    """Serialize to .tflite bytes that the TFLite interpreter loads directly."""
    writer = _Writer()
    model_t = schema.ModelT()
    model_t.version = model.version
    model_t.description = model.description
    model_t.subgraphs = [writer.subgraph(sg) for sg in model.subgraphs]
    model_t.operatorCodes = writer.opcodes
    model_t.buffers = writer.buffers
    builder = flatbuffers.Builder(1024)
    builder.Finish(model_t.Pack(builder), file_identifier=_FILE_IDENTIFIER)
    return bytes(builder.Output())


def boundary(graph: Subgraph, operators: list[int]) -> tuple[list[int], list[int]]:
    """(inputs, outputs) of some of `graph`'s operators, as tensor indices of `graph`: what
    they read and no operator of theirs makes (constants aside); what they make and something
    else reads, or the graph outputs, or nothing reads."""
    readers: dict[int, set[int]] = {}
    for i, op in enumerate(graph.operators):
        for t in op.inputs:
            readers.setdefault(t, set()).add(i)
    inside = set(operators)
    made = [t for i in sorted(inside) for t in graph.operators[i].outputs]
    read = [t for i in sorted(inside) for t in graph.operators[i].inputs if t >= 0]
    inputs = [t for t in dict.fromkeys(read) if t not in made and graph.tensors[t].data is None]
    outputs = [t for t in made if t in graph.outputs or not readers.get(t, set()) <= inside
               or not readers.get(t)]
    return inputs, outputs


def extract(graph: Subgraph, operators: list[int]) -> Model:
    """A model of some of `graph`'s operators, in graph order, with their `boundary` as its
    inputs and outputs (constants stay constants): to time a few nodes with their neighbours,
    away from the rest of the model."""
    chosen = [graph.operators[i] for i in sorted(set(operators))]
    inputs, outputs = boundary(graph, operators)
    used = [t for op in chosen for t in (*op.inputs, *op.outputs) if t >= 0]
    index = {t: k for k, t in enumerate(dict.fromkeys(used))}
    return Model([Subgraph(
        [graph.tensors[t] for t in index],
        [Operator(op.op, [index.get(t, -1) for t in op.inputs], [index[t] for t in op.outputs],
                  op.options, op.options_type, op.custom_code, op.version) for op in chosen],
        [index[t] for t in inputs], [index[t] for t in outputs], graph.name)])


def save_model(model: Model, path: str | os.PathLike) -> None:
    """Write atomically, so a crash never leaves a half-written model behind."""
    data = write_model(model)
    path = os.fspath(path)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"  # same directory: os.replace stays atomic
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _AlignedBufferT(schema.BufferT):
    def Pack(self, builder: flatbuffers.Builder) -> int:
        if self.data is not None:
            builder.Prep(_BUFFER_ALIGNMENT, len(self.data))
        return super().Pack(builder)


def _options_object(options_type: str, options: dict[str, object]) -> object:
    """Build the generated `<options_type>T` object, rejecting keys the table lacks."""
    if options_type not in _OPTION_UNIONS:
        raise ValueError(f"unknown options type {options_type!r}")
    obj = getattr(schema, options_type + "T")()
    fields = {_snake(k): k for k in vars(obj)}
    unknown = sorted(set(options) - fields.keys())
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {options_type}; "
                         f"valid keys: {', '.join(sorted(fields)) or 'none'}")
    for key, value in options.items():
        setattr(obj, fields[key], value.tolist() if isinstance(value, np.ndarray) else value)
    return obj


def _constant_bytes(tensor: Tensor) -> np.ndarray:
    dtype = np.dtype(tensor.dtype)
    if dtype.metadata or tensor.sparsity is not None:  # raw bytes, as read_model returns them
        return np.ascontiguousarray(tensor.data, dtype=np.uint8).reshape(-1)
    data = np.asarray(tensor.data)
    if data.shape != tuple(tensor.shape):
        raise ValueError(f"tensor '{tensor.name}': data shape {data.shape} "
                         f"differs from tensor shape {tuple(tensor.shape)}")
    little_endian = _NUMPY_TYPES[_tflite_type_name(dtype)]
    return np.ascontiguousarray(data, dtype=little_endian).view(np.uint8).reshape(-1)


class _Writer:
    """Collects the model-wide buffer and opcode tables while subgraphs are converted."""

    def __init__(self):
        self.buffers: list[schema.BufferT] = [_AlignedBufferT()]  # 0: empty sentinel
        self.opcodes: list[schema.OperatorCodeT] = []
        self._opcode_index: dict[tuple[str, str | None, int], int] = {}

    def subgraph(self, sg: Subgraph) -> schema.SubGraphT:
        sg_t = schema.SubGraphT()
        sg_t.tensors = [self.tensor(t) for t in sg.tensors]
        sg_t.operators = [self.operator(op) for op in sg.operators]
        sg_t.inputs, sg_t.outputs = list(sg.inputs), list(sg.outputs)
        sg_t.name = sg.name
        return sg_t

    def tensor(self, t: Tensor) -> schema.TensorT:
        t_t = schema.TensorT()
        t_t.name = t.name
        t_t.shape = [int(d) for d in t.shape]
        t_t.type = _TENSOR_TYPE_CODES[_tflite_type_name(np.dtype(t.dtype))]
        if t.data is not None:
            buffer = _AlignedBufferT()
            buffer.data = _constant_bytes(t)
            t_t.buffer = len(self.buffers)
            self.buffers.append(buffer)
        if t.quantization is not None:
            q = schema.QuantizationParametersT()
            q.scale = np.asarray(t.quantization.scale, "<f4").reshape(-1)
            q.zeroPoint = np.asarray(t.quantization.zero_point, "<i8").reshape(-1)
            q.quantizedDimension = int(t.quantization.quantized_dimension)
            t_t.quantization = q
        if t.shape_signature is not None:
            t_t.shapeSignature = [int(d) for d in t.shape_signature]
        t_t.isVariable = bool(t.is_variable)
        t_t.sparsity = t.sparsity
        return t_t

    def opcode(self, op: Operator) -> int:
        if op.op not in OP_CODES:
            raise ValueError(f"unknown builtin operator {op.op!r}")
        key = (op.op, op.custom_code, op.version)
        if key not in self._opcode_index:
            code = schema.OperatorCodeT()
            code.builtinCode = OP_CODES[op.op]
            code.deprecatedBuiltinCode = min(code.builtinCode, 127)  # int8 field in old readers
            code.customCode = op.custom_code
            code.version = op.version
            self._opcode_index[key] = len(self.opcodes)
            self.opcodes.append(code)
        return self._opcode_index[key]

    def operator(self, op: Operator) -> schema.OperatorT:
        op_t = schema.OperatorT()
        op_t.opcodeIndex = self.opcode(op)
        op_t.inputs, op_t.outputs = list(op.inputs), list(op.outputs)
        options = dict(op.options)
        custom_options = options.pop("custom_options", None) if op.op == "CUSTOM" else None
        if custom_options is not None:
            op_t.customOptions = np.frombuffer(bytes(custom_options), np.uint8)
        options_type = op.options_type or _DEFAULT_OPTIONS.get(op.op)
        if options_type is not None:
            options_t = _options_object(options_type, options)
            slot, code = _OPTION_UNIONS[options_type]
            setattr(op_t, slot, options_t)
            setattr(op_t, slot + "Type", code)
        elif options:
            raise ValueError(f"{op.op} has no options table; got options {sorted(options)}")
        return op_t


# --------------------------------------------------------------------------------- building


class ModelBuilder:
    """Makes small single-subgraph models for tests, demos and tools without a converter."""

    def __init__(self, name: str = "main"):
        self._name = name
        self._tensors: list[Tensor] = []
        self._operators: list[Operator] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []

    def _add(self, tensor: Tensor) -> int:
        self._tensors.append(tensor)
        return len(self._tensors) - 1

    def input(self, name: str, shape: tuple[int, ...] | list[int],
              dtype: DTypeLike = np.float32, quantization: Quantization | None = None) -> int:
        index = self._add(Tensor(name, tuple(int(d) for d in shape), np.dtype(dtype),
                                 quantization=quantization))
        self._inputs.append(index)
        return index

    def const(self, name: str, array: np.ndarray,
              quantization: Quantization | None = None) -> int:
        data = np.array(array)  # a copy: later edits to the caller's array must not leak in
        return self._add(Tensor(name, data.shape, data.dtype, data, quantization))

    def op(self, op: str, inputs: list[int], options: dict | None = None, *,
           name: str | None = None, shape: tuple[int, ...] | list[int] | None = None,
           dtype: DTypeLike | None = None, quantization: Quantization | None = None) -> int:
        """Add `op` with one new output tensor and return that tensor's index."""
        if op not in OP_CODES:
            raise ValueError(f"unknown builtin operator {op!r}")
        options = dict(options or {})
        options_type = _DEFAULT_OPTIONS.get(op)
        if options_type is not None:
            _options_object(options_type, options)  # reject bad keys here, not at write time
        elif options:
            raise ValueError(f"{op} has no options table; got options {sorted(options)}")
        present = [self._tensors[i] for i in inputs if i >= 0]
        if shape is None:
            shapes = [t.shape for t in present]
            try:
                shape = np.broadcast_shapes(*shapes)
            except ValueError:
                raise ValueError(f"{op}: cannot infer the output shape from input shapes "
                                 f"{shapes}; pass shape=") from None
        if dtype is None:
            if not present:
                raise ValueError(f"{op} has no inputs to take the output dtype from; pass dtype=")
            dtype = present[0].dtype
        out = self._add(Tensor(name or f"{op.lower()}_{len(self._operators)}",
                               tuple(int(d) for d in shape), np.dtype(dtype),
                               quantization=quantization))
        self._operators.append(Operator(op, list(inputs), [out], options, options_type))
        return out

    def output(self, *tensor_indices: int) -> None:
        self._outputs.extend(tensor_indices)

    def build(self) -> Model:
        return Model([Subgraph(list(self._tensors), list(self._operators), list(self._inputs),
                               list(self._outputs), self._name)])

    def to_bytes(self) -> bytes:
        return write_model(self.build())
