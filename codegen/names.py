"""The identifiers of generated source: tensors' names made Python identifiers, never one of
the names the kernel module itself defines or imports (RESERVED), and fresh local names."""
from __future__ import annotations

import keyword
import re

from .ir import KernelIR, Op
from .ops import HELPER_MODULES
from .qcall import QCALL_HELPERS


NAME_LIMIT = 24


#: Helpers the generated code calls: the op table's, the stack's buffers (aligned copies,
#: codegen.nests) and the fixed-point arithmetic of quantized ops (codegen.lower's QCALL).
KERNEL_HELPERS = {**HELPER_MODULES, "aligned_copy": "codegen.native",
                  "stack_empty": "codegen.native", "stream_store": "codegen.native",
                  "stream_fence": "codegen.native", "line_aligned": "codegen.native",
                  "run_nests": "codegen.native", "store_i64": "codegen.native",
                  "part_first": "codegen.native",
                  "lookup_bytes": "codegen.lut", "lookup_bytes_scalar": "codegen.lut",
                  **dict.fromkeys(QCALL_HELPERS, "codegen.fixedpoint_numba")}


RESERVED = {"np", "carray", "cfunc", "njit", "prange", "context", "node", "tensors", "range",
            "min", "max", "misses", "part", "tile", "block", "start", "stop", "base", "j", "k",
            "row_length", "padded_length", "FLT_MAX", "NAN", "INF", "INF_BITS", "NoAliasCompiler",
            # a kernel whose nests run in parts on the interpreter's pool (codegen.render)
            "nest", "pool", "arguments", "NESTS", "first", "offset",
            # a stencil nest's (codegen.emit_stencil)
            "n", "oy", "ox", "iy", "ix", "ky", "kx", "ky0", "ky1", "kx0", "kx1", "ch", "cb", "px",
            "data_row", "weight_row", "weight", "tap", *KERNEL_HELPERS}


def identifiers(ir: KernelIR) -> dict[int, str]:
    """Tensor id -> Python identifier, from the kernel's structure alone: the inputs x0, x1,
    ... (x alone), each computed value after what computes it (`tanh`, `mul_1`, `row_sum`),
    one-element constants c0, c1, ... Never a tensor's id or model name, so that partitions
    computing the same thing render one text, which compiles once."""
    names: dict[int, str] = {}
    taken = set(RESERVED)
    single = len(ir.inputs) == 1
    for position, tensor in enumerate(ir.inputs):
        names[tensor] = fresh_name("x" if single else f"x{position}", taken)
    for op in ir.ops:
        if op.output not in names:
            names[op.output] = fresh_name(_computed_base(op), taken)
    constants = 0
    for value in sorted(ir.values, key=lambda v: v.tensor):
        if value.tensor not in names:
            names[value.tensor] = fresh_name(f"c{constants}", taken)
            constants += 1
    return names


def _computed_base(op: Op) -> str:
    """What names an op's output: a lowering's label for a value of the kernel's own, a
    table's source ops, a fixed-point call's helper, else the op."""
    params = dict(op.params)
    if "made" in params:
        base = params["made"][0]
    elif op.op in ("LUT", "ROW_LUT") and op.source_ops:
        base = "_".join(op.source_ops)
    elif "call" in params:
        base = params["call"]
    else:
        base = op.op
    base = re.sub(r"[^0-9a-zA-Z]+", "_", base).strip("_").lower()[:NAME_LIMIT].rstrip("_")
    if not base or base[0].isdigit() or keyword.iskeyword(base) or re.fullmatch(
            r"[xc]\d+|i\d+|base_\d+", base):
        return "value"
    return base


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... if taken; the name is taken from then on."""
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    taken.add(name)
    return name
