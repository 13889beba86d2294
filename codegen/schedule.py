"""A partition's schedule: the loop nests that compute it, each over its own domain.

One loop nest per partition cannot carry what TFLite puts in a partition: independent branches
whose shapes do not broadcast together, and ops on smaller shapes than the rest (per-channel
math, squeeze-excite gates, LayerNorm's `rsqrt(var + eps)` per row), which one nest would
recompute for every element of the largest tensor. So each op is placed in a nest over its own
output shape (Halide's compute_root, tinygrad's placement at the outermost loop its values use):
ops of one shape share a nest, a nest runs after every nest it reads from, and a value one nest
computes and a later one reads goes through a buffer of its own size.

Within a nest, two transformations of the loops keep the innermost loop long:
- row tiles: a nest over [M, C] with a short C whose operands are whole tensors or periodic
  [C] rows iterates the M * C elements flat, tile by tile, each tile `rows` rows long, with the
  periodic operands copied `rows` times once per invoke (a 16-wide inner loop is all remainder
  for a vectorising compiler);
- stages: several transcendental ops run one loop each over L1-sized tiles (render.py).

`plan` is a pure function of the IR and the renderer a pure function of the plan: tests assert
on plans without compiling, and the source text stays the cache key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .ir import IRError, KernelIR, Op
from .ops import TRANSCENDENTAL

#: Innermost loops shorter than this are made longer, by row tiles of about ROW_TILE elements
#: (long enough that each tile's loop setup is small against its work); stage tiles are TILE.
TILE = 256
ROW_TILE = 1024
#: Stages need an innermost dimension at least this long, else one loop does better.
TILE_MIN = 64
#: Elements of one iteration of LLVM's vectorised loop (16 float32 lanes, interleaved 4 times):
#: row tiles are a multiple of it, so no element of a whole tile runs in the scalar remainder.
VECTOR_BLOCK = 64


@dataclass(frozen=True)
class LoopNest:
    """The collapsed iteration space and, per tensor, which of its dims are broadcast."""
    sizes: tuple[int, ...]
    broadcast: dict                      # tensor id -> tuple[bool, ...] over `sizes`

    def strides(self, tensor: int) -> list[tuple[int, int]]:
        """(loop dim, element stride) of each dim the tensor varies along, outermost first."""
        dims = [d for d, b in enumerate(self.broadcast[tensor]) if not b]
        strides, stride = [], 1
        for d in reversed(dims):
            strides.append((d, stride))
            stride *= self.sizes[d]
        return strides[::-1]


def collapse(shape: tuple[int, ...], operands: dict) -> LoopNest:
    """Drop size-1 dims and merge adjacent dims with the same broadcast pattern for every
    operand (TFLite's broadcast collapsing), so the inner loop is as long as possible."""
    rank = len(shape)
    masks = {}
    for tensor, operand_shape in operands.items():
        aligned = (1,) * (rank - len(operand_shape)) + tuple(operand_shape)
        masks[tensor] = [a == 1 and s != 1 for a, s in zip(aligned, shape)]
    keep = [d for d in range(rank) if shape[d] != 1]
    sizes: list[int] = []
    merged = {t: [] for t in operands}
    for d in keep:
        pattern = [masks[t][d] for t in operands]
        if sizes and pattern == [merged[t][-1] for t in operands]:
            sizes[-1] *= shape[d]
            continue
        sizes.append(shape[d])
        for t in operands:
            merged[t].append(masks[t][d])
    if not sizes:
        return LoopNest((1,), {t: (False,) for t in operands})
    return LoopNest(tuple(sizes), {t: tuple(m) for t, m in merged.items()})


@dataclass(frozen=True)
class Nest:
    """One loop nest: `ops` (all of output shape `domain`) over the collapsed `loops`.

    reads: tensors it loads (partition inputs, buffers and outputs of earlier nests);
    writes: tensors it stores (partition outputs, buffers for later nests). tile > 0: the
    innermost loop runs tile by tile, `tile` elements each; periodic: operands read through a
    copy repeated to one tile (row tiles), by tensor, with their period; stages: the ops, one
    group per loop over a tile (one group: a single loop).
    """
    domain: tuple[int, ...]
    ops: tuple[Op, ...]
    loops: LoopNest
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    tile: int = 0
    periodic: tuple[tuple[int, int], ...] = ()
    stages: tuple[tuple[Op, ...], ...] = ()
    kind: str = "elementwise"           # or "table": one byte LUT over a whole tensor

    @property
    def elements(self) -> int:
        return math.prod(self.domain)

    @property
    def row_tiled(self) -> bool:
        return bool(self.periodic)


@dataclass(frozen=True)
class Schedule:
    """The nests in execution order and the buffers between them (tensor id -> elements)."""
    nests: tuple[Nest, ...]
    buffers: tuple[tuple[int, int], ...]


def plan(ir: KernelIR) -> Schedule:
    """Place every op in the nest of its output shape; order the nests so each runs after the
    nests it reads from, smaller ones first; loop each over its collapsed, maybe tiled, domain.

    An elementwise op's output shape holds each operand's shape, and is larger where they
    differ, so a nest only ever reads from nests over smaller domains: the order exists."""
    groups: dict[tuple[int, ...], list[Op]] = {}
    for op in ir.ops:
        groups.setdefault(_squeeze(ir.value(op.output).shape), []).append(op)
    domain_of = {op.output: domain for domain, ops in groups.items() for op in ops}
    needs = {domain: {domain_of[t] for op in ops for t in op.inputs if t in domain_of} - {domain}
             for domain, ops in groups.items()}
    first = {domain: ir.ops.index(ops[0]) for domain, ops in groups.items()}
    order: list[tuple[int, ...]] = []
    while len(order) < len(groups):
        ready = [d for d in groups if d not in order and needs[d] <= set(order)]
        if not ready:
            raise IRError(f"partition {ir.partition}: loop nests depend on each other")
        order.append(min(ready, key=lambda d: (math.prod(d), first[d])))
    buffers = {}
    nests = []
    for position, domain in enumerate(order):
        ops = tuple(groups[domain])
        computed = {op.output for op in ops}
        reads = _unique(t for op in ops for t in op.inputs
                        if t not in computed and ir.value(t).literal is None)
        later = {t for d in order[position + 1:] for op in groups[d] for t in op.inputs}
        writes = tuple(op.output for op in ops if op.output in ir.outputs or op.output in later)
        for t in writes:
            if t not in ir.outputs:
                buffers[t] = math.prod(ir.value(t).shape)
        nests.append(_loops(ir, domain, ops, reads, writes))
    return Schedule(tuple(nests), tuple(sorted(buffers.items())))


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without leading 1s: [1, 1, C] and [C] are one domain."""
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def _unique(items) -> tuple[int, ...]:
    return tuple(dict.fromkeys(items))


def _loops(ir: KernelIR, domain: tuple[int, ...], ops: tuple[Op, ...], reads: tuple[int, ...],
           writes: tuple[int, ...]) -> Nest:
    loops = collapse(domain, {t: _squeeze(ir.value(t).shape) for t in (*reads, *writes)})
    periodic: tuple[tuple[int, int], ...] = ()
    tile = 0
    if _row_tileable(loops):
        rows, period = loops.sizes
        periodic = tuple((t, period) for t, mask in loops.broadcast.items()
                         if mask == (True, False))
        unit = math.lcm(period, VECTOR_BLOCK)
        tile = min(rows * period, unit * -(-ROW_TILE // unit))
        loops = LoopNest((rows * period,), {t: (mask == (True, True),)
                                            for t, mask in loops.broadcast.items()})
    if _byte_table(ir, ops, loops):
        return Nest(domain, ops, loops, reads, writes, stages=(ops,), kind="table")
    stages = _stages(ops, loops)
    if len(stages) > 1 and not tile:
        tile = TILE
    return Nest(domain, ops, loops, reads, writes, tile, periodic, stages)


def _byte_table(ir: KernelIR, ops: tuple[Op, ...], loops: LoopNest) -> bool:
    """One LUT from a whole 8-bit tensor to an 8-bit one: codegen.lut looks up 64 at a time."""
    if len(ops) != 1 or ops[0].op != "LUT":
        return False
    (op,) = ops
    return (ir.value(op.output).dtype != "float32" and not any(loops.broadcast[op.inputs[0]])
            and ir.value(op.inputs[0]).literal is None)


def _row_tileable(loops: LoopNest) -> bool:
    """A 2-D nest [M, C] with C short, every operand whole, a [C] row or one value."""
    if len(loops.sizes) != 2 or loops.sizes[1] >= TILE or loops.sizes[0] == 1:
        return False
    masks = set(loops.broadcast.values())
    return (True, False) in masks and masks <= {(False, False), (True, False), (True, True)}


def _stages(ops: tuple[Op, ...], loops: LoopNest) -> tuple[tuple[Op, ...], ...]:
    """One transcendental op (and the cheap ops before it) per stage, when there are two or
    more and the innermost loop is long enough to tile. (Every op of a nest varies along all
    its loops: an op constant along one would have a smaller shape, so another nest.)"""
    expensive = {op.node for op in ops if op.op in TRANSCENDENTAL}
    if len(expensive) < 2 or loops.sizes[-1] < TILE_MIN:
        return (ops,)
    groups: list[list[Op]] = [[]]
    for op in ops:
        if groups[-1] and groups[-1][-1].node in expensive:
            groups.append([])
        groups[-1].append(op)
    return tuple(tuple(group) for group in groups)
