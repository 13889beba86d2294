"""int8/uint8 elementwise ops exactly as LiteRT 2.3's builtin kernels compute them.

Three layers, each reproducing a named TFLite function (docs/quantized_semantics.md has the
formulas, the source references and what is refused):

- Prepare-time math: `quantize_multiplier` (QuantizeMultiplier), the activation range
  (CalculateActivationRangeQuantized), and per op a `prepare_<op>` returning the integer
  constants the kernel's Prepare computes (or the lookup table it builds, `lut_populate`).
- Per element: the integer formulas live in `codegen.fixedpoint` (one implementation that
  runs on numpy arrays and inside `@njit` code); `binary` / `unary_table` run them here on
  numpy arrays, `binary_call` / `unary_call` name them, with their constant arguments, for
  generated kernels (`binary_parts`: ADD, SUB and SQUARED_DIFFERENCE as three calls, each
  input rescaled apart).
- `quant_unsupported`: None when the kernel reproduces the builtin exactly, else why not.

LiteRT's x86 build runs its NEON code through NEON_2_SSE, so several kernels compute vector
blocks ("block" paths) and the remaining elements ("reference" path) with different
roundings: QUANTIZE, DEQUANTIZE, requantizing QUANTIZE, ADD and MUL. `binary_paths` and
`UnaryLookup` say which element takes which path; a kernel that cannot follow that
(`position_aware=False`) is refused the parameters for which the paths disagree.
"""
from __future__ import annotations

import functools
import math
from dataclasses import astuple, dataclass
from typing import Callable, Sequence

import numpy as np
from numba import njit, types

from . import fixedpoint as fp

DTYPE_RANGES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
NUMPY_DTYPES: dict[str, type] = {"int8": np.int8, "uint8": np.uint8}

# TfLiteFusedActivation (builtin_op_data.h).
ACTIVATION_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
                    5: "SIGN_BIT", 6: "SIGMOID"}

INT32_RANGE = (fp.INT32_MIN, fp.INT32_MAX)

# LiteRT's paths through a kernel (binary_paths, UnaryLookup): its scalar loops and reference
# kernels; the NEON blocks of an elementwise kernel; those of a scalar-broadcast kernel.
REFERENCE, ELEMENTWISE_BLOCK, SCALAR_BLOCK = 0, 1, 2
PATH_NAMES = ("reference", "elementwise_block", "scalar_block")


class QuantError(ValueError):
    """The builtin kernel's Prepare fails for these parameters (or LiteRT aborts on a
    TFLITE_CHECK): there is no result to reproduce."""


@dataclass(frozen=True)
class QParams:
    """Per-tensor affine quantization: real = scale * (q - zero_point); scale is float32."""
    scale: float
    zero_point: int
    dtype: str = "int8"

    def __post_init__(self):
        if self.dtype not in DTYPE_RANGES:
            raise ValueError(f"dtype {self.dtype!r} is not int8 or uint8")
        object.__setattr__(self, "scale", float(np.float32(self.scale)))
        object.__setattr__(self, "zero_point", int(self.zero_point))

    @property
    def qmin(self) -> int:
        return DTYPE_RANGES[self.dtype][0]

    @property
    def qmax(self) -> int:
        return DTYPE_RANGES[self.dtype][1]

    @property
    def numpy_dtype(self) -> type:
        return NUMPY_DTYPES[self.dtype]

    def codes(self) -> np.ndarray:
        """All 256 values of the dtype, in table order (q - qmin), as int64."""
        return np.arange(self.qmin, self.qmax + 1, dtype=np.int64)


@dataclass(frozen=True)
class ChannelQParams:
    """Per-channel affine quantization along `axis` (only QUANTIZE's output and DEQUANTIZE's
    input accept it; every other kernel reads the legacy per-tensor params, which are 0)."""
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int
    dtype: str = "int8"


Quant = QParams | ChannelQParams | None


# ---------------------------------------------------------------------- Prepare-time math

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


def _f32(x) -> np.float32:
    return np.float32(x)


def _quiet(function):
    """Run with numpy's float warnings off: overflow to inf and NaN are part of what the
    kernels compute (and what quant_unsupported refuses)."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return function(*args, **kwargs)
    return wrapper


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

_LIBM = ("tanhf", "expf", "expm1f", "logf", "erfcf")
_tanhf_c, _expf_c, _expm1f_c, _logf_c, _erfcf_c = (
    types.ExternalFunction(name, types.float32(types.float32)) for name in _LIBM)


@njit(cache=False)
def _libm_loop(code, x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        v = x[i]
        if code == 0:
            out[i] = _tanhf_c(v)
        elif code == 1:
            out[i] = _expf_c(v)
        elif code == 2:
            out[i] = _expm1f_c(v)
        elif code == 3:
            out[i] = _logf_c(v)
        else:
            out[i] = _erfcf_c(v)
    return out


def _libm_f32(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """A glibc float function over a float32 array. LiteRT's LUTs call glibc (tanhf, expf,
    expm1f, logf and erfcf are imported dynamically by the wheel); numpy's own SIMD versions
    differ in the last bit, so these are called as external C functions from numba."""
    code = _LIBM.index(name)
    return lambda x: _libm_loop(code, np.ascontiguousarray(x, np.float32))


_tanhf, _expf, _expm1f, _logf, _erfcf = (_libm_f32(n) for n in _LIBM)
_ONE, _HALF = np.float32(1.0), np.float32(0.5)
_SQRT_2_OVER_PI = np.float32(1.1283791670955126 * 0.7071067811865476)  # M_2_SQRTPI*M_SQRT1_2
_MINUS_SQRT1_2 = np.float32(-0.7071067811865476)


def gelu_transform(x: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransform: 0.5f * x * erfcf(x * (float)-M_SQRT1_2)."""
    return (_HALF * x) * _erfcf(x * _MINUS_SQRT1_2)


def gelu_transform_approximate(x: np.ndarray) -> np.ndarray:
    """reference_ops::GeluTransformApproximate:
    0.5f * x * (1.f + tanhf(kSqrt2dPi * (x + 0.044715f * x * x * x)))."""
    cube = ((np.float32(0.044715) * x) * x) * x
    return (_HALF * x) * (_ONE + _tanhf(_SQRT_2_OVER_PI * (x + cube)))


def _lut_transform(op: str, output: QParams, params: dict) -> Callable[[np.ndarray], np.ndarray]:
    """The float lambda each kernel's Prepare passes to LUTPopulate."""
    if op == "TANH":
        return _tanhf
    if op == "LOGISTIC":
        return lambda x: _ONE / (_ONE + _expf(-x))
    if op == "ELU":
        return lambda x: np.where(x < 0, _expm1f(x), x)
    if op == "EXP":
        return _expf
    if op == "LOG":
        output_min = _f32(output.qmin - output.zero_point) * _f32(output.scale)
        return lambda x: np.where(x <= 0, output_min, _logf(np.where(x <= 0, 1, x)))
    if op == "GELU":
        return gelu_transform_approximate if params.get("approximate") else gelu_transform
    raise KeyError(op)


@_quiet
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


def _same_type(*tensors: QParams) -> str:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise QuantError(f"mixed dtypes {sorted(dtypes)}")
    return dtypes.pop()


def prepare_add(input1: QParams, input2: QParams, output: QParams, activation: int = 0,
                *, subtract: bool = False) -> ArithParams:
    """add.cc Prepare (and sub.cc PrepareGeneralSubOp with subtract=True): left_shift 20,
    twice_max = 2 * max(s1, s2) in float, input multipliers s_i / twice_max and output
    multiplier twice_max / (2**20 * s_out), each QuantizeMultiplierSmallerThanOneExp
    (SUB takes QuantizeMultiplierGreaterThanOne for an output multiplier > 1)."""
    _same_type(input1, input2, output)
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
    if _same_type(input1, input2, output) != "int8":
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
    _same_type(input1, input2, output)
    lo, hi = activation_range_quantized(activation, output)
    real = float(_f32(_f32(input1.scale) * _f32(input2.scale)) / _f32(output.scale))
    m, s = quantize_multiplier(real)
    return MulParams(-input1.zero_point, -input2.zero_point, m, s, output.zero_point, lo, hi)


def prepare_prelu(input: QParams, alpha: QParams, output: QParams) -> PreluParams:
    """activations.cc PreluPrepare: multiplier 1 = s_in / s_out, multiplier 2 =
    s_in * s_alpha / s_out (float32 arithmetic), each QuantizeMultiplier."""
    _same_type(input, alpha, output)
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


@_quiet
def prepare_hard_swish(input: QParams, output: QParams) -> HardSwishParams:
    """activations.cc HardSwishPrepare, in float32: hires_input_scale = s_in / 128; output
    multiplier hires / s_out and reluish multiplier hires / (3 / 32768), each
    QuantizeMultiplier then DownScaleInt32ToInt16Multiplier; the output exponent must be
    <= 0 (else Prepare fails)."""
    _same_type(input, output)
    hires = _f32(np.float32(1.0 / 128.0) * _f32(input.scale))
    reluish_scale = _f32(np.float32(3.0) / np.float32(32768.0))
    mo, eo = quantize_multiplier(float(_f32(hires / _f32(output.scale))))
    if eo > 0:
        raise QuantError("HARD_SWISH output multiplier exponent > 0: Prepare fails")
    mr, er = quantize_multiplier(float(_f32(hires / reluish_scale)))
    return HardSwishParams(input.zero_point, output.zero_point,
                           _downscale_int32_to_int16_multiplier(mo), eo,
                           _downscale_int32_to_int16_multiplier(mr), er)


# ---------------------------------------------------------------- binary ops, per element

BINARY_OPS = ("ADD", "SUB", "MUL", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "PRELU")

# NEON block length of (op, dtype, path) in LiteRT's optimized kernels on x86.
_BLOCKS = {("ADD", "int8", ELEMENTWISE_BLOCK): 16, ("ADD", "int8", SCALAR_BLOCK): 8,
           ("ADD", "uint8", ELEMENTWISE_BLOCK): 8, ("ADD", "uint8", SCALAR_BLOCK): 8,
           ("MUL", "int8", ELEMENTWISE_BLOCK): 16, ("MUL", "int8", SCALAR_BLOCK): 16,
           ("MUL", "uint8", ELEMENTWISE_BLOCK): 8, ("MUL", "uint8", SCALAR_BLOCK): 8}


@_quiet
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
        _same_type(input1, input2, output)
        return None
    raise KeyError(op)


def binary_call(op: str, prepared, dtype: str, path: int = REFERENCE) -> tuple[str, tuple]:
    """The codegen.fixedpoint helper that computes `op` on `path` and its constant
    arguments (after the two operands): `getattr(fixedpoint, name)(a, b, *args)`."""
    qmin, qmax = DTYPE_RANGES[dtype]
    if op in ("MAXIMUM", "MINIMUM"):
        return ("np.maximum" if op == "MAXIMUM" else "np.minimum"), ()
    if op == "PRELU":
        return "prelu_reference", prepared.args
    if op == "SQUARED_DIFFERENCE":
        return "squared_difference_reference", prepared.args
    if op == "SUB" or (op == "ADD" and path == REFERENCE):
        return "add_sub_reference", (-1 if op == "SUB" else 1, *prepared.args)
    if op == "ADD":
        merged = int(dtype == "int8" and path == ELEMENTWISE_BLOCK)
        return "add_block", (*prepared.args, merged, qmin, qmax)
    if op == "MUL" and path == REFERENCE:
        return "mul_reference", prepared.args
    if op == "MUL":
        saturate16 = int(not (dtype == "uint8" and path == SCALAR_BLOCK))
        return "mul_block", (*prepared.args, saturate16, qmin, qmax)
    raise KeyError(op)


Call = tuple[str, tuple]


def binary_parts(op: str, prepared, dtype: str, path: int = REFERENCE,
                 once: int | None = None) -> tuple[Call, Call, Call] | None:
    """`binary_call`'s helper as its three parts, each input rescaled on its own and the
    output from both (int32 values): (input 1's call, input 2's, the output's, which takes
    them in that order). A kernel then rescales an operand in the nest of its own shape:
    once per channel for a per-channel operand instead of once per element. None for an op
    that does not rescale its inputs apart (MUL, PRELU, MAXIMUM, MINIMUM). once: the input
    (0 or 1) a kernel rescales once per channel, if one is: an int8 ADD block may then look
    it up in a table (a ("LUT", (table,)) part: int32 values indexed by q - qmin)."""
    if op not in ("ADD", "SUB", "SQUARED_DIFFERENCE"):
        return None
    p = prepared
    if op == "ADD" and path != REFERENCE:
        merged = int(dtype == "int8" and path == ELEMENTWISE_BLOCK)
        inputs = (("add_block_input", (p.input1_offset, p.input1_multiplier, p.input1_shift,
                                       p.left_shift, merged)),
                  ("add_block_input", (p.input2_offset, p.input2_multiplier, p.input2_shift,
                                       p.left_shift, merged)))
        if _add_block_stays_in_int16(p, dtype, inputs):
            output = ("add_block_output_in_int16", (p.output_multiplier, p.output_shift,
                                                    p.output_offset, p.act_min, p.act_max))
            whole = (*inputs, output)
            expected = _on_all_pairs(whole, dtype)
            return ((once is not None and _add_block_int16_lanes(output, dtype, once, expected))
                    or _add_block_quadrupled(inputs, output, dtype, expected) or whole)
        return (*inputs, ("add_block_output", (p.output_multiplier, p.output_shift,
                                               p.output_offset, p.act_min, p.act_max,
                                               *DTYPE_RANGES[dtype])))
    inputs = (("rescale_input_int32", (p.input1_offset, p.left_shift, p.input1_multiplier,
                                       p.input1_shift)),
              ("rescale_input_int32", (p.input2_offset, p.left_shift, p.input2_multiplier,
                                       p.input2_shift)))
    output = (p.output_multiplier, p.output_shift, p.output_offset, p.act_min, p.act_max)
    if op == "SQUARED_DIFFERENCE":
        return (*inputs, ("squared_difference_output", output))
    return (*inputs, ("add_sub_output", (-1 if op == "SUB" else 1, *output)))


def _add_block_quadrupled(inputs: tuple, output: Call, dtype: str,
                          expected: np.ndarray) -> tuple | None:
    """The int16 ADD blocks with one input a plain shift (`_plain_shift`: the larger scale's
    input, multiplier 2**30) as `shifted_code_int32`, its offset and the 4 of the output's
    high multiply folded into the other input (`add_block_input_quadrupled`): a per-channel
    operand then carries them, once per channel, and each element costs one shift instead of
    six operations. The tie correction of the rounding is dropped where no input pair meets
    it. Checked against the three calls it replaces over all input pairs (`expected`, theirs);
    None if no input is a plain shift."""
    shifts = [_plain_shift(args, dtype) for _, args in inputs]
    if shifts[0] is None and shifts[1] is None:
        return None
    plain = 0 if shifts[0] is not None else 1
    offset, shift = inputs[plain][1][0], shifts[plain]
    parts = [None, None]
    parts[plain] = ("shifted_code_int32", (shift + 2,))
    parts[1 - plain] = ("add_block_input_quadrupled",
                        (*inputs[1 - plain][1], 4 * (offset << shift)))
    for ties_reached in (False, True):
        candidate = (*parts, ("add_block_output_quadrupled", (*output[1], ties_reached)))
        if np.array_equal(_on_all_pairs(candidate, dtype), expected):
            return candidate
    return None


def _add_block_int16_lanes(output: Call, dtype: str, once: int,
                           expected: np.ndarray) -> tuple | None:
    """The int8 ADD blocks in int16 lanes (`add_block_output_int16_lanes`): input `once`
    (rescaled once per channel) as a table of its pair (c, d) per code, the other as
    `code_times_128_int16`. The multiplier comes from the output's slope in the other
    input's code; each code's (c, d) from the intervals the exact outputs leave it
    (`_pair_per_code`). `expected`: the int32 parts' outputs on all input pairs, which the
    result equals. None if no multiplier fits every input pair."""
    if dtype != "int8":
        return None
    exact = (expected.T if once == 0 else expected).astype(np.int64)  # [q, tabled code]
    act_min, act_max = output[1][3], output[1][4]
    slope = _slope_per_code(exact, act_min, act_max)
    if slope is None:
        return None
    for shift in range(7):
        middle = round(slope * 2 ** (9 + shift))
        for multiplier in sorted(range(middle - 2, middle + 3), key=lambda m: abs(m - middle)):
            if not 0 < multiplier < 2 ** 15:
                continue
            table = _pair_per_code(exact, multiplier, 16 + shift, act_min, act_max)
            if table is not None:
                inputs = [("code_times_128_int16", ()), ("LUT", (tuple(table.tolist()),))]
                output = ("add_block_output_int16_lanes" + ("_table_first" if once == 0 else ""),
                          (multiplier, shift, act_min, act_max))
                candidate = (*(inputs[::-1] if once == 0 else inputs), output)
                if np.array_equal(_on_all_pairs(candidate, dtype), expected):
                    return candidate
    return None


def _slope_per_code(exact: np.ndarray, act_min: int, act_max: int) -> float | None:
    """The outputs' rise per code q (exact's first axis), over the codes no clamp reaches."""
    column = exact[:, exact.shape[1] // 2]
    inside = np.flatnonzero((column > act_min) & (column < act_max))
    if len(inside) < 2:
        return None
    return (column[inside[-1]] - column[inside[0]]) / (inside[-1] - inside[0])


def _pair_per_code(exact: np.ndarray, multiplier: int, shift: int, act_min: int,
                   act_max: int) -> np.ndarray | None:
    """Per code of the tabled input, d << 16 | c (c as uint16) with
    clamp(floor((128 q + c) * multiplier / 2**shift) + d) = exact[q + 128] for every code q
    of the other input and 128 q + c within int16; None if a code has none. For each d
    near the output at q = 0, each q bounds c from both sides (only from one at a clamp)."""
    x = (np.arange(-128, 128, dtype=np.int64) * 128)[:, None]
    lowest, highest = -2 ** 15 + 128 * 128, 2 ** 15 - 1 - 127 * 128
    table = np.full(exact.shape[1], -1, np.int64)
    found = np.zeros(exact.shape[1], bool)
    for step in range(-3, 4):
        d = exact[128] + step
        low = -(-((exact - d) << shift) // multiplier) - x         # ceil
        high = -(-((exact - d + 1) << shift) // multiplier) - x - 1
        low = np.where(exact == act_min, lowest, low).max(0).clip(lowest)
        high = np.where(exact == act_max, highest, high).min(0).clip(None, highest)
        fits = (low <= high) & ~found
        table[fits] = (d[fits] << 16) | (low[fits] & 0xFFFF)
        found |= fits
    return table if found.all() else None


def _on_all_pairs(parts: tuple, dtype: str) -> np.ndarray:
    """The three calls of `binary_parts` composed, on every pair of codes of `dtype`."""
    (name1, args1), (name2, args2), (name, args) = parts
    a, b = np.meshgrid(*[np.arange(*_code_range(dtype), dtype=np.int32)] * 2, indexing="ij")
    return call(name, _part(name1, a, args1, dtype), _part(name2, b, args2, dtype), *args)


def _part(name: str, codes: np.ndarray, args: tuple, dtype: str) -> np.ndarray:
    """One input's part of `binary_parts` on codes: its call, or its table's entries."""
    if name == "LUT":
        return np.array(args[0], np.int32)[codes - DTYPE_RANGES[dtype][0]]
    return call(name, codes, *args)


def _plain_shift(args: tuple, dtype: str) -> int | None:
    """k where `add_block_input` with these arguments is (q + offset) << k for every code q,
    else None. k <= 20 keeps `shifted_code_int32`'s q << (k + 2) within int32 (|q| <= 255)."""
    codes = np.arange(*_code_range(dtype), dtype=np.int64)
    rescaled = fp.add_block_input(codes, *args)
    offset = codes + args[0]
    return next((k for k in range(21) if np.array_equal(rescaled, offset << k)), None)


def _code_range(dtype: str) -> tuple[int, int]:
    """The codes of `dtype` as np.arange's (start, stop)."""
    low, high = DTYPE_RANGES[dtype]
    return low, high + 1


def _add_block_stays_in_int16(p: ArithParams, dtype: str, inputs: tuple) -> bool:
    """Whether the NEON ADD blocks' rescaled sum, and it plus the output offset, lie within
    int16 for every input pair. Each input's rescaling and the output's are non-decreasing
    (multipliers >= 0), so the pairs (qmin, qmin) and (qmax, qmax) bound them."""
    extremes = np.array(DTYPE_RANGES[dtype], np.int64)
    (_, args1), (_, args2) = inputs
    total = fp.add_block_input(extremes, *args1) + fp.add_block_input(extremes, *args2)
    raw = fp.doubling_high_mul_rounded_int32(total.astype(np.int32), p.output_multiplier,
                                             -p.output_shift, 0).astype(np.int64)
    low, high = -(1 << 15), (1 << 15) - 1
    return bool(np.all((low <= raw) & (raw <= high) & (low <= raw + p.output_offset)
                       & (raw + p.output_offset <= high)))


def call(name: str, *args):
    """The codegen.fixedpoint helper `name` (or np.maximum / np.minimum) on numpy operands:
    what a QCALL of that name computes per element."""
    function = {"np.maximum": np.maximum, "np.minimum": np.minimum}.get(name)
    with np.errstate(all="ignore"):
        return (function or getattr(fp, name))(*args)


def binary(op: str, a: np.ndarray, b: np.ndarray, prepared, dtype: str,
           path: int = REFERENCE) -> np.ndarray:
    """`op` on int8/uint8 operands (broadcast by numpy) as LiteRT computes it on `path`;
    returns the output values (of `dtype`)."""
    name, args = binary_call(op, prepared, dtype, path)
    a = np.asarray(a).astype(np.int64)
    b = np.asarray(b).astype(np.int64)
    out = call(name, a, b, *args)
    return np.asarray(out).astype(NUMPY_DTYPES[dtype])


def binary_scalar_table(op: str, input1: QParams, input2: QParams, output: QParams,
                        scalar: int, scalar_index: int, params: dict | None = None,
                        path: int = REFERENCE) -> np.ndarray:
    """The 256-entry table of `op` with operand `scalar_index` (0 or 1) fixed to the code
    `scalar`: indexed by the other operand's q - qmin, values of the output dtype."""
    prepared = prepare_binary(op, input1, input2, output, params)
    other = (input2 if scalar_index == 0 else input1).codes()
    fixed = np.full_like(other, scalar)
    a, b = (fixed, other) if scalar_index == 0 else (other, fixed)
    return binary(op, a, b, prepared, output.dtype, path)


def _broadcast_params(shape1: Sequence[int], shape2: Sequence[int]) -> tuple[str, tuple]:
    """reference_ops::ProcessBroadcastShapes: ('none' | 'generic' | 'fivefold', y0..y4)."""
    rank = max(len(shape1), len(shape2))
    s0 = (1,) * (rank - len(shape1)) + tuple(shape1)
    s1 = (1,) * (rank - len(shape2)) + tuple(shape2)
    if s0 == s1:
        return "none", ()
    category = None
    for i in range(rank - 1, -1, -1):
        if s0[i] == s1[i]:
            continue
        if s0[i] == 1:
            category = "first"
        elif s1[i] == 1:
            category = "second"
        else:
            return "generic", ()
        break
    a, b = (s1, s0) if category == "second" else (s0, s1)
    y = [1, 1, 1, 1, 1]
    i = rank - 1
    for slot, test in ((4, lambda i: a[i] == b[i]), (3, lambda i: a[i] == 1),
                       (2, lambda i: a[i] == b[i]), (1, lambda i: b[i] == 1),
                       (0, lambda i: a[i] == b[i])):
        while i >= 0 and test(i):
            y[slot] *= (b[i] if slot in (4, 3, 0) else a[i])
            i -= 1
    return ("generic", ()) if i >= 0 else ("fivefold", tuple(y))


def binary_paths(op: str, dtype: str, shape1: Sequence[int],
                 shape2: Sequence[int]) -> np.ndarray:
    """Which path LiteRT takes for each output element (REFERENCE, ELEMENTWISE_BLOCK or
    SCALAR_BLOCK), shaped like the output. Same shapes: flat blocks of the elementwise
    kernel; BinaryBroadcastFiveFold: blocks within each innermost row of y4 elements (or
    within each y3-run of a scalar broadcast when y4 == 1); generic broadcasts: reference."""
    out_shape = np.broadcast_shapes(tuple(shape1), tuple(shape2))
    paths = np.zeros(out_shape, np.uint8)
    if op not in ("ADD", "MUL"):
        return paths
    kind, y = _broadcast_params(shape1, shape2)
    flat = paths.reshape(-1)
    if kind == "none":
        block = _BLOCKS[(op, dtype, ELEMENTWISE_BLOCK)]
        flat[:flat.size - flat.size % block] = ELEMENTWISE_BLOCK
    elif kind == "fivefold":
        path = ELEMENTWISE_BLOCK if y[4] > 1 else SCALAR_BLOCK
        row = y[4] if y[4] > 1 else y[3]
        block = _BLOCKS[(op, dtype, path)]
        if row and flat.size:
            flat.reshape(-1, row)[:, :row - row % block] = path
    return paths


def binary_path_set(op: str, dtype: str, shapes: tuple | None = None) -> tuple[int, ...]:
    """The paths an op may take (all of them when the shapes are not known)."""
    if op not in ("ADD", "MUL"):
        return (REFERENCE,)
    if shapes is None:
        return (REFERENCE, ELEMENTWISE_BLOCK, SCALAR_BLOCK)
    return tuple(sorted(set(np.unique(binary_paths(op, dtype, *shapes)).tolist())
                        | {REFERENCE}))


def binary_grid(input1: QParams, input2: QParams) -> tuple[np.ndarray, np.ndarray]:
    """All 65536 operand pairs: a varies slowest."""
    a, b = np.meshgrid(input1.codes(), input2.codes(), indexing="ij")
    return a.reshape(-1), b.reshape(-1)


# ------------------------------------------------------------------ unary ops, as tables

UNARY_OPS = ("QUANTIZE", "DEQUANTIZE", "HARD_SWISH", "LOGISTIC", "TANH", "RELU", "RELU6",
             "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "ELU", "GELU", "EXP", "LOG",
             "RSQRT", "SQRT", "ABS", "NEG")
LUT_OPS = ("LOGISTIC", "TANH", "ELU", "GELU", "EXP", "LOG")
_RELU_BOUNDS = {"RELU": (0.0, math.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0),
                "RELU_0_TO_1": (0.0, 1.0)}


@dataclass(frozen=True)
class UnaryLookup:
    """A unary op over a flat tensor as LiteRT runs it: `table` (indexed q - qmin) for the
    elements of its scalar loop; when `block` > 0, `block_table` for the elements of its
    NEON blocks, i.e. flat index < n - n % block. `invalid`: inputs for which the builtin's
    Eval fails (SQRT, RSQRT of values below the zero point), or None."""
    op: str
    table: np.ndarray
    block: int = 0
    block_table: np.ndarray | None = None
    invalid: np.ndarray | None = None

    @property
    def position_dependent(self) -> bool:
        return self.block_table is not None and not np.array_equal(self.table,
                                                                   self.block_table)

    def table_at(self, index: int, size: int) -> np.ndarray:
        if self.block and index < size - size % self.block:
            return self.block_table
        return self.table


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


@_quiet
def prepare_relu(op: str, input: QParams, output: QParams) -> ReluParams:
    """activations.cc ReluPrepare (multiplier s_in / s_out, the quotient in float32) and
    the bounds QuantizedReluX computes in Eval: max(qmin, zp + (int)roundf(lo / s_out)),
    min(qmax, zp + (int)roundf(hi / s_out)) (RELU: qmax), float32 arithmetic."""
    _same_type(input, output)
    m, s = quantize_multiplier(float(_f32(input.scale) / _f32(output.scale)))
    low, high = _RELU_BOUNDS[op]
    zp = output.zero_point

    def bound(value: float) -> int:
        r = fp.round_half_away(_f32(value) / _f32(output.scale))
        return int(fp.wrap_int32(int(fp.float_to_int32(np.float64(r))) + zp))

    lo = max(output.qmin, bound(low))
    hi = output.qmax if high == math.inf else min(output.qmax, bound(high))
    return ReluParams(input.zero_point, m, s, zp, lo, hi)


def _relu(op: str, input: QParams, output: QParams) -> np.ndarray:
    """reference_ops::ReluX(ReluParams): zp_out + MultiplyByQuantizedMultiplier(q - zp_in),
    then max with the lower and min with the upper bound."""
    p = prepare_relu(op, input, output)
    raw = p.output_zero_point + fp.multiply_by_quantized_multiplier(
        input.codes() - p.input_zero_point, p.multiplier, p.shift)
    return np.minimum(np.maximum(raw, p.act_min), p.act_max)


@dataclass(frozen=True)
class LeakyReluParams:
    """LeakyReluPrepare results."""
    alpha_multiplier: int
    alpha_shift: int
    identity_multiplier: int
    identity_shift: int


@_quiet
def prepare_leaky_relu(input: QParams, output: QParams, alpha: float) -> LeakyReluParams:
    """activations.cc LeakyReluPrepare: QuantizeMultiplier(s_in * alpha / s_out) and
    QuantizeMultiplier(s_in / s_out), the products and quotients in float32."""
    _same_type(input, output)
    ma, sa = quantize_multiplier(float(_f32(_f32(input.scale) * _f32(alpha))
                                       / _f32(output.scale)))
    mi, si = quantize_multiplier(float(_f32(input.scale) / _f32(output.scale)))
    return LeakyReluParams(ma, sa, mi, si)


def _leaky_relu(input: QParams, output: QParams, alpha: float) -> np.ndarray:
    """reference_ops::QuantizeLeakyRelu: identity multiplier for q >= zp, alpha multiplier
    below (a negative alpha multiplier is negated around MultiplyByQuantizedMultiplier, as
    in the 2.3 sources), + zp_out, clamped."""
    p = prepare_leaky_relu(input, output, alpha)
    v = input.codes() - input.zero_point
    negative = p.alpha_multiplier < 0
    scaled = fp.multiply_by_quantized_multiplier(
        v, -p.alpha_multiplier if negative else p.alpha_multiplier, p.alpha_shift)
    out = output.zero_point + np.where(
        v >= 0, fp.multiply_by_quantized_multiplier(v, p.identity_multiplier,
                                                    p.identity_shift),
        -scaled if negative else scaled)
    return np.clip(out, output.qmin, output.qmax)


def _i16(x):
    return fp.wrap_int16(np.asarray(x, np.int64))


def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul(int16, int16)."""
    ab = a * b
    v = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.trunc(v / 32768.0).astype(np.int64)
    return np.where((a == b) & (a == -32768), 32767, q)


def _rounding_divide_by_pot16(x, exponent: int):
    """gemmlowp RoundingDivideByPOT<int16_t>: as for int32, but the mask (1 << exponent) - 1
    is cast to int16 first, so exponents >= 16 give mask -1 (results -1, 0 or 1)."""
    mask = int(fp.wrap_int16((1 << exponent) - 1))
    remainder = _i16(x & mask)
    threshold = _i16((mask >> 1) + (x < 0))
    return _i16((x >> exponent) + (remainder > threshold))


def _hard_swish(input: QParams, output: QParams) -> np.ndarray:
    """reference_ops::HardSwish(HardSwishParams) (reference/hard_swish.h) in int16 fixed
    point; the x86 build has no NEON path for it (that code is under __ARM_NEON)."""
    p = prepare_hard_swish(input, output)
    value = _i16(input.codes() - p.input_zero_point)
    hires = _i16(value * 128)
    preshift = _i16(_srdhm16(hires, p.output_multiplier_fixedpoint_int16))
    reluish = hires
    e = p.reluish_multiplier_exponent
    if e > 0:
        reluish = np.clip(reluish * (1 << (e - 1)), -32768, 32767)
    reluish = _i16(_srdhm16(reluish, p.reluish_multiplier_fixedpoint_int16))
    if e > 0:
        reluish = np.clip(reluish * 2, -32768, 32767)
    if e < 0:
        reluish = _rounding_divide_by_pot16(reluish, -e)
    reluish = _i16((reluish + (1 << 15)) >> 1)
    ab = reluish * preshift                     # SaturatingDoublingHighMul: truncating
    preshift_output = _i16(np.where((reluish == preshift) & (reluish == -32768), 32767,
                                    np.trunc(ab / 32768.0).astype(np.int64)))
    out = _i16(_rounding_divide_by_pot16(preshift_output, -p.output_multiplier_exponent)
               + p.output_zero_point)
    return np.clip(out, output.qmin, output.qmax)


def _mbqm_int(x: int, multiplier: int, shift: int) -> int:
    """MultiplyByQuantizedMultiplier on one Python int, refusing int32 overflow."""
    left = max(shift, 0)
    if left > 30 or not INT32_RANGE[0] <= x * (1 << left) <= INT32_RANGE[1]:
        raise QuantError("x << shift overflows int32 in MultiplyByQuantizedMultiplier")
    if shift < -31:
        raise QuantError(f"RoundingDivideByPOT by {-shift} >= 32 bits (undefined behaviour)")
    return int(fp.multiply_by_quantized_multiplier(x, multiplier, shift))


@_quiet
def prepare_rsqrt(input: QParams, output: QParams) -> tuple[int, int]:
    """elementwise.cc SetRsqrtOutputMultiplier: QuantizeMultiplier(1. / (sqrtf(s_in) *
    s_out)), the product in float32, the reciprocal in double."""
    denominator = float(np.sqrt(_f32(input.scale)) * _f32(output.scale))
    if denominator == 0.0:
        raise QuantError("RSQRT output multiplier 1 / (sqrt(s_in) * s_out) is infinite")
    return quantize_multiplier(1.0 / denominator)


def _rsqrt(input: QParams, output: QParams) -> tuple[np.ndarray, np.ndarray]:
    """elementwise.cc RsqrtEvalQuantizedInt8: 0 -> 127; else GetInvSqrtQuantizedMultiplierExp,
    data = MBQM(1, inv, inv_shift + 20), output = MBQM(data, m, shift - 20) + zp_out,
    clamped; inputs below the zero point fail Eval."""
    m, s = prepare_rsqrt(input, output)
    out = np.zeros(256, np.int64)
    for k, q in enumerate(input.codes().tolist()):
        value = q - input.zero_point
        if value < 0:
            continue
        if value == 0:
            out[k] = 127
            continue
        inv_m, inv_s = fp.inv_sqrt_quantized_multiplier_exp(value)
        data = _mbqm_int(1, inv_m, inv_s + 20)
        out[k] = min(max(_mbqm_int(data, m, s - 20) + output.zero_point, -128), 127)
    return out, input.codes() < input.zero_point


def _sqrt(input: QParams, output: QParams) -> tuple[np.ndarray, np.ndarray]:
    """elementwise.cc SqrtEvalQuantized: (int)(sqrtf(s_in * (q - zp)) / s_out) + zp_out,
    truncated, clamped; negative dequantized values fail Eval."""
    with np.errstate(all="ignore"):
        dequantized = _f32(input.scale) * (input.codes() - input.zero_point).astype(np.float32)
        root = np.sqrt(dequantized)
        q = fp.float_to_int32((root / _f32(output.scale)).astype(np.float64))
    out = np.clip(fp.wrap_int32(q + output.zero_point), output.qmin, output.qmax)
    return out, dequantized < 0


@_quiet
def prepare_abs(input: QParams, output: QParams) -> tuple[bool, int, int]:
    """elementwise.cc GenericPrepare for ABS: needs_rescale = s_in != s_out and, if so,
    QuantizeMultiplier(s_in / s_out) (float32 quotient): (needs_rescale, multiplier, shift)."""
    if input.scale == output.scale:
        return False, 0, 0
    return (True, *quantize_multiplier(float(_f32(input.scale) / _f32(output.scale))))


def _abs(input: QParams, output: QParams) -> np.ndarray:
    """elementwise.cc AbsEvalQuantized: |q - zp_in| + zp_out when the scales are equal,
    else MultiplyByQuantizedMultiplier(|q - zp_in|) + zp_out, clamped."""
    value = np.abs(input.codes() - input.zero_point)
    rescale, m, s = prepare_abs(input, output)
    if rescale:
        value = fp.multiply_by_quantized_multiplier(value, m, s)
    return np.clip(value + output.zero_point, output.qmin, output.qmax)


@_quiet
def prepare_lut(op: str, input: QParams, output: QParams, params: dict | None = None
                ) -> np.ndarray:
    """The 256-entry table the Prepare of TANH, LOGISTIC, ELU, GELU, EXP and LOG builds
    (LUTPopulate with the kernel's float lambda), indexed q - qmin."""
    _same_type(input, output)
    return lut_populate(_lut_transform(op, output, params or {}), input, output)


def unary_call(op: str, input: QParams | None, output: QParams | None,
               path: int = REFERENCE) -> tuple[str, tuple]:
    """The codegen.fixedpoint helper (and its constant arguments after the operand) for
    the ops a kernel computes rather than looks up: QUANTIZE float -> int8/uint8
    (quantize_reference / quantize_block), DEQUANTIZE (dequantize_*), and QUANTIZE
    int -> int (requantize_*)."""
    if op == "QUANTIZE" and input is None:
        if path == REFERENCE:
            return "quantize_reference", (output.scale, output.zero_point, output.qmin,
                                          output.qmax)
        inverse = float(np.float32(1.0 / output.scale))
        return "quantize_block", (inverse, output.zero_point, output.qmin, output.qmax)
    if op == "DEQUANTIZE":
        if path == REFERENCE:
            return "dequantize_reference", (input.scale, input.zero_point)
        return "dequantize_block", (input.scale,
                                    float(np.float32(-input.zero_point * input.scale)))
    if op == "QUANTIZE":
        name = "requantize_reference" if path == REFERENCE else "requantize_block"
        return name, prepare_requantize(input, output).args
    raise KeyError(op)


def unary_block(op: str, in_dtype: str, out_dtype: str) -> int:
    """The NEON block length of a position-dependent unary kernel (0: one path): the first
    n - n % block elements of a flat tensor of n take the block path."""
    if op == "QUANTIZE" and in_dtype == "float32" and out_dtype in DTYPE_RANGES:
        return 8                              # optimized_ops::AffineQuantize<int8/uint8>
    if op == "QUANTIZE" and in_dtype in DTYPE_RANGES and out_dtype in DTYPE_RANGES:
        return 16                             # optimized_ops::Requantize specialisations
    if op == "DEQUANTIZE" and in_dtype in DTYPE_RANGES:
        return 8                              # optimized_ops::Dequantize<int8/uint8>
    return 0


def _channel_view(quant: ChannelQParams, shape: Sequence[int]):
    """Per-channel scales and zero points broadcast along `quant.axis` of `shape`."""
    index = [1] * len(shape)
    index[quant.axis] = -1
    scales = np.asarray(quant.scales, np.float32).reshape(index)
    zero_points = np.asarray(quant.zero_points, np.int64).reshape(index)
    return scales, zero_points


def dequantize(q: np.ndarray, quant: QParams | ChannelQParams | None,
               path: int = REFERENCE) -> np.ndarray:
    """DEQUANTIZE of an array as LiteRT computes it on `path` (float16 input: the exact
    conversion; per-channel: reference_ops::PerChannelDequantize)."""
    q = np.asarray(q)
    if q.dtype == np.float16:
        return q.astype(np.float32)
    if isinstance(quant, ChannelQParams):
        scales, zero_points = _channel_view(quant, q.shape)
        return np.asarray(fp.dequantize_per_channel(q.astype(np.int64), scales, zero_points),
                          np.float32)
    name, args = unary_call("DEQUANTIZE", quant, None, path)
    return np.asarray(call(name, q.astype(np.int64), *args), np.float32)


def quantize(x: np.ndarray, quant: QParams | ChannelQParams, path: int = REFERENCE
             ) -> np.ndarray:
    """QUANTIZE float32 -> int8/uint8 of an array as LiteRT computes it on `path`
    (per-channel: reference_ops::PerChannelQuantize)."""
    x = np.asarray(x, np.float32)
    qmin, qmax = DTYPE_RANGES[quant.dtype]
    if isinstance(quant, ChannelQParams):
        scales, zero_points = _channel_view(quant, x.shape)
        out = call("quantize_per_channel", x, scales, zero_points, qmin, qmax)
    else:
        name, args = unary_call("QUANTIZE", None, quant, path)
        out = call(name, x, *args)
    return np.asarray(out).astype(NUMPY_DTYPES[quant.dtype])


@_quiet
def unary_lookup(op: str, input: QParams, output: QParams | None,
                 params: dict | None = None) -> UnaryLookup:
    """`op` over all 256 inputs as LiteRT computes it (see UnaryLookup). DEQUANTIZE gives
    float32 tables; everything else tables of the output dtype."""
    params = params or {}
    if op in ("QUANTIZE", "DEQUANTIZE"):
        tables = []
        for path in (REFERENCE, ELEMENTWISE_BLOCK):
            name, args = unary_call(op, input, output, path)
            values = call(name, input.codes(), *args)
            tables.append(np.asarray(values).astype(np.float32 if op == "DEQUANTIZE"
                                                    else output.numpy_dtype))
        block = unary_block(op, input.dtype, "float32" if output is None else output.dtype)
        return UnaryLookup(op, tables[0], block, tables[1])
    _same_type(input, output)
    invalid = None
    if op in LUT_OPS:
        table = prepare_lut(op, input, output, params)
    elif op in _RELU_BOUNDS:
        table = _relu(op, input, output)
    elif op == "LEAKY_RELU":
        table = _leaky_relu(input, output, params.get("alpha", 0.2))
    elif op == "HARD_SWISH":
        table = _hard_swish(input, output)
    elif op == "RSQRT":
        table, invalid = _rsqrt(input, output)
    elif op == "SQRT":
        table, invalid = _sqrt(input, output)
    elif op == "ABS":
        table = _abs(input, output)
    elif op == "NEG":
        table = -input.codes()
    else:
        raise KeyError(op)
    table = np.asarray(table).astype(np.int64).astype(output.numpy_dtype)  # C's cast wraps
    return UnaryLookup(op, table, invalid=invalid)


def unary_table(op: str, input: QParams, output: QParams | None,
                params: dict | None = None, path: int = REFERENCE) -> np.ndarray:
    """The 256-entry table of a unary op (indexed q - qmin; DEQUANTIZE: float32) on
    `path` (REFERENCE: LiteRT's scalar loop; ELEMENTWISE_BLOCK: its NEON blocks)."""
    lookup = unary_lookup(op, input, output, params)
    return lookup.block_table if path != REFERENCE and lookup.block else lookup.table


def compose(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The table of `second` after `first` (first's output codes index second's table)."""
    qmin = DTYPE_RANGES[np.dtype(first.dtype).name][0]
    return second[first.astype(np.int64) - qmin]


def chain_regions(lookups: Sequence[UnaryLookup], size: int
                  ) -> list[tuple[int, int, np.ndarray]]:
    """A chain of unary int8/uint8 lookups over a flat tensor of `size` elements as
    [(start, stop, table)]: one composed table per run of flat indices that take the same
    paths through every op (one run unless some op is position dependent)."""
    cuts = {0, size}
    for lookup in lookups:
        if lookup.block and lookup.position_dependent:
            cuts.add(size - size % lookup.block)
    bounds = sorted(cuts)
    regions = []
    for start, stop in zip(bounds, bounds[1:]):
        table = lookups[0].table_at(start, size)
        for lookup in lookups[1:]:
            table = compose(table, lookup.table_at(start, size))
        regions.append((start, stop, table))
    return regions


# --------------------------------------------------------------------- what is supported

# dtypes the builtin kernels of ai-edge-litert 2.3 take (input dtype -> output dtypes).
SUPPORTED_DTYPES: dict[str, tuple[str, ...]] = {
    "ADD": ("int8", "uint8"), "SUB": ("int8", "uint8"), "MUL": ("int8", "uint8"),
    "SQUARED_DIFFERENCE": ("int8",), "MAXIMUM": ("int8", "uint8"), "MINIMUM": ("int8", "uint8"),
    "PRELU": ("int8", "uint8"), "HARD_SWISH": ("int8", "uint8"), "LOGISTIC": ("int8", "uint8"),
    "TANH": ("int8", "uint8"), "RELU": ("int8", "uint8"), "RELU6": ("int8", "uint8"),
    "RELU_N1_TO_1": ("int8", "uint8"), "RELU_0_TO_1": ("int8", "uint8"),
    "LEAKY_RELU": ("int8", "uint8"), "ELU": ("int8",), "GELU": ("int8", "uint8"),
    "EXP": ("int8",), "LOG": ("int8",), "RSQRT": ("int8",), "SQRT": ("int8",),
    "ABS": ("int8",), "NEG": ("int8",), "QUANTIZE": ("float32", "int8", "uint8"),
    "DEQUANTIZE": ("int8", "uint8", "float16"),
}


def _check_tensor(q: Quant, dtype: str, per_channel_ok: bool) -> str | None:
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


def _shift_overflow(max_abs: int, shift: int) -> bool:
    """x * (1 << shift) overflows int32 for |x| up to max_abs (or the shift itself is UB)."""
    left = max(shift, 0)
    return left > 30 or max_abs * (1 << left) > fp.INT32_MAX


@_quiet
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
    if op not in SUPPORTED_DTYPES:
        return f"op {op} not supported quantized"
    dtypes = tuple(dtypes)
    in_dtype, out_dtype = dtypes[0], dtypes[-1]
    if in_dtype not in SUPPORTED_DTYPES[op]:
        return f"{in_dtype} {op} not supported by the builtin kernel"
    per_channel_in = op == "DEQUANTIZE"
    per_channel_out = op == "QUANTIZE" and in_dtype == "float32"
    for q, dtype in zip(inputs, dtypes[:-1]):
        reason = _check_tensor(q, dtype, per_channel_in)
        if reason:
            return reason
    reason = _check_tensor(output, out_dtype, per_channel_out)
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
    if _shift_overflow(255, p.shift):
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
    if op == "MUL" and _shift_overflow(255 * 255, prepared.output_shift):
        return "MUL: (a * b) << shift overflows int32 (output scale too small)"
    if op == "PRELU" and (_shift_overflow(255, prepared.output_shift_1)
                          or _shift_overflow(255 * 255, prepared.output_shift_2)):
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
    if op in _RELU_BOUNDS:
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
    if any(_shift_overflow(255, shift) for shift in shifts):
        return f"{op}: (q - zp) << shift overflows int32 (output scale too small)"
    lookup = unary_lookup(op, input, output, params)
    if lookup.invalid is not None and lookup.invalid.any() and not eval_errors:
        return f"{op} fails Eval for inputs below the zero point"
    return None


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

#: Reductions and row ops with int8/uint8 kernels, by the dtypes the builtin kernels take
#: (SOFTMAX: section "softmax" below).
REDUCTION_DTYPES = {"MEAN": ("int8", "uint8"), "SUM": ("int8", "uint8"),
                    "REDUCE_MAX": ("int8", "uint8"), "REDUCE_MIN": ("int8", "uint8"),
                    "SOFTMAX": ("int8", "uint8"), "LOG_SOFTMAX": ("int8", "uint8"),
                    "L2_NORMALIZATION": ("int8", "uint8")}
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
        return f"{op}: sum << shift overflows int32" if _shift_overflow(2 * largest, shift) \
            else None
    multiplier, shift, bias, qmin, qmax = args
    if _shift_overflow(largest, shift):
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
    high] the same code. About 20 ms for 56 x 56 sums of codes, and asked for each node by
    its claim, by partition selection and by kernel prepare: cached."""
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
    table[255 - values] = _expf(scale * values.astype(np.float32))
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
        reason = _check_tensor(q, q.dtype, False)
        if reason:
            return reason
    return None
