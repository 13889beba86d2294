"""The fixed-point helpers a QCALL kernel op may name (codegen.lower), by name.

A QCALL carries its helper's name: generated kernels import the helper from
codegen.fixedpoint_numba, which registers it with numba, and the numpy references call it on
arrays (quant_reference.run_qcall).
"""
from __future__ import annotations

from typing import Callable

from . import fixedpoint, fixedpoint_binary, fixedpoint_rows

QCALL_HELPERS: dict[str, Callable] = {
    name: helper for module in (fixedpoint, fixedpoint_binary, fixedpoint_rows)
    for name, helper in vars(module).items()
    if getattr(helper, "__module__", None) == module.__name__ and not name.startswith("_")}
