"""LiteRT 2.3's int8/uint8 elementwise kernels on numpy arrays, path by path.

The per-element integer formulas live in codegen.fixedpoint (one implementation that runs on
numpy arrays and inside `@njit` code); `binary_call` / `unary_call` name the helper a kernel
calls for an op on a path, with its constant arguments, and `call` runs it here. Unary ops
become 256-entry tables (`unary_lookup`), one per path where the paths differ.
"""
from __future__ import annotations

import functools
import platform
from typing import Sequence

import numpy as np

from . import fixedpoint as fp
from .kept import kept
from .qcall import QCALL_HELPERS
from .qparams import (DTYPE_RANGES, NUMPY_DTYPES, ChannelQParams, QParams, QuantError,
                      float_warnings_off, same_dtype)
from .quant_ops import LUT_OPS
from .quant_paths import ELEMENTWISE_BLOCK, REFERENCE, SCALAR_BLOCK, UnaryLookup, unary_block
from .quant_prepare import (RELU_BOUNDS, prepare_abs, prepare_binary, prepare_hard_swish,
                            prepare_leaky_relu, prepare_lut, prepare_relu, prepare_requantize,
                            prepare_rsqrt)

_f32 = np.float32
INT32_RANGE = (fp.INT32_MIN, fp.INT32_MAX)
#: What besides codegen's sources a table's float math comes from (LiteRT's LOGISTIC, TANH and
#: GELU tables call the C library's expf and tanhf; ours glibc's and numpy's).
_MATH_LIBRARIES = (platform.libc_ver(), np.__version__)


def run_qcall(name: str, *args):
    """The fixed-point helper `name` (codegen.qcall, or np.maximum / np.minimum) on numpy
    operands: what a QCALL of that name computes per element."""
    function = {"np.maximum": np.maximum, "np.minimum": np.minimum}.get(name)
    with np.errstate(all="ignore"):
        return (function or QCALL_HELPERS[name])(*args)


def binary_call(op: str, prepared, dtype: str, path: int = REFERENCE) -> tuple[str, tuple]:
    """The codegen.fixedpoint helper that computes `op` on `path` and its constant
    arguments (after the two operands): `QCALL_HELPERS[name](a, b, *args)`."""
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


def binary(op: str, a: np.ndarray, b: np.ndarray, prepared, dtype: str,
           path: int = REFERENCE) -> np.ndarray:
    """`op` on int8/uint8 operands (broadcast by numpy) as LiteRT computes it on `path`;
    returns the output values (of `dtype`)."""
    name, args = binary_call(op, prepared, dtype, path)
    a = np.asarray(a).astype(np.int64)
    b = np.asarray(b).astype(np.int64)
    out = run_qcall(name, a, b, *args)
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


def binary_grid(input1: QParams, input2: QParams) -> tuple[np.ndarray, np.ndarray]:
    """All 65536 operand pairs: a varies slowest."""
    a, b = np.meshgrid(input1.codes(), input2.codes(), indexing="ij")
    return a.reshape(-1), b.reshape(-1)


def _relu(op: str, input: QParams, output: QParams) -> np.ndarray:
    """reference_ops::ReluX(ReluParams): zp_out + MultiplyByQuantizedMultiplier(q - zp_in),
    then max with the lower and min with the upper bound."""
    p = prepare_relu(op, input, output)
    raw = p.output_zero_point + fp.multiply_by_quantized_multiplier(
        input.codes() - p.input_zero_point, p.multiplier, p.shift)
    return np.minimum(np.maximum(raw, p.act_min), p.act_max)


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


def _mbqm_int(x: int | np.ndarray, multiplier: int, shift: int) -> int | np.ndarray:
    """MultiplyByQuantizedMultiplier on Python ints or an int64 array, refusing int32
    overflow."""
    left = max(shift, 0)
    extremes = (int(np.min(x)), int(np.max(x))) if np.size(x) else (0, 0)
    if left > 30 or not all(INT32_RANGE[0] <= e * (1 << left) <= INT32_RANGE[1]
                            for e in extremes):
        raise QuantError("x << shift overflows int32 in MultiplyByQuantizedMultiplier")
    if shift < -31:
        raise QuantError(f"RoundingDivideByPOT by {-shift} >= 32 bits (undefined behaviour)")
    product = fp.multiply_by_quantized_multiplier(x, multiplier, shift)
    return int(product) if np.ndim(x) == 0 else product


def _rsqrt(input: QParams, output: QParams) -> tuple[np.ndarray, np.ndarray]:
    """elementwise.cc RsqrtEvalQuantizedInt8: 0 -> 127; else GetInvSqrtQuantizedMultiplierExp,
    data = MBQM(1, inv, inv_shift + 20), output = MBQM(data, m, shift - 20) + zp_out,
    clamped; inputs below the zero point fail Eval."""
    m, s = prepare_rsqrt(input, output)
    value = input.codes() - input.zero_point
    positive = value > 0
    out = np.where(value == 0, 127, 0).astype(np.int64)
    data = _mbqm_int(_inverse_sqrt_data()[value[positive]], m, s - 20)
    out[positive] = np.clip(data + output.zero_point, -128, 127)
    return out, value < 0


@functools.cache
def _inverse_sqrt_data() -> np.ndarray:
    """MBQM(1, GetInvSqrtQuantizedMultiplierExp(value) + 20) for each value = q - zp in 1-255,
    the same for every RSQRT of a model: the Newton iterations of all of them at once (one at
    a time they took 57 ms of every int8 transformer's start)."""
    normalized, shifts = zip(*(fp.inv_sqrt_normalized(value) for value in range(2, 256)))
    inv_m, inv_s = fp.inv_sqrt_newton(np.array(normalized, np.int64), np.array(shifts, np.int64))
    multipliers = [fp.INT32_MAX, fp.INT32_MAX, *inv_m.tolist()]     # values 0 and 1: <= 1
    exponents = [0, 0, *inv_s.tolist()]
    return np.array([_mbqm_int(1, m, e + 20) for m, e in zip(multipliers, exponents)], np.int64)


def _sqrt(input: QParams, output: QParams) -> tuple[np.ndarray, np.ndarray]:
    """elementwise.cc SqrtEvalQuantized: (int)(sqrtf(s_in * (q - zp)) / s_out) + zp_out,
    truncated, clamped; negative dequantized values fail Eval."""
    with np.errstate(all="ignore"):
        dequantized = _f32(input.scale) * (input.codes() - input.zero_point).astype(np.float32)
        root = np.sqrt(dequantized)
        q = fp.float_to_int32((root / _f32(output.scale)).astype(np.float64))
    out = np.clip(fp.wrap_int32(q + output.zero_point), output.qmin, output.qmax)
    return out, dequantized < 0


def _abs(input: QParams, output: QParams) -> np.ndarray:
    """elementwise.cc AbsEvalQuantized: |q - zp_in| + zp_out when the scales are equal,
    else MultiplyByQuantizedMultiplier(|q - zp_in|) + zp_out, clamped."""
    value = np.abs(input.codes() - input.zero_point)
    rescale, m, s = prepare_abs(input, output)
    if rescale:
        value = fp.multiply_by_quantized_multiplier(value, m, s)
    return np.clip(value + output.zero_point, output.qmin, output.qmax)


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
    return np.asarray(run_qcall(name, q.astype(np.int64), *args), np.float32)


def quantize(x: np.ndarray, quant: QParams | ChannelQParams, path: int = REFERENCE
             ) -> np.ndarray:
    """QUANTIZE float32 -> int8/uint8 of an array as LiteRT computes it on `path`
    (per-channel: reference_ops::PerChannelQuantize)."""
    x = np.asarray(x, np.float32)
    qmin, qmax = DTYPE_RANGES[quant.dtype]
    if isinstance(quant, ChannelQParams):
        scales, zero_points = _channel_view(quant, x.shape)
        out = run_qcall("quantize_per_channel", x, scales, zero_points, qmin, qmax)
    else:
        name, args = unary_call("QUANTIZE", None, quant, path)
        out = run_qcall(name, x, *args)
    return np.asarray(out).astype(NUMPY_DTYPES[quant.dtype])


@float_warnings_off
def unary_lookup(op: str, input: QParams, output: QParams | None,
                 params: dict | None = None) -> UnaryLookup:
    """`op` over all 256 inputs as LiteRT computes it (see UnaryLookup). DEQUANTIZE gives
    float32 tables; everything else tables of the output dtype. Kept for the process, its
    tables read-only: a second interpreter of a model checks its ops again; and beside the
    kernels (codegen.kept), for the next process."""
    return _kept_lookup(op, input, output, tuple(sorted((params or {}).items())))


@functools.lru_cache(maxsize=4096)
def _kept_lookup(op: str, input: QParams, output: QParams | None,
                 params: tuple) -> UnaryLookup:
    # Kept beside the kernels (codegen.kept): an int8 model's claims and builds make tens of
    # tables, up to 12 ms of float math at a warm start.
    lookup = kept("lookup", (op, input, output, params, _MATH_LIBRARIES), UnaryLookup,
                  lambda: _lookup(op, input, output, dict(params)))
    for table in (lookup.table, lookup.block_table, lookup.invalid):
        if table is not None:
            table.setflags(write=False)
    return lookup


def _lookup(op: str, input: QParams, output: QParams | None, params: dict) -> UnaryLookup:
    if op in ("QUANTIZE", "DEQUANTIZE"):
        tables = []
        for path in (REFERENCE, ELEMENTWISE_BLOCK):
            name, args = unary_call(op, input, output, path)
            values = run_qcall(name, input.codes(), *args)
            tables.append(np.asarray(values).astype(np.float32 if op == "DEQUANTIZE"
                                                    else output.numpy_dtype))
        block = unary_block(op, input.dtype, "float32" if output is None else output.dtype)
        return UnaryLookup(op, tables[0], block, tables[1])
    same_dtype(input, output)
    invalid = None
    if op in LUT_OPS:
        table = prepare_lut(op, input, output, params)
    elif op in RELU_BOUNDS:
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
