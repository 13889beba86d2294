"""Float math between an 8-bit input and an 8-bit output is a function of 256 codes: one table.

A DEQUANTIZE -> float ops -> QUANTIZE island (any lowered ops leading from one int8/uint8
tensor x to an 8-bit value of x's shape, reading nothing else but one-value literals) computes
f(x[i]) at every element for one function f of x's 256 codes. The kernel looks f up instead of
evaluating float math per element, as XNNPACK does for such islands.

f's table is made by the kernel's own code: the island's ops, rendered and compiled as a kernel
over the 256 codes, so each entry is what the per-element kernel computes for that code, bit
for bit (its ops do not depend on the position of an element). Islands of fixed-point calls
alone are left to codegen.lower, which tabulates them without compiling anything.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .ir import KernelIR, Op

#: Lowered ops whose value at an element depends on no other element of their operands.
_NOT_ELEMENTWISE = frozenset({"ROW_LUT"})


@dataclass(frozen=True)
class Island:
    """The ops from one 8-bit tensor `source` to the 8-bit value `output`, in IR order."""
    source: int
    output: int
    ops: tuple[Op, ...]


def islands(ir: KernelIR) -> list[Island]:
    """The largest islands with float math in them whose inner values nothing else reads."""
    origin = _origins(ir)
    readers: dict[int, list[Op]] = {}
    for op in ir.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    made = {op.output: op for op in ir.ops}
    found = []
    for op in ir.ops:
        out = ir.value(op.output)
        x = origin.get(op.output)
        if x is None or not out.quantized or op.output == x:
            continue
        if op.output not in ir.outputs and all(origin.get(r.output) == x
                                               for r in readers.get(op.output, ())):
            continue            # a larger island ends further on
        cone = _cone(op.output, x, made)
        inner = {c.output for c in cone} - {op.output}
        closed = all(t not in ir.outputs and all(r in cone for r in readers.get(t, ()))
                     for t in inner)
        floats = any(ir.value(c.output).dtype == "float32" for c in cone)
        if closed and floats:
            found.append(Island(x, op.output, tuple(cone)))
    return found


def island_ir(ir: KernelIR, island: Island) -> KernelIR:
    """The island as a kernel of its own over the 256 codes of its source, in table order."""
    members = {island.source, *(op.output for op in island.ops)}
    reads = {t for op in island.ops for t in op.inputs} | members
    values = tuple(replace(v, shape=(256,)) if v.tensor in members else v
                   for v in ir.values if v.tensor in reads)
    return replace(ir, values=values, ops=island.ops, inputs=(island.source,),
                   outputs=(island.output,), threads=1, constants="data")


def tabulate(ir: KernelIR, evaluate: Callable[[KernelIR, np.ndarray], np.ndarray]) -> KernelIR:
    """The IR with each island replaced by one LUT. `evaluate(kernel_ir, codes)` runs a kernel
    on the source's codes and returns its output."""
    for island in islands(ir):
        x = ir.value(island.source)
        codes = x.quant.codes().astype(x.quant.numpy_dtype)
        table = np.asarray(evaluate(island_ir(ir, island), codes))
        sources = tuple(s for op in island.ops for s in op.sources)
        lut = Op(island.ops[-1].node, "LUT", (island.source,), island.output,
                 (("table", tuple(table.tolist())), ("source", sources)))
        gone = {op.output for op in island.ops}
        ops = [lut if op.output == island.output else op
               for op in ir.ops if op.output not in gone or op.output == island.output]
        kept = {t for op in ops for t in (*op.inputs, op.output)} | set(ir.inputs)
        ir = replace(ir, ops=tuple(ops), values=tuple(v for v in ir.values if v.tensor in kept))
    return ir


def _origins(ir: KernelIR) -> dict[int, int]:
    """The 8-bit tensor each value is an elementwise function of, where there is one."""
    origin = {t: t for t in ir.inputs
              if ir.value(t).quantized and ir.value(t).literal is None}
    for op in ir.ops:
        if op.reduction or op.op in _NOT_ELEMENTWISE:
            continue
        varying = {origin.get(t, -1) for t in op.inputs if ir.value(t).literal is None}
        if len(varying) != 1 or -1 in varying:
            continue
        (x,) = varying
        shapes = {ir.value(t).shape for t in op.inputs if ir.value(t).literal is None}
        if shapes == {ir.value(x).shape} == {ir.value(op.output).shape}:
            origin[op.output] = x
    return origin


def _cone(output: int, source: int, made: dict[int, Op]) -> list[Op]:
    """The ops between `source` and `output`, in IR order."""
    cone, stack = {}, [output]
    while stack:
        t = stack.pop()
        if t == source or t not in made or t in cone:
            continue
        cone[t] = made[t]
        stack.extend(made[t].inputs)
    order = {op.output: position for position, op in enumerate(made.values())}
    return sorted(cone.values(), key=lambda op: order[op.output])
