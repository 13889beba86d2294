"""The fixed-point helpers as numba compiles them: generated kernels import them from here.

codegen.fixedpoint, fixedpoint_binary and fixedpoint_rows are numpy code that claiming and the
references run on arrays without numba. Registered here (`register_jitable`), the same
functions compile for scalars in `@njit` code, inlined into the caller's loop; `select` is a
select on scalars there, and codegen.libm's logf a call of glibc's logf.
"""
from __future__ import annotations

import inspect

from numba.extending import overload, register_jitable

from . import fixedpoint, fixedpoint_binary, fixedpoint_rows, glibc, libm
from .qcall import QCALL_HELPERS

for _module in (fixedpoint, fixedpoint_binary, fixedpoint_rows):
    for _function in vars(_module).values():
        if (inspect.isfunction(_function) and _function.__module__ == _module.__name__
                and _function is not fixedpoint.select):
            register_jitable(_function)


@overload(fixedpoint.select)
def _select_scalar(condition, if_true, if_false):
    def impl(condition, if_true, if_false):
        return if_true if condition else if_false
    return impl


@overload(libm.logf)
def _logf_scalar(x):
    return lambda x: glibc.logf(x)


# The helpers by name, for the kernels' `from codegen.fixedpoint_numba import add_block, ...`.
globals().update(QCALL_HELPERS)
