"""Scalar float32 helpers the generated kernels call: TFLite's elementwise semantics, one each.

Each is written the way the builtin kernel computes it (see docs/kernel_semantics.md), operand
order included, because that order decides what NaN and -0.0 become. All are inlined into the
loop nest by numba (`inline="always"`) so LLVM can vectorise across them.
"""
import numpy as np
from numba import njit

from .mathf32 import exp_f32, pow_f32, sqrt_f32
from .native import as_float32, as_int32

_inline = njit(inline="always", error_model="numpy")

ZERO = np.float32(0.0)
ONE = np.float32(1.0)
HALF = np.float32(0.5)
THREE = np.float32(3.0)
SIX = np.float32(6.0)
ONE_SIXTH = np.float32(1.0 / 6.0)
FLT_MAX = np.float32(np.finfo(np.float32).max)
INF = np.float32(np.inf)
INF_BITS = np.int32(0x7F800000)
TANH_CLAMP = np.float32(7.90738964)        # 0x40fd0956, Eigen's non-FMA clamp
LOGISTIC_CLAMP = np.float32(16.6355324)


@_inline
def clamp(x, lo, hi):
    """ActivationFunctionWithMinMax: std::min(std::max(x, lo), hi); NaN passes through."""
    y = lo if x < lo else x
    return hi if hi < y else y


@_inline
def clamp_overflow(x):
    """clamp(x, -FLT_MAX, FLT_MAX), the NONE activation: +-inf become +-FLT_MAX, NaN and
    finite values pass. Written as a test for inf, because LLVM turns the two compares of
    clamp against +-FLT_MAX into mask-register arithmetic three times slower."""
    return x if np.abs(x) != INF else np.float32(np.copysign(FLT_MAX, x))


@_inline
def magnitude(x):
    """The bits of |x| as an int32: INF_BITS or more exactly for +-inf and NaN. A kernel's fast
    loop keeps the largest it sees (codegen.fastpath): an and and an int32 max per element."""
    return np.int32(as_int32(x) & np.int32(0x7FFFFFFF))


@_inline
def miss_if(flag):
    """A fast loop's guard (1: its cheaper form may differ) on magnitude's scale: INF_BITS."""
    return INF_BITS if flag else np.int32(0)


@_inline
def maximum(a, b):
    """MaximumOp: `a > b ? a : b`, so a NaN in `a` yields `b`."""
    return a if a > b else b


@_inline
def minimum(a, b):
    """MinimumOp: `a < b ? a : b`."""
    return a if a < b else b


@_inline
def relu(x):
    """Eigen cwiseMax(0) on SSE: (x < 0) ? 0 : x; NaN and -0.0 pass through."""
    return ZERO if x < ZERO else x


@_inline
def clip(x, lo, hi):
    """reference_ops::Relu6/Relu1/Relu0To1: x > hi ? hi : (x < lo ? lo : x)."""
    return hi if x > hi else (lo if x < lo else x)


@_inline
def relu6(x):
    return clip(x, ZERO, SIX)


@_inline
def relu_n1_to_1(x):
    return clip(x, -ONE, ONE)


@_inline
def relu_0_to_1(x):
    return clip(x, ZERO, ONE)


@_inline
def leaky_relu(x, alpha):
    return x if x > ZERO else x * alpha


@_inline
def prelu(x, alpha):
    return x if x >= ZERO else x * alpha


@_inline
def hard_swish(x):
    """The NEON block formula (x * 1/6) * min(6, max(0, x + 3)); the last n % 4 elements of
    LiteRT's output use x * min(..) * 1/6 instead, which can differ by one rounding. The
    clamp is written as clip, equal on every input (NaN, -0.0 included): LLVM makes a vmaxps
    of it, where it made two compares and masked moves of minimum(maximum(..)), twice as slow
    in a chain (five HARD_SWISH at 94K elements: 41 -> 20 us)."""
    return (x * ONE_SIXTH) * clip(x + THREE, ZERO, SIX)


@_inline
def elu(x):
    return expm1_f32(x) if x < ZERO else x


@_inline
def sign(x):
    """(0 < x) - (x < 0); NaN comes back as it went in, -0.0 gives +0.0."""
    return ONE if x > ZERO else (-ONE if x < ZERO else (x if x != x else ZERO))


@_inline
def round_half_even(x):
    """TFLite's RoundToNearest: ties go to the even neighbour; [-0.5, 0) gives +0.0."""
    below = np.floor(x)
    diff = x - below
    even = np.floor(below * HALF) * np.float32(2.0) == below
    return below if (diff < HALF or (diff == HALF and even)) else below + ONE


@_inline
def rsqrt(x):
    return ONE / sqrt_f32(x)


@_inline
def pow_tflite(x, y, integer_exponent):
    """POW: powf, except where LiteRT takes its integer path (a one-element exponent within
    1e-5 of an integer n >= 1, shapes differing): then `integer_exponent` is n, a literal,
    and the result is IntegerExponentPow's repeated squaring, clamped to +-FLT_MAX."""
    if integer_exponent <= 0:
        return pow_f32(x, y)
    top = 1
    while top * 2 <= integer_exponent:
        top *= 2
    result = x
    bit = top // 2
    while bit > 0:
        result = clamp(result * result, -FLT_MAX, FLT_MAX)
        if integer_exponent & bit:
            result = clamp(x * result, -FLT_MAX, FLT_MAX)
        bit //= 2
    return result


@_inline
def tanh_eigen(x):
    """Eigen's ptanh_float without FMA, the formula LiteRT's TANH runs: a [9/8] rational
    approximation on x clamped to +-7.90738964 (bit-exact with LiteRT)."""
    x = maximum_eigen(minimum_eigen(x, TANH_CLAMP), -TANH_CLAMP)
    x2 = x * x
    x3 = x2 * x
    p = ((np.float32(1.394553628e-8) * x2 + np.float32(2.102733560e-5)) * x2
         + np.float32(3.520756727e-3)) * x2 + np.float32(1.340216100e-1)
    q = (((np.float32(8.015776984e-7) * x2 + np.float32(3.326951409e-4)) * x2
          + np.float32(2.597254514e-2)) * x2 + np.float32(4.673548340e-1)) * x2 + ONE
    return (x3 * p + x) / q


@_inline
def minimum_eigen(a, b):
    """Eigen pmin on SSE (std::min order): (b < a) ? b : a; a NaN in `a` survives."""
    return b if b < a else a


@_inline
def maximum_eigen(a, b):
    """Eigen pmax on SSE (std::max order): (a < b) ? b : a."""
    return b if a < b else a


@_inline
def logistic_eigen(x):
    """Eigen's scalar_logistic_op packet path, the formula LiteRT's LOGISTIC runs on 4-element
    blocks (bit-exact there); its scalar tail uses expf(x) / (1 + expf(x)) instead."""
    t = minimum_eigen(x, LOGISTIC_CLAMP) * HALF
    m = np.floor(t * np.float32(1.44269504) + HALF)
    r = m * np.float32(-0.693359375) + t
    r = m * np.float32(2.12194440e-4) + r
    r2 = r * r
    pe = r2 * np.float32(4.18986678e-2) + np.float32(0.499991417)
    po = r2 * np.float32(8.33471306e-3) + np.float32(0.166668773)
    p = r * po + pe
    p = r2 * p + (r + ONE)
    exponent = min(max(np.int32(m) + np.int32(127), np.int32(0)), np.int32(255))
    e = p * as_float32(exponent << np.int32(23))
    e = e * e
    return ZERO if x < np.float32(-104.0) else e / (ONE + e)


@_inline
def gelu(x, approximate):
    """GELU as LiteRT's reference_ops::Gelu computes it (gelu.h): the tanh form with Eigen's
    tanh (bit-exact), or the erfc form (erfc here from exp_f32, so within a few ulp)."""
    if approximate:
        inner = np.float32(0.797884583) * (x + np.float32(0.0447149985) * (x * (x * x)))
        return (HALF * x) * (ONE + tanh_eigen(inner))
    return (HALF * x) * erfc_eigen(x * np.float32(-0.707106769))


@_inline
def erfc_eigen(x):
    """Eigen's generic_fast_erfc<float> (rational approximations on |x| <= 1 and beyond),
    with exp_f32 for the exponential."""
    x = minimum(maximum(x, np.float32(-11.0)), np.float32(11.0))
    x2 = x * x
    if x2 <= ONE:
        return x * (((((np.float32(5.61802299e-4) * x2 - np.float32(4.91381669e-3)) * x2
                       + np.float32(2.67075151e-2)) * x2 - np.float32(1.12800106e-1)) * x2
                     + np.float32(3.76122952e-1)) * x2 - np.float32(1.12837911)) + ONE
    # x*x - x2 exactly (Dekker's product with a Veltkamp split: no FMA).
    c = np.float32(4097.0) * x
    hi = c - (c - x)
    lo = x - hi
    x2_lo = ((hi * hi - x2) + np.float32(2.0) * hi * lo) + lo * lo
    e = exp_f32(-x2)
    z = e - e * x2_lo
    q2 = ONE / x2
    num = ((np.float32(1.02081165e-1) * q2 + np.float32(4.29206669e-1)) * q2
           + np.float32(3.23790789e-1)) * q2 + np.float32(5.39719760e-2)
    den = x * ((((np.float32(1.72516778e-2) * q2 + np.float32(3.91371638e-1)) * q2 + ONE) * q2
                + np.float32(6.21732414e-1)) * q2 + np.float32(9.56628621e-2))
    return z * (num / den) + (np.float32(2.0) if x < ZERO else ZERO)


@_inline
def expm1_f32(x):
    """exp(x) - 1 without the cancellation near 0: a Taylor polynomial on |x| < 0.35."""
    small = x + x * x * (HALF + x * (np.float32(1 / 6) + x * (np.float32(1 / 24) + x * (
        np.float32(1 / 120) + x * (np.float32(1 / 720) + x * (np.float32(1 / 5040)
                                                              + x * np.float32(1 / 40320)))))))
    return small if np.abs(x) < np.float32(0.35) else exp_f32(x) - ONE
