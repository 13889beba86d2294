"""Per-element fixed-point helpers of LiteRT's int8/uint8 ADD, SUB, SQUARED_DIFFERENCE, MUL and
PRELU kernels: the whole op per path ("reference": the scalar loop; "block": its NEON blocks),
and the parts quant_parts splits ADD, SUB and SQUARED_DIFFERENCE into.

Written in the style of codegen.fixedpoint (one implementation for numpy arrays and `@njit`
code; the int32-lane helpers keep LLVM in 16 lanes per AVX-512 register), from its primitives.
Sources: LiteRT `optimized/integer_ops/{add,mul}.h`, `reference/{add,sub,mul,prelu}.h`.
"""
from __future__ import annotations

import numpy as np

from .fixedpoint import (clamp_int32, doubling_high_mul_int32, doubling_high_mul_int32_wide,
                         doubling_high_mul_rounded_int32, multiply_by_quantized_multiplier,
                         offset_int32, quadrupled_high_mul_rounded_int32,
                         rounding_divide_by_pot_int32, saturate, select,
                         shift_left_or_floor_right_int32, wrap_int16_int32)

_I32_2 = np.int32(2)


# ---------------------------------------------------------------------- ADD / SUB / SQ. DIFF

def rescale_input_int32(q, offset, left_shift, multiplier, shift):
    """MultiplyByQuantizedMultiplierSmallerThanOneExp((q + offset) << left_shift, multiplier,
    shift) of the reference ADD/SUB/SQUARED_DIFFERENCE, in int32: |q + offset| <= 255 and
    left_shift <= 20 keep the shifted value below 2**28."""
    shifted = np.left_shift(offset_int32(q, offset), np.int32(left_shift))
    return doubling_high_mul_rounded_int32(shifted, multiplier, -shift, 0)


def add_sub_output(x1, x2, sign, output_multiplier, output_shift, output_offset, act_min,
                   act_max):
    """The second half of the reference ADD/SUB: the rescaled inputs (`rescale_input_int32`)
    added (sign=1) or subtracted (sign=-1), rescaled to the output, offset and clamped.
    In int32 lanes: each input multiplier is at most 0.5 (of twice the larger scale), so
    |x1|, |x2| <= 255 * 2**19 + 1 and |x1 +- x2| < 2**28."""
    total = np.add(x1, np.multiply(np.int32(sign), x2))
    return clamp_int32(doubling_high_mul_rounded_int32(total, output_multiplier, -output_shift,
                                                       output_offset), act_min, act_max)


def add_sub_reference(a, b, sign, input1_offset, input1_multiplier, input1_shift,
                      input2_offset, input2_multiplier, input2_shift, left_shift,
                      output_multiplier, output_shift, output_offset, act_min, act_max):
    """reference_integer_ops::AddFunc / reference_ops::AddElementwise (sign=1) and
    SubElementwise / BroadcastQuantSubSlow (sign=-1): both inputs rescaled to a common
    2**-left_shift scale, added, rescaled to the output, offset and clamped (int32)."""
    x1 = rescale_input_int32(a, input1_offset, left_shift, input1_multiplier, input1_shift)
    x2 = rescale_input_int32(b, input2_offset, left_shift, input2_multiplier, input2_shift)
    return add_sub_output(x1, x2, sign, output_multiplier, output_shift, output_offset,
                          act_min, act_max)


def add_block_input(q, offset, multiplier, shift, left_shift, merged_shift):
    """One input of the NEON ADD blocks (`add_block`) at the common scale: q + offset
    shifted by left_shift + shift before vqrdmulhq (merged_shift=1), or by left_shift before
    and by shift after, flooring (merged_shift=0). In int32 lanes: the shifted value is below
    255 * 2**20 < 2**28."""
    shifted = shift_left_or_floor_right_int32(offset_int32(q, offset),
                                              left_shift + merged_shift * shift)
    return shift_left_or_floor_right_int32(doubling_high_mul_int32(shifted, multiplier),
                                           (1 - merged_shift) * shift)


def add_block_output(x1, x2, output_multiplier, output_shift, output_offset, act_min, act_max,
                     qmin, qmax):
    """The second half of the NEON ADD blocks: the inputs at the common scale
    (`add_block_input`) added, vqrdmulhq + RoundingDivideByPOT to the output scale,
    vmovn_s32 (wraps to int16), + output_offset in int16, saturation to [qmin, qmax]
    (vqmovn_s16 / vqmovun_s16), clamp to the activation range. In int32 lanes:
    |x1 + x2| < 2**28 (as for add_sub_output), so the int32 sum of the C code never wraps."""
    raw = doubling_high_mul_rounded_int32(np.add(x1, x2), output_multiplier, -output_shift, 0)
    offset = np.add(wrap_int16_int32(raw), np.int32(output_offset))
    narrowed = clamp_int32(wrap_int16_int32(offset), qmin, qmax)
    return clamp_int32(narrowed, act_min, act_max)


def add_block_output_in_int16(x1, x2, output_multiplier, output_shift, output_offset, act_min,
                              act_max):
    """`add_block_output` where Prepare's constants keep the rescaled sum, and it plus the
    output offset, within int16 for every input pair (`quant_parts.binary_parts` checks the
    extremes): vmovn_s32 and the int16 add then never wrap, and the saturation to
    [qmin, qmax] lies outside the activation range, so the offset goes in with the rounding
    and one clamp remains."""
    return clamp_int32(doubling_high_mul_rounded_int32(np.add(x1, x2), output_multiplier,
                                                       -output_shift, output_offset),
                       act_min, act_max)


def shifted_code_int32(q, shift):
    """q << shift as an int32: an ADD block input whose rescaling is a plain shift (the
    input of the larger scale, multiplier 2**30), with its offset added to the other
    input instead (`add_block_input_quadrupled`)."""
    return np.left_shift(np.int32(q), np.int32(shift))


def add_block_input_quadrupled(q, offset, multiplier, shift, left_shift, merged_shift,
                               addend):
    """4 * `add_block_input` + addend: the other input of `add_block_output_quadrupled`
    when one input is `shifted_code_int32`, which leaves its offset, times 4, in addend.
    Computed once per channel for a per-channel input, so the per-element work shrinks to
    one shift. In int32 lanes: 4 * 255 * 2**20 + |addend| < 2**31 (addend < 2**30)."""
    rescaled = add_block_input(q, offset, multiplier, shift, left_shift, merged_shift)
    return np.add(np.left_shift(rescaled, _I32_2), np.int32(addend))


def code_times_128_int16(q):
    """q * 128 as an int16: the per-element input of `add_block_output_int16_lanes`."""
    return np.left_shift(np.int16(q), np.int16(7))


def add_block_output_int16_lanes(x1, x2, multiplier, shift, act_min, act_max):
    """An int8 ADD block's output as floor((x1 + c) * multiplier / 2**(16 + shift)) + d,
    clamped, in int16 lanes (32 a vector instead of the int32 helpers' 16, the product's
    high half one VPMULHW): x1 = `code_times_128_int16` of one input, x2 = d << 16 | c
    (c an int16) the other input's pair, looked up from a table per code that
    `quant_parts.binary_parts` built and checked equal to the int32 helpers on all input pairs.
    No overflow: that check keeps |x1 + c| < 2**15."""
    start = np.int16(np.add(x1, np.int16(x2)))
    high = np.int16(np.right_shift(np.multiply(np.int32(start), np.int32(multiplier)),
                                   np.int32(16 + shift)))
    total = np.int16(np.add(high, np.int16(np.right_shift(x2, np.int32(16)))))
    return np.minimum(np.maximum(total, np.int16(act_min)), np.int16(act_max))


def add_block_output_int16_lanes_table_first(x1, x2, multiplier, shift, act_min, act_max):
    """`add_block_output_int16_lanes` where the first input is the one looked up."""
    return add_block_output_int16_lanes(x2, x1, multiplier, shift, act_min, act_max)


def add_block_output_quadrupled(x1, x2, output_multiplier, output_shift, output_offset,
                                act_min, act_max, ties_reached):
    """`add_block_output_in_int16` of inputs given times 4 (`shifted_code_int32` <<
    2 and `add_block_input_quadrupled`), whose sum is 4 * (the NEON blocks' sum): the high
    multiply takes it as it is. ties_reached as in `quadrupled_high_mul_rounded_int32`."""
    return clamp_int32(quadrupled_high_mul_rounded_int32(np.add(x1, x2), output_multiplier,
                                                         -output_shift, output_offset,
                                                         ties_reached),
                       act_min, act_max)


def add_block(a, b, input1_offset, input1_multiplier, input1_shift, input2_offset,
              input2_multiplier, input2_shift, left_shift, output_multiplier, output_shift,
              output_offset, act_min, act_max, merged_shift, qmin, qmax):
    """The NEON blocks of LiteRT's quantized ADD. merged_shift=1: int8 AddElementwiseInt8
    (optimized/integer_ops/add.h), which shifts by left_shift + input_shift before vqrdmulhq
    (one rounding); merged_shift=0: int8 AddScalarBroadcast and the uint8 AddElementwise /
    AddScalarBroadcast (optimized_ops.h), which shift by left_shift, vqrdmulhq, then shift by
    input_shift without rounding (floor). Then `add_block_output`."""
    x1 = add_block_input(a, input1_offset, input1_multiplier, input1_shift, left_shift,
                         merged_shift)
    x2 = add_block_input(b, input2_offset, input2_multiplier, input2_shift, left_shift,
                         merged_shift)
    return add_block_output(x1, x2, output_multiplier, output_shift, output_offset, act_min,
                            act_max, qmin, qmax)


def squared_difference_output(x1, x2, output_multiplier, output_shift, output_offset, act_min,
                              act_max):
    """The second half of SQUARED_DIFFERENCE: the difference of the rescaled inputs
    (`rescale_input_int32`, left_shift 7) squared (int32), rescaled to the output, offset,
    clamped. In int32 lanes: |x1|, |x2| <= 255 * 2**6 + 1, so the square is below 2**30
    (hence the wide doubling high mul: 4 * square may not fit)."""
    diff = np.subtract(x1, x2)
    raw = rounding_divide_by_pot_int32(
        doubling_high_mul_int32_wide(np.multiply(diff, diff), output_multiplier), -output_shift)
    return clamp_int32(np.add(raw, np.int32(output_offset)), act_min, act_max)


def squared_difference_reference(a, b, input1_offset, input1_multiplier, input1_shift,
                                 input2_offset, input2_multiplier, input2_shift, left_shift,
                                 output_multiplier, output_shift, output_offset, act_min,
                                 act_max):
    """squared_difference.cc SquaredDifference(int8, int8, params): inputs rescaled to a
    2**-7 scale, then `squared_difference_output`."""
    x1 = rescale_input_int32(a, input1_offset, left_shift, input1_multiplier, input1_shift)
    x2 = rescale_input_int32(b, input2_offset, left_shift, input2_multiplier, input2_shift)
    return squared_difference_output(x1, x2, output_multiplier, output_shift, output_offset,
                                     act_min, act_max)


# ----------------------------------------------------------------------------------- MUL

def mul_rescale_int32(a, b, input1_offset, input2_offset, output_multiplier, output_shift):
    """MultiplyByQuantizedMultiplier((a + off1) * (b + off2), multiplier, shift), double
    rounding, in int32: |product| <= 255**2 < 2**16 and Prepare-time checks keep
    product << max(shift, 0) in int32 (quant_unsupported), below 2**29 up to a shift of 13
    (the narrow doubling high mul); a right shift happens only when the left one is 0."""
    left = output_shift * (output_shift > 0)
    right = -output_shift * (output_shift < 0)
    product = np.multiply(offset_int32(a, input1_offset), offset_int32(b, input2_offset))
    shifted = np.left_shift(product, np.int32(left))
    high = select(left <= 13, doubling_high_mul_int32(shifted, output_multiplier),
                  doubling_high_mul_int32_wide(shifted, output_multiplier))
    return rounding_divide_by_pot_int32(high, right)


def mul_reference(a, b, input1_offset, input2_offset, output_multiplier, output_shift,
                  output_offset, act_min, act_max):
    """reference_integer_ops::MulElementwise and the scalar loops of the optimized MUL:
    output_offset + MultiplyByQuantizedMultiplier((a + off1) * (b + off2)), clamped.
    In int32 lanes: the rescaled product is below 255**2 * 2**15 < 2**31 - 255, so adding
    the offset does not wrap."""
    raw = mul_rescale_int32(a, b, input1_offset, input2_offset, output_multiplier,
                            output_shift)
    return clamp_int32(np.add(raw, np.int32(output_offset)), act_min, act_max)


def mul_block(a, b, input1_offset, input2_offset, output_multiplier, output_shift,
              output_offset, act_min, act_max, saturate16, qmin, qmax):
    """The NEON blocks of LiteRT's quantized MUL (optimized/integer_ops/mul.h,
    optimized_ops.h): the product shifted by max(shift, 0) (vshlq), vqrdmulhq,
    RoundingDivideByPOT by max(-shift, 0), narrowed to int16 (saturate16=1: vqmovn_s32;
    0: vmovn_s32, wrapping, in uint8 MulSimpleBroadcast), + output_offset in int16,
    saturated to [qmin, qmax], clamped to the activation range. int32 lanes as
    mul_reference."""
    p = mul_rescale_int32(a, b, input1_offset, input2_offset, output_multiplier, output_shift)
    p16 = select(saturate16 == 1, clamp_int32(p, -32768, 32767), wrap_int16_int32(p))
    offset = np.add(p16, np.int32(output_offset))
    narrowed = clamp_int32(wrap_int16_int32(offset), qmin, qmax)
    return clamp_int32(narrowed, act_min, act_max)


# --------------------------------------------------------------------------------- PRELU

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
