"""What a schedule is: loop nests of a few kinds, each with only the fields its kind means.

codegen.schedule decides them (`plan`); codegen.emit, codegen.emit_rows, codegen.emit_stencil
and codegen.emit_matmul write each kind with an emitter of its own (render.EMITTERS). A new
kind of nest is one class here, the planning that makes it, and one emitter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .fastpath import FastPath
from .ir import Op
from .window import Window


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


@dataclass(frozen=True, kw_only=True)
class Nest:
    """One loop nest: `ops` (all of output shape `domain`) over the collapsed `loops`.

    reads: tensors it loads (partition inputs, buffers and outputs of earlier nests);
    writes: tensors it stores (partition outputs, buffers for later nests); its outermost loop
    split into `threads` parts of `part` iterations each (one thread: part 0).
    """
    domain: tuple[int, ...]
    ops: tuple[Op, ...]
    loops: LoopNest
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    threads: int = 1
    part: int = 0

    @property
    def elements(self) -> int:
        return math.prod(self.domain)

    @property
    def levels(self) -> list[tuple[str, int]]:
        """(loop variable, trip count) of each loop level, outermost first."""
        return [(f"i{d}", n) for d, n in enumerate(self.loops.sizes)]


@dataclass(frozen=True, kw_only=True)
class OneLoopNest(Nest):
    """A nest whose ops all run in one loop."""

    @property
    def stages(self) -> tuple[tuple[Op, ...], ...]:
        return (self.ops,)


@dataclass(frozen=True, kw_only=True)
class ElementwiseNest(Nest):
    """The nest over its collapsed domain, maybe tiled: `tile` > 0 runs the innermost loop tile
    by tile, each of `stages` a loop over the tile, a value one stage leaves for a later one in
    a tile buffer (`stage_buffers`). Row tiles: the [M, C] nest flat, its `periodic` [C]
    operands read through copies repeated to one tile (periods copied by a loop of bounded
    length: `bounded_copies`). A nest with reductions accumulates into their results."""
    stages: tuple[tuple[Op, ...], ...]
    tile: int = 0
    periodic: tuple[tuple[int, int], ...] = ()   # (tensor, period) of the row tiles' operands
    bounded_copies: bool = False
    lookups: tuple[int, ...] = ()       # outputs of LUTs run as a stage of byte lookups
    shuffles: bool = False              # ... 64 bytes a step (codegen.lut)
    stage_buffers: tuple[int, ...] = ()
    aligned: tuple[int, ...] = ()       # periodic operands read through cache-aligned copies
    streamed: tuple[int, ...] = ()      # outputs stored past the caches (STREAM_MIN_BYTES)
    lane_checks: bool = False           # streamed short rows: the fast loop checks per lane

    @property
    def levels(self) -> list[tuple[str, int]]:
        """Tiled, the innermost level is over tiles."""
        sizes = self.loops.sizes
        if not self.tile:
            return super().levels
        return [*super().levels[:-1], ("tile", -(-sizes[-1] // self.tile))]

    @property
    def tile_elements(self) -> int:
        return self.tile


@dataclass(frozen=True, kw_only=True)
class RowBlockNest(OneLoopNest):
    """An [M, C] nest with short rows, run `rows_per_block` rows at a time, the fast loop's
    checks of a block's outputs in one flat loop after it."""
    rows_per_block: int

    @property
    def levels(self) -> list[tuple[str, int]]:
        """Blocks, the rows of a block (at most `rows_per_block`), the row."""
        rows, cols = self.loops.sizes
        return [("block", -(-rows // self.rows_per_block)), ("i0", self.rows_per_block),
                ("i1", cols)]


@dataclass(frozen=True, kw_only=True)
class UnrolledRowsNest(OneLoopNest):
    """An [M, C] nest whose inner loop computes `unroll` rows an iteration, sharing each load
    of a periodic operand; the rows left over one at a time."""
    unroll: int
    aligned: tuple[int, ...] = ()       # periodic operands read through cache-aligned copies


@dataclass(frozen=True, kw_only=True)
class RowsNest(Nest):
    """The reductions over the trailing dims of [rows, cols] and the ops around them: a loop
    over steps of `step_rows` rows, in it one pass over the rows' elements per stage and the
    per-row ops on scalars between passes (`per_row`: before each stage, and last). With
    `across`, the rows of a step go through each pass one by one and the per-row ops run over
    the step's rows at once; else the step's rows go through each pass together. Padded
    stages run past the row's end to whole vectors of `lanes`, over row buffers holding
    `padding` there."""
    stages: tuple[tuple[Op, ...], ...]
    per_row: tuple[tuple[Op, ...], ...]
    step_rows: int
    across: bool = False
    padded: tuple[int, ...] = ()
    padding: tuple[tuple[int, str], ...] = ()
    lanes: int
    stage_buffers: tuple[int, ...] = ()

    @property
    def levels(self) -> list[tuple[str, int]]:
        """The loop over steps (the passes within are not levels a thread may split)."""
        return [("step", -(-self.loops.sizes[0] // self.step_rows))]

    @property
    def row_stride(self) -> int:
        """Elements of one row in the row buffers: its length, rounded up to whole vectors
        where some stage runs over them."""
        cols = self.loops.sizes[-1]
        return -(-cols // self.lanes) * self.lanes if self.padded else cols

    @property
    def tile_elements(self) -> int:
        """Elements of each row buffer: `row_stride` a row of a step."""
        return self.row_stride * self.step_rows


@dataclass(frozen=True, kw_only=True)
class TableNest(Nest):
    """One 8-bit table lookup over a whole tensor, 64 bytes a step with byte shuffles where
    the target has them (codegen.lut)."""
    shuffles: bool

    @property
    def op(self) -> Op:
        return self.ops[0]


@dataclass(frozen=True, kw_only=True)
class StencilNest(Nest):
    """A depthwise convolution (`ops[0]`, its window `window`, `depth_multiplier` output
    channels per input channel) over its [N, OH, OW, C] output `domain`, and its `epilogue`,
    the elementwise ops after it, applied to each sum before it is stored. `loops` is the
    domain uncollapsed, with the broadcast of the epilogue's operands.

    Output rows one by one, each row's taps limited to the input's rows. Along a row, tiles
    of `pixels` columns x `channels` (a divisor of C), their sums in vector registers: over
    the columns `interior` (windows inside the input, whole tiles) a loop of tiles whose taps
    need no check; before and after it, tiles of at most `pixels` columns whose taps inside
    the input are written out one by one."""
    window: Window
    depth_multiplier: int
    pixels: int
    channels: int
    interior: tuple[int, int]          # [first, end) of the columns of the tiles' loop
    runs: bool = False                 # a tile's taps as runs over its pixels x channels
                                       # (stride 1, C not whole half vectors: codegen.stencil)
    exact_columns: bool = False        # the exact loop of a kernel with a fast one runs the
                                       # row a column at a time, the taps a loop (it runs
                                       # only after a miss: fewer lines, compiled sooner)

    @property
    def conv(self) -> Op:
        return self.ops[0]

    @property
    def epilogue(self) -> tuple[Op, ...]:
        return self.ops[1:]

    @property
    def levels(self) -> list[tuple[str, int]]:
        """The images (if more than one) and the output rows: what threads may split."""
        n, rows = self.domain[:2]
        return [("n", n), ("oy", rows)] if n > 1 else [("oy", rows)]


@dataclass(frozen=True, kw_only=True)
class MatmulNest(Nest):
    """An int8 BATCH_MATMUL (codegen.quant_matmul) over its [..., M, N] output `domain`: the
    output rows in blocks of `row_block`, whose int32 sums advance together down rhs's K rows
    (each loaded once for the block), then each sum requantized. An rhs stored [N, K]
    (`adj_y`) is copied as [K, N] first. `batch`: per batch dim of the output larger than 1,
    its size and the element strides of lhs's and rhs's matrices along it (0 where that
    operand broadcasts)."""
    rows: int                           # M
    depth: int                          # K
    columns: int                        # N
    adj_x: bool                         # lhs stored [..., K, M]
    adj_y: bool                         # rhs stored [..., N, K]
    batch: tuple[tuple[int, int, int], ...]
    row_block: int


@dataclass(frozen=True)
class Schedule:
    """The nests in execution order, the buffers between them (tensor id -> elements), the
    tensors whose memory is on the kernel's stack, and the fast loop, where it pays."""
    nests: tuple[Nest, ...]
    buffers: tuple[tuple[int, int], ...]
    stack: frozenset[int] = frozenset()
    fast: FastPath | None = None
