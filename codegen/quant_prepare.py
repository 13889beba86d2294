"""Prepare-time math of LiteRT 2.3's int8/uint8 builtin kernels: the integer constants (and
lookup tables) each kernel's Prepare computes, in the precision LiteRT computes them.

Each function reproduces a named TFLite function: `quantize_multiplier` (QuantizeMultiplier),
`activation_range_quantized` (CalculateActivationRangeQuantized), `lut_populate`
(LUTPopulate) and per op a `prepare_<op>`. The results feed the codegen.fixedpoint helpers
(`args`, in the order they take them) and the tables of quant_reference.
"""
from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import Callable

import numpy as np

from . import fixedpoint as fp
from .libm import erfcf, expf, expm1f, logf, tanhf
from .qparams import QParams, QuantError, float_warnings_off, same_dtype

_f32 = np.float32


# ---------------------------------------------------------- multipliers, activation ranges

def _round_half_away(x: float) -> float:
    """TfLiteRound (std::round) on a double."""
    return math.copysign(math.floor(abs(x) + 0.5), x) if abs(x) < 2.0 ** 52 else x


def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier (quantization_util.cc, TFLITE_SINGLE_ROUNDING unset): frexp, then
    round(q * 2**31); 2**31 becomes 2**30 with shift + 1; a shift below -31 flushes to
    (0, 0). Negative reals give negative multipliers."""
    if real == 0.0:
        return 0, 0
    if not math.isfinite(real):
        raise QuantError(f"multiplier {real} is not finite")
    q, shift = math.frexp(real)
    q_fixed = int(_round_half_away(q * 2.0 ** 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multipliers(reals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_multiplier of each of `reals` (float64), as int64 multipliers and shifts: the
    same double arithmetic at once, for a convolution's hundreds of channels."""
    if not np.isfinite(reals).all():
        raise QuantError(f"multipliers {reals[~np.isfinite(reals)][:3]} are not finite")
    q, shift = np.frexp(reals)
    fixed = np.copysign(np.floor(np.abs(q * 2.0 ** 31) + 0.5), q).astype(np.int64)
    top = fixed == 1 << 31
    fixed, shift = np.where(top, fixed // 2, fixed), shift.astype(np.int64) + top
    flushed = shift < -31
    return np.where(flushed, 0, fixed), np.where(flushed, 0, shift)


def quantize_multiplier_smaller_than_one_exp(real: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: TFLITE_CHECKs 0 < real < 1 and shift <= 0 (a
    failed check aborts the process: QuantError here)."""
    if not 0.0 < real < 1.0:
        raise QuantError(f"multiplier {real:.6g} outside (0, 1): LiteRT aborts (TFLITE_CHECK)")
    multiplier, shift = quantize_multiplier(real)
    if shift > 0:
        raise QuantError(f"multiplier {real!r} rounds to 1: LiteRT aborts (TFLITE_CHECK)")
    return multiplier, shift


def quantize_multiplier_greater_than_one(real: float) -> tuple[int, int]:
    """QuantizeMultiplierGreaterThanOne: TFLITE_CHECKs real > 1 and shift >= 0."""
    if not real > 1.0:
        raise QuantError(f"multiplier {real:.6g} not > 1: LiteRT aborts (TFLITE_CHECK)")
    return quantize_multiplier(real)


def _quantize_bound(scale: float, zero_point: int, value: float) -> int:
    """kernel_util.cc Quantize(): zero_point + static_cast<int32>(roundf(f / scale)),
    failing Prepare when the rounded float is outside [INT32_MIN, (float)INT32_MAX]."""
    with np.errstate(all="ignore"):
        tmp = fp.round_half_away(_f32(value) / _f32(scale))
    if not (-2.0 ** 31 <= float(tmp) <= 2.0 ** 31):
        raise QuantError(f"activation bound {value} / scale {scale:.6g} overflows int32: "
                         "Prepare fails")
    return int(fp.wrap_int32(int(fp.float_to_int32(np.float64(tmp))) + zero_point))


def activation_range_quantized(activation: int, output: QParams) -> tuple[int, int]:
    """CalculateActivationRangeQuantized (kernel_util.cc): RELU [zp, qmax], RELU6
    [zp, zp + round(6/s)], RELU_N1_TO_1 [zp - round(1/s), zp + round(1/s)], intersected with
    the type range; NONE, TANH, SIGN_BIT and SIGMOID give the whole type range."""
    qmin, qmax = output.qmin, output.qmax
    s, zp = output.scale, output.zero_point
    if activation == 1:
        return max(qmin, _quantize_bound(s, zp, 0.0)), qmax
    if activation == 3:
        return max(qmin, _quantize_bound(s, zp, 0.0)), min(qmax, _quantize_bound(s, zp, 6.0))
    if activation == 2:
        return max(qmin, _quantize_bound(s, zp, -1.0)), min(qmax, _quantize_bound(s, zp, 1.0))
    return qmin, qmax


# ------------------------------------------------------------------------- lookup tables

_ONE, _HALF = np.float32(1.0), np.float32(0.5)
_SQRT_2_OVER_PI = np.float32(1.1283791670955126 * 0.7071067811865476)  # M_2_SQRTPI*M_SQRT1_2
_MINUS_SQRT1_2 = np.float32(-0.7071067811865476)


def gelu_transform(x: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransform: 0.5f * x * erfcf(x * (float)-M_SQRT1_2)."""
    return (_HALF * x) * erfcf(x * _MINUS_SQRT1_2)


def gelu_transform_approximate(x: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransformApproximate:
    0.5f * x * (1.f + tanhf(kSqrt2dPi * (x + 0.044715f * x * x * x)))."""
    cube = ((np.float32(0.044715) * x) * x) * x
    return (_HALF * x) * (_ONE + tanhf(_SQRT_2_OVER_PI * (x + cube)))


def _lut_transform(op: str, output: QParams, params: dict) -> Callable[[np.ndarray], np.ndarray]:
    """The float lambda each kernel's Prepare passes to LUTPopulate."""
    if op == "TANH":
        return tanhf
    if op == "LOGISTIC":
        return lambda x: _ONE / (_ONE + expf(-x))
    if op == "ELU":
        return lambda x: np.where(x < 0, expm1f(x), x)
    if op == "EXP":
        return expf
    if op == "LOG":
        output_min = _f32(output.qmin - output.zero_point) * _f32(output.scale)
        return lambda x: np.where(x <= 0, output_min, logf(np.where(x <= 0, 1, x)))
    if op == "GELU":
        return gelu_transform_approximate if params.get("approximate") else gelu_transform
    raise KeyError(op)


@float_warnings_off
def lut_populate(transform: Callable[[np.ndarray], np.ndarray], input: QParams,
                 output: QParams) -> np.ndarray:
    """LUTPopulateInt8 (common.h), in float32 as LiteRT does it: dequantized = in_scale *
    (q - in_zp); quantized = (int32)(roundf(transform(dequantized) * (1 / out_scale)) +
    out_zp), the sum in float, clamped. Indexed q - qmin. NaN and values beyond int32 (a
    tiny output scale, EXP overflowing) cast as observed in the wheel, see below."""
    with np.errstate(all="ignore"):
        inverse_scale = _ONE / _f32(output.scale)
        dequantized = _f32(input.scale) * (input.codes() - input.zero_point).astype(np.float32)
        transformed = np.asarray(transform(dequantized), np.float32)
        rescaled = fp.round_half_away(transformed * inverse_scale)
        summed = (rescaled + _f32(output.zero_point)).astype(np.float64)
    if output.dtype == "int8":
        quantized = _saturating_float_to_int32(summed)
    else:
        quantized = fp.float_to_int32(summed)
    return np.clip(quantized, output.qmin, output.qmax).astype(output.numpy_dtype)


def _saturating_float_to_int32(x: np.ndarray) -> np.ndarray:
    """The (int32_t) cast of LUTPopulateInt8<int8_t> as the wheel's compiled code behaves
    (observed; the C cast is undefined there): NaN -> 0, out-of-range values saturate. The
    uint8 instantiation behaves like cvttss2si (INT32_MIN), as fp.float_to_int32."""
    return np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), fp.INT32_MIN,
                                            fp.INT32_MAX)).astype(np.int64)


# ------------------------------------------------------------------------ prepared params

class _Prepared:
    """Prepare results, in the order the codegen.fixedpoint helper takes them after its
    operands (`args`)."""

    @property
    def args(self) -> tuple[int, ...]:
        return astuple(self)


@dataclass(frozen=True)
class ArithParams(_Prepared):
    """ADD / SUB / SQUARED_DIFFERENCE Prepare results (the ArithmeticParams Eval gets)."""
    input1_offset: int
    input1_multiplier: int
    input1_shift: int
    input2_offset: int
    input2_multiplier: int
    input2_shift: int
    left_shift: int
    output_multiplier: int
    output_shift: int
    output_offset: int
    act_min: int
    act_max: int


@dataclass(frozen=True)
class MulParams(_Prepared):
    """MUL Prepare results."""
    input1_offset: int
    input2_offset: int
    output_multiplier: int
    output_shift: int
    output_offset: int
    act_min: int
    act_max: int


@dataclass(frozen=True)
class PreluParams(_Prepared):
    """PRELU Prepare results (PreluOpData) and the offsets Eval adds."""
    input_offset: int
    alpha_offset: int
    output_multiplier_1: int
    output_shift_1: int
    output_multiplier_2: int
    output_shift_2: int
    output_offset: int
    qmin: int
    qmax: int


@dataclass(frozen=True)
class RequantizeParams(_Prepared):
    """QUANTIZE int8/uint8 -> int8/uint8 Prepare results."""
    input_zero_point: int
    multiplier: int
    shift: int
    output_zero_point: int
    qmin: int
    qmax: int


@dataclass(frozen=True)
class HardSwishParams:
    """HardSwishPrepare results (HardSwishParams)."""
    input_zero_point: int
    output_zero_point: int
    output_multiplier_fixedpoint_int16: int
    output_multiplier_exponent: int
    reluish_multiplier_fixedpoint_int16: int
    reluish_multiplier_exponent: int


def prepare_add(input1: QParams, input2: QParams, output: QParams, activation: int = 0,
                *, subtract: bool = False) -> ArithParams:
    """add.cc Prepare (and sub.cc PrepareGeneralSubOp with subtract=True): left_shift 20,
    twice_max = 2 * max(s1, s2) in float, input multipliers s_i / twice_max and output
    multiplier twice_max / (2**20 * s_out), each QuantizeMultiplierSmallerThanOneExp
    (SUB takes QuantizeMultiplierGreaterThanOne for an output multiplier > 1)."""
    same_dtype(input1, input2, output)
    if subtract:
        for t in (input1, input2, output):
            if not output.qmin <= t.zero_point <= output.qmax:
                raise QuantError(f"zero point {t.zero_point} outside {output.dtype}: "
                                 "Prepare fails")
    twice_max = float(np.float32(2) * max(_f32(input1.scale), _f32(input2.scale)))
    real1 = input1.scale / twice_max
    real2 = input2.scale / twice_max
    real_out = twice_max / float(np.float32(1 << 20) * _f32(output.scale))
    m1, s1 = quantize_multiplier_smaller_than_one_exp(real1)
    m2, s2 = quantize_multiplier_smaller_than_one_exp(real2)
    if subtract and real_out > 1:
        mo, so = quantize_multiplier_greater_than_one(real_out)
    else:
        mo, so = quantize_multiplier_smaller_than_one_exp(real_out)
    lo, hi = activation_range_quantized(activation, output)
    return ArithParams(-input1.zero_point, m1, s1, -input2.zero_point, m2, s2, 20, mo, so,
                       output.zero_point, lo, hi)


def prepare_squared_difference(input1: QParams, input2: QParams,
                               output: QParams) -> ArithParams:
    """squared_difference.cc Prepare (int8): zero points checked in range, left_shift 7,
    output multiplier twice_max**2 / (2**14 * s_out) (double), no activation."""
    if same_dtype(input1, input2, output) != "int8":
        raise QuantError("SQUARED_DIFFERENCE is int8 only")
    for t in (input1, input2, output):
        if not -128 <= t.zero_point <= 127:
            raise QuantError(f"zero point {t.zero_point} outside int8: Prepare fails")
    twice_max = float(np.float32(2) * max(_f32(input1.scale), _f32(input2.scale)))
    m1, s1 = quantize_multiplier_smaller_than_one_exp(input1.scale / twice_max)
    m2, s2 = quantize_multiplier_smaller_than_one_exp(input2.scale / twice_max)
    mo, so = quantize_multiplier_smaller_than_one_exp(
        twice_max * twice_max / float(np.float32(1 << 14) * _f32(output.scale)))
    return ArithParams(-input1.zero_point, m1, s1, -input2.zero_point, m2, s2, 7, mo, so,
                       output.zero_point, -128, 127)


def prepare_mul(input1: QParams, input2: QParams, output: QParams,
                activation: int = 0) -> MulParams:
    """mul.cc Prepare: QuantizeMultiplier(s1 * s2 / s_out), the product and quotient in
    float32; the quantized activation range."""
    same_dtype(input1, input2, output)
    lo, hi = activation_range_quantized(activation, output)
    real = float(_f32(_f32(input1.scale) * _f32(input2.scale)) / _f32(output.scale))
    m, s = quantize_multiplier(real)
    return MulParams(-input1.zero_point, -input2.zero_point, m, s, output.zero_point, lo, hi)


def prepare_prelu(input: QParams, alpha: QParams, output: QParams) -> PreluParams:
    """activations.cc PreluPrepare: multiplier 1 = s_in / s_out, multiplier 2 =
    s_in * s_alpha / s_out (float32 arithmetic), each QuantizeMultiplier."""
    same_dtype(input, alpha, output)
    m1, s1 = quantize_multiplier(float(_f32(input.scale) / _f32(output.scale)))
    m2, s2 = quantize_multiplier(float(_f32(_f32(input.scale) * _f32(alpha.scale))
                                       / _f32(output.scale)))
    return PreluParams(-input.zero_point, -alpha.zero_point, m1, s1, m2, s2,
                       output.zero_point, output.qmin, output.qmax)


def prepare_requantize(input: QParams, output: QParams) -> RequantizeParams:
    """quantize.cc Prepare for int8/uint8 input: QuantizeMultiplier(double(s_in) /
    double(s_out))."""
    m, s = quantize_multiplier(input.scale / output.scale)
    return RequantizeParams(input.zero_point, m, s, output.zero_point, output.qmin,
                            output.qmax)


def _downscale_int32_to_int16_multiplier(multiplier: int) -> int:
    """DownScaleInt32ToInt16Multiplier (common.h)."""
    if multiplier >= (1 << 31) - 1 - (1 << 15):
        return 32767
    return (multiplier + (1 << 15)) >> 16


@float_warnings_off
def prepare_hard_swish(input: QParams, output: QParams) -> HardSwishParams:
    """activations.cc HardSwishPrepare, in float32: hires_input_scale = s_in / 128; output
    multiplier hires / s_out and reluish multiplier hires / (3 / 32768), each
    QuantizeMultiplier then DownScaleInt32ToInt16Multiplier; the output exponent must be
    <= 0 (else Prepare fails)."""
    same_dtype(input, output)
    hires = _f32(np.float32(1.0 / 128.0) * _f32(input.scale))
    reluish_scale = _f32(np.float32(3.0) / np.float32(32768.0))
    mo, eo = quantize_multiplier(float(_f32(hires / _f32(output.scale))))
    if eo > 0:
        raise QuantError("HARD_SWISH output multiplier exponent > 0: Prepare fails")
    mr, er = quantize_multiplier(float(_f32(hires / reluish_scale)))
    return HardSwishParams(input.zero_point, output.zero_point,
                           _downscale_int32_to_int16_multiplier(mo), eo,
                           _downscale_int32_to_int16_multiplier(mr), er)


@float_warnings_off
def prepare_binary(op: str, input1: QParams, input2: QParams, output: QParams,
                   params: dict | None = None):
    """The Prepare results of a quantized binary op (None for MAXIMUM/MINIMUM, which
    compare raw values and ignore the quantization)."""
    activation = (params or {}).get("activation", 0)
    if op == "ADD":
        return prepare_add(input1, input2, output, activation)
    if op == "SUB":
        return prepare_add(input1, input2, output, activation, subtract=True)
    if op == "MUL":
        return prepare_mul(input1, input2, output, activation)
    if op == "SQUARED_DIFFERENCE":
        return prepare_squared_difference(input1, input2, output)
    if op == "PRELU":
        return prepare_prelu(input1, input2, output)
    if op in ("MAXIMUM", "MINIMUM"):
        same_dtype(input1, input2, output)
        return None
    raise KeyError(op)


# ------------------------------------------------------------------------------ unary ops

#: The real-valued range each quantized RELU clamps to (QuantizedReluX, in Eval).
RELU_BOUNDS = {"RELU": (0.0, math.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0),
                "RELU_0_TO_1": (0.0, 1.0)}


@dataclass(frozen=True)
class ReluParams:
    """ReluPrepare's multiplier and QuantizedReluX's bounds (RELU, RELU6, RELU_N1_TO_1,
    RELU_0_TO_1)."""
    input_zero_point: int
    multiplier: int
    shift: int
    output_zero_point: int
    act_min: int
    act_max: int


@float_warnings_off
def prepare_relu(op: str, input: QParams, output: QParams) -> ReluParams:
    """activations.cc ReluPrepare (multiplier s_in / s_out, the quotient in float32) and
    the bounds QuantizedReluX computes in Eval: max(qmin, zp + (int)roundf(lo / s_out)),
    min(qmax, zp + (int)roundf(hi / s_out)) (RELU: qmax), float32 arithmetic."""
    same_dtype(input, output)
    m, s = quantize_multiplier(float(_f32(input.scale) / _f32(output.scale)))
    low, high = RELU_BOUNDS[op]
    zp = output.zero_point

    def bound(value: float) -> int:
        r = fp.round_half_away(_f32(value) / _f32(output.scale))
        return int(fp.wrap_int32(int(fp.float_to_int32(np.float64(r))) + zp))

    lo = max(output.qmin, bound(low))
    hi = output.qmax if high == math.inf else min(output.qmax, bound(high))
    return ReluParams(input.zero_point, m, s, zp, lo, hi)


@dataclass(frozen=True)
class LeakyReluParams:
    """LeakyReluPrepare results."""
    alpha_multiplier: int
    alpha_shift: int
    identity_multiplier: int
    identity_shift: int


@float_warnings_off
def prepare_leaky_relu(input: QParams, output: QParams, alpha: float) -> LeakyReluParams:
    """activations.cc LeakyReluPrepare: QuantizeMultiplier(s_in * alpha / s_out) and
    QuantizeMultiplier(s_in / s_out), the products and quotients in float32."""
    same_dtype(input, output)
    ma, sa = quantize_multiplier(float(_f32(_f32(input.scale) * _f32(alpha))
                                       / _f32(output.scale)))
    mi, si = quantize_multiplier(float(_f32(input.scale) / _f32(output.scale)))
    return LeakyReluParams(ma, sa, mi, si)


@float_warnings_off
def prepare_rsqrt(input: QParams, output: QParams) -> tuple[int, int]:
    """elementwise.cc SetRsqrtOutputMultiplier: QuantizeMultiplier(1. / (sqrtf(s_in) *
    s_out)), the product in float32, the reciprocal in double."""
    denominator = float(np.sqrt(_f32(input.scale)) * _f32(output.scale))
    if denominator == 0.0:
        raise QuantError("RSQRT output multiplier 1 / (sqrt(s_in) * s_out) is infinite")
    return quantize_multiplier(1.0 / denominator)


@float_warnings_off
def prepare_abs(input: QParams, output: QParams) -> tuple[bool, int, int]:
    """elementwise.cc GenericPrepare for ABS: needs_rescale = s_in != s_out and, if so,
    QuantizeMultiplier(s_in / s_out) (float32 quotient): (needs_rescale, multiplier, shift)."""
    if input.scale == output.scale:
        return False, 0, 0
    return (True, *quantize_multiplier(float(_f32(input.scale) / _f32(output.scale))))


@float_warnings_off
def prepare_lut(op: str, input: QParams, output: QParams, params: dict | None = None
                ) -> np.ndarray:
    """The 256-entry table the Prepare of TANH, LOGISTIC, ELU, GELU, EXP and LOG builds
    (LUTPopulate with the kernel's float lambda), indexed q - qmin."""
    same_dtype(input, output)
    return lut_populate(_lut_transform(op, output, params or {}), input, output)
