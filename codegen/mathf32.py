"""Elementwise float32 math as plain arithmetic that LLVM vectorises.

numba lowers np.exp, np.tanh, math.erf, ... on float32 to scalar libm calls (no SVML here), and
the call blocks vectorisation of the loop around it. The functions below (the exact ones;
precision="fast"'s cheaper ones are in codegen.mathf32_fast, the LLVM intrinsics both use in
codegen.mathf32_intrinsics) use range reduction plus a polynomial, integer bit tricks through
bitcasts, and selects instead of branches, so a loop such as
``for i in range(n): out[i] = exp_f32(x[i])`` compiles to packed AVX2/AVX-512 code. Polynomials
and other a*b + c steps go through ``mul_add`` (llvm.fmuladd): one FMA instruction on CPUs that
have FMA, a mul and an add on those that don't; ULP_BUDGET holds either way. Steps whose
exactness depends on a separate rounding of the product (Dekker products, Fast2Sum error terms)
are plain mul and add.

Conventions:
- Every function takes and returns np.float32; every literal is an np.float32 or np.int32
  constant, so nothing is promoted to float64.
- ``inline="always"`` inlines the numba IR into the caller, and the *caller's* flags then
  govern the code: call these from kernels compiled with ``error_model="numpy"`` (the
  "python" model adds a zero check to every division, which blocks vectorisation) and with
  no fastmath flags beyond "contract": "nnan"/"ninf"/"fast" delete the NaN and infinity
  selects, "reassoc" breaks the exact range reductions. ``mul_add`` fuses whatever the
  caller's flags, so kernels need no "contract" to get FMA here.
- Edge cases follow C's std:: float functions (what TFLite's reference kernels call); each
  docstring lists them. Subnormal inputs and outputs are handled, never flushed.
- ULP_BUDGET is the published worst-case error in ulps against a float64 reference, measured
  by ``ulp_error``, for the fused and the unfused form of ``mul_add`` (see
  ``mathf32_intrinsics.compile_unfused``); tests/test_mathf32.py enforces it and
  perf/math_accuracy.py publishes the measured numbers.
"""
import numba
import numpy as np

from .mathf32_intrinsics import llvm_sqrt, mul_add
from .native import as_float32, as_int32
from .trig_reduce import PI_OVER_2_FIXED_HI, PI_OVER_2_FIXED_LO, reduce_large

ULP_BUDGET = {
    "exp_f32": 1.5,
    "log_f32": 1.5,
    "tanh_f32": 2.0,
    "logistic_f32": 3.0,
    "erf_f32": 2.0,
    "sin_f32": 2.0,
    "cos_f32": 2.0,
    "pow_f32": 2.0,
    "sqrt_f32": 0.5,
}

# sin/cos reduce x exactly while n = rint(x * 2/pi) < 2**16 (8-bit pieces of pi/2 times a
# 16-bit n), i.e. up to SIN_COS_ACCURATE_MAX; from SIN_COS_LARGE on they use the exact
# integer (Payne-Hanek) reduction of trig_reduce.py, so the budget holds over the whole range.
SIN_COS_ACCURATE_MAX = np.float32(102943.0)
SIN_COS_LARGE = np.float32(2.0**16)


def ulp_error(got, ref):
    """Error of float32 results ``got`` in units of the last place of the exact ``ref``.

    ``ref`` is a float64 reference. The ulp is that of the float32 binade holding ``ref``
    (2**-149 for the subnormal range), so a correctly rounded result scores <= 0.5. NaN
    against NaN and equal infinities score 0; any other mismatch involving NaN or an
    infinity (including a float32 overflow of ``ref``) scores inf.
    """
    got = np.asarray(got, dtype=np.float32)
    ref = np.asarray(ref, dtype=np.float64)
    binade = ((ref.view(np.int64) >> 52) & 0x7FF) - 1023       # float64 exponent; 0 -> -1023
    ulp = ((np.maximum(binade, -126) - 23 + 1023) << 52).view(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        err = np.abs(got - ref) / ulp
        ref32 = ref.astype(np.float32)
    special = np.flatnonzero(~(np.isfinite(got) & np.isfinite(ref32)))
    g, r = got.flat[special], ref32.flat[special]
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    err.flat[special] = np.where(nan_g | nan_r, np.where(nan_g & nan_r, 0.0, np.inf),
                                 np.where(g == r, 0.0, np.inf))
    return err


def budget_error(got, ref, abs_floor=0.0):
    """ulp_error with an absolute allowance: (|got - ref| - abs_floor)+ in ulps of ``ref``, so
    that ``budget_error(...) <= ulp`` is |got - ref| <= ulp * ulp_of(ref) + abs_floor, the form
    of FAST_BUDGET (and of codegen.ops.Tolerance). NaN and infinities as in ulp_error."""
    got = np.asarray(got, dtype=np.float32)
    ref = np.asarray(ref, dtype=np.float64)
    err = ulp_error(got, ref)
    if abs_floor:
        with np.errstate(invalid="ignore"):
            scale = err / np.abs(got.astype(np.float64) - ref)      # 1/ulp where finite
            allowed = np.where(np.isfinite(err) & (err > 0), abs_floor * scale, 0.0)
        err = np.maximum(err - allowed, 0.0)
    return err


_jit = numba.njit(inline="always", error_model="numpy", fastmath=False)

_F = np.float32
_I = np.int32
_ZERO = _F(0.0)
_HALF = _F(0.5)
_ONE = _F(1.0)
_TWO = _F(2.0)
_INF = _F(np.inf)
_NAN = _F(np.nan)
_FLT_MIN = _F(2.0**-126)            # smallest normal float32
_FLT_MAX = _F(np.finfo(np.float32).max)
_TWO_POW_23 = _F(2.0**23)           # scales a subnormal into the normal range, exactly
_ONE_BITS = _I(0x3F800000)          # bits of 1.0f
_MANTISSA_MASK = _I(0x007FFFFF)

# exp: Cephes expf.c. x = n*ln2 + r, |r| <= ln2/2, with ln2 = _LN2_HI + _LN2_LO; _LN2_HI has
# 9 significant bits so n*_LN2_HI is exact for |n| <= 2**15.
_LOG2E = _F(1.44269504088896341)
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.12194440e-4)
# Adding 1.5 * 2**23 rounds a float32 of magnitude < 2**22 to an integer (round to nearest
# even) and leaves that integer in the low mantissa bits, so no float->int conversion.
_ROUND_MAGIC = _F(12582912.0)
_ROUND_MAGIC_BITS = _I(0x4B400000)
# Clamps keeping n in [-150, 128]: exp(89) overflows to inf, exp(-104) rounds to +0.
_EXP_X_MAX = _F(89.0)
_EXP_X_MIN = _F(-104.0)
# Cephes expf.c minimax polynomial: exp(r) = 1 + r + r**2 * P(r) on [-ln2/2, ln2/2].
_EXP_P0 = _F(1.9875691500e-4)
_EXP_P1 = _F(1.3981999507e-3)
_EXP_P2 = _F(8.3334519073e-3)
_EXP_P3 = _F(4.1665795894e-2)
_EXP_P4 = _F(1.6666665459e-1)
_EXP_P5 = _F(5.0000001201e-1)


@_jit
def _exp_parts(hi, lo):
    """exp(hi + lo) for |lo| << 1 ulp of hi; lo extends the precision of hi (pow needs it).

    n = rint(hi / ln2) through _ROUND_MAGIC, r = hi - n*ln2 + lo by Cody-Waite, then
    2**n is applied as two factors 2**(n//2) * 2**(n - n//2), each a normal float, so the
    result overflows to inf and underflows gradually with a single rounding.
    """
    hi = _EXP_X_MAX if hi > _EXP_X_MAX else hi
    hi = _EXP_X_MIN if hi < _EXP_X_MIN else hi
    t = mul_add(hi, _LOG2E, _ROUND_MAGIC)     # fused or not: n is an integer near hi/ln2
    n = t - _ROUND_MAGIC
    # n * _LN2_HI is exact, so the first step rounds once fused or not: same result.
    r = mul_add(n, -_LN2_LO, mul_add(n, -_LN2_HI, hi)) + lo
    p = mul_add(r, _EXP_P0, _EXP_P1)
    p = mul_add(p, r, _EXP_P2)
    p = mul_add(p, r, _EXP_P3)
    p = mul_add(p, r, _EXP_P4)
    p = mul_add(p, r, _EXP_P5)
    p = mul_add(p, r * r, r) + _ONE
    k = as_int32(t) - _ROUND_MAGIC_BITS
    k1 = k >> 1
    scale1 = as_float32(_I((k1 + 127) << 23))
    scale2 = as_float32(_I((k - k1 + 127) << 23))
    return p * scale1 * scale2


@_jit
def exp_f32(x):
    """e**x. exp(NaN) = NaN, exp(+inf) = inf, exp(-inf) = 0; overflows to inf for
    x > 88.72; subnormal results are rounded, not flushed; below -103.97 gives +0."""
    return _exp_parts(x, _F(-0.0))


# log: Cephes logf.c. x = 2**e * m with m in [sqrt(1/2), sqrt(2)), found by adding
# 1 - sqrt(1/2) to the bits (musl's trick) so the exponent field carries into e.
_SQRT_HALF_BITS = _I(0x3F3504F3)    # bits of sqrt(1/2)
# Cephes logf.c minimax polynomial: log(1+f) = f - f**2/2 + f**3 * P(f), f in
# [sqrt(1/2)-1, sqrt(2)-1].
_LOG_P0 = _F(7.0376836292e-2)
_LOG_P1 = _F(-1.1514610310e-1)
_LOG_P2 = _F(1.1676998740e-1)
_LOG_P3 = _F(-1.2420140846e-1)
_LOG_P4 = _F(1.4249322787e-1)
_LOG_P5 = _F(-1.6668057665e-1)
_LOG_P6 = _F(2.0000714765e-1)
_LOG_P7 = _F(-2.4999993993e-1)
_LOG_P8 = _F(3.3333331174e-1)


@_jit
def _log_reduce(x):
    """(e, m) with x = 2**e * m, m in [sqrt(1/2), sqrt(2)), for finite x > 0 (subnormals
    included); e is returned as float32 (exact)."""
    tiny = x < _FLT_MIN
    x = x * _TWO_POW_23 if tiny else x
    bits = as_int32(x) + (_ONE_BITS - _SQRT_HALF_BITS)
    e = _F((bits >> 23) - 127 - (23 if tiny else 0))
    m = as_float32(_I((bits & _MANTISSA_MASK) + _SQRT_HALF_BITS))
    return e, m


@_jit
def log_f32(x):
    """Natural logarithm. log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = inf,
    log(NaN) = NaN; subnormal x is exact-scaled, not flushed."""
    e, m = _log_reduce(x)
    f = m - _ONE
    z = f * f
    y = mul_add(f, _LOG_P0, _LOG_P1)
    y = mul_add(y, f, _LOG_P2)
    y = mul_add(y, f, _LOG_P3)
    y = mul_add(y, f, _LOG_P4)
    y = mul_add(y, f, _LOG_P5)
    y = mul_add(y, f, _LOG_P6)
    y = mul_add(y, f, _LOG_P7)
    y = mul_add(y, f, _LOG_P8)
    return _log_assemble(x, e, f, z, y)


@_jit
def _log_assemble(x, e, f, z, p):
    """log(x) for x = 2**e * (1 + f), z = f*f, from P(f), log(1+f) ~ f - z/2 + f*z*P(f), with
    log's edge cases. _HALF * z and e * _LN2_HI (|e| <= 150 times 9 bits) are exact: fusing
    them changes nothing."""
    y = p * f * z
    y = mul_add(-_HALF, z, mul_add(e, _LN2_LO, y))
    r = mul_add(e, _LN2_HI, f + y)
    r = -_INF if x == _ZERO else r
    r = _NAN if x < _ZERO else r
    return x if not x < _INF else r


# tanh: Cephes tanhf.c. Odd minimax polynomial below |x| = 0.625, else 1 - 2/(exp(2|x|)+1).
_TANH_SPLIT = _F(0.625)
_TANH_P0 = _F(-5.70498872745e-3)
_TANH_P1 = _F(2.06390887954e-2)
_TANH_P2 = _F(-5.37397155531e-2)
_TANH_P3 = _F(1.33314422036e-1)
_TANH_P4 = _F(-3.33332819422e-1)


@_jit
def tanh_f32(x):
    """Hyperbolic tangent. tanh(+-inf) = +-1, tanh(-0) = -0, tanh(NaN) = NaN. Both
    branches are computed on |x| and selected, then the sign bit of x is applied."""
    ax = abs(x)
    z = ax * ax
    p = mul_add(z, _TANH_P0, _TANH_P1)
    p = mul_add(p, z, _TANH_P2)
    p = mul_add(p, z, _TANH_P3)
    p = mul_add(p, z, _TANH_P4)
    small = mul_add(p * z, ax, ax)
    big = _ONE - _TWO / (_exp_parts(ax + ax, _F(-0.0)) + _ONE)
    v = small if ax < _TANH_SPLIT else big
    return -v if as_int32(x) < 0 else v


@_jit
def logistic_f32(x):
    """1 / (1 + exp(-x)). logistic(+inf) = 1, logistic(-inf) = 0, NaN -> NaN.

    With e = exp(-|x|) <= 1 the result is 1/(1+e) or e/(1+e): nothing overflows, and the
    tail for x << 0 keeps its relative accuracy down into the subnormals (TFLite's
    reference kernel switches to exp(x) below -9 for the same reason).
    """
    e = _exp_parts(-abs(x), _F(-0.0))
    return (_ONE if x >= _ZERO else e) / (_ONE + e)


# erf: coefficients fitted for this module (float64 least squares on 4000 Chebyshev nodes,
# rounded to float32). Below _ERF_SPLIT, erf(x) = x + x * Q(x**2) with Q ~ erf(x)/x - 1
# (fit error 0.4 ulp); above it, erf(t) = 1 - exp(R(t)) with R ~ log(erfc(t)) on
# [_ERF_SPLIT, 4] (fit error 0.04 ulp of erf). Past t = 4, erf rounds to 1.
_ERF_SPLIT = _F(0.921875)
_ERF_T_MAX = _F(4.0)
_ERF_Q0 = _F(-6.008737e-4)
_ERF_Q1 = _F(4.9970117e-3)
_ERF_Q2 = _F(-2.6769497e-2)
_ERF_Q3 = _F(1.12819046e-1)
_ERF_Q4 = _F(-3.7612504e-1)
_ERF_Q5 = _F(1.2837915e-1)
_ERF_R0 = _F(-3.9904876e-8)
_ERF_R1 = _F(2.4969324e-6)
_ERF_R2 = _F(-5.4058717e-5)
_ERF_R3 = _F(6.3889625e-4)
_ERF_R4 = _F(-4.8971632e-3)
_ERF_R5 = _F(2.6709925e-2)
_ERF_R6 = _F(-1.1046824e-1)
_ERF_R7 = _F(-6.31505e-1)
_ERF_R8 = _F(-1.1303812)
_ERF_R9 = _F(3.488988e-4)


@_jit
def erf_f32(x):
    """Error function. erf(+-inf) = +-1, erf(-0) = -0, erf(NaN) = NaN."""
    z = x * x
    q = mul_add(z, _ERF_Q0, _ERF_Q1)
    q = mul_add(q, z, _ERF_Q2)
    q = mul_add(q, z, _ERF_Q3)
    q = mul_add(q, z, _ERF_Q4)
    q = mul_add(q, z, _ERF_Q5)
    small = mul_add(x, q, x)
    t = abs(x)
    t = _ERF_T_MAX if t > _ERF_T_MAX else t
    r = mul_add(t, _ERF_R0, _ERF_R1)
    r = mul_add(r, t, _ERF_R2)
    r = mul_add(r, t, _ERF_R3)
    r = mul_add(r, t, _ERF_R4)
    r = mul_add(r, t, _ERF_R5)
    r = mul_add(r, t, _ERF_R6)
    r = mul_add(r, t, _ERF_R7)
    r = mul_add(r, t, _ERF_R8)
    r = mul_add(r, t, _ERF_R9)
    big = _ONE - _exp_parts(r, _F(-0.0))
    big = big if x > _ZERO else -big
    return small if t < _ERF_SPLIT else big


# sin/cos: x = n*pi/2 + r, |r| <= ~pi/4. pi/2 is split (from 80 digits of pi) into five
# pieces of <= 8 significant bits, whose products with n < 2**16 are exact, plus a float32
# remainder; together they carry pi/2 to 1e-22. The rounding errors of the subtractions are
# recovered exactly (see _sin_cos_reduce) and fed to the polynomials as r_lo.
_TWO_OVER_PI = _F(0.636619772367581343)
_PIO2_1 = _F(float.fromhex("0x1.92p+0"))
_PIO2_2 = _F(float.fromhex("0x1.fcp-12"))
_PIO2_3 = _F(float.fromhex("-0x1.58p-21"))
_PIO2_4 = _F(float.fromhex("0x1.1p-30"))
_PIO2_5 = _F(float.fromhex("0x1.68p-39"))
_PIO2_6 = _F(float.fromhex("0x1.84698ap-48"))
_QUARTER = _F(0.25)
_FOUR = _F(4.0)
# Cephes sinf.c minimax polynomials on [-pi/4, pi/4]:
# sin(r) = r + r**3 * S(r**2), cos(r) = 1 - r**2/2 + r**4 * C(r**2).
_SIN_S0 = _F(-1.9515295891e-4)
_SIN_S1 = _F(8.3321608736e-3)
_SIN_S2 = _F(-1.6666654611e-1)
_COS_C0 = _F(2.443315711809948e-5)
_COS_C1 = _F(-1.388731625493765e-3)
_COS_C2 = _F(4.166664568298827e-2)


@_jit
def _sin_cos_reduce(x):
    """(r_hi, r_lo, q): x = n*pi/2 + r_hi + r_lo, q = n mod 4 as float32 (0..3), x >= 0.

    The first two steps are exact (Sterbenz). A later step s' = s - n*piece may round only
    when |s'| is large compared with n*piece, and then (s - s') - n*piece is its exact
    rounding error (Fast2Sum; the term is 0 when the step was exact). Every n*piece is
    exact for n < 2**16, so mul_add gives the same s fused or not; the Fast2Sum steps keep
    the product p as a value of its own, as their error term needs it.
    """
    n = np.rint(x * _TWO_OVER_PI)
    s = mul_add(n, -_PIO2_2, mul_add(n, -_PIO2_1, x))
    s6, err = _subtract_small_pieces(s, n)
    q = n - _FOUR * np.floor(n * _QUARTER)
    return s6, err, q


@_jit
def _subtract_small_pieces(s, n):
    """s - n * (_PIO2_3 + _PIO2_4 + _PIO2_5 + _PIO2_6) as (s6, err), s6 + err its value: each
    subtraction's rounding error is kept by Fast2Sum, which needs the product p apart."""
    p = n * _PIO2_3
    s3 = s - p
    err = (s - s3) - p
    p = n * _PIO2_4
    s4 = s3 - p
    err += (s3 - s4) - p
    p = n * _PIO2_5
    s5 = s4 - p
    err += (s4 - s5) - p
    p = n * _PIO2_6
    s6 = s5 - p
    err += (s5 - s6) - p
    return s6, err


@_jit
def _sin_poly(r, r_lo):
    z = r * r
    p = mul_add(z, _SIN_S0, _SIN_S1)
    p = mul_add(p, z, _SIN_S2)
    return r + mul_add(p * z, r, r_lo)


@_jit
def _cos_poly(r, r_lo):
    z = r * r
    p = mul_add(z, _COS_C0, _COS_C1)
    p = mul_add(p, z, _COS_C2)
    w = mul_add(p * z, z, -(r * r_lo))      # r**4 * C(r**2) - r * r_lo
    return _ONE - (_HALF * z - w)


@_jit
def _clamp_unit(v):
    """Keeps results in [-1, 1]; NaN passes."""
    v = _ONE if v > _ONE else v
    return -_ONE if v < -_ONE else v


@_jit
def _sin_cos_reduce_abs(x):
    """(r_hi, r_lo, q) for |x|: Cody-Waite below SIN_COS_LARGE, Payne-Hanek from there on
    (both computed, one selected, so the loop stays branch-free); NaN for +-inf and NaN."""
    ax = abs(x)
    r, r_lo, q = _sin_cos_reduce(ax)
    fraction, q_big = reduce_large(ax)
    f_hi = np.float32(fraction)
    f_lo = np.float32(fraction - np.int64(f_hi))
    p, e = _two_prod(f_hi, PI_OVER_2_FIXED_HI)
    e = e + mul_add(f_lo, PI_OVER_2_FIXED_HI, f_hi * PI_OVER_2_FIXED_LO)
    big_hi = p + e
    big_lo = e - (big_hi - p)
    if ax >= SIN_COS_LARGE:
        return big_hi + (ax - ax), big_lo, np.float32(q_big)
    return r, r_lo, q


@_jit
def _sin_of(x, r, r_lo, q):
    v = _cos_poly(r, r_lo) if (q == _ONE) or (q == _F(3.0)) else _sin_poly(r, r_lo)
    return _clamp_unit(-v if (q >= _TWO) != (as_int32(x) < 0) else v)


@_jit
def _cos_of(r, r_lo, q):
    v = _sin_poly(r, r_lo) if (q == _ONE) or (q == _F(3.0)) else _cos_poly(r, r_lo)
    return _clamp_unit(-v if (q == _ONE) or (q == _TWO) else v)


@_jit
def sin_f32(x):
    """Sine. sin(+-inf) = NaN, sin(NaN) = NaN, sin(-0) = -0. Within ULP_BUDGET."""
    r, r_lo, q = _sin_cos_reduce_abs(x)     # sin is odd: reduce |x|, apply the sign last
    return _sin_of(x, r, r_lo, q)


@_jit
def cos_f32(x):
    """Cosine. cos(+-inf) = NaN, cos(NaN) = NaN. Within ULP_BUDGET."""
    r, r_lo, q = _sin_cos_reduce_abs(x)
    return _cos_of(r, r_lo, q)


# A kernel's fast loop (codegen.fastpath) runs sin/cos without the large-argument reduction,
# which costs more than the rest of sin_f32 even when no argument needs it, and counts the arguments
# that would: any such count makes the kernel run its exact loop, with sin_f32/cos_f32.
@_jit
def far_angle(x):
    """1 where sin_near_f32/cos_near_f32 may differ from sin_f32/cos_f32 (finite |x| >= 2**16),
    else 0; +-inf and NaN give NaN either way."""
    ax = abs(x)
    return _I(1) if ax >= SIN_COS_LARGE and ax < _INF else _I(0)


@_jit
def sin_near_f32(x):
    """sin_f32(x), bit for bit, where far_angle(x) is 0."""
    r, r_lo, q = _sin_cos_reduce(abs(x))
    return _sin_of(x, r, r_lo, q)


@_jit
def cos_near_f32(x):
    """cos_f32(x), bit for bit, where far_angle(x) is 0."""
    r, r_lo, q = _sin_cos_reduce(abs(x))
    return _cos_of(r, r_lo, q)


# pow: |x|**y = exp(y * log|x|) with log|x| and the product carried as float32 pairs
# (hi + lo), since y*log|x| up to ~104 needs ~31 bits to give a float32 result.
_SPLIT_MASK = _I(-4096)             # 0xFFFFF000: sign, exponent, top 11 mantissa bits
# log(m) = log(c) + 2*atanh(s), s = (m-c)/(m+c), with the centre c in {2**-1/3, 1, 2**1/3}
# nearest to m (switching at 2**-1/6, 2**1/6), so |s| <= 0.0578. log(c) is split into a
# multiple of 2**-17 (exact when added to e*_LN2_HI) and a float32 rest: the values are
# float64 log() of the float32 centres.
_POW_M_LOW = _F(float.fromhex("0x1.c823ep-1"))          # 2**-1/6
_POW_M_HIGH = _F(float.fromhex("0x1.1f59acp+0"))        # 2**1/6
_POW_C_LOW = _F(float.fromhex("0x1.965feap-1"))         # 2**-1/3
_POW_C_HIGH = _F(float.fromhex("0x1.428a3p+0"))         # 2**1/3
_POW_LOGC_HI = _F(float.fromhex("0x1.d93p-3"))          # both |log c|, to 2**-17
_POW_LOG_C_LOW_LO = _F(float.fromhex("-0x1.0642d6p-21"))
_POW_LOG_C_HIGH_LO = _F(float.fromhex("0x1.09e4d4p-21"))
# Taylor coefficients 2/(2k+1) of log((1+s)/(1-s)) = 2s + s * z * A(z), z = s**2; with
# |s| <= 0.0578 the first omitted term is < 2**-36 relative.
_ATANH_A0 = _F(2.0 / 7.0)
_ATANH_A1 = _F(2.0 / 5.0)
_ATANH_A2 = _F(2.0 / 3.0)
_POW_T_BIG = _F(150.0)              # |y*log|x|| beyond this: result is inf or 0


@_jit
def _split(a):
    """a = hi + lo with hi and lo of at most 12 significant bits each (exact)."""
    hi = as_float32(_I(as_int32(a) & _SPLIT_MASK))
    return hi, a - hi


@_jit
def _two_prod(a, b):
    """(p, e) with p = fl(a*b) and p + e = a*b exactly (Dekker 1971, no FMA needed)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, e


@_jit
def _log_parts(a):
    """log(a) as (hi, lo), |lo| < 1 ulp of hi, for finite a > 0 (error ~2**-40 relative)."""
    e, m = _log_reduce(a)
    low = m < _POW_M_LOW
    high = m >= _POW_M_HIGH
    c = _POW_C_LOW if low else (_POW_C_HIGH if high else _ONE)
    logc_hi = -_POW_LOGC_HI if low else (_POW_LOGC_HI if high else _ZERO)
    logc_lo = _POW_LOG_C_LOW_LO if low else (_POW_LOG_C_HIGH_LO if high else _ZERO)
    f = m - c                               # exact (Sterbenz)
    u = c + m
    u_lo = m - (u - c)                      # Fast2Sum: u + u_lo = m + c exactly
    s = f / u
    p, p_err = _two_prod(s, u)
    s_lo = mul_add(-s, u_lo, (f - p) - p_err) / u
    z = s * s
    tail = s * z * mul_add(mul_add(z, _ATANH_A0, _ATANH_A1), z, _ATANH_A2)
    big = mul_add(e, _LN2_HI, logc_hi)     # exact (fused or not); 0 or > |2s| (Fast2Sum)
    hi = big + (s + s)
    lo = ((s + s) - (hi - big)) + (mul_add(e, _LN2_LO, logc_lo) + (s_lo + s_lo + tail))
    top = hi + lo                           # renormalise so lo < 1 ulp of hi
    return top, lo - (top - hi)


@_jit
def pow_f32(x, y):
    """x**y with C pow semantics:
    pow(x, +-0) = 1 even for NaN x; pow(1, y) = 1 even for NaN y; pow(-1, +-inf) = 1;
    otherwise NaN in -> NaN out; x < 0 finite with y finite non-integer -> NaN;
    x < 0 (or -0, -inf) with odd integer y -> the sign of x is kept (pow(-2, 3) = -8,
    pow(-0, -1) = -inf); pow(+-0, y < 0) = inf, pow(+-0, y > 0) = 0;
    pow(x, +inf) = inf for |x| > 1, 0 for |x| < 1 (pow(x, -inf) the reverse);
    pow(+-inf, y) = inf for y > 0, 0 for y < 0. Over/underflow give inf / 0 with
    gradual underflow.
    """
    a = abs(x)
    l_hi, l_lo = _log_parts(a)
    t_hi, t_err = _two_prod(y, l_hi)
    r = _exp_parts(t_hi, mul_add(y, l_lo, t_err))
    big = not abs(t_hi) < _POW_T_BIG or a == _ZERO or a == _INF
    grows = (a > _ONE) == (y > _ZERO)
    r = (_INF if grows else _ZERO) if big else r
    y_int = np.floor(y) == y
    y_half = y * _HALF
    y_odd = y_int and np.floor(y_half) != y_half
    r = -r if (as_int32(x) < 0 and y_odd) else r
    r = _NAN if (x < _ZERO and x > -_INF and not y_int) else r
    r = _NAN if (x != x or y != y) else r
    r = _ONE if (y == _ZERO or x == _ONE or (x == -_ONE and abs(y) == _INF)) else r
    return r


@_jit
def sqrt_f32(x):
    """Correctly rounded square root through the llvm.sqrt intrinsic, never libm.
    sqrt(-0) = -0, sqrt(x < 0) = NaN, sqrt(inf) = inf, sqrt(NaN) = NaN."""
    return llvm_sqrt(x)
