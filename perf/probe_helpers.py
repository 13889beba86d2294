"""numba helpers for perf/chain_probe.py's hand-edited kernels (not used by the delegate)."""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def store_nt(typingctx, array, index, value):
    """array[index] = value with LLVM's !nontemporal hint: the vectoriser keeps it, and x86
    emits streaming stores (vmovntps) where the store is aligned, so the output's cache lines
    are written without being read first."""
    if not isinstance(array, types.Array):
        return None
    sig = types.void(array, index, value)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        arr = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, arr, [args[1]],
                                       wraparound=False)
        store = builder.store(args[2], ptr)
        one = ir.Constant(ir.IntType(32), 1)
        store.set_metadata("nontemporal", builder.module.add_metadata([one]))
        return context.get_dummy_value()

    return sig, codegen
