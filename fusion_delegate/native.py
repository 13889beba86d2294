"""The registration's native callbacks: invoke and free never run Python.

Invoke is on the hot path; free runs while interpreters are destroyed, possibly during
interpreter shutdown after Python's module state is gone, when calling a ctypes thunk would
crash. A kernel slot is `int64[6] {invoke address, freed flag, pool block, data}`, malloc'd by
kernel init and returned as node->user_data; free only sets the flag, and Python releases
flagged slots later. The pool block is what a kernel with parts reads to run them on the
interpreter's pool (codegen.native.run_nests): `pthreadpool_parallelize_1d`, the pool, the
kernel's task. The data is the address of the partition's tables and constants, which the
kernel reads there rather than from its text (codegen.kernel_data, codegen.shared).
"""
import ctypes
import gc

from numba import cfunc, types

from codegen.native import POOL_WORDS, call_status_fn, load_i64, store_i64

from .abi import NODE_USER_DATA_OFFSET, kTfLiteError

SLOT_FREED_OFFSET = 8
SLOT_POOL_OFFSET = 16
SLOT_DATA_OFFSET = SLOT_POOL_OFFSET + 8 * POOL_WORDS
SLOT_WORDS = SLOT_DATA_OFFSET // 8 + 1
SLOT_BYTES = 8 * SLOT_WORDS
_NO_SLOT = -1  # TfLiteKernelInitFailed()


@cfunc(types.int32(types.int64, types.int64), cache=True)
def invoke_trampoline(context, node):
    """Call the invoke address in the node's slot (a compiled kernel, or Python's callback)."""
    slot = load_i64(node + NODE_USER_DATA_OFFSET)
    if slot == 0 or slot == _NO_SLOT:
        return kTfLiteError
    function = load_i64(slot)
    if function == 0:
        return kTfLiteError
    return call_status_fn(function, context, node)


@cfunc(types.void(types.int64, types.int64), cache=True)
def mark_freed(context, slot):
    """TfLiteRegistration.free: flag the slot; Python frees it on its next sweep."""
    if slot != 0 and slot != _NO_SLOT:
        store_i64(slot + SLOT_FREED_OFFSET, 1)


# Their machine code must outlive every interpreter, even those finalized after module teardown.
for _callback in (invoke_trampoline, mark_freed):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_callback))

# numba's import leaves ~110K objects that live as long as the process. Frozen, the collector no
# longer walks them: the full collection that would follow this import (30 ms, inside the first
# interpreter's construction) and every later one skip them (perf/README.md, session 29). What
# the process holds then is frozen with them: reference counting still frees it, but a cycle
# among those objects is never collected (docs/runtimes.md).
gc.freeze()
