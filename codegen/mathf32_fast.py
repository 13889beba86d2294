"""precision="fast": cheaper float32 approximations for the ops LiteRT's default path (XNNPACK)
already approximates, as plain arithmetic that LLVM vectorises.

Same conventions as codegen.mathf32 (float32 in and out, no float64 promotion, selects instead
of branches, C's std:: results for NaN, +-inf and -0.0); FAST_BUDGET holds their errors, which
tests/test_mathf32.py enforces.
"""
from .mathf32 import (_EXP_X_MAX, _EXP_X_MIN, _F, _FLT_MAX, _FLT_MIN, _HALF, _I, _LN2_HI, _LN2_LO,
                      _LOG2E, _MANTISSA_MASK, _ONE, _ONE_BITS, _PIO2_1, _PIO2_2, _ROUND_MAGIC,
                      _ROUND_MAGIC_BITS, _SQRT_HALF_BITS, _TWO, _TWO_POW_23, _ZERO, _jit,
                      _log_assemble, _subtract_small_pieces)
from .mathf32_intrinsics import fma_available, ldexp, mul_add
from .native import as_float32, as_int32


# ---------------------------------------------------------------------------------------------
# precision="fast": cheaper approximations for the ops LiteRT's default path (XNNPACK) already
# approximates. Each stays within an error budget no larger than XNNPACK's own measured error
# against LiteRT's builtin kernels (perf/math_accuracy.md; the per-op budgets against the
# builtin kernels are codegen.ops.OpSpec.approx_tolerance), and keeps the builtin results for
# NaN, +-inf and -0.0 exactly, subnormals included (XNNPACK flushes them). Savings come from
# shorter polynomials, FMA where the exact functions copy LiteRT's unfused arithmetic, int32
# rather than int64 bit arithmetic, a single Cody-Waite reduction with FMA and one polynomial
# for sin and cos, 2**n applied by one vscalefps where the CPU has AVX-512, and formulas that
# need no cancellation-prone steps (mish without log and tanh, GELU's erf form from erfc).
# Divisions stay vdivps. An fdiv with LLVM's `arcp ninf contract` flags becomes vrcp14ps and a
# fused correction (q = a*r, q + r*(a - q*d)), as accurate as the division, but slower
# (perf/README.md): these loops are bound by the throughput of the FMA pipes, the divider
# works beside them, and the estimate puts three more instructions on them. FAST_BUDGET is (ulp, abs) against a float64
# reference, |got - ref| <= ulp * ulp_of(ref) + abs (budget_error), for the fused and the
# unfused form of mul_add; sin/cos only where far_angle(x) is 0.
# ---------------------------------------------------------------------------------------------

FAST_BUDGET = {
    "exp_fast_f32": (3.0, 0.0),
    "logistic_fast_f32": (4.0, 0.0),
    "tanh_fast_f32": (7.0, 0.0),            # Eigen's rational itself is 5.4 ulp from tanh
    "elu_fast_f32": (1.5, 0.0),
    "log_fast_f32": (6.0, 0.0),
    "sin_fast_f32": (3.0, 0.0),
    "cos_fast_f32": (3.0, 0.0),
    # x * (a subnormal) loses the relative accuracy of the subnormal
    "swish_fast_f32": (5.0, 1e-42),
    "mish_fast_f32": (5.0, 1e-42),
    # exp(-2y), exp(-x**2/2): their float32 argument is rounded, about |arg| / 2 ulp of result
    "gelu_tanh_fast_f32": (16.0, 1e-9),
    "gelu_erf_fast_f32": (8.0, 1e-9),
}
#: sin_fast_f32 and cos_fast_f32 are within FAST_BUDGET where far_angle(x) is 0 (|x| < 2**16);
#: beyond, a kernel's exact loop runs sin_f32 / cos_f32 (see codegen.ops, SIN and COS).
FAST_NEAR_ONLY = frozenset({"sin_fast_f32", "cos_fast_f32"})


# exp: n = rint(x / ln2) through _ROUND_MAGIC, r = x - n*ln2 (exact first step, _LN2_HI has 9
# bits), exp(r) = 1 + r + r**2 * Q(r), then 2**n by ldexp. Q fitted for this module (minimax
# relative error on [-ln2/2, ln2/2]): degree 3 for exp (1.76 * 2**-24), degree 4 where the
# result feeds a longer formula (0.05 * 2**-24).
_EXPF_Q0 = _F(0.4999923)
_EXPF_Q1 = _F(0.16667114)
_EXPF_Q2 = _F(0.041890156)
_EXPF_Q3 = _F(0.008312521)
_EXPF6_Q0 = _F(0.49999994)
_EXPF6_Q1 = _F(0.16666521)
_EXPF6_Q2 = _F(0.04166839)
_EXPF6_Q3 = _F(0.008368717)
_EXPF6_Q4 = _F(0.0013814599)


@_jit
def _exp_reduce(x):
    """(r, k): x = k*ln2 + r, |r| <= ~ln2/2, for x clamped to [-104, 89] (NaN gives NaN r)."""
    return _exp_reduce_below(_EXP_X_MAX if x > _EXP_X_MAX else x)


@_jit
def _exp_reduce_below(x):
    """_exp_reduce for x <= 89 (or NaN): only the lower clamp, one vmaxps."""
    x = _EXP_X_MIN if x < _EXP_X_MIN else x
    t = mul_add(x, _LOG2E, _ROUND_MAGIC)
    k = _I(as_int32(t) - _ROUND_MAGIC_BITS)
    n = _F(k)                   # llvm.ldexp converts k the same way: one vcvtdq2ps for both
    r = mul_add(n, -_LN2_LO, mul_add(n, -_LN2_HI, x))
    return r, k


@_jit
def _exp_fast5(x):
    r, k = _exp_reduce(x)
    return ldexp(_exp5_polynomial(r), k)


@_jit
def _exp_nonpositive_gradual5(x):
    """e**x for x <= 0 (a positive x is not handled): exp_fast_f32's value, gradual underflow
    included (_exp_nonpositive_fast5 flushes below 2**-126), +0 for -inf, NaN -> NaN."""
    r, k = _exp_reduce_below(x)
    return ldexp(_exp5_polynomial(r), k)


@_jit
def _exp5_polynomial(r):
    """e**r for |r| <= ~ln2/2, degree 5."""
    q = mul_add(r, _EXPF_Q3, _EXPF_Q2)
    q = mul_add(q, r, _EXPF_Q1)
    q = mul_add(q, r, _EXPF_Q0)
    return mul_add(mul_add(q, r, _ONE), r, _ONE)


# e**x for x <= 0 (softmax's exp(x - max)): n and r as _exp_reduce finds them, the power 2**n
# from the rounding constant's low bits, which hold n + 127 (the exponent bias is folded into
# the constant), shifted into the exponent field: one shift and one multiply instead of
# llvm.ldexp's conversion and scaling. The clamp at -88 keeps n >= -127, whose power is +0: the
# results below about 2**-126.5 (x < -87.68) are +0, where exp_fast_f32 rounds gradually.
_EXP_NONPOSITIVE_MIN = _F(-88.0)
_ROUND_MAGIC_BIASED = _F(12582912.0 + 127.0)


@_jit
def _exp_nonpositive_fast5(x):
    """e**x for x <= 0 (a positive x is not handled): exp_fast_f32's value wherever it is at
    least 2**-126 (n may differ by one on an exact tie of x * log2(e) between integers, an
    equally good reduction), +0 below about 2**-126.5 and for -inf, NaN -> NaN."""
    x = _EXP_NONPOSITIVE_MIN if x < _EXP_NONPOSITIVE_MIN else x
    t = mul_add(x, _LOG2E, _ROUND_MAGIC_BIASED)
    n = t - _ROUND_MAGIC_BIASED
    r = mul_add(n, -_LN2_LO, mul_add(n, -_LN2_HI, x))
    return _exp5_polynomial(r) * as_float32(_I(as_int32(t) << _I(23)))


@_jit
def _exp_fast6(x):
    r, k = _exp_reduce(x)
    q = mul_add(r, _EXPF6_Q4, _EXPF6_Q3)
    q = mul_add(q, r, _EXPF6_Q2)
    q = mul_add(q, r, _EXPF6_Q1)
    q = mul_add(q, r, _EXPF6_Q0)
    return ldexp(mul_add(mul_add(q, r, _ONE), r, _ONE), k)


@_jit
def exp_fast_f32(x):
    """e**x within FAST_BUDGET; the edge cases of exp_f32 (NaN, +-inf, overflow to inf from
    88.73, gradual underflow, +0 below -103.97)."""
    return _exp_fast5(x)


@_jit
def logistic_fast_f32(x):
    """1 / (1 + exp(-x)) from e = exp(-|x|) in (0, 1]: 1/(1+e) or e/(1+e), so nothing
    overflows and the negative tail keeps its relative accuracy down into the subnormals.
    e has exp_fast_f32's polynomial (XNNPACK's degree): the longer one of _exp_fast6 is slower
    and leaves the error against LiteRT's kernel as it is (XNNPACK's own).
    logistic(+inf) = 1, logistic(-inf) = 0, logistic(+-0) = 0.5, NaN -> NaN."""
    e = _exp_nonpositive_gradual5(-abs(x))
    return (e if x < _ZERO else _ONE) / (_ONE + e)


@_jit
def _times_logistic(x, s, otherwise):
    """x * logistic(s) for s of the sign of x, the way logistic_fast_f32 forms logistic(s):
    x*e / (1+e) with e = exp(-|s|) for x < 0, else `otherwise` / (1+e) (x, or x with the
    clamp the caller needs): one division, nothing overflows, and the negative tail keeps its
    relative accuracy down into the subnormals."""
    e = _exp_nonpositive_gradual5(-abs(s))
    return (x * e if x < _ZERO else otherwise) / (_ONE + e)


# tanh: Eigen's [9/8] rational (the coefficients of LiteRT's TANH, codegen.scalar.tanh_eigen)
# on |x|, then the sign of x, every step with FMA: 3 instructions fewer than LiteRT's unfused
# numerator, and within 8 ulp of LiteRT (XNNPACK's own error; the rational
# itself is 5.4 ulp from tanh, so LiteRT's unfused rounding and ours add up). |x| is clamped
# at 9 rather than Eigen's 7.90738964 (where its unfused evaluation reaches 1) and the result
# at 1, so +-inf give +-1 exactly whether mul_add fuses or not.
_TANH_FAST_CLAMP = _F(9.0)
_TANH_A1 = _F(1.394553628e-8)
_TANH_A2 = _F(2.102733560e-5)
_TANH_A3 = _F(3.520756727e-3)
_TANH_A4 = _F(1.340216100e-1)
_TANH_B0 = _F(8.015776984e-7)
_TANH_B1 = _F(3.326951409e-4)
_TANH_B2 = _F(2.597254514e-2)
_TANH_B3 = _F(4.673548340e-1)
_SIGN_BIT = _I(-2147483648)


@_jit
def _with_sign_of(v, x):
    """v (>= +0 or NaN) with the sign bit of x."""
    return as_float32(_I(as_int32(v) ^ (as_int32(x) & _SIGN_BIT)))


@_jit
def tanh_fast_f32(x):
    """Hyperbolic tangent. tanh(+-inf) = +-1, tanh(-0) = -0, NaN -> NaN, subnormal x -> x."""
    ax = abs(x)
    ax = _TANH_FAST_CLAMP if _TANH_FAST_CLAMP < ax else ax       # min; NaN stays NaN
    x2 = ax * ax
    p = mul_add(mul_add(mul_add(x2, _TANH_A1, _TANH_A2), x2, _TANH_A3), x2, _TANH_A4)
    q = mul_add(x2, _TANH_B0, _TANH_B1)
    q = mul_add(q, x2, _TANH_B2)
    q = mul_add(q, x2, _TANH_B3)
    q = mul_add(q, x2, _ONE)
    v = mul_add(x2 * ax, p, ax) / q
    return _with_sign_of(_ONE if _ONE < v else v, x)


# ELU: expm1(x) for x < 0 as 2**n * expm1(r) + (2**n - 1), n = rint(x / ln2) in [-25, 0],
# expm1(r) = r + r**2 * Q(r), Q of degree 4 (fitted for this module: minimax relative error
# 0.22 * 2**-24 on [-ln2/2, ln2/2]); 2**n * r and 2**n - 1 are exact, so the result is rounded
# about twice: faithful, hence within 1 ulp of glibc's expm1f.
_EXPM1_X_MIN = _F(-17.5)            # expm1 rounds to -1 below -17.33
_EXPM1_Q0 = _F(0.49999997)
_EXPM1_Q1 = _F(0.16666543)
_EXPM1_Q2 = _F(0.0416672)
_EXPM1_Q3 = _F(0.0083665205)
_EXPM1_Q4 = _F(0.0013882521)


@_jit
def elu_fast_f32(x):
    """ELU: expm1(x) for x < 0, else x unchanged (NaN and -0.0 pass bit for bit, as in
    LiteRT); elu(-inf) = -1."""
    r, k = _exp_reduce(_EXPM1_X_MIN if x < _EXPM1_X_MIN else x)   # its clamps: x >= 0 only
    s = as_float32(_I((k + 127) << 23))
    q = mul_add(r, _EXPM1_Q4, _EXPM1_Q3)
    q = mul_add(q, r, _EXPM1_Q2)
    q = mul_add(q, r, _EXPM1_Q1)
    q = mul_add(q, r, _EXPM1_Q0)
    sr = s * r
    y = mul_add(q * r, sr, sr) + (s - _ONE)
    return y if x < _ZERO else x


# log: the reduction of log_f32, then log(1+f) = f - f**2/2 + f**3 * P(f) with P of degree 5
# instead of 8 (fitted for this module: minimax relative error 4.4 * 2**-24).
_LOGF_P0 = _F(0.33334246)
_LOGF_P1 = _F(-0.24983267)
_LOGF_P2 = _F(0.19924504)
_LOGF_P3 = _F(-0.17137127)
_LOGF_P4 = _F(0.16024381)
_LOGF_P5 = _F(-0.10191729)


@_jit
def _log_reduce32(x):
    """_log_reduce in int32 arithmetic (numba widens int32 sums to int64, which costs vector
    conversions): (e, m) with x = 2**e * m, m in [sqrt(1/2), sqrt(2)), finite x > 0."""
    tiny = x < _FLT_MIN
    x = x * _TWO_POW_23 if tiny else x
    bits = _I(as_int32(x) + (_ONE_BITS - _SQRT_HALF_BITS))
    e = _I(_I(bits >> 23) - (_I(150) if tiny else _I(127)))
    m = as_float32(_I(_I(bits & _MANTISSA_MASK) + _SQRT_HALF_BITS))
    return _F(e), m


@_jit
def log_fast_f32(x):
    """Natural logarithm; the edge cases of log_f32 (log(+-0) = -inf, x < 0 -> NaN,
    log(inf) = inf, NaN -> NaN, subnormal x exact-scaled)."""
    e, m = _log_reduce32(x)
    f = m - _ONE
    z = f * f
    y = mul_add(f, _LOGF_P5, _LOGF_P4)
    y = mul_add(y, f, _LOGF_P3)
    y = mul_add(y, f, _LOGF_P2)
    y = mul_add(y, f, _LOGF_P1)
    y = mul_add(y, f, _LOGF_P0)
    return _log_assemble(x, e, f, z, y)


# sin/cos: x = m*pi + r, |r| <= pi/2 (m an integer for sin, a half-integer for cos), then
# sin(x) = (-1)**m sin(r) and cos(x) = (-1)**(m + 1/2) sin(r) with one odd polynomial,
# sin(r) = r + r**3 * S(r**2), S of degree 3 (fitted for this module: minimax relative error
# 0.1 * 2**-24 on [-pi/2, pi/2]). With FMA, r = x - m*P1 - m*P2 - m*P3 (pi to 72 bits, the
# first step exact for |x| < 2**16); without, the exact 8-bit pieces of _sin_cos_reduce.
_INV_PI = _F(0.318309886183790672)
_PI_1 = _F(float.fromhex("0x1.921fb6p+1"))              # float32(pi)
_PI_2 = _F(float.fromhex("-0x1.777a5cp-24"))            # float32(pi - _PI_1)
_PI_3 = _F(float.fromhex("-0x1.ee59dap-49"))            # float32(pi - _PI_1 - _PI_2)
_SINF_S0 = _F(-0.1666666)
_SINF_S1 = _F(0.008333066)
_SINF_S2 = _F(-0.00019809521)
_SINF_S3 = _F(2.6055902e-06)


@_jit
def _reduce_pi(ax, m):
    """ax - m*pi for |m| < 2**15 (m a multiple of 1/2), rounded about once."""
    if fma_available():
        r = mul_add(m, -_PI_1, ax)
        r = mul_add(m, -_PI_2, r)
        return mul_add(m, -_PI_3, r)
    n = m + m                                   # an integer < 2**16: pieces of pi/2 apply
    s = ax - n * _PIO2_1
    s = s - n * _PIO2_2
    s6, err = _subtract_small_pieces(s, n)
    return s6 + err


@_jit
def _sin_odd(r):
    z = r * r
    s = mul_add(z, _SINF_S3, _SINF_S2)
    s = mul_add(s, z, _SINF_S1)
    s = mul_add(s, z, _SINF_S0)
    return mul_add(s * z, r, r)


@_jit
def _sin_unit(r, sign):
    """sin(r) for |r| <= ~pi/2, at most 1 in magnitude, with its sign bit flipped by `sign`."""
    v = _sin_odd(abs(r))
    v = _ONE if _ONE < v else v                                   # NaN stays NaN
    return as_float32(_I(as_int32(v) ^ _I(sign ^ (as_int32(r) & _SIGN_BIT))))


@_jit
def sin_fast_f32(x):
    """Sine, within FAST_BUDGET for |x| < 2**16 (where far_angle(x) is 0), never above 1 in
    magnitude. sin(-0) = -0, sin(+-inf) = sin(NaN) = NaN; subnormal x gives x."""
    ax = abs(x)
    t = mul_add(ax, _INV_PI, _ROUND_MAGIC)                       # m = rint(ax/pi)
    m = t - _ROUND_MAGIC
    return _sin_unit(_reduce_pi(ax, m), _I(_I(as_int32(t) << 31) ^ (as_int32(x) & _SIGN_BIT)))


@_jit
def cos_fast_f32(x):
    """Cosine, within FAST_BUDGET for |x| < 2**16 (where far_angle(x) is 0), never above 1 in
    magnitude. cos(+-inf) = cos(NaN) = NaN."""
    ax = abs(x)
    t = mul_add(ax, _INV_PI, _HALF) + _ROUND_MAGIC              # N = rint(ax/pi + 1/2)
    m = (t - _ROUND_MAGIC) - _HALF
    return _sin_unit(_reduce_pi(ax, m), _I(as_int32(t) << 31))   # (-1)**N


@_jit
def swish_fast_f32(x):
    """x * logistic(x), the chain MUL(x, LOGISTIC(x)) with the clamp of MUL's NONE activation
    built in (x saturates at FLT_MAX, one vminps; a clamp of the result costs four
    instructions): swish(+inf) = FLT_MAX, swish(-inf) = NaN (-inf * 0), swish(-0) = -0."""
    return _times_logistic(x, x, _FLT_MAX if _FLT_MAX < x else x)


# mish: tanh(log(1 + e)) = ((1+e)**2 - 1) / ((1+e)**2 + 1) = n / (n + 2) with n = e * (e + 2),
# e = exp(x): no log and no tanh. Below 0 the ratio is n / (n+2) (the tail, mish(x) ~ x*e**x,
# keeps its relative accuracy), above it 1 - 2/(n+2) (exactly 1 once x exceeds about 9).
_MISH_X_MAX = _F(20.0)


@_jit
def mish_fast_f32(x):
    """x * tanh(softplus(x)), the chain MUL(x, TANH(LOG(ADD(EXP(x), 1)))) with the clamp of
    MUL's NONE activation built in, as in swish_fast_f32: mish(+inf) = FLT_MAX,
    mish(-inf) = NaN (-inf * 0, as in the chain), mish(-0) = -0, NaN -> NaN."""
    e = _exp_fast6(_MISH_X_MAX if _MISH_X_MAX < x else x)
    n = mul_add(e, e, e + e)
    negative = x < _ZERO
    ratio = (n if negative else -_TWO) / (n + _TWO)
    return (_FLT_MAX if _FLT_MAX < x else x) * (ratio if negative else ratio + _ONE)


# GELU, tanh form: (x/2) * (1 + tanh(y)) = x * logistic(2y), y = sqrt(2/pi) * (x + 0.044715 x**3),
# 2y of the sign of x: no cancellation in the negative tail (LiteRT's formula cancels there: its
# -0.0 for x < -4.8 is the true value's rounding error); below x = -10.7 exp(-2|y|) is +0 and the
# product -0, as LiteRT's result there.
# 2y = x * (_GELU_2K + _GELU_2KC * x**2): three instructions, and closer to the float64 value
# than LiteRT's order of operations (8.9 ulp of the result at most against 10.2).
_GELU_2K = _F(1.5957692)            # 2 * 0.797884583 (LiteRT's kSqrt2dPi, doubled exactly)
_GELU_2KC = _F(1.5957692 * 0.0447149985)


@_jit
def gelu_tanh_fast_f32(x):
    """GELU(approximate=True): gelu(+inf) = inf, gelu(-inf) = NaN (-inf * 0, as LiteRT),
    gelu(-0) = -0, NaN -> NaN."""
    return _times_logistic(x, x * mul_add(x * x, _GELU_2KC, _GELU_2K), x)


# GELU, erf form: x * Phi(x) with 1 - Phi(|x|) = erfc(|x|/sqrt2) / 2 formed without cancellation,
# as exp(-x**2/2) * S(|x|) where S(a) = exp(a**2/2) * erfc(a/sqrt2) (erfcx(a/sqrt2), smooth,
# 1 at 0, about 0.8/a far out) is a [3/4] rational fitted for this module (linearised minimax
# on [0, 6]: relative error 1.1 * 2**-24). The negative tail keeps its relative accuracy, as in
# LiteRT's erfc formula (x**2/2 is rounded once: about |x|**2/2 ulp there); |x| is clamped at
# 15, where exp underflows, so that the rational never sees inf.
_GELU_ERF_CLAMP = _F(15.0)
_GELU_S1 = _F(0.6676422)
_GELU_S2 = _F(0.20809673)
_GELU_S3 = _F(0.027064294)
_GELU_T1 = _F(1.4655243)
_GELU_T2 = _F(0.8774444)
_GELU_T3 = _F(0.26024827)
_GELU_T4 = _F(0.03394109)


@_jit
def gelu_erf_fast_f32(x):
    """GELU(approximate=False): gelu(+inf) = inf, gelu(-inf) = NaN (-inf * 0, as LiteRT),
    gelu(-0) = -0, NaN -> NaN."""
    a = abs(x)
    a = _GELU_ERF_CLAMP if _GELU_ERF_CLAMP < a else a
    p = mul_add(mul_add(mul_add(a, _GELU_S3, _GELU_S2), a, _GELU_S1), a, _ONE)
    q = mul_add(mul_add(mul_add(mul_add(a, _GELU_T4, _GELU_T3), a, _GELU_T2), a, _GELU_T1),
                 a, _ONE)
    tail = _exp_nonpositive_gradual5(-(_HALF * a) * a) * p / q     # erfc(|x| / sqrt2)
    return (_HALF * x) * (tail if x < _ZERO else _TWO - tail)


@_jit
def gelu_fast_f32(x, approximate):
    """LiteRT's GELU op under precision="fast": the tanh form when `approximate` (a literal in
    the generated code, so only one form is compiled), else the erf form."""
    return gelu_tanh_fast_f32(x) if approximate else gelu_erf_fast_f32(x)
