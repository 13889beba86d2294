"""numba intrinsics for kernels that run as native code inside the TFLite runtime.

Kernels receive raw addresses (the TfLiteContext and TfLiteNode pointers, as integers) and read
the tensor table themselves: codegen gets the struct offsets as plain ints from the caller and
knows nothing of ctypes. All loads are unchecked, so callers pass only offsets that the ABI layer
has verified.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_I8P = ir.IntType(8).as_pointer()


@intrinsic
def load_i64(typingctx, address):
    """The int64 stored at `address` (a pointer field of a C struct)."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()))
    return types.int64(types.int64), codegen


@intrinsic
def load_i32(typingctx, address):
    """The int32 stored at `address`."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(32).as_pointer()))
    return types.int32(types.int64), codegen


@intrinsic
def store_i64(typingctx, address, value):
    """Store an int64 at `address`."""
    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], ir.IntType(64).as_pointer()))
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


def _pointer(element: types.Type, llvm_element: ir.Type):
    def typed(typingctx, address):
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], llvm_element.as_pointer())
        return types.CPointer(element)(types.int64), codegen
    typed.__doc__ = f"`address` as a {element}*, for numba.carray."
    return intrinsic(typed)


float32_pointer = _pointer(types.float32, ir.FloatType())
int8_pointer = _pointer(types.int8, ir.IntType(8))
uint8_pointer = _pointer(types.uint8, ir.IntType(8))
#: The pointer intrinsic of each tensor dtype a kernel reads or writes.
POINTERS = {"float32": "float32_pointer", "int8": "int8_pointer", "uint8": "uint8_pointer"}


@intrinsic
def call_status_fn(typingctx, function_address, first, second):
    """Call the C function `TfLiteStatus f(void*, void*)` at `function_address`."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [_I8P, _I8P])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.call(fn, [builder.inttoptr(args[1], _I8P), builder.inttoptr(args[2], _I8P)])
    return types.int32(types.int64, types.int64, types.int64), codegen


@intrinsic
def as_int32(typingctx, x):
    """The bits of a float32, as int32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@intrinsic
def as_float32(typingctx, i):
    """An int32's bits, as float32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen
