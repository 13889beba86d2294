"""A partition's schedule: the loop nests that compute it, each over its own domain.

One loop nest per partition cannot carry what TFLite puts in a partition: independent branches
whose shapes do not broadcast together, and ops on smaller shapes than the rest (per-channel
math, squeeze-excite gates, LayerNorm's `rsqrt(var + eps)` per row), which one nest would
recompute for every element of the largest tensor. So each op is placed in a nest over its own
output shape (Halide's compute_root, tinygrad's placement at the outermost loop its values use):
ops of one shape share a nest, a nest runs after every nest it reads from, and a value one nest
computes and a later one reads goes through a buffer of its own size.

Within a nest, four transformations of the loops fit it to the vector registers and L1:
- row blocks: a nest over [M, C] with a short C (a vector or more) whose operands are whole
  tensors or periodic [C] rows, many but few enough to stay in vector registers, or few, in rows of three whole vectors or more, keeps
  the plain [M, C] nest (the periodic operands then live in registers for the whole nest, or
  are read in place) and runs it in blocks of about ROW_TILE elements, each block's outputs
  checked by the fast loop in one flat loop after it, while in L1;
- unrolled rows: such a nest, C of any length, with more periodic operands than registers
  computes UNROLL_ROWS rows in each iteration of its inner loop, each load of a periodic
  operand shared by them; out of L2 only short rows (the unrolled rows one stream) are
  unrolled, and longer rows of whole vectors keep the plain nest, which streams better than
  row tiles;
- row tiles: any other such nest with a short C iterates the M * C elements flat, tile by
  tile, each tile `rows` rows long, with the periodic operands copied `rows` times once per
  invoke, all the copies within half of L1 (see ROW_BLOCK_OPERANDS for why few operands are
  not blocked);
- stages: several transcendental ops run one loop each over L1-sized tiles, and
  an 8-bit table lookup among other ops runs alone over the tile, 64 bytes a step (codegen.lut).

A nest whose outputs leave the caches anyway (STREAM_MIN_BYTES) stores them past the caches
with streaming stores, where its loops can promise that every vector store starts on a vector.

Reductions (codegen.ops.REDUCTIONS) add phases: a reduction is computed in the nest of its
input's domain, accumulating, and what reads its result runs in a later phase, so nests are
keyed by (domain, phase), phase(op) = max over its inputs of the producer's phase, + 1 past a
reduction. The reductions over the trailing dims of one [rows, C] domain (LayerNorm, softmax)
and the ops around them become one `rows` nest, run before the partition's other nests: one
loop over rows (two a step, ROWS_PER_STEP), in it one pass over the row's C elements per phase
(producers and scalar accumulators), and between passes the per-row ops on scalars. The row
stays in L1, so the input is read from memory once; values one pass computes for a later one
go through a row buffer (the stage buffers of a tile of one row). A pass that reads and writes
row buffers only (softmax's exp after its scale) runs on past the row's end to whole vectors,
over padding its reductions take in as their identity. Where the per-row ops are fixed-point
calls (int8), the rows go through the passes one by one in blocks of FIXED_POINT_ROW_BLOCK and
the per-row ops run once per block, across its rows. Threads split the rows, never a reduction.
Any other reduction (H,W of NHWC) is an ordinary nest over its input's domain accumulating
into a buffer of its output's size, in the input's order, on one thread.

A depthwise convolution (codegen.ops.STENCILS) reads its data at other positions than its
output's, so it runs a phase after that data. It and the elementwise ops after it that read
its values (its epilogue) are one stencil nest (codegen.stencil), formed whole as a rows nest
is, and a rows nest may follow it, reading what it stores (ConvNeXt's LayerNorm after its 7x7
convolution).

An int8 BATCH_MATMUL (codegen.ops.MATMULS) reads both operands at other positions than its
output's, so it runs a phase after both: one matmul nest (codegen.nests.MatmulNest), formed
whole, and a rows nest may follow it (an attention's softmax over the scores it stores).

`plan(ir, target)` is a pure function of the IR and the target (codegen.target: vector width,
registers, streaming stores, byte shuffles), and decides everything the renderer writes: the
kinds of nests (codegen.nests), their threads, the memory on the kernel's stack, the fast loop
(codegen.fastpath). Tests assert on plans without compiling, and the source text stays the
cache key.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .fastpath import FastPath
from .ir import IRError, KernelIR, Op, matmul_depth, reduced_shape
from .nests import (ElementwiseNest, LoopNest, MatmulNest, Nest, RowBlockNest, RowsNest,
                    Schedule, StencilNest, TableNest, UnrolledRowsNest, collapse)
from .ops import TRANSCENDENTAL, TRANSCENDENTAL_COST
from .padding import padding_of
from .stencil import joins_epilogue, stencil_nest
from .target import Target

#: Innermost loops shorter than this are made longer, by row tiles of about ROW_TILE elements
#: (long enough that each tile's loop setup is small against its work); stage tiles are TILE.
TILE = 256
ROW_TILE = 1024
#: The row-tile copies of a nest's periodic operands together stay within this many bytes, half
#: of L1, else each tile's loop streams them from L2.
ROW_COPIES_BYTES = 16 << 10
#: Stages need an innermost dimension at least this long, else one loop does better.
TILE_MIN = 64
#: Vectors of one iteration of LLVM's vectorised loop (vector_block): row tiles are a multiple
#: of it, so no element of a whole tile runs in the scalar remainder.
INTERLEAVE = 4
#: The quarters of the target's vector registers a nest's periodic operands may hold for the
#: whole nest (the rest hold the values being computed). Within that, rows of a vector or more
#: with ROW_BLOCK_OPERANDS periodic operands or more run in row blocks: with fewer, LLVM may
#: vectorise the plain nest across rows instead, with gathers and scatters, while with more
#: the row tiles' copies cost the most loads.
CONSTANT_REGISTER_QUARTERS = 3
ROW_BLOCK_OPERANDS = 8
#: ... and, with fewer periodic operands (in registers too), rows of whole vectors from this
#: many vectors up to TILE, in nests within L2 (UNROLL_MAX_ELEMENTS): from three vectors a row
#: LLVM vectorises the row loop, never the loop across rows, and blocks need no copies. Out of
#: L2, or with more operands than registers, row tiles stream better. Rows of int8 data must
#: be whole vector blocks (_row_lanes): LLVM vectorises them a vector block a step, and leaves
#: shorter rows scalar.
BLOCK_MIN_VECTORS = 3
#: Rows per iteration of the inner loop of a per-channel nest with ROW_BLOCK_OPERANDS periodic
#: operands or more that do not fit in registers: each load of a periodic operand then serves
#: UNROLL_ROWS rows (such a nest is bound by its loads).
UNROLL_ROWS = 4
#: ... in nests of at most this many elements, or with the UNROLL_ROWS rows of an iteration
#: within UNROLL_MAX_SPAN elements, one stream through memory; longer rows out of L2 run the
#: plain nest, which streams better. Out of L2, periodic operands are read from copies that
#: start on a cache line (`aligned`): in the model's flatbuffer they are 16-byte aligned, and
#: vector loads that span two lines slow the nest down.
UNROLL_MAX_ELEMENTS = 1 << 18
UNROLL_MAX_SPAN = 256
#: A nest whose float32 outputs (those no later nest reads) take this many bytes or more
#: stores them with streaming stores (codegen.native.stream_store), past the caches: with an
#: input as large they leave the last-level cache anyway, and a store that misses the caches
#: first reads the line it writes, a third of the nest's traffic. Every vector store must
#: start on a vector: such a nest is the plain nest where its rows are whole vectors, without
#: the blocks and unrolled rows above (blocks' checks read back what they stored), else its
#: tiles (row tiles, stages) if each starts on a vector, their last stage's outputs streamed;
#: else nothing is streamed.
STREAM_MIN_BYTES = 8 << 20
#: ... and with rows shorter than this it keeps the fast loop's checks per lane of a row (a max
#: per element in an array of the row's length, their largest taken after the nest): a check
#: per element into one `misses` ends every short row in a horizontal max.
LANE_CHECKS_BELOW = 128

#: Below this many elements a kernel runs on one thread: waking threads costs more.
PARALLEL_MIN_ELEMENTS = 1 << 16
#: ... and with more threads, each part has at least this many: handing a part to a pool
#: thread costs some microseconds, which many small parts would not earn back (perf/README.md,
#: "Kernels on the interpreter's thread pool").
PART_MIN_ELEMENTS = PARALLEL_MIN_ELEMENTS // 2
#: Bytes of its buffers and aligned copies a kernel may keep on its stack (_on_stack): a few
#: pages, within any thread's stack that calls the interpreter.
STACK_BYTES = 64 << 10

#: Output rows a matmul nest computes together: each rhs row is loaded once for them, their
#: sums stay in registers (ViT's values, 4 x [64, 64] @ [64, 16] without requantization:
#: 64 us a row at a time, 11 in blocks of 4; perf/README.md, "int8 BATCH_MATMUL"); fewer
#: where the block's sums would pass MATMUL_SUMS int32 values.
MATMUL_ROW_BLOCK = 4
MATMUL_SUMS = 4096

#: Rows a rows nest takes through its passes together: the reductions of a row end in
#: horizontal sums, divisions and square roots that one row alone leaves the core waiting on;
#: a second row's work fills the wait. A nest with a transcendental op (softmax's exp) keeps
#: the core busy with one row: it takes one row a step.
ROWS_PER_STEP = 2
#: Rows of a block of a rows nest with fixed-point per-row ops (int8 LayerNorm): its passes run
#: row by row, its per-row ops once per block, vectorised across the block's rows (the
#: vectoriser's main loop).
FIXED_POINT_ROW_BLOCK = 64


def plan(ir: KernelIR, target: Target) -> Schedule:
    """Place every op in the nest of its domain (its output shape, a reduction's input shape)
    and phase; order the nests so each runs after the nests it reads from, earlier phases and
    smaller domains first; loop each over its collapsed, maybe tiled, domain. Reductions over
    rows and the ops around them are one `rows` nest instead, and a depthwise convolution and
    its epilogue one `stencil` nest (_formed).

    An elementwise op's output shape holds each operand's shape, and is larger where they
    differ, so within a phase a nest only ever reads from nests over smaller domains, and a
    reduction's or a stencil's result is read in a later phase: the order exists."""
    phases, stencil_of = _phases(ir)
    formed = _formed(ir, phases, stencil_of, target)
    in_formed = {op.output for nest in formed for op in nest.ops}
    groups: dict[tuple, tuple[Op, ...]] = {}
    for op in ir.ops:
        if op.output not in in_formed:
            key = (_domain(ir, op), phases[op.output])
            groups[key] = (*groups.get(key, ()), op)
    # Formed nests sort before the groups of their phase: a rows nest reads memory only.
    units: dict[tuple, tuple[Op, ...]] = {
        **{(phases[nest.ops[0].output], -1, n): nest.ops for n, nest in enumerate(formed)},
        **{(phase, math.prod(domain), ir.ops.index(ops[0]), domain): ops
           for (domain, phase), ops in groups.items()}}
    unit_of = {op.output: key for key, ops in units.items() for op in ops}
    needs = {key: {unit_of[t] for op in ops for t in op.inputs if t in unit_of} - {key}
             for key, ops in units.items()}
    order: list[tuple] = []
    while len(order) < len(units):
        ready = [k for k in units if k not in order and needs[k] <= set(order)]
        if not ready:
            raise IRError(f"kernel {ir.name}: loop nests depend on each other")
        order.append(min(ready))
    nests: list[Nest] = []
    buffers = {}
    for position, key in enumerate(order):
        later = {t for k in order[position + 1:] for op in units[k] for t in op.inputs}
        if key[1] == -1:
            nest = formed[key[2]]
        else:
            ops = units[key]
            computed = {op.output for op in ops}
            reads = _unique(t for op in ops for t in op.inputs
                            if t not in computed and ir.value(t).literal is None)
            writes = tuple(op.output for op in ops
                           if op.output in ir.outputs or op.output in later)
            nest = _loops(ir, key[3], ops, reads, writes, tuple(set(writes) - later), target)
        buffers.update((t, math.prod(ir.value(t).shape)) for t in nest.writes
                       if t not in ir.outputs)
        nests.append(nest)
    nests = [_threaded(nest, ir.threads, target.lanes) for nest in nests]
    in_passes = frozenset(op.output for nest in nests if isinstance(nest, RowsNest)
                          for stage in nest.stages for op in stage)
    fast = FastPath.of(ir, in_passes)
    if fast.pays:
        nests = [replace(nest, exact_columns=True) if isinstance(nest, StencilNest) else nest
                 for nest in nests]
    ordered = tuple(sorted(buffers.items()))
    return Schedule(tuple(nests), ordered, _on_stack(ir, nests, ordered),
                    fast if fast.pays else None)


def _formed(ir: KernelIR, phases: dict[int, int], stencil_of: dict[int, int],
            target: Target) -> list[Nest]:
    """The nests formed whole, in op order: a stencil nest at each convolution (its epilogue
    as `stencil_of` says), and a rows nest at the first reduction over rows and at the first
    one after each stencil nest. Such a rows nest may read the stencils' values (they are in
    memory then), so it takes none of the ops they need."""
    formed: list[Nest] = []
    taken = set(stencil_of)
    available: set[int] = set()
    producer = {op.output: op for op in ir.ops}
    rows_wanted = True
    for op in ir.ops:
        if op.stencil:
            ops = tuple(o for o in ir.ops if stencil_of.get(o.output) == op.output)
            members = {o.output for o in ops}
            readers = {t for o in ir.ops if o.output not in members for t in o.inputs}
            writes = tuple(t for t in members if t in ir.outputs or t in readers)
            formed.append(stencil_nest(ir, ops, writes, target))
            available |= members
            rows_wanted = True
        elif op.matmul:
            formed.append(_matmul_nest(ir, op))
            taken.add(op.output)
            available.add(op.output)
            rows_wanted = True
        elif rows_wanted and op.output not in taken and _split(ir, op):
            needed = set()
            pending = [t for nest in formed if isinstance(nest, (StencilNest, MatmulNest))
                       for t in nest.reads]
            while pending:
                t = pending.pop()
                if t in producer and t not in needed:
                    needed.add(t)
                    pending += producer[t].inputs
            rows = _rows_nest(ir, phases, target, _split(ir, op), taken | needed, available)
            if rows is not None:
                formed.append(rows)
                taken |= {o.output for o in rows.ops}
                available |= {o.output for o in rows.ops}
            rows_wanted = False
    return formed


def _threaded(nest: Nest, requested: int, lanes: int) -> Nest:
    """The nest with its outermost loop split over threads: 1 unless the nest is large (and
    loops: a table nest is one call); parts of whole steps of rows, of whole groups of
    unrolled rows, of whole vectors where outputs are streamed."""
    if (requested <= 1 or nest.elements < PARALLEL_MIN_ELEMENTS
            or isinstance(nest, (TableNest, MatmulNest))
            or not isinstance(nest, RowsNest) and any(op.reduction for op in nest.ops)):
        return nest                    # (a reduction's outer loop may run along a reduced dim)
    threads = min(requested, nest.levels[0][1], nest.elements // PART_MIN_ELEMENTS)
    if threads == 1:
        return nest
    if isinstance(nest, UnrolledRowsNest):
        rows = nest.loops.sizes[0]
        whole = rows - rows % nest.unroll
        part = -(-whole // (threads * nest.unroll)) * nest.unroll
    else:
        unit = lanes if isinstance(nest, ElementwiseNest) and nest.streamed and not nest.tile \
            else 1
        part = -(-nest.levels[0][1] // (threads * unit)) * unit
    return replace(nest, threads=threads, part=part)


def _stage_buffers(stages: tuple[tuple[Op, ...], ...], writes: tuple[int, ...]
                   ) -> tuple[int, ...]:
    """The values a stage computes and a later stage reads, other than the nest's outputs: each
    tile's stage buffers."""
    stage_of = {op.output: n for n, group in enumerate(stages) for op in group
                if not op.reduction}
    return tuple(sorted({t for n, group in enumerate(stages) for op in group
                         for t in op.inputs if stage_of.get(t, n) < n} - set(writes)))


def _on_stack(ir: KernelIR, nests: list[Nest], buffers: tuple[tuple[int, int], ...]
              ) -> frozenset[int]:
    """The aligned copies of periodic operands (Nest.aligned), the buffers between nests and
    the stage buffers of one-thread nests that fit in STACK_BYTES, taken in that order (a
    stack array costs nothing, an allocator's call as much as a small kernel); the buffers
    beyond are allocated, and the aligned copies beyond are not made (the operands are read in
    place). A stage buffer filled with its padding is allocated."""
    room = STACK_BYTES
    stack = set()
    wanted = [(t, math.prod(ir.value(t).shape)) for t in dict.fromkeys(
        t for nest in nests if isinstance(nest, (ElementwiseNest, UnrolledRowsNest))
        for t in nest.aligned)]
    wanted += buffers
    wanted += [(t, nest.tile_elements) for nest in nests
               if isinstance(nest, (ElementwiseNest, RowsNest)) and nest.threads == 1
               for t in nest.stage_buffers
               if not isinstance(nest, RowsNest) or t not in dict(nest.padding)]
    for t, elements in wanted:
        size = elements * np.dtype(ir.value(t).dtype).itemsize
        if size <= room:
            room -= size
            stack.add(t)
    return frozenset(stack)


def _phases(ir: KernelIR) -> tuple[dict[int, int], dict[int, int]]:
    """Each op output's phase, and for each op of a stencil nest, its convolution's output.

    An op's phase is the largest of its inputs' (+ 1 for a reduction's result). A convolution
    reads its data at other positions than its own: it runs a phase after that data's. An op
    joins a convolution's epilogue (codegen.stencil.joins_epilogue) where it reads the values
    of that one convolution and otherwise only values of its phase or before: it is of that
    phase. Any other op sees a stencil nest's values one phase later (they are complete once
    the nest has run)."""
    after: dict[int, int] = {}
    phases: dict[int, int] = {}
    stencil_of: dict[int, int] = {}
    products: set[int] = set()              # matmuls' outputs, complete once their nest ran

    def seen(t: int) -> int:
        return after[t] + (t in stencil_of or t in products)

    for op in ir.ops:
        known = [t for t in op.inputs if t in after]
        convs = {stencil_of[t] for t in known if t in stencil_of}
        if op.stencil:
            phase = max((seen(t) + (t == op.inputs[0]) for t in known), default=0)
            stencil_of[op.output] = op.output
        elif op.matmul:
            phase = max((seen(t) + 1 for t in known), default=0)
            products.add(op.output)
        elif len(convs) == 1 and joins_epilogue(ir, op, _producer(ir, min(convs))) and all(
                seen(t) <= phases[min(convs)] for t in known if stencil_of.get(t) not in convs):
            phase = phases[min(convs)]
            stencil_of[op.output] = min(convs)
        else:
            phase = max((seen(t) for t in known), default=0)
        phases[op.output] = phase
        after[op.output] = phase + op.reduction
    return phases, stencil_of


def _matmul_nest(ir: KernelIR, op: Op) -> MatmulNest:
    """A BATCH_MATMUL's nest: its output's batch dims over 1, each with lhs's and rhs's
    matrix strides (0 where one broadcasts, as reference_ops::BatchMatMul's extents are)."""
    out = ir.value(op.output).shape
    lhs, rhs = (ir.value(t).shape for t in op.inputs)
    params = dict(op.params)
    rows, columns = out[-2:]
    depth = matmul_depth(lhs, params["adj_x"])

    def strides(shape: tuple[int, ...]) -> list[int]:
        dims = (1,) * (len(out) - len(shape)) + shape[:-2]
        result, stride = [], math.prod(shape[-2:])
        for size in reversed(dims):
            result.append(stride if size > 1 else 0)
            stride *= size
        return result[::-1]
    batch = tuple((size, lhs_stride, rhs_stride) for size, lhs_stride, rhs_stride
                  in zip(out[:-2], strides(lhs), strides(rhs)) if size > 1)
    block = min(MATMUL_ROW_BLOCK, rows)
    while block > 1 and block * columns > MATMUL_SUMS:
        block //= 2
    return MatmulNest(domain=out, ops=(op,), loops=LoopNest(out, {}), reads=op.inputs,
                      writes=(op.output,), rows=rows, depth=depth, columns=columns,
                      adj_x=params["adj_x"], adj_y=params["adj_y"], batch=batch,
                      row_block=block)


def _producer(ir: KernelIR, tensor: int) -> Op:
    return next(op for op in ir.ops if op.output == tensor)


def _domain(ir: KernelIR, op: Op) -> tuple[int, ...]:
    """Where an op is computed: over its output, a reduction over its input."""
    return _squeeze(ir.value(op.inputs[0] if op.reduction else op.output).shape)


def _in_domain(ir: KernelIR, tensor: int, reductions: dict[int, Op]) -> tuple[int, ...]:
    """A tensor's shape as its nest broadcasts it: a reduction's result has its reduced dims
    as 1s over the input's, whether keep_dims or not."""
    op = reductions.get(tensor)
    if op is None:
        return _squeeze(ir.value(tensor).shape)
    return _squeeze(reduced_shape(ir.value(op.inputs[0]).shape, dict(op.params)["axes"], True))


def _split(ir: KernelIR, op: Op) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(rows, cols) of a reduction over the trailing dims of its input, else None."""
    if not op.reduction:
        return None
    shape, axes = ir.value(op.inputs[0]).shape, dict(op.params)["axes"]
    if list(axes) != list(range(len(shape) - len(axes), len(shape))):
        return None
    return _squeeze(shape[:len(shape) - len(axes)]), shape[len(shape) - len(axes):]


def _rows_nest(ir: KernelIR, phases: dict[int, int], target: Target,
               split: tuple[tuple[int, ...], tuple[int, ...]], taken_before: set[int],
               available: set[int]) -> RowsNest | None:
    """One nest over rows for the reductions over the trailing dims of the domain `split`,
    [*rows, *cols], and the ops around them, or None if there are none. It takes, in order,
    each op not `taken_before` (by nests formed before it) over that domain (a full op) or
    over its rows (a per-row op: its operands' cols dims are all 1) whose operands are whole
    or broadcast along all their rows or all their cols, and come from memory (partition
    inputs, values `available` from nests before it) or from ops it took; the other ops of
    the partition are nests after it."""
    rows, cols = split
    rank = len(rows) + len(cols)
    by_output = {op.output: op for op in ir.ops if _split(ir, op) == (rows, cols)}

    def parts(tensor: int, read: bool = False) -> tuple[tuple[int, ...], ...] | None:
        """(rows part, cols part) of the tensor aligned to the domain: as an op reads it, or
        as it is stored (a reduction's result over its input's rows)."""
        shape = _squeeze(ir.value(tensor).shape) if read else _in_domain(ir, tensor, by_output)
        if len(shape) > rank:
            return None
        aligned = (1,) * (rank - len(shape)) + shape
        row_part, col_part = aligned[:len(rows)], aligned[len(rows):]
        if row_part not in (rows, (1,) * len(rows)) or col_part not in (cols, (1,) * len(cols)):
            return None
        return row_part, col_part

    scalar = set(by_output)            # per-row values: reduction results and per-row ops
    computed = {op.output for op in ir.ops} - available
    full_ops, row_ops, taken = [], [], set()
    for op in ir.ops:
        if op.output in taken_before or op.reduction and op.output not in by_output:
            continue
        if any(t in computed and t not in taken for t in op.inputs):
            continue
        operands = [parts(t, read=True) for t in op.inputs] + [parts(op.output)]
        if any(p is None for p in operands):
            continue
        if any(t in scalar and p[1] != (1,) * len(cols) for t, p in zip(op.inputs, operands)):
            continue                   # a row's value broadcast along the cols: [N] over [N, N]
        taken.add(op.output)
        if op.reduction or operands[-1][1] == cols and math.prod(cols) > 1:
            full_ops.append(op)
        else:
            scalar.add(op.output)
            row_ops.append(op)
    if not any(op.reduction for op in full_ops):
        return None
    first = min(phases[t] for t in taken)     # after a stencil nest, phases start later
    phases = {t: phases[t] - first for t in taken}
    stages = max(phases.values()) + 1
    # An elementwise op runs in the pass of its first reader, not before: x - mean then costs
    # no row buffer between passes.
    stage_of = {}
    for op in reversed(full_ops):
        readers = [stage_of[r.output] for r in full_ops if op.output in r.inputs]
        stage_of[op.output] = min(readers) if readers and not op.reduction \
            else phases[op.output]
    stage_ops = tuple(tuple(op for op in full_ops if stage_of[op.output] == k)
                      for k in range(stages))
    per_row = tuple(tuple(op for op in row_ops if phases[op.output] == k)
                    for k in range(stages + 1))
    ops = tuple(op for op in ir.ops if op.output in taken)
    reads = _unique(t for op in ops for t in op.inputs
                    if t not in taken and ir.value(t).literal is None)
    later = {t for op in ir.ops if op.output not in taken for t in op.inputs}
    writes = tuple(op.output for op in ops if op.output in ir.outputs or op.output in later)
    sizes = (math.prod(rows), math.prod(cols))
    broadcast = {}
    for t in (*reads, *taken):
        row_part, col_part = parts(t)
        broadcast[t] = (math.prod(row_part) == 1, math.prod(col_part) == 1)
    transcendental = any(op.spec.cost >= TRANSCENDENTAL_COST for op in full_ops)
    fixed_point = any(op.op in ("LUT", "QCALL") for op in row_ops)
    step_rows = (min(FIXED_POINT_ROW_BLOCK, sizes[0]) if fixed_point
                 else 1 if transcendental else min(ROWS_PER_STEP, sizes[0]))
    padded, padding = (_padded_stages(stage_ops, {*reads, *writes}) if sizes[1] % target.lanes
                       else ((), {}))
    return RowsNest(domain=rows + cols, ops=ops, loops=LoopNest(sizes, broadcast), reads=reads,
                    writes=writes, stages=stage_ops, per_row=per_row, step_rows=step_rows,
                    across=fixed_point, padded=padded, padding=tuple(sorted(padding.items())),
                    lanes=target.lanes, stage_buffers=_stage_buffers(stage_ops, writes))


def _padded_stages(stages: tuple[tuple[Op, ...], ...],
                   memory: set[int]) -> tuple[tuple[int, ...], dict[int, str]]:
    """The stages of a rows nest that may run over whole vectors past the row's end, and the
    value each row buffer they read is filled with there (codegen.padding.padding_of): else a
    row that ends mid-vector ends in scalar iterations. Such a stage reads and writes no array
    in memory (it
    ends with its row), reads row buffers that stages not running past the row write (their
    padding stays as filled), and has no fused activation or guard (the fast loop would
    check what it makes of the padding)."""
    made_in = {op.output: k for k, ops in enumerate(stages) for op in ops if not op.reduction}
    padded: list[int] = []
    padding: dict[int, str] = {}
    for k, ops in enumerate(stages):
        touched = {t for op in ops for t in (*op.inputs, op.output)}
        buffers = {t for t in touched if made_in.get(t, k) < k}
        if (not ops or touched & memory or any(made_in[t] in padded for t in buffers)
                or any(op.spec.fused_activation or op.spec.guard for op in ops)):
            continue
        fills = padding_of(ops, buffers)
        if fills is None or any(padding.get(t, fill) != fill for t, fill in fills.items()):
            continue
        padded.append(k)
        padding.update(fills)
    return tuple(padded), padding


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without leading 1s: [1, 1, C] and [C] are one domain."""
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def _unique(items) -> tuple[int, ...]:
    return tuple(dict.fromkeys(items))


def _loops(ir: KernelIR, domain: tuple[int, ...], ops: tuple[Op, ...], reads: tuple[int, ...],
           writes: tuple[int, ...], finals: tuple[int, ...], target: Target) -> Nest:
    """The nest of `ops`, which writes `writes`, of which no later nest reads `finals`."""
    lanes = target.lanes
    reductions = {op.output: op for op in ops if op.reduction}
    loops = collapse(domain, {t: _squeeze(ir.value(t).shape) for t in reads}
                     | {t: _in_domain(ir, t, reductions) for t in writes})
    common = {"domain": domain, "ops": ops, "loops": loops, "reads": reads, "writes": writes}
    if reductions:
        return ElementwiseNest(**common, stages=(ops,))
    large = _large_outputs(ir, loops, finals, target)
    if large and _streams_plain(ir, ops, loops, lanes):
        return ElementwiseNest(**common, stages=(ops,), streamed=large,
                               aligned=_periodic_inputs(ir, loops),
                               lane_checks=loops.sizes[-1] < LANE_CHECKS_BELOW)
    if _per_channel(loops):
        rows, period = loops.sizes
        constants = _row_operands(loops)
        flat = LoopNest((rows * period,), {})
        many = period >= lanes and ROW_BLOCK_OPERANDS <= constants
        whole_vectors = (period % _row_lanes(ir, reads, writes, lanes) == 0
                         and BLOCK_MIN_VECTORS * lanes <= period < TILE
                         and rows * period <= UNROLL_MAX_ELEMENTS)
        one_stage = (many or whole_vectors) and len(_stages(
            ops, flat, _lookups(ir, ops, flat, writes))) == 1
        registers = target.vector_registers * CONSTANT_REGISTER_QUARTERS // 4
        if one_stage and -(-period // lanes) * constants <= registers:
            return RowBlockNest(**common, rows_per_block=min(rows, max(1, ROW_TILE // period)))
        if many and one_stage:
            if UNROLL_ROWS <= rows and rows * period <= UNROLL_MAX_ELEMENTS:
                return UnrolledRowsNest(**common, unroll=UNROLL_ROWS)
            periodic_rows = _periodic_inputs(ir, loops)
            if UNROLL_ROWS <= rows and UNROLL_ROWS * period <= UNROLL_MAX_SPAN:
                return UnrolledRowsNest(**common, unroll=UNROLL_ROWS, aligned=periodic_rows)
            if period % lanes == 0:
                return ElementwiseNest(**common, stages=(ops,), aligned=periodic_rows)
    periodic: tuple[tuple[int, int], ...] = ()
    tile = 0
    if _row_tileable(loops):
        rows, period = loops.sizes
        periodic = tuple((t, period) for t, mask in loops.broadcast.items()
                         if mask == (True, False))
        unit = math.lcm(period, vector_block(target))
        wanted = min(ROW_TILE, ROW_COPIES_BYTES // (4 * len(periodic)))
        tile = min(rows * period, unit * max(1, -(-wanted // unit)))
        loops = LoopNest((rows * period,), {t: (mask == (True, True),)
                                            for t, mask in loops.broadcast.items()})
        common["loops"] = loops
    if _byte_table(ir, ops, loops):
        return TableNest(**common, shuffles=target.byte_shuffle)
    lookups = _lookups(ir, ops, loops, writes)
    stages = _stages(ops, loops, lookups)
    if len(stages) > 1 and not tile:
        tile = TILE
    streamed: tuple[int, ...] = ()
    if large and tile and not lookups and _tiles_start_on_vectors(loops, tile, lanes):
        streamed = tuple(t for t in large if t in {op.output for op in stages[-1]})
    return ElementwiseNest(**common, stages=stages, tile=tile, periodic=periodic,
                           bounded_copies=bool(periodic) and periodic[0][1] >= lanes,
                           lookups=lookups, shuffles=bool(lookups) and target.byte_shuffle,
                           stage_buffers=_stage_buffers(stages, writes), streamed=streamed,
                           lane_checks=bool(streamed) and loops.sizes[-1] < LANE_CHECKS_BELOW)


def vector_block(target: Target) -> int:
    """Elements of one iteration of LLVM's vectorised loop over float32 (INTERLEAVE vectors)."""
    return INTERLEAVE * target.lanes


def _row_lanes(ir: KernelIR, reads: tuple[int, ...], writes: tuple[int, ...],
               lanes: int) -> int:
    """What a row of a per-channel nest's plain loop must be a multiple of for LLVM to vectorise
    all of it: a vector of float32 lanes; for int8 data, a vector block's bytes."""
    quantized = any(ir.value(t).quantized for t in (*reads, *writes))
    return INTERLEAVE * lanes if quantized else lanes


def _large_outputs(ir: KernelIR, loops: LoopNest, finals: tuple[int, ...],
                   target: Target) -> tuple[int, ...]:
    """The float32 `finals` of a nest, if together STREAM_MIN_BYTES or more and the target has
    streaming stores: what it may stream."""
    large = tuple(t for t in sorted(finals) if ir.value(t).dtype == "float32")
    if (not target.streaming_stores
            or 4 * math.prod(loops.sizes) * len(large) < STREAM_MIN_BYTES):
        return ()
    return large


def _streams_plain(ir: KernelIR, ops: tuple[Op, ...], loops: LoopNest, lanes: int) -> bool:
    """Whether the nest streams as the plain nest: one stage, rows of whole vectors (so LLVM's
    vector stores start on vector boundaries), and, 2-D, rows of BLOCK_MIN_VECTORS vectors or
    ROW_BLOCK_OPERANDS per-channel operands (else LLVM vectorises it across rows, with gathers
    and scatters: such a nest streams from row tiles)."""
    constants = _row_operands(loops)
    lookups = _lookups(ir, ops, loops, tuple(op.output for op in ops))
    return not (loops.sizes[-1] % lanes or lookups or len(_stages(ops, loops)) > 1
                or len(loops.sizes) == 2 and loops.sizes[1] < BLOCK_MIN_VECTORS * lanes
                and constants < ROW_BLOCK_OPERANDS)


def _row_operands(loops: LoopNest) -> int:
    """How many of a 2-D nest's operands are one [C] row, the same for every row."""
    return sum(mask == (True, False) for mask in loops.broadcast.values())


def _tiles_start_on_vectors(loops: LoopNest, tile: int, lanes: int) -> bool:
    """Whether every tile starts on a whole vector: the tiles of a flat nest are whole vectors
    (or there is one), the rows of a deeper one are."""
    if len(loops.sizes) > 1:
        return loops.sizes[-1] % lanes == 0 and tile % lanes == 0
    return tile % lanes == 0 or tile >= loops.sizes[0]


def _byte_table(ir: KernelIR, ops: tuple[Op, ...], loops: LoopNest) -> bool:
    """One LUT from a whole 8-bit tensor to an 8-bit one: codegen.lut looks up 64 at a time."""
    if len(ops) != 1 or ops[0].op != "LUT":
        return False
    (op,) = ops
    return (ir.value(op.output).dtype in ("int8", "uint8")
            and not any(loops.broadcast[op.inputs[0]])
            and ir.value(op.inputs[0]).literal is None)


def _lookups(ir: KernelIR, ops: tuple[Op, ...], loops: LoopNest,
             writes: tuple[int, ...]) -> tuple[int, ...]:
    """The LUTs from 8-bit elements to 8-bit ones, each a stage of its own that codegen.lut
    runs 64 elements a step: in the loop with the other ops, LLVM makes of a table lookup one
    scalar load per element and leaves the whole loop unvectorised. (A LUT whose value nothing
    uses stays in the loop, where LLVM drops it.)"""
    if loops.sizes[-1] < TILE_MIN:
        return ()
    used = set(writes) | {t for op in ops for t in op.inputs}
    return tuple(op.output for op in ops if op.op == "LUT" and op.output in used
                 and ir.value(op.output).dtype in ("int8", "uint8")
                 and ir.value(op.inputs[0]).literal is None
                 and not any(loops.broadcast.get(op.inputs[0], ())))


def _periodic_inputs(ir: KernelIR, loops: LoopNest) -> tuple[int, ...]:
    """The [C] rows of a 2-D nest that are partition inputs (TFLite's, 16-byte aligned): what
    an aligned copy is for. A buffer of an earlier nest is on a line already, and not yet
    computed when the copies are made."""
    if len(loops.sizes) != 2:
        return ()
    return tuple(t for t, mask in loops.broadcast.items()
                 if mask == (True, False) and t in ir.inputs)


def _per_channel(loops: LoopNest) -> bool:
    """A 2-D nest [M, C], every operand whole, a [C] row or one value, and some [C] row."""
    if len(loops.sizes) != 2 or loops.sizes[0] == 1:
        return False
    masks = set(loops.broadcast.values())
    return (True, False) in masks and masks <= {(False, False), (True, False), (True, True)}


def _row_tileable(loops: LoopNest) -> bool:
    """A per-channel nest with C short."""
    return _per_channel(loops) and loops.sizes[1] < TILE


def _stages(ops: tuple[Op, ...], loops: LoopNest,
            lookups: tuple[int, ...] = ()) -> tuple[tuple[Op, ...], ...]:
    """One transcendental op (and the cheap ops before it) per stage, when there are two or
    more and the innermost loop is long enough to tile; each of `lookups` a stage alone.
    (Every op of a nest varies along all its loops: an op constant along one would have a
    smaller shape, so another nest.)"""
    expensive = {op.node for op in ops if op.op in TRANSCENDENTAL}
    if len(expensive) < 2:
        expensive = set()
    if not (expensive or lookups) or loops.sizes[-1] < TILE_MIN:
        return (ops,)
    groups: list[list[Op]] = [[]]
    for op in ops:
        last = groups[-1][-1] if groups[-1] else None
        if last is not None and (last.node in expensive or last.output in lookups
                                 or op.output in lookups):
            groups.append([])
        groups[-1].append(op)
    return tuple(tuple(group) for group in groups)
