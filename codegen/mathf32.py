"""Elementwise float32 math as plain arithmetic that LLVM vectorises.

numba lowers np.exp, np.tanh, math.erf, ... on float32 to scalar libm calls (no SVML here):
2-14 ns per element, and the call blocks vectorisation of the loop around it. The functions
below use range reduction plus a polynomial, integer bit tricks through bitcasts, and
selects instead of branches, so a loop such as ``for i in range(n): out[i] = exp_f32(x[i])``
compiles to packed AVX2/AVX-512 code. Polynomials and other a*b + c steps go through
``_mul_add`` (llvm.fmuladd): one FMA instruction on CPUs that have FMA, a mul and an add on
those that don't; ULP_BUDGET holds either way. Steps whose exactness depends on a separate
rounding of the product (Dekker products, Fast2Sum error terms) are plain mul and add.

Conventions:
- Every function takes and returns np.float32; every literal is an np.float32 or np.int32
  constant, so nothing is promoted to float64.
- ``inline="always"`` inlines the numba IR into the caller, and the *caller's* flags then
  govern the code: call these from kernels compiled with ``error_model="numpy"`` (the
  "python" model adds a zero check to every division, which blocks vectorisation) and with
  no fastmath flags beyond "contract": "nnan"/"ninf"/"fast" delete the NaN and infinity
  selects, "reassoc" breaks the exact range reductions. ``_mul_add`` fuses whatever the
  caller's flags, so kernels need no "contract" to get FMA here.
- Edge cases follow C's std:: float functions (what TFLite's reference kernels call); each
  docstring lists them. Subnormal inputs and outputs are handled, never flushed.
- ULP_BUDGET is the published worst-case error in ulps against a float64 reference, measured
  by ``ulp_error``, for the fused and the unfused form of ``_mul_add`` (see
  ``compile_unfused``); tests/test_mathf32.py enforces it and perf/math_accuracy.py
  publishes the measured numbers.
"""
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .native import as_float32, as_int32
from .target import numba_target
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


@intrinsic
def _llvm_sqrt(typingctx, x):
    """llvm.sqrt.f32 (vsqrtps once vectorised). numba's np.sqrt/math.sqrt emit a libm
    sqrtf call instead: LLVM vectorises it, but scalar remainder iterations still call libm."""
    def codegen(context, builder, signature, args):
        return builder.call(builder.module.declare_intrinsic("llvm.sqrt", [ir.FloatType()]), args)

    return types.float32(types.float32), codegen


_FUSE_MUL_ADD = True


@intrinsic
def _mul_add(typingctx, a, b, c):
    """a*b + c as llvm.fmuladd.f32: LLVM emits one FMA (vfmadd) where the target CPU has it
    and a separate mul and add where it doesn't, never a libm fmaf call. Whether it fuses
    depends on the CPU, not on the caller's fastmath flags, so use it only where both
    roundings are acceptable. float32 arguments only (nothing is promoted)."""
    if not all(arg == types.float32 for arg in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):
        if not _FUSE_MUL_ADD:
            return builder.fadd(builder.fmul(args[0], args[1]), args[2])
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fmuladd", [f32],
                                              ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fn, args)

    return types.float32(types.float32, types.float32, types.float32), codegen


def compile_unfused(loop, n_arrays: int):
    """`loop` (a numba dispatcher over `n_arrays` contiguous float32 arrays) compiled now with
    ``_mul_add`` as a plain mul and add, i.e. what a CPU without FMA computes; no other
    specialisation may be compiled later (it would fuse). For the accuracy checks only; not
    thread-safe."""
    global _FUSE_MUL_ADD
    saved, _FUSE_MUL_ADD = _FUSE_MUL_ADD, False
    try:
        loop.compile((numba.float32[::1],) * n_arrays)
    finally:
        _FUSE_MUL_ADD = saved
    loop.disable_compile()
    return loop


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
    t = _mul_add(hi, _LOG2E, _ROUND_MAGIC)     # fused or not: n is an integer near hi/ln2
    n = t - _ROUND_MAGIC
    # n * _LN2_HI is exact, so the first step rounds once fused or not: same result.
    r = _mul_add(n, -_LN2_LO, _mul_add(n, -_LN2_HI, hi)) + lo
    p = _mul_add(r, _EXP_P0, _EXP_P1)
    p = _mul_add(p, r, _EXP_P2)
    p = _mul_add(p, r, _EXP_P3)
    p = _mul_add(p, r, _EXP_P4)
    p = _mul_add(p, r, _EXP_P5)
    p = _mul_add(p, r * r, r) + _ONE
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
    y = _mul_add(f, _LOG_P0, _LOG_P1)
    y = _mul_add(y, f, _LOG_P2)
    y = _mul_add(y, f, _LOG_P3)
    y = _mul_add(y, f, _LOG_P4)
    y = _mul_add(y, f, _LOG_P5)
    y = _mul_add(y, f, _LOG_P6)
    y = _mul_add(y, f, _LOG_P7)
    y = _mul_add(y, f, _LOG_P8)
    return _log_assemble(x, e, f, z, y)


@_jit
def _log_assemble(x, e, f, z, p):
    """log(x) for x = 2**e * (1 + f), z = f*f, from P(f), log(1+f) ~ f - z/2 + f*z*P(f), with
    log's edge cases. _HALF * z and e * _LN2_HI (|e| <= 150 times 9 bits) are exact: fusing
    them changes nothing."""
    y = p * f * z
    y = _mul_add(-_HALF, z, _mul_add(e, _LN2_LO, y))
    r = _mul_add(e, _LN2_HI, f + y)
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
    p = _mul_add(z, _TANH_P0, _TANH_P1)
    p = _mul_add(p, z, _TANH_P2)
    p = _mul_add(p, z, _TANH_P3)
    p = _mul_add(p, z, _TANH_P4)
    small = _mul_add(p * z, ax, ax)
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
    q = _mul_add(z, _ERF_Q0, _ERF_Q1)
    q = _mul_add(q, z, _ERF_Q2)
    q = _mul_add(q, z, _ERF_Q3)
    q = _mul_add(q, z, _ERF_Q4)
    q = _mul_add(q, z, _ERF_Q5)
    small = _mul_add(x, q, x)
    t = abs(x)
    t = _ERF_T_MAX if t > _ERF_T_MAX else t
    r = _mul_add(t, _ERF_R0, _ERF_R1)
    r = _mul_add(r, t, _ERF_R2)
    r = _mul_add(r, t, _ERF_R3)
    r = _mul_add(r, t, _ERF_R4)
    r = _mul_add(r, t, _ERF_R5)
    r = _mul_add(r, t, _ERF_R6)
    r = _mul_add(r, t, _ERF_R7)
    r = _mul_add(r, t, _ERF_R8)
    r = _mul_add(r, t, _ERF_R9)
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
    exact for n < 2**16, so _mul_add gives the same s fused or not; the Fast2Sum steps keep
    the product p as a value of its own, as their error term needs it.
    """
    n = np.rint(x * _TWO_OVER_PI)
    s = _mul_add(n, -_PIO2_2, _mul_add(n, -_PIO2_1, x))
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
    p = _mul_add(z, _SIN_S0, _SIN_S1)
    p = _mul_add(p, z, _SIN_S2)
    return r + _mul_add(p * z, r, r_lo)


@_jit
def _cos_poly(r, r_lo):
    z = r * r
    p = _mul_add(z, _COS_C0, _COS_C1)
    p = _mul_add(p, z, _COS_C2)
    w = _mul_add(p * z, z, -(r * r_lo))      # r**4 * C(r**2) - r * r_lo
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
    e = e + _mul_add(f_lo, PI_OVER_2_FIXED_HI, f_hi * PI_OVER_2_FIXED_LO)
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


# A kernel's fast loop (render.FastPath) runs sin/cos without the large-argument reduction,
# which costs 4x the rest of sin_f32 even when no argument needs it, and counts the arguments
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
    s_lo = _mul_add(-s, u_lo, (f - p) - p_err) / u
    z = s * s
    tail = s * z * _mul_add(_mul_add(z, _ATANH_A0, _ATANH_A1), z, _ATANH_A2)
    big = _mul_add(e, _LN2_HI, logc_hi)     # exact (fused or not); 0 or > |2s| (Fast2Sum)
    hi = big + (s + s)
    lo = ((s + s) - (hi - big)) + (_mul_add(e, _LN2_LO, logc_lo) + (s_lo + s_lo + tail))
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
    r = _exp_parts(t_hi, _mul_add(y, l_lo, t_err))
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
    return _llvm_sqrt(x)



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
# fused correction (q = a*r, q + r*(a - q*d)), as accurate as the division on every input
# measured, but 5-10% slower (logistic, tanh; Zen 4 and Rocket Lake): these loops are bound
# by the throughput of the FMA pipes, the divider works beside them, and the estimate puts
# three more instructions on them. FAST_BUDGET is (ulp, abs) against a float64
# reference, |got - ref| <= ulp * ulp_of(ref) + abs (budget_error), for the fused and the
# unfused form of _mul_add; sin/cos only where far_angle(x) is 0.
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


@intrinsic
def _fma_available(typingctx):
    """True (a compile-time constant LLVM folds away) when _mul_add fuses: the target has FMA
    and compile_unfused is not in effect. Picks reductions that are exact only with FMA."""
    def codegen(context, builder, signature, args):
        fused = _FUSE_MUL_ADD and "fma" in numba_target().features
        return context.get_constant(types.boolean, fused)

    return types.boolean(), codegen


@intrinsic
def _ldexp(typingctx, p, k):
    """p * 2**k for an integer k (its low 32 bits), rounded once (overflow to inf, gradual
    underflow): llvm.ldexp, which LLVM lowers to vscalefps on AVX-512 targets. Elsewhere it
    would call libm, so there the product is formed as p * 2**(k//2) * 2**(k - k//2), two
    normal powers of two (k in [-252, 254]), as _exp_parts does."""
    if not (p == types.float32 and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        f32, i32 = ir.FloatType(), ir.IntType(32)
        value, exponent = args
        if exponent.type != i32:
            exponent = builder.trunc(exponent, i32)
        if "avx512f" in numba_target().features:
            fn = builder.module.declare_intrinsic("llvm.ldexp", [f32, i32],
                                                  ir.FunctionType(f32, [f32, i32]))
            return builder.call(fn, [value, exponent])
        half = builder.ashr(exponent, ir.Constant(i32, 1))
        rest = builder.sub(exponent, half)
        bias, shift = ir.Constant(i32, 127), ir.Constant(i32, 23)
        s1 = builder.bitcast(builder.shl(builder.add(half, bias), shift), f32)
        s2 = builder.bitcast(builder.shl(builder.add(rest, bias), shift), f32)
        return builder.fmul(builder.fmul(value, s1), s2)

    return types.float32(types.float32, k), codegen


# exp: n = rint(x / ln2) through _ROUND_MAGIC, r = x - n*ln2 (exact first step, _LN2_HI has 9
# bits), exp(r) = 1 + r + r**2 * Q(r), then 2**n by _ldexp. Q fitted for this module (minimax
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
    t = _mul_add(x, _LOG2E, _ROUND_MAGIC)
    k = _I(as_int32(t) - _ROUND_MAGIC_BITS)
    n = _F(k)                   # llvm.ldexp converts k the same way: one vcvtdq2ps for both
    r = _mul_add(n, -_LN2_LO, _mul_add(n, -_LN2_HI, x))
    return r, k


@_jit
def _exp_fast5(x):
    r, k = _exp_reduce(x)
    return _ldexp(_exp5_polynomial(r), k)


@_jit
def _exp_nonpositive_gradual5(x):
    """e**x for x <= 0 (a positive x is not handled): exp_fast_f32's value, gradual underflow
    included (_exp_nonpositive_fast5 flushes below 2**-126), +0 for -inf, NaN -> NaN."""
    r, k = _exp_reduce_below(x)
    return _ldexp(_exp5_polynomial(r), k)


@_jit
def _exp5_polynomial(r):
    """e**r for |r| <= ~ln2/2, degree 5."""
    q = _mul_add(r, _EXPF_Q3, _EXPF_Q2)
    q = _mul_add(q, r, _EXPF_Q1)
    q = _mul_add(q, r, _EXPF_Q0)
    return _mul_add(_mul_add(q, r, _ONE), r, _ONE)


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
    t = _mul_add(x, _LOG2E, _ROUND_MAGIC_BIASED)
    n = t - _ROUND_MAGIC_BIASED
    r = _mul_add(n, -_LN2_LO, _mul_add(n, -_LN2_HI, x))
    return _exp5_polynomial(r) * as_float32(_I(as_int32(t) << _I(23)))


@_jit
def _exp_fast6(x):
    r, k = _exp_reduce(x)
    q = _mul_add(r, _EXPF6_Q4, _EXPF6_Q3)
    q = _mul_add(q, r, _EXPF6_Q2)
    q = _mul_add(q, r, _EXPF6_Q1)
    q = _mul_add(q, r, _EXPF6_Q0)
    return _ldexp(_mul_add(_mul_add(q, r, _ONE), r, _ONE), k)


@_jit
def exp_fast_f32(x):
    """e**x within FAST_BUDGET; the edge cases of exp_f32 (NaN, +-inf, overflow to inf from
    88.73, gradual underflow, +0 below -103.97)."""
    return _exp_fast5(x)


@_jit
def logistic_fast_f32(x):
    """1 / (1 + exp(-x)) from e = exp(-|x|) in (0, 1]: 1/(1+e) or e/(1+e), so nothing
    overflows and the negative tail keeps its relative accuracy down into the subnormals.
    e has exp_fast_f32's polynomial (XNNPACK's degree): the longer one of _exp_fast6 is 5%
    slower and leaves the error against LiteRT's kernel as it is (7 ulp, XNNPACK's own).
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
# numerator, about 8% faster, and within 8 ulp of LiteRT (XNNPACK's own error; the rational
# itself is 5.4 ulp from tanh, so LiteRT's unfused rounding and ours add up). |x| is clamped
# at 9 rather than Eigen's 7.90738964 (where its unfused evaluation reaches 1) and the result
# at 1, so +-inf give +-1 exactly whether _mul_add fuses or not.
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
    p = _mul_add(_mul_add(_mul_add(x2, _TANH_A1, _TANH_A2), x2, _TANH_A3), x2, _TANH_A4)
    q = _mul_add(x2, _TANH_B0, _TANH_B1)
    q = _mul_add(q, x2, _TANH_B2)
    q = _mul_add(q, x2, _TANH_B3)
    q = _mul_add(q, x2, _ONE)
    v = _mul_add(x2 * ax, p, ax) / q
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
    q = _mul_add(r, _EXPM1_Q4, _EXPM1_Q3)
    q = _mul_add(q, r, _EXPM1_Q2)
    q = _mul_add(q, r, _EXPM1_Q1)
    q = _mul_add(q, r, _EXPM1_Q0)
    sr = s * r
    y = _mul_add(q * r, sr, sr) + (s - _ONE)
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
    y = _mul_add(f, _LOGF_P5, _LOGF_P4)
    y = _mul_add(y, f, _LOGF_P3)
    y = _mul_add(y, f, _LOGF_P2)
    y = _mul_add(y, f, _LOGF_P1)
    y = _mul_add(y, f, _LOGF_P0)
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
    if _fma_available():
        r = _mul_add(m, -_PI_1, ax)
        r = _mul_add(m, -_PI_2, r)
        return _mul_add(m, -_PI_3, r)
    n = m + m                                   # an integer < 2**16: pieces of pi/2 apply
    s = ax - n * _PIO2_1
    s = s - n * _PIO2_2
    s6, err = _subtract_small_pieces(s, n)
    return s6 + err


@_jit
def _sin_odd(r):
    z = r * r
    s = _mul_add(z, _SINF_S3, _SINF_S2)
    s = _mul_add(s, z, _SINF_S1)
    s = _mul_add(s, z, _SINF_S0)
    return _mul_add(s * z, r, r)


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
    t = _mul_add(ax, _INV_PI, _ROUND_MAGIC)                       # m = rint(ax/pi)
    m = t - _ROUND_MAGIC
    return _sin_unit(_reduce_pi(ax, m), _I(_I(as_int32(t) << 31) ^ (as_int32(x) & _SIGN_BIT)))


@_jit
def cos_fast_f32(x):
    """Cosine, within FAST_BUDGET for |x| < 2**16 (where far_angle(x) is 0), never above 1 in
    magnitude. cos(+-inf) = cos(NaN) = NaN."""
    ax = abs(x)
    t = _mul_add(ax, _INV_PI, _HALF) + _ROUND_MAGIC              # N = rint(ax/pi + 1/2)
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
    n = _mul_add(e, e, e + e)
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
    return _times_logistic(x, x * _mul_add(x * x, _GELU_2KC, _GELU_2K), x)


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
    p = _mul_add(_mul_add(_mul_add(a, _GELU_S3, _GELU_S2), a, _GELU_S1), a, _ONE)
    q = _mul_add(_mul_add(_mul_add(_mul_add(a, _GELU_T4, _GELU_T3), a, _GELU_T2), a, _GELU_T1),
                 a, _ONE)
    tail = _exp_nonpositive_gradual5(-(_HALF * a) * a) * p / q     # erfc(|x| / sqrt2)
    return (_HALF * x) * (tail if x < _ZERO else _TWO - tail)


@_jit
def gelu_fast_f32(x, approximate):
    """LiteRT's GELU op under precision="fast": the tanh form when `approximate` (a literal in
    the generated code, so only one form is compiled), else the erf form."""
    return gelu_tanh_fast_f32(x) if approximate else gelu_erf_fast_f32(x)
