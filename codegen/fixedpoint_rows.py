"""Per-row and per-element fixed-point helpers of LiteRT's int8/uint8 reductions (MEAN, SUM)
and row ops (SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION): from a row's exact sum (or largest code)
to its output codes, with the constants quant_rows computes.

Written in the style of codegen.fixedpoint (one implementation for numpy arrays and `@njit`
code), from its primitives.
"""
from __future__ import annotations

import numpy as np

from .fixedpoint import (float_to_int32, inv_sqrt_quantized_multiplier_exp,
                         multiply_by_quantized_multiplier,
                         multiply_by_quantized_multiplier_smaller_than_one, round_half_away,
                         saturate, wrap_int32)
from .libm import logf


# ---------------------------------------------------------------------------- reductions
# From the exact sum of a reduction's codes to its output code (codegen.quant_rows).

def mean_output(total, offset, multiplier, shift, output_zero_point, qmin, qmax):
    """reference_ops::QuantizedMeanOrSum's mean: MultiplyByQuantizedMultiplier(sum - zp_in * n)
    with the multiplier already divided by n (offset = zp_in * n), + zp_out, clamped."""
    return saturate(multiply_by_quantized_multiplier(total - offset, multiplier, shift)
                    + output_zero_point, qmin, qmax)


def hw_mean_output(total, multiplier, shift, bias, qmin, qmax):
    """optimized_integer_ops::Mean's scalar tail: MultiplyByQuantizedMultiplier(sum) + bias,
    clamped (the zero points are in the bias; its vector blocks round alike where claimed)."""
    return saturate(multiply_by_quantized_multiplier(total, multiplier, shift) + bias, qmin, qmax)


def sum_output(total, scale, bias, output_zero_point, qmin, qmax):
    """optimized_ops::QuantizedMeanOrSum's sum: std::round(float(sum) * scale + bias) in
    float32, cast to int32, + zp_out, clamped."""
    v = np.float32(total) * np.float32(scale) + np.float32(bias)
    return saturate(float_to_int32(round_half_away(v)) + output_zero_point, qmin, qmax)


# ---------------------------------------------------------------------------- softmax
# optimized_ops::Softmax<In, Out> (int8 -> int8, uint8 -> uint8): after the row's exps from its
# table, one float32 inverse per row and one rounding per element (codegen.quant_rows).

def softmax_inverse(total, output_scale):
    """1.0f / (sum_exp * params.scale), in float32."""
    return np.float32(1.0) / (np.float32(total) * np.float32(output_scale))


def softmax_output(e, inverse, zero_point, qmin, qmax):
    """QuantizeSoftmaxOutput<int8_t>: (int32_t)std::round(e * inverse) + zero_point, clamped."""
    v = round_half_away(np.float32(e) * np.float32(inverse))
    return saturate(wrap_int32(float_to_int32(v) + zero_point), qmin, qmax)


def softmax_output_uint8(e, inverse, qmin, qmax):
    """QuantizeSoftmaxOutput<uint8_t> on x86: (int32_t)(e * inverse + 0.5f), no zero point,
    clamped."""
    return saturate(float_to_int32(np.float32(e) * np.float32(inverse) + np.float32(0.5)),
                    qmin, qmax)


def log_softmax_offset(total, largest, input_scale, output_scale):
    """optimized_ops::LogSoftmax's `precomputed`: (S_in * max + std::log(sum_exp)) / S_out in
    float32, with glibc's logf (numpy's log differs in the last bit)."""
    return ((np.float32(input_scale) * np.float32(largest) + logf(np.float32(total)))
            / np.float32(output_scale))


def log_softmax_output(q, offset, scale, zero_point, qmin, qmax):
    """optimized_ops::LogSoftmax's output: std::rint(scale * q - offset) + zero_point (ties to
    even), clamped; scale = S_in / S_out in float32."""
    v = np.rint(np.float32(scale) * np.float32(q) - np.float32(offset))
    return saturate(float_to_int32(v) + zero_point, qmin, qmax)


# ---------------------------------------------------------------------------- L2 normalization
# int8: reference_integer_ops::L2Normalization; uint8: optimized_ops::L2Normalization<uint8_t>.
# Per row, the exact sum of (q - zp)**2 and its GetInvSqrtQuantizedMultiplierExp; per element,
# the code rescaled by it to the output's fixed 1/128 scale.

def centred_square(q, zero_point):
    """(q - zp)**2, the terms of a row's squared L2 norm (exact in int32 for 8-bit codes)."""
    return (q - zero_point) * (q - zero_point)


def inv_sqrt_multiplier(total):
    """The multiplier of inv_sqrt_quantized_multiplier_exp(total), once per row."""
    return inv_sqrt_quantized_multiplier_exp(total)[0]


def inv_sqrt_shift(total):
    """The shift of inv_sqrt_quantized_multiplier_exp(total), once per row."""
    return inv_sqrt_quantized_multiplier_exp(total)[1]


def l2_norm_output(q, multiplier, shift, zero_point):
    """int8: MultiplyByQuantizedMultiplier(q - zp, multiplier, shift + 7), clamped to int8."""
    return saturate(multiply_by_quantized_multiplier(q - zero_point, multiplier, shift + 7),
                    -128, 127)


def l2_norm_output_uint8(q, multiplier, shift, zero_point):
    """uint8: 128 + MultiplyByQuantizedMultiplierSmallerThanOneExp(128 * (q - zp), multiplier,
    shift), clamped to uint8."""
    return saturate(128 + multiply_by_quantized_multiplier_smaller_than_one(
        128 * (q - zero_point), multiplier, shift), 0, 255)
