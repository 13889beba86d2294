"""float32 constants as generated source writes them.

Shared by the op table (codegen.ops renders an op's float params) and the renderer.
"""
from __future__ import annotations

import numpy as np


def literal(value: float) -> str:
    """A float32 literal: a bare Python float would make numba compute in float64."""
    text = float32_text(value)
    return text if text.lstrip("-").isupper() else f"np.float32({text})"


def float32_text(value: float) -> str:
    """The shortest text of a float32 value that reads back as it (NAN, INF and FLT_MAX by
    name, the module constants)."""
    value = np.float32(value)
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "INF" if value > 0 else "-INF"
    if abs(value) == np.finfo(np.float32).max:
        return "FLT_MAX" if value > 0 else "-FLT_MAX"
    text = np.format_float_positional(value, unique=True, trim="0")
    if len(text) > 12:
        text = np.format_float_scientific(value, unique=True, trim="0")
    return text


def plus(offset: int) -> str:
    """` + offset` or ` - -offset` after an integer expression, nothing for 0."""
    return "" if not offset else f" + {offset}" if offset > 0 else f" - {-offset}"
