"""The fast loop: a cheaper copy of a kernel's nests, exact unless its checks say otherwise.

TFLite's float kernels clamp every ADD/SUB/MUL/DIV result to +-FLT_MAX, which only changes
+-inf. The fast loop leaves those clamps out, so it differs from the exact loop only if an
unclamped value is +-inf. Such a value stays inf or NaN through ops that propagate it (ADD,
SUB, MUL, NEG, ...), so the fast loop checks the values where that propagation ends: partition
outputs and operands of any other op. It also runs ops with a `fast_expr` (sin, cos) and counts
their `guard`. No miss: the fast loop's results are the exact ones, bit for bit (NaN payloads
aside); any miss: the kernel runs the exact loop over everything.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import KernelIR


@dataclass(frozen=True)
class FastPath:
    """What a kernel's fast loop leaves out and what it checks instead."""
    dropped: int                       # clamps left out
    checked: tuple[int, ...]           # tensors whose magnitude() is counted
    guarded: tuple[int, ...]           # nodes run with their fast_expr
    in_passes: int = 0                 # of `checked`, those a rows nest's passes sum instead

    @classmethod
    def of(cls, ir: KernelIR, in_passes: frozenset[int] = frozenset()) -> "FastPath":
        """The fast path of `ir`, whose values `in_passes` are computed in a rows nest's
        passes (codegen.schedule)."""
        consumers: dict[int, list] = {}
        for op in ir.ops:
            for t in set(op.inputs):
                consumers.setdefault(t, []).append(op)
        dropped, unclamped = 0, set()
        for op in ir.ops:
            params = dict(op.params)
            if op.spec.clamps_overflow_only(params):
                dropped += 1
                unclamped.add(op.output)
            elif op.spec.propagates(params, fast=True) and unclamped & set(op.inputs):
                unclamped.add(op.output)
        checked = tuple(t for t in sorted(unclamped) if t in ir.outputs or any(
            not c.spec.propagates(dict(c.params), fast=True) for c in consumers.get(t, ())))
        guarded = tuple(op.node for op in ir.ops if op.spec.guard)
        return cls(dropped, checked, guarded, sum(t in in_passes for t in checked))

    @property
    def pays(self) -> bool:
        """Checks cost about what clamps do, but one a rows nest's pass sums (0 * value: a
        multiply and an add) half the clamp's and, compare, and, or; guarded ops save far more
        than their guard."""
        return bool(self.guarded) or self.dropped > len(self.checked) - self.in_passes / 2
