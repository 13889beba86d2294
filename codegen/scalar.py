"""Scalar float32 helpers the generated kernels call: TFLite's elementwise semantics, one each.

Each is written the way the builtin kernel computes it (see docs/kernel_semantics.md), operand
order included, because that order decides what NaN and -0.0 become. All are inlined into the
loop nest by numba (`inline="always"`) so LLVM can vectorise across them.
"""
import numpy as np
from numba import njit

from .mathf32 import erf_f32, exp_f32, tanh_f32

_inline = njit(inline="always", error_model="numpy")

ZERO = np.float32(0.0)
ONE = np.float32(1.0)
HALF = np.float32(0.5)
THREE = np.float32(3.0)
SIX = np.float32(6.0)


@_inline
def clamp(x, lo, hi):
    """ActivationFunctionWithMinMax: std::min(std::max(x, lo), hi); NaN passes through."""
    y = lo if x < lo else x
    return hi if hi < y else y


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
    return clamp(x, ZERO, np.float32(np.inf))


@_inline
def relu6(x):
    return clamp(x, ZERO, SIX)


@_inline
def relu_n1_to_1(x):
    return clamp(x, -ONE, ONE)


@_inline
def relu_0_to_1(x):
    return clamp(x, ZERO, ONE)


@_inline
def leaky_relu(x, alpha):
    return x if x > ZERO else x * alpha


@_inline
def prelu(x, alpha):
    return x if x >= ZERO else x * alpha


@_inline
def hard_swish(x):
    return x * minimum(SIX, maximum(ZERO, x + THREE)) / SIX


@_inline
def elu(x):
    return x if x >= ZERO else exp_f32(x) - ONE


@_inline
def sign(x):
    """(0 < x) - (x < 0): NaN and -0.0 give +0.0."""
    return ONE if x > ZERO else (-ONE if x < ZERO else ZERO)


@_inline
def round_half_even(x):
    """TFLite's RoundToNearest: ties go to the even neighbour."""
    below = np.floor(x)
    diff = x - below
    even = np.floor(below * HALF) * np.float32(2.0) == below
    return below if (diff < HALF or (diff == HALF and even)) else below + ONE


@_inline
def rsqrt(x):
    return ONE / np.sqrt(x)


@_inline
def gelu_tanh(x):
    """GELU, approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    return HALF * x * (ONE + tanh_f32(inner))


@_inline
def gelu_erf(x):
    """GELU, exact: 0.5 x (1 + erf(x / sqrt(2)))."""
    return HALF * x * (ONE + erf_f32(x * np.float32(0.7071067811865476)))
