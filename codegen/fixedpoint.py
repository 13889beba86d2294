"""Integer (and quantize/dequantize) arithmetic of TFLite's int8/uint8 kernels, one helper each.

This module holds the primitives (gemmlowp, common.h), their int32-lane forms and the
QUANTIZE / DEQUANTIZE / requantize helpers; the per-op helpers built from them are in
codegen.fixedpoint_binary (ADD, SUB, SQUARED_DIFFERENCE, MUL, PRELU) and
codegen.fixedpoint_rows (reductions and row ops). codegen.qcall names them all.

Every helper here is ONE implementation for two callers: called from Python it runs on numpy
arrays (or Python ints), vectorised; referenced from `@njit` code numba compiles the same
source for scalars (codegen.fixedpoint_numba registers each with numba, and generated kernels
import them from there; LLVM inlines these small functions into the caller's loop and
vectorises it, see tests/test_quant.py). Hence the style: no `if` on values, only arithmetic,
`select`, `np.minimum`/`np.maximum` and shifts, all of which mean the same on arrays and on
scalars. The modules themselves import no numba: claiming runs them without it.

Conventions:
- The generic helpers (SRDHM, RoundingDivideByPOT, MultiplyByQuantizedMultiplier, ...) take
  int64 values (numba promotes int32 arithmetic to int64 anyway); every helper returns a
  value in the range of the C type it models, so the int32 wrap-around of the C code never
  happens here. Where LiteRT's int32 arithmetic could overflow, `codegen.quant_support` refuses the
  parameters instead (`quant_unsupported`).
- The helpers a kernel calls per element pair (ADD, SUB, SQUARED_DIFFERENCE, MUL, QUANTIZE
  from float) compute in int32 lanes instead (section "int32 lanes"): numpy ufuncs on int32
  stay int32 in numba too, where `+` would widen to int64, and LLVM then packs 16 lanes per
  AVX-512 register instead of 8 and multiplies through vpmuldq + a shuffle. Each of those
  helpers equals the int64 definition for every int8/uint8 operand pair and every parameter
  Prepare can produce (the bounds are stated where they are used; tests/test_quant.py checks
  all pairs against the int64 formulas and against LiteRT).
- Shifts and multipliers are those computed by `codegen.quant_prepare`.
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

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
_TWO_POW_31 = 2147483648.0


def select(condition, if_true, if_false):
    """`condition ? if_true : if_false`, elementwise (np.where on arrays; a select in numba,
    codegen.fixedpoint_numba)."""
    return np.where(condition, if_true, if_false)


# ---------------------------------------------------------------------------- integer basics

def wrap_int32(x):
    """`x` as a C int32 (two's complement wrap-around), e.g. `INT_MIN + zero_point`."""
    return ((x + 2147483648) & 4294967295) - 2147483648


def wrap_int16(x):
    """vmovn_s32 / int16 arithmetic: the low 16 bits of `x`, as a signed value."""
    return ((x + 32768) & 65535) - 32768


def saturate(x, lo, hi):
    """std::min(std::max(x, lo), hi): activation clamps and vqmovn-style saturation."""
    return np.minimum(np.maximum(x, lo), hi)


def saturating_rounding_doubling_high_mul(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul(int32, int32): (a*b + nudge) / 2**31,
    truncating, nudge = a*b >= 0 ? 2**30 : 1 - 2**30 (ties round up); INT32_MIN * INT32_MIN
    saturates to INT32_MAX. Also what vqrdmulhq_s32 computes under NEON_2_SSE."""
    ab = a * b
    v = ab + select(ab >= 0, 1073741824, -1073741823)
    q = (v + (v < 0) * 2147483647) >> 31        # C's truncating division by 2**31
    return select((a == b) & (a == INT32_MIN), INT32_MAX, q)


def rounding_divide_by_pot(x, exponent):
    """gemmlowp RoundingDivideByPOT: x / 2**exponent rounded to nearest, ties away from
    zero (the remainder is compared with half the mask, plus one for negative x)."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """tflite::MultiplyByQuantizedMultiplier(int32, int32, int) with double rounding
    (common.cc, TFLITE_SINGLE_ROUNDING unset, as in the 2.3 wheel):
    RoundingDivideByPOT(SRDHM(x * 2**max(shift, 0), multiplier), max(-shift, 0))."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(x * (1 << left), multiplier), right)


def multiply_by_quantized_multiplier_smaller_than_one(x, multiplier, shift):
    """tflite::MultiplyByQuantizedMultiplierSmallerThanOneExp (common.h, double rounding):
    RoundingDivideByPOT(SRDHM(x, multiplier), -shift), shift <= 0."""
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), -shift)


def shift_left_or_floor_right(x, shift):
    """vshlq_s32 under NEON_2_SSE (SERIAL_SHIFT): x << shift, or an arithmetic (flooring)
    x >> -shift for a negative shift; 0 once |shift| >= 32."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return select((shift >= 32) | (shift <= -32), 0, wrap_int32(x << left) >> right)


def rounding_shift_right(x, exponent):
    """vrshlq_s32 by -exponent under NEON_2_SSE (SERIAL_ROUNDING_SHIFT), 0 <= exponent < 32:
    x / 2**exponent rounded to nearest, ties up (towards +inf)."""
    return (x >> exponent) + select(exponent > 0, (x >> (exponent - 1 + (exponent == 0))) & 1, 0)


def multiply_by_quantized_multiplier_4rows(x, multiplier, shift):
    """MultiplyByQuantizedMultiplier4Rows (common.h, double rounding, NEON): vshlq by
    max(shift, 0), vqrdmulhq, then vrshlq by min(shift, 0), which rounds ties up where
    RoundingDivideByPOT rounds them away from zero."""
    left = shift * (shift > 0)
    right = -shift * (shift < 0)
    return rounding_shift_right(
        saturating_rounding_doubling_high_mul(shift_left_or_floor_right(x, left), multiplier),
        right)


def saturating_multiply_by_pot(x, exponent):
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent> for exponent > 0: x * 2**exponent,
    saturated to int32."""
    threshold = (1 << (31 - exponent)) - 1
    return select(x > threshold, INT32_MAX, select(x < -threshold, INT32_MIN, x << exponent))


def inv_sqrt_quantized_multiplier_exp(value):
    """GetInvSqrtQuantizedMultiplierExp(value, kReverseShift = -1) (common.h): the multiplier and
    shift (<= 0) of 1 / sqrt(value), by Newton-Raphson in gemmlowp fixed point (3 integer
    bits), five iterations. Scalar only (it loops over the value's bits): kernels call it once
    per row (int8 L2_NORMALIZATION); a Prepare-time table (RSQRT) runs the two halves,
    inv_sqrt_normalized per value and inv_sqrt_newton on all of them at once."""
    if value <= 1:
        return INT32_MAX, 0
    normalized, shift = inv_sqrt_normalized(value)
    x, exponent = inv_sqrt_newton(normalized, shift)
    return int(x), exponent


def inv_sqrt_normalized(value):
    """The first half of GetInvSqrtQuantizedMultiplierExp for a value > 1: the value shifted by
    bit pairs into [2**27, 2**29), and the shift that makes up for it."""
    shift = 11
    while value >= (1 << 29):
        value = value >> 2
        shift += 1
    bits, rest = 0, value
    while rest > 0:
        rest = rest >> 1
        bits += 1
    left_shift_bit_pairs = (31 - bits) // 2 - 1
    return value << (2 * left_shift_bit_pairs), shift - left_shift_bit_pairs


def inv_sqrt_newton(value, shift):
    """The second half of GetInvSqrtQuantizedMultiplierExp, on inv_sqrt_normalized's value and
    shift: the Newton-Raphson iterations and the final scaling, (multiplier, shift <= 0)."""
    half_input = rounding_divide_by_pot(value >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28
    for _ in range(5):
        x3 = saturating_multiply_by_pot(saturating_rounding_doubling_high_mul(
            saturating_rounding_doubling_high_mul(x, x), x), 6)
        x = saturating_multiply_by_pot(wrap_int32(
            saturating_rounding_doubling_high_mul(half_three, x)
            - saturating_rounding_doubling_high_mul(half_input, x3)), 3)
    x = saturating_rounding_doubling_high_mul(x, 1518500250)
    negative = shift < 0
    return (select(negative, wrap_int32(x << (-shift * negative)), x),
            -shift * (shift >= 0))


# ---------------------------------------------------------------------------- int32 lanes
# The same arithmetic on int32 values, for the per-element helpers below. Only numpy ufuncs
# on int32 operands (np.add, np.left_shift, ...) keep numba in int32; constants are cast
# with np.int32 first. np.multiply of two int32 is `mul nsw` in numba (overflow is poison),
# so products that may overflow int32 are taken in int64 and truncated. Shift amounts are
# constants in [0, 31]. Each helper states the operand range it is exact for.

_I32_1 = np.int32(1)
_I32_2 = np.int32(2)
_I32_3 = np.int32(3)
_I32_30 = np.int32(30)
_I32_31 = np.int32(31)


def high_mul(a, b):
    """floor(a * b / 2**32) for int32 a, b: the high half of the 64-bit product. By a
    constant b (a Prepare-time multiplier) LLVM computes it in int32 lanes: vpmuldq on the
    even and on the odd lanes, one shuffle."""
    return np.int32(np.right_shift(np.multiply(np.int64(a), np.int64(b)), 32))


def doubling_high_mul_int32(a, multiplier):
    """SRDHM(a, multiplier) for int32 |a| < 2**29 (any int32 multiplier), in int32.

    SRDHM(a, m) = floor((a*m + 2**30) / 2**31) for both signs of a*m (gemmlowp's nudge
    1 - 2**30 with truncation rounds a negative product the same way), which is
    floor((floor(a*m / 2**30) + 1) / 2), and floor(a*m / 2**30) = high_mul(4a, m) exactly
    while 4a fits int32. The saturating case needs a = INT32_MIN: out of range here."""
    return np.right_shift(np.add(high_mul(np.left_shift(a, _I32_2), multiplier), _I32_1),
                          _I32_1)


def doubling_high_mul_int32_wide(a, multiplier):
    """SRDHM(a, multiplier) for any int32 a and multiplier but a = multiplier = INT32_MIN:
    with P = a*m = 2**32 * high + low (low the unsigned low word), floor((P + 2**30) / 2**31)
    = 2 * high + floor((low + 2**30) / 2**31), and the latter is ((low >> 30) + 1) >> 1 on
    the top two bits of low. Three operations more than `doubling_high_mul_int32`."""
    high = high_mul(a, multiplier)
    low = np.int32(np.multiply(np.int64(a), np.int64(multiplier)))    # wraps: the low word
    top = np.bitwise_and(np.right_shift(low, _I32_30), _I32_3)
    return np.add(np.add(high, high), np.right_shift(np.add(top, _I32_1), _I32_1))


def rounding_divide_by_pot_int32(x, exponent):
    """RoundingDivideByPOT(x, exponent) for int32 |x| < 2**30, 0 <= exponent <= 31:
    (x + 2**(exponent-1) - (x < 0)) >> exponent, one add fewer than the mask and threshold
    of gemmlowp. Same result: for x >= 0 a remainder >= half rounds up; for x < 0 it must
    exceed half (ties go away from zero), which the -1 does. No overflow: |x| + half < 2**31.
    exponent 0: half is 0 and the -1 is dropped (np.maximum with -half), so x comes back."""
    half = np.int32((1 << exponent) >> 1)
    negative = np.maximum(np.right_shift(x, _I32_31), np.int32(-((1 << exponent) >> 1)))
    return np.right_shift(np.add(np.add(x, half), negative), np.int32(exponent))


def doubling_high_mul_rounded_int32(a, multiplier, exponent, offset):
    """RoundingDivideByPOT(SRDHM(a, multiplier), exponent) + offset, i.e.
    MultiplyByQuantizedMultiplierSmallerThanOneExp(a, multiplier, -exponent) + offset, for
    int32 |a| < 2**29, 0 <= exponent <= 31 and |offset| <= 255, rounding once: with
    H = high_mul(4a, multiplier), SRDHM is t = floor((H + 1) / 2) (`doubling_high_mul_int32`)
    and RoundingDivideByPOT is floor((t + 2**(exponent-1) - (t < 0)) / 2**exponent)
    (`rounding_divide_by_pot_int32`); floor(floor(y / 2) / 2**e) = floor(y / 2**(e+1)) makes
    both one shift of H + 1 + 2**exponent - 2 * (t < 0), and t < 0 exactly when H < -1.
    exponent 0: half is 0 and nothing is subtracted, so t comes back. Up to exponent 20 the
    offset goes in before the shift, as offset * 2**(exponent+1), one add fewer. No overflow:
    |H| < 2**30, 255 * 2**21 < 2**29; from exponent 30 on, |t| < 2**29 rounds to 0."""
    return quadrupled_high_mul_rounded_int32(np.left_shift(a, _I32_2), multiplier, exponent,
                                             offset, True)


def quadrupled_high_mul_rounded_int32(a4, multiplier, exponent, offset, ties_reached):
    """`doubling_high_mul_rounded_int32` of a = a4 / 4, given a4 = 4a (a kernel that can
    fold the 4 into a constant saves the shift). ties_reached=False drops the correction of
    negative ties (-2 where H < -1, two operations): for callers that checked that no
    operand they pass makes RoundingDivideByPOT meet a negative tie, where the correction
    changes nothing."""
    high = high_mul(a4, multiplier)
    exponent_fits = min(exponent, 29)
    inside = offset * (exponent <= 20)
    nudge = np.int32(1 + 2 * ((1 << exponent_fits) >> 1) + inside * (1 << (exponent_fits + 1)))
    negative = select(np.less(high, np.int32(-1)),
                      np.int32(2 * (exponent > 0) * ties_reached), np.int32(0))
    rounded = np.right_shift(np.subtract(np.add(high, nudge), negative),
                             np.int32(exponent_fits + 1))
    return np.add(select(exponent >= 30, np.int32(0), rounded), np.int32(offset - inside))


def depthwise_requantize_int32(acc, multiplier, exponent, offset, ties_away):
    """optimized_ops::Quantize of an int8 depthwise convolution's sum (codegen.quant_conv),
    + offset, for int32 |acc| < 2**29 and a shift <= 0 (exponent = -shift), in int32 lanes:
    the scalar loop's MultiplyByQuantizedMultiplier rounds ties away from zero (ties_away),
    the NEON blocks' MultiplyByQuantizedMultiplier4Rows rounds them up (vrshlq), which is
    `quadrupled_high_mul_rounded_int32` without its correction of negative ties."""
    return quadrupled_high_mul_rounded_int32(np.left_shift(acc, _I32_2), multiplier, exponent,
                                             offset, ties_away)


def shift_left_or_floor_right_int32(x, shift):
    """x << shift, or x >> -shift (flooring) for a negative shift: vshlq_s32 for int32 x
    and |shift| < 32 (the int8 paths' shifts: >= 20 - 31)."""
    left = np.int32(shift * (shift > 0))
    right = np.int32(-shift * (shift < 0))
    return np.right_shift(np.left_shift(x, left), right)


def wrap_int16_int32(x):
    """vmovn_s32 / int16 arithmetic on an int32: the low 16 bits, as a signed value."""
    return np.int32(np.int16(x))


def clamp_int32(x, lo, hi):
    """std::min(std::max(x, lo), hi) on an int32 (lo, hi: constants)."""
    return np.minimum(np.maximum(x, np.int32(lo)), np.int32(hi))


def offset_int32(q, offset):
    """q + offset as an int32 (q an int8/uint8 value, offset minus a zero point)."""
    return np.add(np.int32(q), np.int32(offset))


# ------------------------------------------------------------------------------ REQUANTIZE

def requantize_reference(x, input_zero_point, multiplier, shift, output_zero_point, qmin,
                         qmax):
    """reference_ops::Requantize and the scalar tail of the optimized Requantize:
    MultiplyByQuantizedMultiplier(x - input_zp) + output_zp, clamped."""
    return saturate(multiply_by_quantized_multiplier(x - input_zero_point, multiplier, shift)
                    + output_zero_point, qmin, qmax)


def requantize_block(x, input_zero_point, multiplier, shift, output_zero_point, qmin, qmax):
    """The NEON blocks of optimized_ops::Requantize<int8/uint8, int8/uint8>: as the
    reference, but through MultiplyByQuantizedMultiplier4Rows (ties of the final shift
    round up, not away from zero)."""
    return saturate(multiply_by_quantized_multiplier_4rows(x - input_zero_point, multiplier,
                                                           shift)
                    + output_zero_point, qmin, qmax)


# -------------------------------------------------------------------- QUANTIZE / DEQUANTIZE

def dequantize_reference(q, scale, zero_point):
    """reference_ops::Dequantize and the optimized scalar tail: static_cast<float>(
    double(scale) * (q - zero_point)), one rounding. `scale` is the float32 scale."""
    return np.float32(np.float64(scale) * (q - zero_point))


def dequantize_block(q, scale, zero_times_scale):
    """The NEON blocks of optimized_ops::Dequantize (ScaleWithNewZeroPoint without FMA):
    float(q) * scale + zero_times_scale in float32, two roundings; zero_times_scale is
    static_cast<float>(-zero_point * double(scale))."""
    return np.float32(q) * np.float32(scale) + np.float32(zero_times_scale)


def round_half_away(v):
    """std::round on a double: to nearest, ties away from zero (exact, no +0.5 trick)."""
    t = np.trunc(v)
    return t + select(np.abs(v - t) >= 0.5, np.sign(v), 0.0)


def float_to_int32(v):
    """static_cast<int32_t>(float or double) as x86 compiles it (cvttss2si/cvttsd2si,
    also cvtps2dq for rounded values): truncation, and INT32_MIN for NaN and anything
    outside the int32 range."""
    ok = np.abs(v) < _TWO_POW_31
    return select(ok, np.int64(select(ok, v, 0.0)), INT32_MIN)


def float32_to_int32(v):
    """float_to_int32 of a float32, as an int32 (cvttps2dq, 16 lanes): truncation, and
    INT32_MIN for NaN and anything outside the int32 range. np.add on it wraps as C does."""
    ok = np.abs(v) < np.float32(_TWO_POW_31)
    return select(ok, np.int32(select(ok, v, np.float32(0))), np.int32(INT32_MIN))


def quantize_reference(x, scale, zero_point, qmin, qmax):
    """optimized_ops::AffineQuantize<int8/uint8> scalar tail (= reference AffineQuantize):
    static_cast<int32>(std::round(float x / double scale)) + zero_point (int32 wrap),
    clamped. NaN and |x / scale| >= 2**31 (so +-inf) give INT32_MIN before the zero point."""
    v = round_half_away(np.float64(x) / np.float64(scale))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


def quantize_block(x, inverse_scale, zero_point, qmin, qmax):
    """The NEON blocks of optimized_ops::AffineQuantize<int8/uint8>: x * inverse_scale in
    float32 (inverse_scale = float(1.0 / double(scale))), RoundToNearest = vcvtnq_s32_f32
    = cvtps2dq (ties to even; NaN/overflow -> INT32_MIN), + zero_point (wraps), clamped."""
    v = np.rint(np.float32(x) * np.float32(inverse_scale))
    return clamp_int32(np.add(float32_to_int32(v), np.int32(zero_point)), qmin, qmax)


def quantize_per_channel(x, scale, zero_point, qmin, qmax):
    """reference_ops::PerChannelQuantize: std::round(x / scale) in float32 (roundf), cast,
    + zero_point, clamped."""
    v = round_half_away(np.float32(x) / np.float32(scale))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


def dequantize_per_channel(q, scale, zero_point):
    """reference_ops::PerChannelDequantize: static_cast<float>(scale * (q - zero_point)),
    a float32 product."""
    return np.float32(scale) * np.float32(q - zero_point)
