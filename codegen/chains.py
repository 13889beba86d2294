"""Chains of ops that precision="fast" computes as one function (codegen.ops.APPROX_CHAINS).

swish is MUL(x, LOGISTIC(x)) in a converted model; as one function, x * logistic(x), and mish,
x * tanh(log(1 + exp(x))) as x * n / (n + 2) with n = e * (e + 2), cost less than their ops
one by one and stay within the chain's tolerance. A chain is replaced only where nothing else
reads its inner values: they are no partition output and no other op's operand.
"""
from __future__ import annotations

from dataclasses import replace

from .ir import KernelIR, Op
from .ops import APPROX_CHAINS

#: Ops whose two operands may come either way round in a pattern.
COMMUTATIVE = frozenset({"ADD", "MUL"})


def approximate_chains(ir: KernelIR) -> KernelIR:
    """The IR with every APPROX_CHAINS match as one SWISH / MISH kernel op."""
    producer = {op.output: op for op in ir.ops}
    readers: dict[int, int] = {}
    for op in ir.ops:
        for t in op.inputs:
            readers[t] = readers.get(t, 0) + 1
    replaced: dict[int, Op] = {}          # root node -> chain op
    absorbed: set[int] = set()            # inner nodes
    for op in reversed(ir.ops):
        if op.node in absorbed:
            continue
        for chain in APPROX_CHAINS.values():
            match = _match(ir, chain.pattern, op, producer, readers, root=True)
            if match is None:
                continue
            x, inner = match
            source = tuple((o.node, o.op) for o in sorted([*inner, op], key=lambda o: o.node))
            activation = dict(op.params).get("activation", 0)
            replaced[op.node] = Op(op.node, chain.name.upper(), (x,), op.output,
                                   (("activation", activation), ("source", source)))
            absorbed |= {o.node for o in inner}
            break
    if not replaced:
        return ir
    ops = tuple(replaced.get(op.node, op) for op in ir.ops if op.node not in absorbed)
    return replace(ir, ops=ops)


def _match(ir: KernelIR, pattern, op: Op, producer: dict, readers: dict,
           root: bool = False) -> tuple[int, list[Op]] | None:
    """(x, the inner ops) if `op` computes `pattern` of one tensor x, else None."""
    name, *operands = pattern
    params = dict(op.params)
    if op.op != name or len(op.inputs) != len(operands) or (
            not root and params.get("activation", 0) != 0):
        return None
    orders = [operands, operands[::-1]] if name in COMMUTATIVE else [operands]
    for order in orders:
        x, inner, ok = None, [], True
        for tensor, sub in zip(op.inputs, order):
            if sub == "x":
                ok = x in (None, tensor)
                x = tensor
            elif isinstance(sub, float):
                ok = ir.value(tensor).literal == sub
            else:
                child = producer.get(tensor)
                found = None if child is None or not _inner(ir, tensor, readers) else _match(
                    ir, sub, child, producer, readers)
                ok = found is not None and x in (None, found[0])
                if ok:
                    x = found[0]
                    inner += [*found[1], child]
            if not ok:
                break
        if ok and x is not None:
            return x, inner
    return None


def _inner(ir: KernelIR, tensor: int, readers: dict) -> bool:
    """Only the chain reads this value: one reader, and no partition output."""
    return readers.get(tensor, 0) == 1 and tensor not in ir.outputs

