"""numba intrinsics for kernels that run as native code inside the TFLite runtime.

Kernels receive raw addresses (the TfLiteContext and TfLiteNode pointers, as integers) and read
the tensor table themselves: codegen gets the struct offsets as plain ints from the caller and
knows nothing of ctypes. All loads are unchecked, so callers pass only offsets that the ABI layer
has verified.
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

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
int32_pointer = _pointer(types.int32, ir.IntType(32))      # an int8 convolution's bias
int64_pointer = _pointer(types.int64, ir.IntType(64))      # the kernel slot's pool block
#: The pointer intrinsic of each dtype a kernel reads or writes.
POINTERS = {"float32": "float32_pointer", "int8": "int8_pointer", "uint8": "uint8_pointer",
            "int32": "int32_pointer", "int64": "int64_pointer"}


@intrinsic
def call_status_fn(typingctx, function_address, first, second):
    """Call the C function `TfLiteStatus f(void*, void*)` at `function_address`."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [_I8P, _I8P])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.call(fn, [builder.inttoptr(args[1], _I8P), builder.inttoptr(args[2], _I8P)])
    return types.int32(types.int64, types.int64, types.int64), codegen


#: pthreadpool.h: the workers sleep right after the job instead of spinning for the next. With
#: LiteRT's wheels XNNPACK runs on a pool of its own beside the interpreter's: workers of ours
#: that spin would hold a core its next op needs (perf/threads.py; perf/README.md).
PTHREADPOOL_FLAG_YIELD_WORKERS = 2


@intrinsic
def parallelize_1d(typingctx, function_address, pool, task, argument, count):
    """`pthreadpool_parallelize_1d(pool, task, argument, count, PTHREADPOOL_FLAG_YIELD_WORKERS)`
    at `function_address`: `task(argument, i)` for i in [0, count), on the pool's threads (the
    caller's among them), returning when all are done; a null pool runs them on the caller, in
    order."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I8P, _I8P, i64, ir.IntType(32)])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(fn, [*(builder.inttoptr(a, _I8P) for a in args[1:4]), args[4],
                          ir.IntType(32)(PTHREADPOOL_FLAG_YIELD_WORKERS)])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def part_first(typingctx, part, parts):
    """`part`, which LLVM is told (llvm.assume) is below `parts`: so it knows the part's
    first index (`part * step`) and every index counted up from it are not negative
    (codegen.emit.part_loop)."""
    def codegen(context, builder, signature, args):
        assume = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(1)]), "llvm.assume")
        builder.call(assume, [builder.icmp_unsigned("<", args[0], args[1])])
        return args[0]
    return types.int64(types.int64, types.int64), codegen


#: The pool block a kernel with parts reads (in its slot, fusion_delegate.native): the
#: address of pthreadpool_parallelize_1d, the pool (0: the caller runs every part), the
#: address of the kernel's task (its `_part` cfunc).
POOL_PARALLELIZE, POOL_THREADS, POOL_TASK = 0, 1, 2
POOL_WORDS = 3
#: The kernel's `arguments` for its task: the nest to run, whether exactly, each part's
#: misses (codegen.fastpath), then the addresses of its arrays.
ARGUMENT_NEST, ARGUMENT_EXACT, ARGUMENT_MISSES = 0, 1, 2


@njit(inline="always")
def run_nests(pool, arguments, nests, exact):
    """The kernel's nests in order, each `(nest, parts)` of `nests` as that many calls of its
    task on the interpreter's pool (parts of one are made on the caller): each returns when
    all its parts are done, so a nest reads whole what the nests before it wrote. Returns the
    largest misses of the parts."""
    arguments[ARGUMENT_EXACT] = exact
    misses = 0
    for nest, parts in nests:
        arguments[ARGUMENT_NEST] = nest
        arguments[ARGUMENT_MISSES:ARGUMENT_MISSES + parts] = 0
        parallelize_1d(pool[POOL_PARALLELIZE], pool[POOL_THREADS] if parts > 1 else 0,
                       pool[POOL_TASK], arguments.ctypes.data, parts)
        misses = max(misses, arguments[ARGUMENT_MISSES:ARGUMENT_MISSES + parts].max())
    return misses


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


#: Bytes of a cache line, and of one AVX-512 vector.
CACHE_LINE = 64


def _stack_array(context, builder, array_type: types.Array, count):
    """A 1-D `array_type` of `count` (an LLVM intp) uninitialised elements on the calling
    function's stack, at the start of a cache line."""
    element = context.get_data_type(array_type.dtype)
    data = builder.alloca(element, size=count)
    data.align = CACHE_LINE
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(element))
    array = context.make_array(array_type)(context, builder)
    populate_array(array, data=data, shape=cgutils.pack_array(builder, [count]),
                   strides=cgutils.pack_array(builder, [itemsize]), itemsize=itemsize,
                   meminfo=None)
    return array


@intrinsic
def aligned_copy(typingctx, values):
    """`values` (1-D, contiguous) copied to the kernel's stack at the start of a cache line
    (codegen.schedule's `aligned`). A vector load of a per-channel operand that TFLite's
    flatbuffer left 16-byte aligned spans two lines: chain16 at C = 256 ran 2x slower for it at
    4M elements, 1.7x at 64K (docs/chain_performance.md). On the stack, the copy costs no
    allocation; it lives until the kernel returns, so the kernel calls this at its top level,
    never in a loop."""
    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, args[0])
        count = builder.extract_value(source.shape, 0)
        copy = _stack_array(context, builder, signature.return_type, count)
        cgutils.raw_memcpy(builder, copy.data, source.data, count,
                           context.get_abi_sizeof(context.get_data_type(values.dtype)))
        return copy._getvalue()
    if not (isinstance(values, types.Array) and values.ndim == 1 and values.layout == "C"):
        return None
    return values.copy(readonly=False)(values), codegen


@intrinsic
def stack_empty(typingctx, count, dtype):
    """An uninitialised 1-D array of `count` `dtype` elements on the kernel's stack, at the
    start of a cache line: a buffer between nests without the allocator's call. Like
    aligned_copy, it lives until the kernel returns: the kernel calls this at its top level,
    never in a loop, and only for small buffers (schedule.STACK_BYTES)."""
    def codegen(context, builder, signature, args):
        return _stack_array(context, builder, signature.return_type, args[0])._getvalue()
    if not isinstance(count, types.Integer) or not isinstance(dtype, types.NumberClass):
        return None
    return types.Array(dtype.instance_type, 1, "C")(types.intp, dtype), codegen


@intrinsic
def stream_store(typingctx, array, index, value):
    """`array[index] = value` as a non-temporal (streaming) store: it bypasses the caches, so
    an output that leaves them anyway costs no read of each line before it is written (a
    third of a large elementwise kernel's traffic; docs/chain_performance.md). The store claims
    the alignment of a cache line, so that LLVM's vectoriser may make aligned streaming vector
    stores of it (it makes none of a store it knows less aligned): only a schedule's `streamed`
    nest uses it, whose inner loops (rows, tiles, threads' parts) all start on whole vectors,
    and the kernel runs such a nest only when `line_aligned` says the array starts on a line.
    The value is cast to the array's dtype, as `array[index] = value` would."""
    def codegen(context, builder, signature, args):
        target = context.make_array(signature.args[0])(context, builder, args[0])
        element = context.cast(builder, args[2], signature.args[2], signature.args[0].dtype)
        store = builder.store(element, builder.gep(target.data, [args[1]]), align=CACHE_LINE)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()
    if not (isinstance(array, types.Array) and array.layout == "C" and array.ndim == 1
            and isinstance(index, types.Integer) and isinstance(value, types.Number)):
        return None
    return types.void(array, index, value), codegen


@intrinsic
def stream_fence(typingctx):
    """Order the streaming stores made so far before any later store (x86 `sfence`): they
    are weakly ordered, and another thread may read the output next."""
    def codegen(context, builder, signature, args):
        sfence = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
        builder.call(sfence, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def line_aligned(typingctx, array):
    """Whether `array` starts on a cache line (TFLite's arena aligns tensors to 64 bytes; a
    tensor allocated elsewhere may not be)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        address = builder.ptrtoint(data, ir.IntType(64))
        offset = builder.and_(address, ir.IntType(64)(CACHE_LINE - 1))
        return builder.icmp_unsigned("==", offset, ir.IntType(64)(0))
    if not isinstance(array, types.Array):
        return None
    return types.boolean(array), codegen
