"""What a rows nest pads its row buffers with, so that a pass may run over whole vectors.

A scheduler query over the IR (codegen.schedule asks it); it imports no numba.
"""
from __future__ import annotations

from .ir import Op


def padding_of(ops: tuple[Op, ...], buffers: set[int]) -> dict[int, str] | None:
    """What to fill the row buffers a pass of `ops` reads (`buffers`) with past the row's end,
    so that the pass may run on over whole vectors there: each reduction must then take in its
    identity. A reduction of a buffer gets its `init`; softmax's sum of exps gets +0 (its
    identity: every exp is >= +0 and a row has one) from the exp of -INF minus the row's max
    with beta > 0 (with a max of -inf or NaN the row is NaN anyway). None for any other."""
    made = {op.output: op for op in ops}
    fills: dict[int, str] = {}
    for op in ops:
        if not op.reduction:
            continue
        operand, exp = op.inputs[0], made.get(op.inputs[0])
        if operand in buffers:
            fill = {operand: op.init}
        elif (op.op == "ROW_SUM" and exp is not None and exp.op == "SCALED_EXP"
              and dict(exp.params)["beta"] > 0 and exp.inputs[0] in buffers
              and exp.inputs[1] not in buffers):
            fill = {exp.inputs[0]: "-INF"}
        else:
            return None
        if any(fills.setdefault(t, value) != value for t, value in fill.items()):
            return None
    return fills
