"""What a kernel reads as data rather than from its text: its lookup tables, and in a kernel run
once at build (an island's) the constants of its fixed-point calls too (issue 33: compile
less).

Partitions of one structure and shapes often differ in these alone (the islands of an int8
ViT's nine LayerNorms): written into the source, each would be a kernel of its own to compile.
Passed as data, they share one text and one compiled kernel. The data is
one block of bytes per partition, which the caller keeps alive and puts in the kernel's slot;
the entry point makes an array of each part (`KernelData.arrays`) and passes them to the
kernel as arguments, the way it passes the tensors. Its layout follows from the IR's
structure alone, so it is the same for every partition that shares the text.
"""
from __future__ import annotations

import functools
import inspect
import textwrap
from dataclasses import dataclass

import numpy as np

from .ir import KernelIR, Op
from .literals import float32_text, literal
from .lut import byte_table
from .names import identifiers
from .nests import ElementwiseNest, Schedule, TableNest
from .qcall import QCALL_HELPERS
from .writer import LINE_LIMIT

#: The arrays of a kernel's fixed-point constants, integer and float32.
QCALL_INTS, QCALL_FLOATS = "qcall_ints", "qcall_floats"
#: Where each array starts in the block: a cache line of its own.
ALIGNMENT = 64


@dataclass(frozen=True)
class DataArray:
    """One array of a kernel's data: its name in the kernel, dtype, offset in the block (bytes)
    and length (elements)."""
    name: str
    dtype: str
    offset: int
    length: int


@dataclass(frozen=True)
class KernelData:
    """A partition's data: its arrays' layout and the block of bytes holding them."""
    arrays: tuple[DataArray, ...]
    block: bytes

    def legend(self) -> list[str]:
        """The constants, as comment lines for the partition's legend (codegen.render)."""
        lines = []
        for array, values in zip(self.arrays, self.views()):
            if array.name in (QCALL_INTS, QCALL_FLOATS):
                text = ", ".join(map(float32_text if array.name == QCALL_FLOATS else str,
                                     values.tolist()))
                lines += ["# " + line for line in
                          textwrap.wrap(f"{array.name} = [{text}]", LINE_LIMIT - 2)]
        return lines

    def views(self) -> list[np.ndarray]:
        """The arrays, over a copy of the block (to call the kernel's loop from Python, which
        takes writable arrays as the entry point makes them)."""
        block = bytearray(self.block)
        return [np.frombuffer(block, a.dtype, a.length, a.offset) for a in self.arrays]


def table_name(names: dict[int, str], op: Op) -> str:
    """The kernel's name for the table of a LUT or ROW_LUT op."""
    return f"{names[op.output]}_table"


def _kind(ir: KernelIR, constant: object) -> str:
    """How a fixed-point call's constant is passed: as "int" or "float" data, or in the "text".
    Only a kernel run once at build time (ir.constants == "data", an island's) takes them as
    data: LLVM narrows the lanes of a call whose multipliers, offsets and bounds it knows, and
    passed as data they made int8 kernels up to 1.5x slower (perf/README.md)."""
    if ir.constants != "data" or isinstance(constant, bool):
        return "text"
    if isinstance(constant, float):
        return "float"
    return "int" if isinstance(constant, (int, np.integer)) else "text"


@functools.cache
def _parameters(call: str) -> tuple[str, ...]:
    """The parameters of a QCALL's helper (none for a numpy function)."""
    return () if call.startswith("np.") else tuple(
        inspect.signature(QCALL_HELPERS[call]).parameters)


def _constants(ir: KernelIR, op: Op) -> list[tuple[str, object, str]]:
    """A QCALL's constants: (keyword, value, kind)."""
    params = dict(op.params)
    constants = params["args"]
    keywords = _parameters(params["call"])
    keywords = keywords[len(keywords) - len(constants):]
    return [(key, c, _kind(ir, c)) for key, c in zip(keywords, constants, strict=True)]


def _all_constants(ir: KernelIR) -> list[tuple[Op, str, object, str]]:
    """Every QCALL's constants in IR order: (op, keyword, value, kind)."""
    return [(op, *constant) for op in ir.ops if op.op == "QCALL"
            for constant in _constants(ir, op)]


def qcall_arguments(ir: KernelIR, op: Op) -> list[tuple[str, object]]:
    """A QCALL's constants by keyword, each as the kernel reads it: `qcall_ints[k]`,
    `qcall_floats[k]`, or the constant itself where it stays in the text."""
    index = {"int": 0, "float": 0}
    arguments = []
    for owner, key, c, kind in _all_constants(ir):
        mine = owner.output == op.output          # an op is known by the value it makes
        if mine and kind == "text":
            arguments.append((key, literal(c) if isinstance(c, float) else c))
        elif mine:
            arrays = QCALL_INTS if kind == "int" else QCALL_FLOATS
            arguments.append((key, f"{arrays}[{index[kind]}]"))
        if kind != "text":
            index[kind] += 1
    return arguments


def kernel_data(ir: KernelIR, schedule: Schedule) -> KernelData:
    """The data of the kernel computing `ir` as `schedule` says: each LUT and ROW_LUT op's
    table (in table nests and byte lookups indexed by the element's raw byte, codegen.lut),
    then the QCALL constants."""
    names = identifiers(ir)
    by_byte = {t for nest in schedule.nests
               for t in ((nest.op.output,) if isinstance(nest, TableNest)
                         else nest.lookups if isinstance(nest, ElementwiseNest) else ())}
    parts: list[tuple[str, np.ndarray]] = []
    for op in ir.ops:
        if op.op in ("LUT", "ROW_LUT"):
            table = np.array(dict(op.params)["table"], ir.value(op.output).dtype)
            if op.output in by_byte:
                table = byte_table(table, ir.value(op.inputs[0]).dtype)
            parts.append((table_name(names, op), table))
    constants = _all_constants(ir)
    ints = [int(c) for _, _, c, kind in constants if kind == "int"]
    floats = [c for _, _, c, kind in constants if kind == "float"]
    if ints:
        parts.append((QCALL_INTS, np.array(ints, np.int64)))
    if floats:
        parts.append((QCALL_FLOATS, np.array(floats, np.float32)))
    arrays, block = [], bytearray()
    for name, values in parts:
        block += bytes(-len(block) % ALIGNMENT)
        arrays.append(DataArray(name, str(values.dtype), len(block), len(values)))
        block += values.tobytes()
    return KernelData(tuple(arrays), bytes(block))
