"""Byte table lookups at memory speed: 64 elements a step with AVX-512 VBMI byte shuffles.

A LUT nest (codegen.lower) maps each int8/uint8 element through a 256-entry byte table. LLVM
turns `table[x[i]]` into one scalar load per element; VPERMI2B looks up 64
bytes in a 128-byte table in one instruction, so two of them and a blend by the index's top
bit cover 256 entries. Where numba's target (codegen.target) has no VBMI, the schedule has the
kernel call `lookup_bytes_scalar` instead: the intrinsic would end the process in LLVM there.

The table is indexed by the raw byte of the element (`byte_table` rotates an int8 table, which
codegen.quant_reference indexes by q + 128), so the loop never adds an offset.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_BYTES = ir.VectorType(ir.IntType(8), 64)


def byte_table(table: np.ndarray, in_dtype: str) -> np.ndarray:
    """A table indexed by q - qmin, as one indexed by the raw byte of q (uint8 view)."""
    values = np.asarray(table)
    if in_dtype == "int8":
        values = np.roll(values, -128)       # byte b holds q = b - 256 for b >= 128
    return values.view(np.uint8) if values.dtype.itemsize == 1 else values


@intrinsic
def _lookup_64(typingctx, source, target, table):
    """target[0:64] = table[source[0:64]] for byte addresses; the table is 256 bytes."""
    def codegen(context, builder, signature, args):
        pointer = _BYTES.as_pointer()
        src, dst, tab = (builder.inttoptr(a, pointer) for a in args)
        index = builder.load(src, align=1)
        quarters = [builder.load(builder.gep(tab, [ir.Constant(ir.IntType(64), k)]), align=1)
                    for k in range(4)]
        permute = builder.module.declare_intrinsic(
            "llvm.x86.avx512.vpermi2var.qi.512", fnty=ir.FunctionType(_BYTES, [_BYTES] * 3))
        low = builder.call(permute, [quarters[0], index, quarters[1]])
        high = builder.call(permute, [quarters[2], index, quarters[3]])
        upper = builder.icmp_signed("<", index, ir.Constant(_BYTES, None))
        builder.store(builder.select(upper, high, low), dst, align=1)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


@njit(error_model="numpy", nogil=True, cache=True, inline="always")
def lookup_bytes(source, target, table):
    """target[i] = table[byte of source[i]] over whole arrays of 8-bit values.

    Inlined into the kernel (numba IR), and making no array of its own, so that in a kernel's
    loop over tiles LLVM keeps the table in registers and numba's reference counts of the
    tile slices cancel: called, each tile's call would reload the table and count references
    around it."""
    n = source.shape[0]
    start = n - n % 64
    for i in range(0, start, 64):
        _lookup_64(source.ctypes.data + i, target.ctypes.data + i, table.ctypes.data)
    for i in range(start, n):
        target[i] = table[np.uint8(source[i])]


@njit(error_model="numpy", nogil=True, cache=True, inline="always")
def lookup_bytes_scalar(source, target, table):
    """lookup_bytes one element at a time, for targets without byte shuffles."""
    for i in range(source.shape[0]):
        target[i] = table[np.uint8(source[i])]
