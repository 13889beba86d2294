"""The helpers a kernel's reductions accumulate with, and those of the composite row ops'
steps (codegen.composites): numba code the generated kernels import.

numba compiles float code without fast-math (it would change what inf and NaN become in every
other op), so a float sum or max loop stays sequential: `add_reassoc` and `max_reassoc` carry
LLVM's `reassoc` flag (and the max `nnan nsz`) on that one instruction, which lets the loop
vectoriser keep partial accumulators in vector lanes. Only the accumulation is reordered; each
element's value is computed as before.
"""
from __future__ import annotations

from numba import njit, types
from numba.extending import intrinsic

from .mathf32_fast import _exp_nonpositive_fast5, exp_fast_f32


@intrinsic
def add_reassoc(typingctx, acc, x):
    """acc + x, which LLVM may reassociate with the other adds of its reduction."""
    if not (isinstance(acc, types.Float) and acc == x):
        return None

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))
    return acc(acc, x), codegen


@intrinsic
def max_reassoc(typingctx, acc, x):
    """`acc > x ? acc : x` as a reassociable maximum: exact for rows without NaN (the caller's
    result is NaN for a row with one whatever this gives); -0.0 and 0.0 may come either way."""
    if not (isinstance(acc, types.Float) and acc == x):
        return None

    def codegen(context, builder, signature, args):
        flags = ("nnan", "nsz", "reassoc")
        greater = builder.fcmp_ordered(">", args[0], args[1], flags=flags)
        return builder.select(greater, args[0], args[1], flags=flags)
    return acc(acc, x), codegen


@njit(inline="always", error_model="numpy")
def scaled_exp(d, beta):
    """exp(d * beta) for softmax's d = x - max: with beta >= 0 (a constant, so LLVM keeps one
    branch) the argument is <= 0, or NaN in a row that is NaN anyway, and its exp is
    _exp_nonpositive_fast5's; with beta < 0, exp_fast_f32's."""
    x = d * beta
    return _exp_nonpositive_fast5(x) if beta >= 0 else exp_fast_f32(x)


@njit(inline="always", error_model="numpy")
def max_eps(x, epsilon):
    """std::max(l2_norm, epsilon): `x < epsilon ? epsilon : x`, so NaN passes."""
    return epsilon if x < epsilon else x
