"""glibc's float32 functions over arrays: what LiteRT's int8/uint8 Prepare calls to fill its
tables (the wheel imports tanhf, expf, expm1f, logf and erfcf dynamically); numpy's own SIMD
versions differ in the last bit. The loop that calls them (codegen.glibc) is numba code, loaded
on first call: importing the modules that claim and plan loads no numba."""
from __future__ import annotations

from typing import Callable

import numpy as np

NAMES = ("tanhf", "expf", "expm1f", "logf", "erfcf")


def _vectorised(name: str) -> Callable[[np.ndarray], np.ndarray]:
    def over(x: np.ndarray) -> np.ndarray:
        from . import glibc
        x = np.asarray(x, np.float32)
        flat = np.ascontiguousarray(x.reshape(-1))
        return glibc.over(NAMES.index(name), flat).reshape(x.shape)

    over.__name__ = over.__qualname__ = name
    over.__doc__ = f"glibc's {name} of each float32 element of `x`."
    return over


tanhf, expf, expm1f, logf, erfcf = (_vectorised(name) for name in NAMES)
