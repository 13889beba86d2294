"""The identifiers of generated source: tensors' names made Python identifiers, never one of
the names the kernel module itself defines or imports (RESERVED), and fresh local names."""
from __future__ import annotations

import keyword
import re

from .ir import KernelIR
from .ops import HELPER_MODULES
from .qcall import QCALL_HELPERS


NAME_LIMIT = 24


#: Helpers the generated code calls: the op table's, the stack's buffers (aligned copies,
#: codegen.nests) and the fixed-point arithmetic of quantized ops (codegen.lower's QCALL).
KERNEL_HELPERS = {**HELPER_MODULES, "aligned_copy": "codegen.native",
                  "stack_empty": "codegen.native", "stream_store": "codegen.native",
                  "stream_fence": "codegen.native", "line_aligned": "codegen.native",
                  "lookup_bytes": "codegen.lut", "lookup_bytes_scalar": "codegen.lut",
                  **dict.fromkeys(QCALL_HELPERS, "codegen.fixedpoint_numba")}


RESERVED = {"np", "carray", "cfunc", "njit", "prange", "context", "node", "tensors", "range",
            "min", "max", "misses", "part", "tile", "block", "start", "stop", "base", "j", "k",
            "row_length", "padded_length", "FLT_MAX", "NAN", "INF", "INF_BITS", "NoAliasCompiler",
            # a stencil nest's (codegen.emit_stencil)
            "n", "oy", "ox", "iy", "ix", "ky", "kx", "ky0", "ky1", "kx0", "kx1", "ch", "cb", "px",
            "data_row", "weight_row", "weight", *KERNEL_HELPERS}


def identifiers(ir: KernelIR) -> dict[int, str]:
    """Tensor id -> Python identifier from the tensor name: deduplicated, cut, or t{id}."""
    names: dict[int, str] = {}
    taken = set(RESERVED)
    for value in sorted(ir.values, key=lambda v: v.tensor):
        base = re.sub(r"[^0-9a-zA-Z]+", "_", value.name.split("/")[-1] or "").strip("_").lower()
        base = base[:NAME_LIMIT].rstrip("_")
        if (not base or base[0].isdigit() or keyword.iskeyword(base)
                or re.fullmatch(r"i\d+|base_\d+", base)):
            base = f"t{value.tensor}"
        name, suffix = base, 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names[value.tensor] = name
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... if taken; the name is taken from then on."""
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    taken.add(name)
    return name
