"""The composite row ops as the reductions and elementwise ops the schedule knows.

SOFTMAX, LOG_SOFTMAX and L2_NORMALIZATION are row reductions plus elementwise ops. `expand`
rewrites each float one into the steps LiteRT's float kernel takes (optimized_ops.h SoftmaxImpl,
LogSoftmax, L2Normalization), so the schedule sees reductions and elementwise ops only:

- SOFTMAX:     m = max(x); e = exp((x - m) * beta); s = sum(e); y = e * (1 / s)
- LOG_SOFTMAX: m = max(x); d = x - m; s = sum(exp(d)); y = d - log(s)
- L2_NORMALIZATION: s = sum(x * x) in order; y = x / max(sqrt(s), 1e-6)

An IR pass: it imports no numba (the helpers its steps call are codegen.reduce's).
"""
from __future__ import annotations

from dataclasses import replace

from .ir import KernelIR, Op, Value

#: L2Normalization's default epsilon (optimized_ops.h), which the float kernel uses.
L2_EPSILON = 1e-6
#: The ops `expand` rewrites, by builtin code.
COMPOSITES = {"SOFTMAX": 25, "LOG_SOFTMAX": 50, "L2_NORMALIZATION": 11}


def expand(ir: KernelIR) -> KernelIR:
    """The IR with its float SOFTMAX, LOG_SOFTMAX and L2_NORMALIZATION as reductions and
    elementwise ops over the last axis (codegen.lower lowers the int8/uint8 ones). New
    intermediates get tensor ids past the model's and names after the op's output; every op
    keeps the node's name as its source."""
    if not any(op.op in COMPOSITES for op in ir.ops):
        return ir
    values = {v.tensor: v for v in ir.values}
    next_id = max(values) + 1
    ops: list[Op] = []
    for op in ir.ops:
        if op.op not in COMPOSITES or values[op.output].quantized:
            ops.append(op)
            continue
        x, out = values[op.inputs[0]], values[op.output]
        rank = len(x.shape)
        row = tuple(1 if d == rank - 1 else n for d, n in enumerate(x.shape))
        source = ("source", ((op.node, op.op),))
        names: dict[str, int] = {}

        def tensor(label: str, shape: tuple[int, ...]) -> int:
            nonlocal next_id
            values[next_id] = Value(next_id, shape)
            names[label], next_id = next_id, next_id + 1
            return next_id - 1

        def step(kind: str, inputs: tuple[int, ...], output: int, *params) -> None:
            ops.append(Op(op.node, kind, inputs, output, (*params, source)))

        last = (("axes", (rank - 1,)), ("keep_dims", True))
        if op.op == "SOFTMAX":
            beta = dict(op.params)["beta"]
            step("ROW_MAX", (x.tensor,), tensor("max", row), *last)
            step("SCALED_EXP", (x.tensor, names["max"]), tensor("exp", x.shape), ("beta", beta))
            step("ROW_SUM", (names["exp"],), tensor("sum", row), *last)
            step("RECIPROCAL", (names["sum"],), tensor("inverse", row))
            step("MUL_RAW", (names["exp"], names["inverse"]), out.tensor)
        elif op.op == "LOG_SOFTMAX":
            step("ROW_MAX", (x.tensor,), tensor("max", row), *last)
            step("SUB_RAW", (x.tensor, names["max"]), tensor("shifted", x.shape))
            step("EXP", (names["shifted"],), tensor("exp", x.shape))
            step("ROW_SUM", (names["exp"],), tensor("sum", row), *last)
            step("LOG", (names["sum"],), tensor("log_sum", row))
            step("SUB_RAW", (names["shifted"], names["log_sum"]), out.tensor)
        else:
            step("SQUARE", (x.tensor,), tensor("square", x.shape))
            step("SUM", (names["square"],), tensor("sum", row), *last)
            step("L2_NORM", (names["sum"],), tensor("norm", row), ("epsilon", L2_EPSILON))
            step("DIV_RAW", (x.tensor, names["norm"]), out.tensor)
    return replace(ir, values=tuple(values[t] for t in sorted(values)), ops=tuple(ops))
