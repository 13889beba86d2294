"""Which int8/uint8 elementwise nodes a kernel reproduces exactly: `quant_unsupported` is None
for those, else a short reason (a Prepare that fails, int32 arithmetic that would overflow in
LiteRT, LiteRT's vector blocks and scalar loop disagreeing where the kernel cannot follow).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from . import fixedpoint as fp
from .qparams import (ACTIVATION_NAMES, DTYPE_RANGES, ChannelQParams, QParams, Quant, QuantError,
                      float_warnings_off)
from .quant_ops import BINARY_OPS, ELEMENTWISE_OPS, QUANT_OPS
from .quant_paths import PATH_NAMES, REFERENCE, binary_path_set
from .quant_prepare import (RELU_BOUNDS, prepare_abs, prepare_binary, prepare_leaky_relu,
                            prepare_relu, prepare_requantize)
from .quant_reference import binary, binary_grid, unary_lookup


def tensor_reason(q: Quant, dtype: str, per_channel_ok: bool) -> str | None:
    """None if a tensor of `dtype` with quantization `q` is one the kernels read as LiteRT's
    do (per_channel_ok: its op reads per-channel params), else why not."""
    if isinstance(q, ChannelQParams):
        if not per_channel_ok:
            return "per-channel quantization not supported (the kernel reads per-tensor params)"
        if q.dtype != dtype:
            return f"quantization dtype {q.dtype} differs from tensor dtype {dtype}"
        qmin, qmax = DTYPE_RANGES[dtype]
        if not all(math.isfinite(s) and np.float32(s) > 0 for s in q.scales):
            return "scale not finite and positive"
        if not all(qmin <= z <= qmax for z in q.zero_points):
            return f"zero point outside {dtype}"
        return None
    if q is None:
        return "tensor not quantized" if dtype in DTYPE_RANGES else None
    if q.dtype != dtype:
        return f"quantization dtype {q.dtype} differs from tensor dtype {dtype}"
    if not (math.isfinite(q.scale) and q.scale > 0):
        return f"scale {q.scale:g} not finite and positive"
    if not q.qmin <= q.zero_point <= q.qmax:
        return f"zero point {q.zero_point} outside {q.dtype}"
    return None


def shift_overflows(max_abs: int, shift: int) -> bool:
    """x * (1 << shift) overflows int32 for |x| up to max_abs (or the shift itself is UB)."""
    left = max(shift, 0)
    return left > 30 or max_abs * (1 << left) > fp.INT32_MAX


@float_warnings_off
def quant_unsupported(op: str, dtypes: Sequence[str], inputs: Sequence[Quant],
                      output: Quant, params: dict | None = None, *,
                      shapes: tuple | None = None, position_aware: bool = False,
                      eval_errors: bool = False) -> str | None:
    """None when the int8/uint8 kernel reproduces LiteRT's builtin `op` exactly, else a
    short reason. dtypes: the inputs' then the output's dtype names; inputs/output: their
    quantization. position_aware: the kernel follows binary_paths / UnaryLookup.block
    (else parameters for which LiteRT's vector blocks and scalar loop differ are refused);
    eval_errors: the kernel fails the invoke where UnaryLookup.invalid says the builtin's
    Eval fails (else SQRT/RSQRT with such inputs are refused)."""
    params = params or {}
    if op not in ELEMENTWISE_OPS:
        return f"op {op} not supported quantized"
    dtypes = tuple(dtypes)
    in_dtype, out_dtype = dtypes[0], dtypes[-1]
    if in_dtype not in QUANT_OPS[op].dtypes:
        return f"{in_dtype} {op} not supported by the builtin kernel"
    per_channel_in = op == "DEQUANTIZE"
    per_channel_out = op == "QUANTIZE" and in_dtype == "float32"
    for q, dtype in zip(inputs, dtypes[:-1]):
        reason = tensor_reason(q, dtype, per_channel_in)
        if reason:
            return reason
    reason = tensor_reason(output, out_dtype, per_channel_out)
    if reason:
        return reason
    try:
        if op == "QUANTIZE":
            return _quantize_unsupported(inputs[0], output, in_dtype, out_dtype, position_aware)
        if op == "DEQUANTIZE":
            if out_dtype != "float32":
                return f"DEQUANTIZE to {out_dtype} not supported"
            if in_dtype == "float16" or isinstance(inputs[0], ChannelQParams):
                return None                  # exact conversion / reference per-channel loop
            lookup = unary_lookup(op, inputs[0], None)
            if lookup.position_dependent and not position_aware:
                return "DEQUANTIZE: LiteRT's NEON blocks and scalar loop round differently " \
                       "for a nonzero zero point (position dependent)"
            return None
        if len(set(dtypes)) != 1:
            return f"mixed dtypes {'/'.join(dtypes)} not supported"
        if op in BINARY_OPS:
            return _binary_unsupported(op, inputs, output, params, shapes, position_aware)
        return _unary_unsupported(op, inputs[0], output, params, eval_errors)
    except QuantError as error:
        return str(error)


def _quantize_unsupported(input: Quant, output: Quant, in_dtype: str, out_dtype: str,
                          position_aware: bool) -> str | None:
    if out_dtype not in DTYPE_RANGES:
        return f"QUANTIZE to {out_dtype} not supported"
    if in_dtype == "float32":
        if isinstance(output, ChannelQParams):
            return None                      # reference PerChannelQuantize: one path
        if not position_aware:
            return "QUANTIZE: LiteRT's NEON blocks round ties to even, its scalar loop away " \
                   "from zero (position dependent)"
        return None
    p = prepare_requantize(input, output)
    if shift_overflows(255, p.shift):
        return "QUANTIZE: (q - zp) << shift overflows int32 (scale ratio too large)"
    lookup = unary_lookup("QUANTIZE", input, output)
    if lookup.position_dependent and not position_aware:
        return "QUANTIZE: LiteRT's NEON blocks round ties up, its scalar loop away from zero, " \
               "for these scales (position dependent)"
    return None


def _binary_unsupported(op: str, inputs: Sequence[QParams], output: QParams, params: dict,
                        shapes: tuple | None, position_aware: bool) -> str | None:
    input1, input2 = inputs
    activation = params.get("activation", 0)
    if activation not in ACTIVATION_NAMES:
        return f"fused activation {activation} not supported"
    prepared = prepare_binary(op, input1, input2, output, params)
    if op == "SUB" and prepared.output_shift > 0:
        return "SUB output multiplier > 1: its kernel shifts by a negative amount (undefined)"
    if op == "MUL" and shift_overflows(255 * 255, prepared.output_shift):
        return "MUL: (a * b) << shift overflows int32 (output scale too small)"
    if op == "PRELU" and (shift_overflows(255, prepared.output_shift_1)
                          or shift_overflows(255 * 255, prepared.output_shift_2)):
        return "PRELU: value << shift overflows int32 (output scale too small)"
    if op == "PRELU" and shapes is not None and \
            np.broadcast_shapes(*shapes) != tuple(shapes[0]):
        return "PRELU alpha broadcasts beyond the input (Prepare fails)"
    paths = binary_path_set(op, output.dtype, shapes)
    if len(paths) > 1 and not position_aware:
        a, b = binary_grid(input1, input2)
        reference = binary(op, a, b, prepared, output.dtype, REFERENCE)
        for path in paths[1:]:
            if not np.array_equal(reference, binary(op, a, b, prepared, output.dtype, path)):
                return f"{output.dtype} {op}: LiteRT's {PATH_NAMES[path]} path and scalar loop " \
                       "differ for these scales (position dependent)"
    return None


def _unary_unsupported(op: str, input: QParams, output: QParams, params: dict,
                       eval_errors: bool) -> str | None:
    if op == "LOGISTIC" and output.scale != 1.0 / 256:
        return "LOGISTIC output scale must be 1/256 (Prepare fails)"
    if op == "GELU" and not isinstance(params.get("approximate", False), (bool, int)):
        return "GELU approximate flag missing"
    shifts = ()
    if op in RELU_BOUNDS:
        shifts = (prepare_relu(op, input, output).shift,)
    elif op == "ABS":
        shifts = (prepare_abs(input, output)[2],)
    elif op == "LEAKY_RELU":
        if params.get("alpha") is None:
            return "LEAKY_RELU alpha missing"
        p = prepare_leaky_relu(input, output, params["alpha"])
        if p.alpha_multiplier == fp.INT32_MIN:
            return "LEAKY_RELU alpha multiplier -2**31 cannot be negated"
        shifts = (p.alpha_shift, p.identity_shift)
    if any(shift_overflows(255, shift) for shift in shifts):
        return f"{op}: (q - zp) << shift overflows int32 (output scale too small)"
    lookup = unary_lookup(op, input, output, params)
    if lookup.invalid is not None and lookup.invalid.any() and not eval_errors:
        return f"{op} fails Eval for inputs below the zero point"
    return None
