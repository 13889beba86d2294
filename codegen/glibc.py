"""glibc's float32 functions as numba calls them: external C functions, resolved in the process
(the Python binary links libm). codegen.libm runs `over` on arrays; kernels call the same
symbols (codegen.fixedpoint_numba)."""
from __future__ import annotations

import numpy as np
from numba import njit, types

NAMES = ("tanhf", "expf", "expm1f", "logf", "erfcf")
tanhf, expf, expm1f, logf, erfcf = (types.ExternalFunction(name, types.float32(types.float32))
                                    for name in NAMES)


@njit(cache=True)
def over(function, x):
    """glibc function number `function` (of NAMES) of each element of the float32 vector `x`;
    compiled once and cached, for every function: compiling it cost each new process seconds."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
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
    return out
