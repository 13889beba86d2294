"""glibc's float32 functions as numba calls them: external C functions, resolved in the process
(the Python binary links libm). codegen.libm runs `over` on arrays; kernels call the same
symbols (codegen.fixedpoint_numba)."""
from __future__ import annotations

import numpy as np
from numba import carray, cfunc, types

NAMES = ("tanhf", "expf", "expm1f", "logf", "erfcf")
tanhf, expf, expm1f, logf, erfcf = (types.ExternalFunction(name, types.float32(types.float32))
                                    for name in NAMES)


@cfunc(types.void(types.int64, types.voidptr, types.voidptr, types.intp), cache=True)
def _over(function, x_address, out_address, size):
    x = carray(x_address, size, np.float32)
    out = carray(out_address, size, np.float32)
    for i in range(size):
        v = x[i]
        if function == 0:
            out[i] = tanhf(v)
        elif function == 1:
            out[i] = expf(v)
        elif function == 2:
            out[i] = expm1f(v)
        elif function == 3:
            out[i] = logf(v)
        else:
            out[i] = erfcf(v)


_OVER = _over.ctypes


def over(function: int, x: np.ndarray) -> np.ndarray:
    """glibc function number `function` (of NAMES) of each element of the contiguous float32
    vector `x`. A C callback compiled once and cached, for every function (compiling it cost
    each new process seconds), and called as a C function: a numba dispatcher's first call with
    an array imports numpy.ma (20 ms of a warm start) to type it."""
    out = np.empty_like(x)
    _OVER(function, x.ctypes.data, out.ctypes.data, x.shape[0])
    return out
