"""Reductions in a kernel: the composite ops made of them, and the accumulating helpers.

SOFTMAX, LOG_SOFTMAX and L2_NORMALIZATION are row reductions plus elementwise ops. `expand`
rewrites each into the steps LiteRT's float kernel takes (optimized_ops.h SoftmaxImpl,
LogSoftmax, L2Normalization), so the schedule sees reductions and elementwise ops only:

- SOFTMAX:     m = max(x); e = exp((x - m) * beta); s = sum(e); y = e * (1 / s)
- LOG_SOFTMAX: m = max(x); d = x - m; s = sum(exp(d)); y = d - log(s)
- L2_NORMALIZATION: s = sum(x * x) in order; y = x / max(sqrt(s), 1e-6)

The helpers are what a row loop accumulates with. numba compiles float code without fast-math
(it would change what inf and NaN become in every other op), so a float sum or max loop stays
sequential: `add_reassoc` and `max_reassoc` carry LLVM's `reassoc` flag (and the max `nnan nsz`)
on that one instruction, which lets the loop vectoriser keep partial accumulators in vector
lanes. Only the accumulation is reordered; each element's value is computed as before.
"""
from __future__ import annotations

from dataclasses import replace

from numba import njit, types
from numba.extending import intrinsic

from .ir import KernelIR, Op, Value
from .mathf32 import _exp_nonpositive_fast5, exp_fast_f32

#: L2Normalization's default epsilon (optimized_ops.h), which the float kernel uses.
L2_EPSILON = 1e-6


@intrinsic
def add_reassoc(typingctx, acc, x):
    """acc + x, which LLVM may reassociate with the other adds of its reduction."""
    if not (isinstance(acc, types.Float) and acc == x):
        return None

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))
    return acc(acc, x), codegen


@intrinsic
def max_reassoc(typingctx, acc, x):
    """`acc > x ? acc : x` as a reassociable maximum: exact for rows without NaN (the caller's
    result is NaN for a row with one whatever this gives); -0.0 and 0.0 may come either way."""
    if not (isinstance(acc, types.Float) and acc == x):
        return None

    def codegen(context, builder, signature, args):
        flags = ("nnan", "nsz", "reassoc")
        greater = builder.fcmp_ordered(">", args[0], args[1], flags=flags)
        return builder.select(greater, args[0], args[1], flags=flags)
    return acc(acc, x), codegen


@njit(inline="always", error_model="numpy")
def scaled_exp(d, beta):
    """exp(d * beta) for softmax's d = x - max: with beta >= 0 (a constant, so LLVM keeps one
    branch) the argument is <= 0, or NaN in a row that is NaN anyway, and its exp is
    _exp_nonpositive_fast5's; with beta < 0, exp_fast_f32's."""
    x = d * beta
    return _exp_nonpositive_fast5(x) if beta >= 0 else exp_fast_f32(x)


@njit(inline="always", error_model="numpy")
def max_eps(x, epsilon):
    """std::max(l2_norm, epsilon): `x < epsilon ? epsilon : x`, so NaN passes."""
    return epsilon if x < epsilon else x


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
            values[next_id] = Value(next_id, f"{out.name}_{label}", shape)
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


#: The ops `expand` rewrites, by builtin code.
COMPOSITES = {"SOFTMAX": 25, "LOG_SOFTMAX": 50, "L2_NORMALIZATION": 11}
