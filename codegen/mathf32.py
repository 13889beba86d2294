"""Draft."""
import numpy as np
import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_F = np.float32
_I = np.int32


@intrinsic
def _as_int32(typingctx, x):
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def _as_float32(typingctx, i):
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


_jit = numba.njit(inline="always", error_model="numpy", fastmath=False)

_LOG2E = _F(1.44269504088896341)
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.12194440e-4)
_ROUND_MAGIC = _F(12582912.0)
_ROUND_MAGIC_BITS = _I(0x4B400000)
_EXP_X_MAX = _F(89.0)
_EXP_X_MIN = _F(-104.0)
_EXP_P0 = _F(1.9875691500e-4)
_EXP_P1 = _F(1.3981999507e-3)
_EXP_P2 = _F(8.3334519073e-3)
_EXP_P3 = _F(4.1665795894e-2)
_EXP_P4 = _F(1.6666665459e-1)
_EXP_P5 = _F(5.0000001201e-1)
_ONE = _F(1.0)
_TWO = _F(2.0)
_ZERO = _F(0.0)
_HALF = _F(0.5)
_INF = _F(np.inf)
_NAN = _F(np.nan)


@_jit
def exp_f32(x):
    x = _EXP_X_MAX if x > _EXP_X_MAX else x
    x = _EXP_X_MIN if x < _EXP_X_MIN else x
    t = x * _LOG2E + _ROUND_MAGIC
    n = t - _ROUND_MAGIC
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = ((((_EXP_P0 * r + _EXP_P1) * r + _EXP_P2) * r + _EXP_P3) * r + _EXP_P4) * r + _EXP_P5
    p = p * (r * r) + r + _ONE
    k = _as_int32(t) - _ROUND_MAGIC_BITS
    k1 = k >> 1
    s1 = _as_float32(_I((k1 + 127) << 23))
    s2 = _as_float32(_I((k - k1 + 127) << 23))
    return p * s1 * s2


_SQRT_HALF_BITS = _I(0x3F3504F3)
_FLT_MIN = _F(1.17549435e-38)
_TWO_23 = _F(8388608.0)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_LOG_P0, _LOG_P1, _LOG_P2, _LOG_P3, _LOG_P4, _LOG_P5, _LOG_P6, _LOG_P7, _LOG_P8 = [
    _F(c) for c in _LOG_P]


@_jit
def log_f32(x):
    tiny = x < _FLT_MIN
    xs = x * _TWO_23 if tiny else x
    ix = _as_int32(xs) + (_I(0x3F800000) - _SQRT_HALF_BITS)
    e = _F((ix >> 23) - 127 - (23 if tiny else 0))
    f = _as_float32(_I((ix & 0x007FFFFF) + _SQRT_HALF_BITS)) - _ONE
    z = f * f
    y = ((((((((_LOG_P0 * f + _LOG_P1) * f + _LOG_P2) * f + _LOG_P3) * f + _LOG_P4) * f
             + _LOG_P5) * f + _LOG_P6) * f + _LOG_P7) * f + _LOG_P8) * f * z
    y = y + e * _LN2_LO
    y = y - _HALF * z
    r = (f + y) + e * _LN2_HI
    r = -_INF if x == _ZERO else r
    r = _NAN if x < _ZERO else r
    r = x if not (x < _INF) else r
    return r


_TANH_SMALL = _F(0.625)
_TANH_P0 = _F(-5.70498872745e-3)
_TANH_P1 = _F(2.06390887954e-2)
_TANH_P2 = _F(-5.37397155531e-2)
_TANH_P3 = _F(1.33314422036e-1)
_TANH_P4 = _F(-3.33332819422e-1)


@_jit
def tanh_f32(x):
    ax = abs(x)
    z = x * x
    small = ((((_TANH_P0 * z + _TANH_P1) * z + _TANH_P2) * z + _TANH_P3) * z + _TANH_P4) * z * x + x
    big = _ONE - _TWO / (exp_f32(ax + ax) + _ONE)
    big = big if x > _ZERO else -big
    return small if ax < _TANH_SMALL else big


@_jit
def logistic_f32(x):
    e = exp_f32(-abs(x))
    return (_ONE if x >= _ZERO else e) / (_ONE + e)


_ERF_SPLIT = _F(0.921875)
_ERF_T_MAX = _F(4.0)
_ERF_S = [_F(c) for c in (-0.0006008737, 0.0049970117, -0.026769497, 0.112819046, -0.37612504,
                          0.12837915)]
_ERF_B = [_F(c) for c in (-3.9904876e-08, 2.4969324e-06, -5.4058717e-05, 0.00063889625,
                          -0.0048971632, 0.026709925, -0.11046824, -0.631505, -1.1303812,
                          0.0003488988)]
_ES0, _ES1, _ES2, _ES3, _ES4, _ES5 = _ERF_S
_EB0, _EB1, _EB2, _EB3, _EB4, _EB5, _EB6, _EB7, _EB8, _EB9 = _ERF_B


@_jit
def erf_f32(x):
    t = abs(x)
    z = x * x
    q = ((((_ES0 * z + _ES1) * z + _ES2) * z + _ES3) * z + _ES4) * z + _ES5
    small = x + x * q
    t = _ERF_T_MAX if t > _ERF_T_MAX else t
    r = ((((((((_EB0 * t + _EB1) * t + _EB2) * t + _EB3) * t + _EB4) * t + _EB5) * t + _EB6) * t
          + _EB7) * t + _EB8) * t + _EB9
    big = _ONE - exp_f32(r)
    big = big if x > _ZERO else -big
    return small if t < _ERF_SPLIT else big
