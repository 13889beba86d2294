"""LLVM intrinsics the float32 math of codegen.mathf32 and codegen.mathf32_fast is built on.

Each emits one LLVM instruction or intrinsic that numba would not: a square root that never
calls libm, a multiply-add that is one FMA where the target CPU has FMA, a power-of-two
scaling that is one vscalefps on AVX-512 targets. What the target has is asked of numba's
configured target (codegen.target), never of the host.
"""
import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .target import numba_target


@intrinsic
def llvm_sqrt(typingctx, x):
    """llvm.sqrt.f32 (vsqrtps once vectorised). numba's np.sqrt/math.sqrt emit a libm
    sqrtf call instead: LLVM vectorises it, but scalar remainder iterations still call libm."""
    def codegen(context, builder, signature, args):
        return builder.call(builder.module.declare_intrinsic("llvm.sqrt", [ir.FloatType()]), args)

    return types.float32(types.float32), codegen


_FUSE_MUL_ADD = True


@intrinsic
def mul_add(typingctx, a, b, c):
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
    ``mul_add`` as a plain mul and add, i.e. what a CPU without FMA computes; no other
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


@intrinsic
def fma_available(typingctx):
    """True (a compile-time constant LLVM folds away) when mul_add fuses: the target has FMA
    and compile_unfused is not in effect. Picks reductions that are exact only with FMA."""
    def codegen(context, builder, signature, args):
        fused = _FUSE_MUL_ADD and "fma" in numba_target().features
        return context.get_constant(types.boolean, fused)

    return types.boolean(), codegen


@intrinsic
def ldexp(typingctx, p, k):
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
