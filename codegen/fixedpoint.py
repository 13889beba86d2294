"""Integer (and quantize/dequantize) arithmetic of TFLite's int8/uint8 kernels, one helper each.

Every helper here is ONE implementation for two callers: called from Python it runs on numpy
arrays (or Python ints), vectorised; referenced from `@njit` code numba compiles the same
source for scalars (`numba.extending.register_jitable`; LLVM inlines these small functions
into the caller's loop and vectorises it, see tests/test_quant.py). Hence the style: no `if`
on values, only arithmetic, `select`, `np.minimum`/`np.maximum` and shifts, all of which mean
the same on arrays and on scalars.

Conventions:
- Values are int64 (numba promotes int32 arithmetic to int64 anyway); every helper returns a
  value in the range of the C type it models, so the int32 wrap-around of the C code never
  happens here. Where LiteRT's int32 arithmetic could overflow, `codegen.quant` refuses the
  parameters instead (`quant_unsupported`).
- Shifts and multipliers are those computed by `codegen.quant` (Prepare-time math).
- "block" helpers reproduce LiteRT's NEON code, which runs on x86 through NEON_2_SSE
  (`tflite/kernels/internal/optimized/neon_check.h` defines USE_NEON whenever SSE4.1 is on);
  "reference" helpers reproduce the scalar loops (the tail after the NEON blocks, and the
  reference kernels). docs/quantized_semantics.md says which elements take which.

Sources: gemmlowp `fixedpoint/fixedpoint.h`; LiteRT `tflite/kernels/internal/common.h`,
`common.cc`, `optimized/optimized_ops.h`, `optimized/integer_ops/{add,mul}.h`,
`reference/{add,sub,mul,prelu,requantize,quantize,dequantize}.h`; intel/ARM_NEON_2_x86_SSE
`NEON_2_SSE.h` for what each NEON intrinsic computes on x86.
"""
from __future__ import annotations

import numpy as np
from numba.extending import overload, register_jitable

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
_TWO_POW_31 = 2147483648.0

_jitable = register_jitable


def select(condition, if_true, if_false):
    """`condition ? if_true : if_false`, elementwise (np.where on arrays; a select in numba)."""
    return np.where(condition, if_true, if_false)


@overload(select)
def _select_scalar(condition, if_true, if_false):
    def impl(condition, if_true, if_false):
        return if_true if condition else if_false
    return impl


# ---------------------------------------------------------------------------- integer basics

@_jitable
def wrap_int32(x):
    """`x` as a C int32 (two's complement wrap-around), e.g. `INT_MIN + zero_point`."""
    return ((x + 2147483648) & 4294967295) - 2147483648


@_jitable
def wrap_int16(x):
    """vmovn_s32 / int16 arithmetic: the low 16 bits of `x`, as a signed value."""
    return ((x + 32768) & 65535) - 32768


@_jitable
def saturate(x, lo, hi):
    """std::min(std::max(x, lo), hi): activation clamps and vqmovn-style saturation."""
    return np.minimum(np.maximum(x, lo), hi)


@_jitable
def saturating_rounding_doubling_high_mul(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul(int32, int32): (a*b + nudge) / 2**31,
    truncating, nudge = a*b >= 0 ? 2**30 : 1 - 2**30 (ties round up); INT32_MIN * INT32_MIN
    saturates to INT32_MAX. Also what vqrdmulhq_s32 computes under NEON_2_SSE."""
    ab = a * b
    v = ab + select(ab >= 0, 1073741824, -1073741823)
    q = (v + (v < 0) * 2147483647) >> 31        # C's truncating division by 2**31
    return select((a == b) & (a == INT32_MIN), INT32_MAX, q)


@_jitable
def rounding_divide_by_pot(x, exponent):
    """gemmlowp RoundingDivideByPOT: x / 2**exponent rounded to nearest, ties away from
    zero (the remainder is compared with half the mask, plus one for negative x)."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


@_jitable
def multiply_by_quantized_multiplier(x, multiplier, shift):
    """tflite::MultiplyByQuantizedMultiplier(int32, int32, int) with double rounding
    (common.cc, TFLITE_SINGLE_ROUNDING unset, as in the 2.3 wheel):
    RoundingDivideByPOT(SRDHM(x * 2**max(shift, 0), multiplier), max(-shift, 0))."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(x * (1 << left), multiplier), right)


@_jitable
def multiply_by_quantized_multiplier_smaller_than_one(x, multiplier, shift):
    """tflite::MultiplyByQuantizedMultiplierSmallerThanOneExp (common.h, double rounding):
    RoundingDivideByPOT(SRDHM(x, multiplier), -shift), shift <= 0."""
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), -shift)


@_jitable
def shift_left_or_floor_right(x, shift):
    """vshlq_s32 under NEON_2_SSE (SERIAL_SHIFT): x << shift, or an arithmetic (flooring)
    x >> -shift for a negative shift; 0 once |shift| >= 32."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return select((shift >= 32) | (shift <= -32), 0, wrap_int32(x << left) >> right)


@_jitable
def rounding_shift_right(x, exponent):
    """vrshlq_s32 by -exponent under NEON_2_SSE (SERIAL_ROUNDING_SHIFT), 0 <= exponent < 32:
    x / 2**exponent rounded to nearest, ties up (towards +inf)."""
    return (x >> exponent) + select(exponent > 0, (x >> (exponent - 1 + (exponent == 0))) & 1, 0)


@_jitable
def multiply_by_quantized_multiplier_4rows(x, multiplier, shift):
    """MultiplyByQuantizedMultiplier4Rows (common.h, double rounding, NEON): vshlq by
    max(shift, 0), vqrdmulhq, then vrshlq by min(shift, 0), which rounds ties up where
    RoundingDivideByPOT rounds them away from zero."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return rounding_shift_right(
        saturating_rounding_doubling_high_mul(shift_left_or_floor_right(x, left), multiplier),
        right)


# ---------------------------------------------------------------------- ADD / SUB / SQ. DIFF

@_jitable
def add_sub_reference(a, b, sign, input1_offset, input1_multiplier, input1_shift,
                      input2_offset, input2_multiplier, input2_shift, left_shift,
                      output_multiplier, output_shift, output_offset, act_min, act_max):
    """reference_integer_ops::AddFunc / reference_ops::AddElementwise (sign=1) and
    SubElementwise / BroadcastQuantSubSlow (sign=-1): both inputs rescaled to a common
    2**-left_shift scale, added, rescaled to the output, offset and clamped (int32)."""
    x1 = multiply_by_quantized_multiplier_smaller_than_one(
        (a + input1_offset) * (1 << left_shift), input1_multiplier, input1_shift)
    x2 = multiply_by_quantized_multiplier_smaller_than_one(
        (b + input2_offset) * (1 << left_shift), input2_multiplier, input2_shift)
    raw = multiply_by_quantized_multiplier_smaller_than_one(
        x1 + sign * x2, output_multiplier, output_shift) + output_offset
    return saturate(raw, act_min, act_max)


@_jitable
def add_block(a, b, input1_offset, input1_multiplier, input1_shift, input2_offset,
              input2_multiplier, input2_shift, left_shift, output_multiplier, output_shift,
              output_offset, act_min, act_max, merged_shift, qmin, qmax):
    """The NEON blocks of LiteRT's quantized ADD. merged_shift=1: int8 AddElementwiseInt8
    (optimized/integer_ops/add.h), which shifts by left_shift + input_shift before vqrdmulhq
    (one rounding); merged_shift=0: int8 AddScalarBroadcast and the uint8 AddElementwise /
    AddScalarBroadcast (optimized_ops.h), which shift by left_shift, vqrdmulhq, then shift by
    input_shift without rounding (floor). Both: vqrdmulhq + RoundingDivideByPOT to the
    output scale, vmovn_s32 (wraps to int16), + output_offset in int16, saturation to
    [qmin, qmax] (vqmovn_s16 / vqmovun_s16), clamp to the activation range."""
    s1 = left_shift + merged_shift * input1_shift
    s2 = left_shift + merged_shift * input2_shift
    x1 = saturating_rounding_doubling_high_mul(
        shift_left_or_floor_right(a + input1_offset, s1), input1_multiplier)
    x2 = saturating_rounding_doubling_high_mul(
        shift_left_or_floor_right(b + input2_offset, s2), input2_multiplier)
    x1 = shift_left_or_floor_right(x1, (1 - merged_shift) * input1_shift)
    x2 = shift_left_or_floor_right(x2, (1 - merged_shift) * input2_shift)
    raw = multiply_by_quantized_multiplier_smaller_than_one(
        wrap_int32(x1 + x2), output_multiplier, output_shift)
    narrowed = saturate(wrap_int16(wrap_int16(raw) + output_offset), qmin, qmax)
    return saturate(narrowed, act_min, act_max)


@_jitable
def squared_difference_reference(a, b, input1_offset, input1_multiplier, input1_shift,
                                 input2_offset, input2_multiplier, input2_shift, left_shift,
                                 output_multiplier, output_shift, output_offset, act_min,
                                 act_max):
    """squared_difference.cc SquaredDifference(int8, int8, params): inputs rescaled to a
    2**-7 scale, difference squared (int32), rescaled to the output, offset, clamped."""
    x1 = multiply_by_quantized_multiplier_smaller_than_one(
        (a + input1_offset) * (1 << left_shift), input1_multiplier, input1_shift)
    x2 = multiply_by_quantized_multiplier_smaller_than_one(
        (b + input2_offset) * (1 << left_shift), input2_multiplier, input2_shift)
    diff = x1 - x2
    raw = multiply_by_quantized_multiplier_smaller_than_one(
        diff * diff, output_multiplier, output_shift) + output_offset
    return saturate(raw, act_min, act_max)


# ----------------------------------------------------------------------------------- MUL

@_jitable
def mul_reference(a, b, input1_offset, input2_offset, output_multiplier, output_shift,
                  output_offset, act_min, act_max):
    """reference_integer_ops::MulElementwise and the scalar loops of the optimized MUL:
    output_offset + MultiplyByQuantizedMultiplier((a + off1) * (b + off2)), clamped."""
    raw = output_offset + multiply_by_quantized_multiplier(
        (a + input1_offset) * (b + input2_offset), output_multiplier, output_shift)
    return saturate(raw, act_min, act_max)


@_jitable
def mul_block(a, b, input1_offset, input2_offset, output_multiplier, output_shift,
              output_offset, act_min, act_max, saturate16, qmin, qmax):
    """The NEON blocks of LiteRT's quantized MUL (optimized/integer_ops/mul.h,
    optimized_ops.h): the product shifted by max(shift, 0) (vshlq), vqrdmulhq,
    RoundingDivideByPOT by max(-shift, 0), narrowed to int16 (saturate16=1: vqmovn_s32;
    0: vmovn_s32, wrapping, in uint8 MulSimpleBroadcast), + output_offset in int16,
    saturated to [qmin, qmax], clamped to the activation range."""
    left = output_shift * (output_shift > 0)
    right = -output_shift * (output_shift < 0)
    p = saturating_rounding_doubling_high_mul(
        shift_left_or_floor_right((a + input1_offset) * (b + input2_offset), left),
        output_multiplier)
    p = rounding_divide_by_pot(p, right)
    p16 = select(saturate16 == 1, saturate(p, -32768, 32767), wrap_int16(p))
    narrowed = saturate(wrap_int16(p16 + output_offset), qmin, qmax)
    return saturate(narrowed, act_min, act_max)


# --------------------------------------------------------------------------------- PRELU

@_jitable
def prelu_reference(x, alpha, input_offset, alpha_offset, output_multiplier_1,
                    output_shift_1, output_multiplier_2, output_shift_2, output_offset,
                    qmin, qmax):
    """reference_ops::Prelu / BroadcastPrelu4DSlow (quantized): x + input_offset >= 0 is
    rescaled by multiplier 1, otherwise (x + input_offset) * (alpha + alpha_offset) by
    multiplier 2; + output_offset, clamped to the type range."""
    v = x + input_offset
    positive = multiply_by_quantized_multiplier(v, output_multiplier_1, output_shift_1)
    negative = multiply_by_quantized_multiplier(
        v * (alpha + alpha_offset), output_multiplier_2, output_shift_2)
    return saturate(select(v >= 0, positive, negative) + output_offset, qmin, qmax)


# ------------------------------------------------------------------------------ REQUANTIZE

@_jitable
def requantize_reference(x, input_zero_point, multiplier, shift, output_zero_point, qmin,
                         qmax):
    """reference_ops::Requantize and the scalar tail of the optimized Requantize:
    MultiplyByQuantizedMultiplier(x - input_zp) + output_zp, clamped."""
    return saturate(multiply_by_quantized_multiplier(x - input_zero_point, multiplier, shift)
                    + output_zero_point, qmin, qmax)


@_jitable
def requantize_block(x, input_zero_point, multiplier, shift, output_zero_point, qmin, qmax):
    """The NEON blocks of optimized_ops::Requantize<int8/uint8, int8/uint8>: as the
    reference, but through MultiplyByQuantizedMultiplier4Rows (ties of the final shift
    round up, not away from zero)."""
    return saturate(multiply_by_quantized_multiplier_4rows(x - input_zero_point, multiplier,
                                                           shift)
                    + output_zero_point, qmin, qmax)


# -------------------------------------------------------------------- QUANTIZE / DEQUANTIZE

@_jitable
def dequantize_reference(q, scale, zero_point):
    """reference_ops::Dequantize and the optimized scalar tail: static_cast<float>(
    double(scale) * (q - zero_point)), one rounding. `scale` is the float32 scale."""
    return np.float32(np.float64(scale) * (q - zero_point))


@_jitable
def dequantize_block(q, scale, zero_times_scale):
    """The NEON blocks of optimized_ops::Dequantize (ScaleWithNewZeroPoint without FMA):
    float(q) * scale + zero_times_scale in float32, two roundings; zero_times_scale is
    static_cast<float>(-zero_point * double(scale))."""
    return np.float32(q) * np.float32(scale) + np.float32(zero_times_scale)


@_jitable
def round_half_away(v):
    """std::round on a double: to nearest, ties away from zero (exact, no +0.5 trick)."""
    t = np.trunc(v)
    return t + select(np.abs(v - t) >= 0.5, np.sign(v), 0.0)


@_jitable
def float_to_int32(v):
    """static_cast<int32_t>(float or double) as x86 compiles it (cvttss2si/cvttsd2si,
    also cvtps2dq for rounded values): truncation, and INT32_MIN for NaN and anything
    outside the int32 range."""
    ok = np.abs(v) < _TWO_POW_31
    return select(ok, np.int64(select(ok, v, 0.0)), INT32_MIN)


@_jitable
def quantize_reference(x, scale, zero_point, qmin, qmax):
    """optimized_ops::AffineQuantize<int8/uint8> scalar tail (= reference AffineQuantize):
    static_cast<int32>(std::round(float x / double scale)) + zero_point (int32 wrap),
    clamped. NaN and |x / scale| >= 2**31 (so +-inf) give INT32_MIN before the zero point."""
    v = round_half_away(np.float64(x) / np.float64(scale))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


@_jitable
def quantize_block(x, inverse_scale, zero_point, qmin, qmax):
    """The NEON blocks of optimized_ops::AffineQuantize<int8/uint8>: x * inverse_scale in
    float32 (inverse_scale = float(1.0 / double(scale))), RoundToNearest = vcvtnq_s32_f32
    = cvtps2dq (ties to even; NaN/overflow -> INT32_MIN), + zero_point (wraps), clamped."""
    v = np.rint(np.float32(x) * np.float32(inverse_scale))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


@_jitable
def quantize_per_channel(x, scale, zero_point, qmin, qmax):
    """reference_ops::PerChannelQuantize: std::round(x / scale) in float32 (roundf), cast,
    + zero_point, clamped."""
    v = round_half_away(np.float32(x) / np.float32(scale))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


@_jitable
def dequantize_per_channel(q, scale, zero_point):
    """reference_ops::PerChannelDequantize: static_cast<float>(scale * (q - zero_point)),
    a float32 product."""
    return np.float32(scale) * np.float32(q - zero_point)
