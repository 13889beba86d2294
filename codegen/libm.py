"""glibc's float32 functions over arrays, from Python: what LiteRT's int8/uint8 Prepare calls to
fill its tables (the wheel imports tanhf, expf, expm1f, logf and erfcf dynamically). numpy's own
SIMD versions differ in the last bit. Called through ctypes, an element at a time (a table has
256 entries): claiming and the references need no numba. Kernels call the same symbols
(codegen.fixedpoint_numba)."""
from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable

import numpy as np

NAMES = ("tanhf", "expf", "expm1f", "logf", "erfcf")
_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))


def _vectorised(name: str) -> Callable[[np.ndarray], np.ndarray]:
    function = getattr(_LIBM, name)
    function.argtypes, function.restype = (ctypes.c_float,), ctypes.c_float

    def over(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float32)
        return np.array([function(v) for v in x.ravel().tolist()], np.float32).reshape(x.shape)

    over.__name__ = over.__qualname__ = name
    over.__doc__ = f"glibc's {name} of each float32 element of `x`."
    return over


tanhf, expf, expm1f, logf, erfcf = (_vectorised(name) for name in NAMES)
