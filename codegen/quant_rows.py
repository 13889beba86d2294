"""int8/uint8 reductions and row ops as LiteRT 2.3's builtin kernels compute them: their
Prepare-time constants, the codegen.fixedpoint helper from a row's sum (or extreme) to its
output codes, and which parameters are reproduced exactly.
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from . import fixedpoint as fp
from .qparams import QParams, QuantError
from .libm import expf
from .quant_prepare import quantize_multiplier
from .quant_support import shift_overflows, tensor_reason

_f32 = np.float32


# ---------------------------------------------------------------------------- reductions
# int8/uint8 MEAN, SUM, REDUCE_MAX and REDUCE_MIN (tflite/kernels/reduce.cc, kGenericOptimized).
# Each sums (or takes the extreme of) the codes exactly, in integers, so the order of the
# accumulation is free; MEAN and SUM then turn each sum into its output code with Prepare-time
# constants, which `reduction_output` gives as a codegen.fixedpoint helper call:
# - MEAN of a 4-D tensor over H, W with keep_dims: optimized_integer_ops::Mean (and its uint8
#   twin in optimized/reduce.h): MultiplyByQuantizedMultiplier(sum, s_in / (n * s_out)) + bias.
#   It runs channels in blocks of 16 (MultiplyByQuantizedMultiplier4Rows, ties up) and a scalar
#   tail (ties away from zero), per thread's range of channels: the kernel takes it only where
#   both round every reachable sum alike.
# - any other MEAN: reference_ops::QuantizedMeanOrSum: the multiplier of s_in / s_out divided
#   by n, applied to sum - zp_in * n.
# - SUM: optimized_ops::QuantizedMeanOrSum: round(float(sum) * scale + bias) in float32.
# REDUCE_MAX / REDUCE_MIN return the extreme code as it is (no requantization, whatever the
# output's scale).

#: The largest sum of codes whose agreement between the 4-D mean's two roundings is checked
#: at claim time (every reachable sum is tried): larger H * W are not claimed.
_HW_MEAN_MAX_SUMS = 1 << 20


def _hw_mean(shape: Sequence[int], axes: Sequence[int], keep_dims: bool) -> bool:
    """The MEAN takes optimized_integer_ops::Mean (reduce.cc EvalMean)."""
    return len(shape) == 4 and keep_dims and tuple(axes) == (1, 2)


def prepare_hw_mean(input: QParams, output: QParams, count: int) -> tuple[int, int, int]:
    """(multiplier, shift, bias) of optimized_integer_ops::Mean, in its float32 arithmetic:
    bias = zp_out - (int)(zp_in * s_in / s_out +- 0.5f), real = s_in / (n * s_out)."""
    temp = _f32(_f32(_f32(input.zero_point) * _f32(input.scale)) / _f32(output.scale))
    temp = _f32(temp + _f32(0.5)) if temp > 0 else _f32(temp - _f32(0.5))
    bias = output.zero_point - int(temp)
    multiplier, shift = quantize_multiplier(float(_f32(input.scale)
                                                  / _f32(_f32(count) * _f32(output.scale))))
    return multiplier, shift, bias


def prepare_mean(input: QParams, output: QParams, count: int) -> tuple[int, int]:
    """reference_ops::QuantizedMeanOrSum's multiplier and shift for a mean of `count`: that of
    s_in / s_out (PrepareMeanOrSum), shifted left by up to floor(log2(count)) and divided by
    count in int64 (truncating)."""
    multiplier, shift = quantize_multiplier(input.scale / output.scale)
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    if extra < 0:
        raise QuantError("MEAN: scale ratio below 2**-31 (the kernel shifts by a negative "
                         "amount, undefined)")
    return (multiplier << extra) // count, shift - extra


def prepare_sum(input: QParams, output: QParams, count: int) -> tuple[float, float]:
    """optimized_ops::QuantizedMeanOrSum's float32 scale and bias for a sum of `count`."""
    scale = _f32(_f32(input.scale) / _f32(output.scale))
    return float(scale), float(_f32(_f32(_f32(-input.zero_point) * scale) * _f32(count)))


def reduction_output(op: str, input: QParams, output: QParams, shape: Sequence[int],
                     axes: Sequence[int], keep_dims: bool) -> tuple[str, tuple] | None:
    """The codegen.fixedpoint helper and constants from a sum of codes to an output code, or
    None where the reduced code is the output (REDUCE_MAX, REDUCE_MIN)."""
    count = math.prod(shape[a] for a in axes)
    bounds = (output.qmin, output.qmax)
    if op == "SUM":
        return "sum_output", (*prepare_sum(input, output, count), output.zero_point, *bounds)
    if op != "MEAN":
        return None
    if _hw_mean(shape, axes, keep_dims):
        return "hw_mean_output", (*prepare_hw_mean(input, output, count), *bounds)
    multiplier, shift = prepare_mean(input, output, count)
    return "mean_output", (input.zero_point * count, multiplier, shift, output.zero_point,
                           *bounds)


def reduction_unsupported(op: str, input: QParams, output: QParams, shape: Sequence[int],
                          axes: Sequence[int], keep_dims: bool) -> str | None:
    """None when the int8/uint8 reduction is reproduced exactly, else why not."""
    reason = _same_dtype_reason(op, input, output)
    if reason:
        return reason
    count = math.prod(shape[a] for a in axes)
    largest = count * max(abs(input.qmin), input.qmax)
    if largest > fp.INT32_MAX:
        return f"{op} of {count} codes may overflow LiteRT's int32 sum"
    if op not in ("MEAN", "SUM"):
        return None if (input.scale, input.zero_point) == (output.scale, output.zero_point) \
            else f"{op}: input and output quantization differ (its Eval fails)"
    try:
        call, args = reduction_output(op, input, output, shape, axes, keep_dims)
    except QuantError as error:
        return str(error)
    if call == "sum_output":
        return None if largest * args[0] < 2 ** 30 else "SUM: scaled sum may exceed int32"
    if call == "mean_output":
        _, _, shift, *_ = args
        return f"{op}: sum << shift overflows int32" if shift_overflows(2 * largest, shift) \
            else None
    multiplier, shift, bias, qmin, qmax = args
    if shift_overflows(largest, shift):
        return f"{op}: sum << shift overflows int32"
    if (count * (input.qmax - input.qmin) + 1) > _HW_MEAN_MAX_SUMS:
        return f"{op} over H, W of {count} elements: LiteRT's vector blocks and scalar tail " \
               "round differently (position dependent) and too many sums to check"
    if not _hw_mean_rounds_alike(count * input.qmin, count * input.qmax, *args):
        return f"{op} over H, W: LiteRT's vector blocks and scalar tail round some sums " \
               "differently for these scales (position dependent)"
    return None


@functools.lru_cache(maxsize=256)
def _hw_mean_rounds_alike(low: int, high: int, multiplier: int, shift: int, bias: int,
                          qmin: int, qmax: int) -> bool:
    """optimized_integer_ops::Mean's vector blocks and scalar tail give every sum in [low,
    high] the same code. The same node is asked about by its claim, by partition selection and
    by kernel prepare: cached.

    For a right shift r the two share y = SRDHM(sum, multiplier) and differ only where y is a
    negative tie (y mod 2**r == 2**(r-1)): RoundingDivideByPOT gives k = y >> r, the vector
    shift k + 1, one code apart unless a clamp joins them. y is monotonic in the sum and steps
    by at most 1 (multiplier < 2**31), so it takes every value between its ends: the ties are
    those k with k * 2**r + 2**(r-1) in [y(low), min(y(high), -1)], and the means agree when
    none has k + bias within [qmin, qmax - 1]. Otherwise (a left shift) every sum is tried."""
    if shift < 0 and 0 <= multiplier <= fp.INT32_MAX:
        right = -shift
        first, last = (int(fp.saturating_rounding_doubling_high_mul(np.int64(end), multiplier))
                       for end in (low, high))
        half = 1 << (right - 1)
        ties = range(-((half - first) >> right), ((min(last, -1) - half) >> right) + 1)
        codes_apart = range(qmin - bias, qmax - bias)
        return max(ties.start, codes_apart.start) >= min(ties.stop, codes_apart.stop)
    return _hw_mean_sums_alike(low, high, multiplier, shift, bias, qmin, qmax)


def _hw_mean_sums_alike(low: int, high: int, multiplier: int, shift: int, bias: int,
                        qmin: int, qmax: int) -> bool:
    """_hw_mean_rounds_alike by trying every sum in [low, high]."""
    sums = np.arange(low, high + 1, dtype=np.int64)
    scalar = fp.multiply_by_quantized_multiplier(sums, multiplier, shift)
    blocks = fp.multiply_by_quantized_multiplier_4rows(sums, multiplier, shift)
    return np.array_equal(np.clip(scalar + bias, qmin, qmax), np.clip(blocks + bias, qmin, qmax))


# ---------------------------------------------------------------------------- softmax
# int8 -> int8 and uint8 -> uint8 SOFTMAX (activations.cc, kGenericOptimized on x86:
# optimized_ops::Softmax<In, Out>; XNNPACK takes only float softmax). Per row: m, the largest
# code; e[j] = table[255 - m + q[j]] with table[255 - v] = expf(-S_in * beta * v) (Prepare,
# float32, glibc's expf); the float32 sum of the e[j] in order from 0.0f; inv = 1.0f / (sum *
# S_out); out = round(e[j] * inv) + zp_out (int8), (int)(e[j] * inv + 0.5f) (uint8), clamped.

def softmax_table(input: QParams, beta: float) -> np.ndarray:
    """PopulateSoftmaxLookupTable: table[255 - v] = expf((-S_in * beta) * v), float32."""
    scale = _f32(-_f32(input.scale) * _f32(beta))
    values = np.arange(256)
    table = np.empty(256, np.float32)
    table[255 - values] = expf(scale * values.astype(np.float32))
    return table


def softmax_output(output: QParams) -> tuple[str, tuple]:
    """The codegen.fixedpoint helper and constants from an exp and its row's inverse sum to the
    output code."""
    if output.dtype == "uint8":
        return "softmax_output_uint8", (output.qmin, output.qmax)
    return "softmax_output", (output.zero_point, output.qmin, output.qmax)


# LOG_SOFTMAX (int8 -> int8, uint8 -> uint8; optimized_ops::LogSoftmax(params, input_scale, ...)):
# the same row max, table (beta 1) and ordered sum; then per row precomputed = (S_in * m +
# logf(sum)) / S_out, and out = rint(S_in / S_out * q - precomputed) + zp_out, clamped. Prepare
# requires S_out = 16 / 256 and zp_out = 127 (int8) or 255 (uint8).

def log_softmax_output(input: QParams, output: QParams) -> tuple[str, tuple]:
    """The codegen.fixedpoint helper and constants from a code and its row's offset to the
    output code."""
    scale = float(_f32(_f32(input.scale) / _f32(output.scale)))
    return "log_softmax_output", (scale, output.zero_point, output.qmin, output.qmax)


# L2_NORMALIZATION (int8: reference_integer_ops::L2Normalization; uint8: optimized_ops'): per
# row the exact sum of (q - zp)**2 and GetInvSqrtQuantizedMultiplierExp of it; per element the
# code rescaled to the output's 1/128 scale (codegen.fixedpoint, "L2 normalization"). Prepare
# requires S_out = 1/128 and zp_out = 0 (int8) or 128 (uint8).

def l2_norm_output(input: QParams) -> str:
    """The codegen.fixedpoint helper from a code and its row's multiplier and shift."""
    return "l2_norm_output" if input.dtype == "int8" else "l2_norm_output_uint8"


#: The output quantization each int8/uint8 row op's Prepare requires (else it fails), by
#: dtype: scale, zero point, and how far the scale may be off (TF_LITE_ENSURE_NEAR or _EQ).
ROW_OP_OUTPUTS = {"SOFTMAX": {"int8": (1 / 256, -128, 0.001 / 256)},
                  "LOG_SOFTMAX": {"int8": (16 / 256, 127, 0.0), "uint8": (16 / 256, 255, 0.0)},
                  "L2_NORMALIZATION": {"int8": (1 / 128, 0, 0.0), "uint8": (1 / 128, 128, 0.0)}}


def row_op_unsupported(op: str, input: QParams, output: QParams, depth: int,
                       beta: float = 1.0) -> str | None:
    """None when the int8/uint8 SOFTMAX, LOG_SOFTMAX or L2_NORMALIZATION over rows of `depth`
    is reproduced exactly: one dtype in and out, per-tensor quantization, the output
    quantization its Prepare requires, SOFTMAX's beta >= 0 (else exps overflow), L2's sum of
    squares within int32."""
    if op == "SOFTMAX" and not (math.isfinite(beta) and beta >= 0):
        return f"SOFTMAX beta {beta} < 0: exps overflow"
    if op == "L2_NORMALIZATION" and depth * 255 * 255 > fp.INT32_MAX:
        return f"L2_NORMALIZATION over rows of {depth}: the int32 sum of squares may overflow"
    reason = _same_dtype_reason(op, input, output)
    if reason:
        return reason
    required = ROW_OP_OUTPUTS[op].get(output.dtype)
    if required and (output.zero_point != required[1]
                     or abs(output.scale - required[0]) > required[2]):
        return (f"{output.dtype} {op} output must be scale {required[0]:g}, zero point "
                f"{required[1]} (Prepare fails)")
    return None


def _same_dtype_reason(op: str, input: QParams, output: QParams) -> str | None:
    if input.dtype != output.dtype:
        return f"{input.dtype} -> {output.dtype} {op} not supported"
    for q in (input, output):
        reason = tensor_reason(q, q.dtype, False)
        if reason:
            return reason
    return None
