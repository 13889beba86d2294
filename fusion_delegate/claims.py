"""Which nodes the fusion delegate can claim, and for the others, why not.

A node whose result the kernel could not reproduce exactly as the builtin kernel does is never
claimed: this module is that legality, and NotClaimed the one type every reason to leave a node
or a partition to LiteRT has (here, the claim policy's and the delegate's own).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from codegen.composites import COMPOSITES
from codegen.ir import (DTYPES, MAX_RANK, IRError, broadcast_shapes, matmul_depth,
                        matmul_output_shape, reduced_shape)
from codegen.ops import ACTIVATIONS, MATMULS, OPS_BY_CODE, REDUCTIONS, STENCILS
from codegen.qparams import DTYPE_RANGES, QParams
from codegen.quant_ops import BINARY_OPS, CONVERSIONS, ELEMENTWISE_OPS, QUANT_OPS
from codegen.quant_conv import depthwise_unsupported
from codegen.quant_matmul import matmul_unsupported
from codegen.quant_rows import ROW_OP_OUTPUTS, reduction_unsupported, row_op_unsupported
from codegen.quant_support import quant_unsupported
from codegen.target import Target, numba_target
from codegen.window import conv_output_shape

from . import abi, runtime
from .context import Context, NodeInfo, TensorInfo
from .model import OP_NAMES

#: Ops whose params live in a TfLite*Params struct at node->builtin_data (besides activations).
PARAMS_STRUCTS = {"LEAKY_RELU": abi.TfLiteLeakyReluParams, "GELU": abi.TfLiteGeluParams}
#: Reductions (codegen.ops.REDUCTIONS) and the composite row ops (codegen.composites), by code.
REDUCTION_CODES = {spec.code: name for name, spec in REDUCTIONS.items() if spec.code >= 0}
COMPOSITE_CODES = {code: name for name, code in COMPOSITES.items()}
REDUCTION_PARAMS = {"SOFTMAX": abi.TfLiteSoftmaxParams, "L2_NORMALIZATION": abi.TfLiteL2NormParams,
                    **{name: abi.TfLiteReducerParams for name in REDUCTION_CODES.values()}}
#: The ops over windows (codegen.ops.STENCILS), by code, and their TfLitePadding values.
STENCIL_CODES = {spec.code: name for name, spec in STENCILS.items()}
#: The runtimes whose depthwise convolution kernels the stencil nest reproduces bit for bit
#: (tests/test_stencil*.py, run under tests/compat too): tflite-runtime 2.14's float kernel
#: clamps a NaN sum to FLT_MAX and its int8 kernel rounds the requantization otherwise.
STENCIL_RUNTIMES = frozenset({"ai-edge-litert"})
#: The products (codegen.ops.MATMULS), by code, and the runtimes whose int8 BATCH_MATMUL the
#: matmul nest reproduces bit for bit, from the version given (tests/test_matmul.py, run under
#: tests/compat too: ai-edge-litert 1.2.0's rounds otherwise, 2.3.0's as its reference kernel).
MATMUL_CODES = {spec.code: name for name, spec in MATMULS.items()}
MATMUL_RUNTIMES = {"ai-edge-litert": (2, 3)}
PADDINGS = {1: "same", 2: "valid"}


class NotClaimed(str):
    """Why a node or partition is left to LiteRT: a fixed phrase and the values it names. It
    is the text `inspect` prints ("dtype int8 not supported"), so reports and tests read it as
    text, and `phrase` ("dtype {} not supported") groups the nodes refused for the same reason
    whatever their values. A reason made in codegen (quant_support, quant_rows) is its own
    phrase."""
    phrase: str
    values: tuple

    def __new__(cls, phrase: str, *values: object) -> NotClaimed:
        reason = super().__new__(cls, phrase.format(*values) if values else phrase)
        reason.phrase, reason.values = phrase, values
        return reason


@dataclass(frozen=True)
class FusedNode:
    """A claimed node as the kernel needs it: plain values, read once from the runtime."""
    index: int
    op: str
    inputs: tuple[int, ...]
    output: int
    params: tuple[tuple[str, object], ...]


def op_name(node: NodeInfo) -> str:
    if node.custom_name and node.builtin_code == 32:
        return f"CUSTOM({node.custom_name})"
    return OP_NAMES.get(node.builtin_code, f"builtin {node.builtin_code}")


def unsupported_reason(context: Context, node: NodeInfo) -> NotClaimed | None:
    """None if the node can be fused, otherwise why it cannot."""
    tensors = [context.tensor(t) for t in node.inputs + node.outputs if t >= 0]
    if node.builtin_code in STENCIL_CODES:
        return stencil_reason(context, node, tensors)
    if node.builtin_code in MATMUL_CODES:
        return matmul_reason(context, node, tensors)
    if node.builtin_code in REDUCTION_CODES or node.builtin_code in COMPOSITE_CODES:
        return reduction_reason(context, node, tensors)
    if op_name(node) in CONVERSIONS or any(t.type_name.lower() in DTYPE_RANGES
                                              for t in tensors):
        return quantized_reason(context, node, tensors)
    spec = OPS_BY_CODE.get(node.builtin_code)
    if spec is None:
        return NotClaimed("op {} not supported", op_name(node))
    if len(node.inputs) != spec.arity or len(node.outputs) != 1:
        return arity_reason(node, spec.arity)
    if any(t < 0 for t in node.inputs):
        return NotClaimed("optional input missing")
    reason = operands_reason(context, spec.name, tensors, spec.dtypes)
    if reason:
        return reason
    exponent = tensors[1] if spec.name == "POW" else None
    if exponent is not None and math.prod(exponent.shape) == 1 and not exponent.is_constant:
        # LiteRT picks powf or repeated squaring per invoke from this value.
        return NotClaimed("POW with a one-element exponent that is not a constant")
    if (spec.fused_activation or spec.name in PARAMS_STRUCTS) and not node.builtin_data:
        return NotClaimed("builtin params missing")
    activation = dict(fused_node(context, node).params).get("activation", 0)
    if activation not in ACTIVATIONS:
        return NotClaimed("fused activation {} not supported", activation)
    return None


def reduction_reason(context: Context, node: NodeInfo,
                     tensors: list[TensorInfo]) -> NotClaimed | None:
    """None if the reduction or row op is reproduced: float32, or int8/uint8 bit for bit
    (codegen.quant_rows: MEAN, SUM, REDUCE_MAX, REDUCE_MIN, SOFTMAX, LOG_SOFTMAX,
    L2_NORMALIZATION); a constant axis tensor (MEAN, SUM, REDUCE_MAX, REDUCE_MIN), an output
    of the shape it implies, no fused activation."""
    name = op_name(node)
    arity = 2 if node.builtin_code in REDUCTION_CODES else 1
    if len(node.inputs) != arity or len(node.outputs) != 1 or any(t < 0 for t in node.inputs):
        return arity_reason(node, arity)
    x, out = tensors[0], tensors[-1]
    reason = operands_reason(context, name, [x, out], ("float32", *QUANT_OPS[name].dtypes))
    if reason:
        return reason
    if x.type_name != out.type_name:
        return NotClaimed("mixed dtypes {}/{} not supported", x.type_name.lower(),
                          out.type_name.lower())
    if name in REDUCTION_PARAMS and not node.builtin_data:
        return NotClaimed("builtin params missing")
    if arity == 2:
        axis = tensors[1]
        if not axis.is_constant or axis.type_name.lower() != "int32":
            return NotClaimed("axis tensor not a constant int32 tensor")
        axes = reduction_axes(context.view(axis.index), len(x.shape))
        if axes is None:
            return NotClaimed("axes {} out of range for rank {}",
                              context.view(axis.index).tolist(), len(x.shape))
        if not axes:
            return NotClaimed("no axes to reduce")
        keep_dims = context.params(node.index, abi.TfLiteReducerParams).keep_dims
        expected = reduced_shape(x.shape, axes, bool(keep_dims))
    else:
        if not x.shape:
            return NotClaimed("rank 0 input")
        if name == "L2_NORMALIZATION" and \
                context.params(node.index, abi.TfLiteL2NormParams).activation != 0:
            return NotClaimed("fused activation not supported")
        expected = x.shape
    if tuple(out.shape) != expected or 0 in x.shape:
        return NotClaimed("output shape {} for input {}, expected {}", list(out.shape),
                          list(x.shape), list(expected))
    if qparams(x) is None:
        return None
    if name in ROW_OP_OUTPUTS:
        beta = context.params(node.index, abi.TfLiteSoftmaxParams).beta \
            if name == "SOFTMAX" else 1.0
        return quantized(row_op_unsupported(name, qparams(x), qparams(out), x.shape[-1], beta))
    return quantized(reduction_unsupported(name, qparams(x), qparams(out), x.shape, axes,
                                           bool(keep_dims)))


def stencil_reason(context: Context, node: NodeInfo,
                   tensors: list[TensorInfo]) -> NotClaimed | None:
    """None if the depthwise convolution is reproduced: data [N, H, W, C] and output, constant
    weights [1, KH, KW, C * M] and bias [C * M], SAME or VALID padding, any strides and
    dilations; float32, or int8 with int32 bias bit for bit (codegen.quant_conv)."""
    name = op_name(node)
    if runtime.NAME not in STENCIL_RUNTIMES:
        return NotClaimed("{} under {}: reproduced only under {}", name, runtime.RUNTIME,
                          ", ".join(sorted(STENCIL_RUNTIMES)))
    if len(node.outputs) != 1 or len(node.inputs) not in (2, 3) or min(node.inputs[:2]) < 0:
        return arity_reason(node, 3)
    if len(node.inputs) == 2 or node.inputs[2] < 0:
        return NotClaimed("{} without a bias not supported", name)
    data, weights, bias, out = tensors
    quantized = data.type_name.lower() == "int8"
    dtypes = ("int8", "int8", "int32", "int8") if quantized else ("float32",) * 4
    for role, tensor, dtype in zip(("data", "weights", "bias", "output"), tensors, dtypes):
        if tensor.type_name.lower() != dtype:
            return NotClaimed("{} {} of dtype {} not supported (float32, or int8 with int32 "
                              "bias, only)", name, role, tensor.type_name.lower())
        if tensor.is_dynamic or tensor.sparse:
            return NotClaimed("{} tensor {}", "dynamic" if tensor.is_dynamic else "sparse",
                              tensor_label(context, tensor))
    if not all(fixed(context, t) for t in (weights, bias)):
        return NotClaimed("{} weights or bias not constant", name)
    if data.is_constant:
        return NotClaimed("{} of a constant tensor", name)
    if not node.builtin_data:
        return NotClaimed("builtin params missing")
    params = dict(fused_node(context, node).params)
    if params["padding"] is None:
        return NotClaimed("{} padding not SAME or VALID", name)
    if min(*params["strides"], *params["dilations"]) < 1:
        return NotClaimed("{} strides or dilations below 1", name)
    if params["activation"] not in ACTIVATIONS:
        return NotClaimed("fused activation {} not supported", params["activation"])
    if (len(data.shape) != 4 or len(weights.shape) != 4 or weights.shape[0] != 1
            or not data.shape[3] or weights.shape[3] % data.shape[3]
            or tuple(bias.shape) != tuple(weights.shape[3:]) or 0 in data.shape
            or tuple(out.shape) != conv_output_shape(data.shape, weights.shape, params)):
        return NotClaimed("{} shapes {} not supported", name, " ".join(
            str(list(t.shape)) for t in tensors))
    if quantized:
        return quantized_stencil_reason(context, node, params["activation"])
    return None


def matmul_reason(context: Context, node: NodeInfo,
                  tensors: list[TensorInfo]) -> NotClaimed | None:
    """None if the BATCH_MATMUL is reproduced: int8 operands and output, per-tensor
    quantization, ranks 2 to 5 with broadcasting batch dims, adj_x and adj_y, bit for bit
    (codegen.quant_matmul)."""
    name = op_name(node)
    if not matmul_reproduced():
        return NotClaimed("{} under {}: reproduced only under {}", name, runtime.RUNTIME,
                          ", ".join(f"{runtime_name} >= {'.'.join(map(str, first))}"
                                    for runtime_name, first in MATMUL_RUNTIMES.items()))
    if len(node.inputs) != 2 or len(node.outputs) != 1 or min(node.inputs) < 0:
        return arity_reason(node, 2)
    for tensor in tensors:
        if tensor.type_name.lower() != "int8":
            return NotClaimed("{} of dtype {} not supported (int8 only)", name,
                              tensor.type_name.lower())
        if tensor.is_dynamic or tensor.sparse or tensor.per_channel:
            what = ("dynamic" if tensor.is_dynamic else "sparse" if tensor.sparse
                    else "per-channel quantized")
            return NotClaimed("{} tensor {}", what, tensor_label(context, tensor))
    if not node.builtin_data:
        return NotClaimed("builtin params missing")
    lhs, rhs, out = tensors
    params = dict(fused_node(context, node).params)
    try:
        expected = matmul_output_shape(tuple(lhs.shape), tuple(rhs.shape), params["adj_x"],
                                       params["adj_y"])
    except IRError:
        expected = None
    if (expected != tuple(out.shape) or 0 in out.shape or math.prod(lhs.shape) == 1
            or math.prod(rhs.shape) == 1 or len(out.shape) > MAX_RANK):
        return NotClaimed("{} shapes {} not supported", name,
                          " ".join(str(list(t.shape)) for t in tensors))
    depth = matmul_depth(tuple(lhs.shape), params["adj_x"])
    return quantized(matmul_unsupported(qparams(lhs), qparams(rhs), qparams(out), depth))


def matmul_reproduced() -> bool:
    """Whether the running runtime's int8 BATCH_MATMUL is the one the matmul nest computes."""
    first = MATMUL_RUNTIMES.get(runtime.NAME)
    return first is not None and runtime.parse_version(runtime.VERSION) >= first


def fixed(context: Context, tensor: TensorInfo) -> bool:
    """Whether a tensor is the same at every invoke: a constant, or the float32 DEQUANTIZE of
    a constant float16 one (a float16 model's weights, which LiteRT converts exactly)."""
    if tensor.is_constant:
        return True
    maker = context.makers.get(tensor.index)
    if (maker is None or op_name(maker) != "DEQUANTIZE" or len(maker.inputs) != 1
            or tensor.type_name.lower() != "float32"):
        return False
    source = context.tensor(maker.inputs[0])
    return source.type_name.lower() == "float16" and source.is_constant


def miscompiled_int8_channels(target: Target) -> int | None:
    """The output channels of the int8 convolutions `target`'s kernels computed wrong: one
    past a vector of int32 in AVX-512 code of half-width vectors; None elsewhere."""
    if "avx512f" in target.features and target.vector_bytes < 64:
        return target.lanes + 1
    return None


def quantized_stencil_reason(context: Context, node: NodeInfo,
                             activation: int) -> NotClaimed | None:
    """None if the int8 convolution is LiteRT's bit for bit: the filter's scales per tensor or
    per output channel (dimension 3), no int32 overflow (codegen.quant_conv); and not one
    channel more than a vector of int32 where kernels are AVX-512 code in half-width vectors
    (LLVM's choice on Intel's servers): there the kernel of 9 channels gave wrong codes, and
    no other count of 1-20, 24, 25, 33, 41 or 57 did (perf/README.md, "Another CPU"); the
    cause is not found yet."""
    data, weights, bias, out = (context.tensor(t) for t in (*node.inputs[:3], node.outputs[0]))
    target = numba_target()
    if out.shape[3] == miscompiled_int8_channels(target):
        return NotClaimed("int8 {} of {} channels not claimed for AVX-512 code in {}-byte "
                          "vectors: such a kernel gave wrong codes there", op_name(node),
                          out.shape[3], target.vector_bytes)
    scales, _, dimension = context.affine_quantization(weights.index)
    if not scales or len(scales) not in (1, weights.shape[3]) or \
            (len(scales) > 1 and dimension != 3):
        return NotClaimed("{} filter scales {} along dimension {} not supported", op_name(node),
                          len(scales), dimension)
    return quantized(depthwise_unsupported(
        qparams(data), scales, qparams(out), activation, context.view(weights.index),
        context.view(bias.index)))


def arity_reason(node: NodeInfo, arity: int) -> NotClaimed:
    return NotClaimed("{} inputs / {} outputs, expected {} / 1", len(node.inputs),
                      len(node.outputs), arity)


def quantized(reason: str | None) -> NotClaimed | None:
    """codegen's reason (quant_support, quant_rows) an int8/uint8 node is not reproduced."""
    return None if reason is None else NotClaimed(reason)


def reduction_axes(axis: np.ndarray, rank: int) -> tuple[int, ...] | None:
    """The axis tensor as LiteRT resolves it (reduce_utils ResolveAxis): negatives from the
    end, duplicates once, sorted; None if one is out of range."""
    axes = [int(a) for a in np.asarray(axis).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        return None
    return tuple(sorted({a % rank for a in axes}))


def tensor_label(context: Context, tensor: TensorInfo) -> str | int:
    """How messages name a tensor: by its name, else its index."""
    return context.tensor_name(tensor.index) or tensor.index


def operands_reason(context: Context, op: str, tensors: list[TensorInfo],
                    dtypes: tuple[str, ...]) -> NotClaimed | None:
    """Why the node's tensors (inputs, then output) keep it from being fused, if they do:
    dtype, rank, storage, quantization per channel, shapes."""
    for tensor in tensors:
        if tensor.type_name.lower() not in dtypes:
            return NotClaimed("dtype {} not supported", tensor.type_name.lower())
        if len(tensor.shape) > MAX_RANK:
            return NotClaimed("rank {} > {}", len(tensor.shape), MAX_RANK)
        if tensor.is_dynamic or tensor.sparse:
            return NotClaimed("{} tensor {}", "dynamic" if tensor.is_dynamic else "sparse",
                              tensor_label(context, tensor))
        if tensor.per_channel:
            return NotClaimed("per-channel quantization of {} not supported",
                              tensor_label(context, tensor))
    try:
        shape = broadcast_shapes(*(t.shape for t in tensors[:-1]))
    except IRError:
        return NotClaimed("shapes {} do not broadcast",
                          " and ".join(str(list(t.shape)) for t in tensors[:-1]))
    if op == "PRELU" and shape != tensors[0].shape:
        return NotClaimed("PRELU alpha {} broadcasts beyond the input", list(tensors[1].shape))
    return None


def quantized_reason(context: Context, node: NodeInfo,
                     tensors: list[TensorInfo]) -> NotClaimed | None:
    """None if the int8/uint8 node (or QUANTIZE / DEQUANTIZE) is reproduced exactly."""
    name = op_name(node)
    if name not in ELEMENTWISE_OPS:
        return NotClaimed("op {} not supported", name)
    arity = 2 if name in BINARY_OPS else 1
    if len(node.inputs) != arity or len(node.outputs) != 1 or any(t < 0 for t in node.inputs):
        return arity_reason(node, arity)
    reason = operands_reason(context, name, tensors, DTYPES)
    if reason:
        return reason
    if name in PARAMS_STRUCTS and not node.builtin_data:
        return NotClaimed("builtin params missing")
    # Position-aware: the kernel computes LiteRT's one path at the partition's shapes, or
    # cannot be built there (codegen.lower), and the partition is then not claimed.
    return quantized(quant_unsupported(
        name, [t.type_name.lower() for t in tensors], [qparams(t) for t in tensors[:-1]],
        qparams(tensors[-1]), dict(fused_node(context, node).params), position_aware=True))


def qparams(tensor: TensorInfo) -> QParams | None:
    """The tensor's per-tensor quantization, None for float32."""
    dtype = tensor.type_name.lower()
    if dtype not in DTYPE_RANGES:
        return None
    return QParams(tensor.scale, tensor.zero_point, dtype)


def fused_node(context: Context, node: NodeInfo) -> FusedNode:
    """The node's op and params, read from its builtin data once (in kernel init)."""
    spec = OPS_BY_CODE.get(node.builtin_code)
    name = op_name(node)
    if name in REDUCTION_PARAMS and node.builtin_data:
        struct = context.params(node.index, REDUCTION_PARAMS[name])
        params = {key: getattr(struct, key) for key, _ in struct._fields_}
        if name in REDUCTIONS:                # resolved at the current shapes: fusion._params
            params["axis_tensor"] = node.inputs[1]
        return FusedNode(node.index, name, node.inputs[:1], node.outputs[0],
                         tuple(sorted(params.items())))
    if name in STENCILS and node.builtin_data:
        struct = context.params(node.index, abi.TfLiteDepthwiseConvParams)
        params = {"activation": struct.activation, "padding": PADDINGS.get(struct.padding),
                  "strides": (struct.stride_height, struct.stride_width),
                  "dilations": (struct.dilation_height_factor, struct.dilation_width_factor)}
        return FusedNode(node.index, name, node.inputs, node.outputs[0],
                         tuple(sorted(params.items())))
    if name in MATMULS and node.builtin_data:
        struct = context.params(node.index, abi.TfLiteBatchMatMulParams)
        params = {"adj_x": bool(struct.adj_x), "adj_y": bool(struct.adj_y)}
        return FusedNode(node.index, name, node.inputs, node.outputs[0],
                         tuple(sorted(params.items())))
    if spec is None:                          # QUANTIZE, DEQUANTIZE: no params
        return FusedNode(node.index, name, node.inputs, node.outputs[0], ())
    params: dict[str, object] = {}
    if spec.fused_activation and node.builtin_data:
        params["activation"] = context.params(node.index, abi.TfLiteArithParams).activation
    if spec.name in PARAMS_STRUCTS:
        struct = context.params(node.index, PARAMS_STRUCTS[spec.name])
        params.update((name, getattr(struct, name)) for name, _ in struct._fields_)
    if spec.name == "POW":
        params["integer_exponent"] = 0  # decided per shape in the kernel: integer_exponent()
    return FusedNode(index=node.index, op=spec.name, inputs=node.inputs, output=node.outputs[0],
                     params=tuple(sorted(params.items())))


def integer_exponent(base_shape: tuple[int, ...], exponent_shape: tuple[int, ...],
                     exponent: float | None) -> int:
    """The n of LiteRT's IntegerExponentPow path (optimized_ops BroadcastPow4D), or 0 for powf:
    a one-element constant exponent within 1e-5 of an integer n >= 1, shapes differing."""
    if exponent is None or base_shape == exponent_shape:
        return 0
    value = np.float32(exponent)
    if not np.isfinite(value):
        return 0
    rounded = np.float32(np.round(value))
    if abs(value - rounded) < np.float32(1e-5) and rounded >= 1:
        return int(rounded)
    return 0
