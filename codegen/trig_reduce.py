"""Exact reduction of large float32 arguments modulo pi/2 (Payne-Hanek), in integer arithmetic.

For |x| beyond what a Cody-Waite reduction carries (about 1e5), sin and cos need x mod pi/2
to about 30 significant bits, i.e. 2/pi to ~200 bits. A float32 is x = m * 2**k with a 24-bit m,
so y = x * 2/pi mod 4 needs only a 96-bit window of 2/pi chosen by k: with the window
W_k = floor(2/pi * 2**(k+94)) mod 2**96, y in 2.62 fixed point is (m * W_k / 2**32) mod 2**64,
three integer multiplies with wrap-around. The table of windows is computed here from pi itself
(Machin's formula in Python integers), not copied from anywhere.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .native import as_int32

_WINDOW_BITS = 96
_FRACTION_BITS = 62
MIN_EXPONENT = 143            # |x| >= 2**16: use this reduction


def _pi_scaled(bits: int) -> int:
    """floor(pi * 2**bits) (to within a few units), from pi = 16 atan(1/5) - 4 atan(1/239)."""
    one = 1 << (bits + 16)

    def atan_inverse(n: int) -> int:
        total, term, k, n2 = 0, one // n, 1, n * n
        while term:
            total += term // k if k % 4 == 1 else -(term // k)
            term //= n2
            k += 2
        return total

    return (16 * atan_inverse(5) - 4 * atan_inverse(239)) >> 16


def _two_over_pi_windows() -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo): the 96-bit windows W_k for every biased exponent, split 64 + 32 bits."""
    bits = 320
    two_over_pi = (1 << (2 * bits + 1)) // _pi_scaled(bits)   # floor(2/pi * 2**bits)
    hi = np.zeros(256, np.uint64)
    lo = np.zeros(256, np.uint64)
    for exponent in range(256):
        shift = exponent - 150 + 94                   # k + 94, at most 198 < bits
        window = (two_over_pi >> (bits - shift)) & ((1 << _WINDOW_BITS) - 1)
        hi[exponent] = window >> 32
        lo[exponent] = window & 0xFFFFFFFF
    return hi, lo


_HI, _LO = _two_over_pi_windows()
_ONE_HALF_FIXED = np.uint64(1 << (_FRACTION_BITS - 1))
_SHIFT_FIXED = np.uint64(_FRACTION_BITS)
_SHIFT_32 = np.uint64(32)
_MANTISSA = np.int32(0x7FFFFF)
_HIDDEN_BIT = np.int32(0x800000)
#: pi/2 * 2**-62 as a float32 pair, to turn the fraction into radians without float64.
PI_OVER_2_FIXED_HI = np.float32(math.pi / 2 / 2.0 ** _FRACTION_BITS)
PI_OVER_2_FIXED_LO = np.float32(math.pi / 2 / 2.0 ** _FRACTION_BITS - float(PI_OVER_2_FIXED_HI))


@njit(inline="always", error_model="numpy")
def reduce_large(x):
    """(f, q) with |x| * 2/pi = n + f * 2**-62, |f| <= 2**61 (an int64) and q = n mod 4,
    for finite |x| >= 2**16."""
    bits = as_int32(x) & np.int32(0x7FFFFFFF)
    exponent = bits >> np.int32(23)
    mantissa = np.uint64((bits & _MANTISSA) | _HIDDEN_BIT)
    y = mantissa * _HI[exponent] + ((mantissa * _LO[exponent]) >> _SHIFT_32)
    n = (y + _ONE_HALF_FIXED) >> _SHIFT_FIXED
    fraction = np.int64(y - (n << _SHIFT_FIXED))
    return fraction, n & np.uint64(3)
