"""Writing the loop nests of a schedule (codegen.nests), one emitter per kind, and what they share:
the nests' local names, the kernel's memory, the statements of one element.

An emitter writes what the schedule says and decides nothing: codegen.schedule chose the loops,
threads, tiles, buffers and checks."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np

from .fastpath import FastPath
from .ir import KernelIR, Op, Value
from .kernel_data import qcall_arguments, table_name
from .literals import literal
from .names import RESERVED, fresh_name
from .nests import (ElementwiseNest, MatmulNest, Nest, RowBlockNest, RowsNest, Schedule,
                    StencilNest, TableNest, UnrolledRowsNest)
from .writer import INDENT, LINE_LIMIT, assignment, wrap_call


@dataclass(frozen=True)
class NestNames:
    """A nest's local arrays: stage buffers carrying values from one stage to a later one of
    the same tile (partition outputs and nest buffers are read back instead), the row-tile
    copies of its periodic operands, and, tiled, each tile's slice of the arrays it reads and
    writes along the innermost loop (indices from 0 in a slice are what LLVM can prove
    non-negative, so numba's negative-index wraparound vanishes and the loop vectorises)."""
    stages: dict
    rows: dict                         # ... and a matmul's rhs stored [N, K], copied [K, N],
                                       # and a stencil's weights and bias repeated for a
                                       # tile's runs
    slices: dict
    accumulators: dict                 # rows nests: a reduction's register, if stored too;
                                       # stencil nests: the array of a tile's sums
    unrolled: dict                     # unrolled rows: (tensor, row) -> row's temporary
    values: dict                       # streamed nests: output -> its value, stream_store'd
    lane_misses: str                   # ... with short rows: the fast loop's checks per lane


def nest_names(schedule: Schedule, names: dict[int, str]) -> list[NestNames]:
    taken = set(names.values()) | RESERVED

    def fresh(base: str) -> str:
        return fresh_name(base, taken)

    result = []
    for nest in schedule.nests:
        rows_nest, elementwise = isinstance(nest, RowsNest), isinstance(nest, ElementwiseNest)
        tiled = rows_nest or elementwise and nest.tile
        periodic = dict(nest.periodic) if elementwise else {}
        inner = len(nest.loops.sizes) - 1
        sliced = [t for t in (*nest.reads, *nest.writes) if tiled and t not in periodic
                  and not nest.loops.broadcast[t][inner]]
        stored = [op.output for op in nest.ops if op.reduction and op.output in nest.writes
                  and rows_nest]
        temporaries = [op.output for op in nest.ops if op.output not in nest.writes]
        unroll = nest.unroll if isinstance(nest, UnrolledRowsNest) else 1
        stage_buffers = nest.stage_buffers if rows_nest or elementwise else ()
        copies = {nest.ops[0].inputs[1]: fresh(f"{names[nest.ops[0].inputs[1]]}_kn")} \
            if isinstance(nest, MatmulNest) and nest.adj_y else {}
        if isinstance(nest, StencilNest) and nest.runs:
            copies = {t: fresh(f"{names[t]}_runs") for t in nest.conv.inputs[1:]}
        result.append(NestNames({t: fresh(f"{names[t]}_buf") for t in stage_buffers},
                                {t: fresh(f"{names[t]}_rows") for t in periodic} | copies,
                                {t: fresh(f"{names[t]}_t") for t in dict.fromkeys(sliced)},
                                {t: fresh(f"{names[t]}_acc") for t in stored}
                                | ({nest.ops[0].output: fresh("acc")}
                                   if isinstance(nest, StencilNest) else {})
                                | ({nest.ops[0].output: fresh("sums")}
                                   if isinstance(nest, MatmulNest) else {}),
                                {(t, row): fresh(f"{names[t]}_r{row}") for row in
                                 range(1, unroll) for t in temporaries},
                                {t: fresh(f"{names[t]}_value")
                                 for t in (nest.streamed if elementwise else ())},
                                fresh("lane_misses") if elementwise and nest.lane_checks
                                else ""))
    return result


def kernel_names(names: dict[int, str], local: NestNames) -> set[str]:
    """The identifiers a nest's new names must not take: tensors', reserved and its locals."""
    return (set(names.values()) | RESERVED | set(local.stages.values())
            | set(local.rows.values()) | set(local.slices.values())
            | set(local.accumulators.values()))


def allocations(ir: KernelIR, names: dict[int, str], schedule: Schedule,
                local: list[NestNames]) -> list[str]:
    """What the kernel sets up before its first nest: the aligned copies of periodic operands
    (`aligned` of codegen.nests) it makes, the buffers between nests and the stage buffers of
    one-thread tiles, each on the stack or allocated as the schedule says."""
    lines = [f"{names[t]} = aligned_copy({names[t]})"
             for t in dict.fromkeys(t for nest in schedule.nests
                                    if isinstance(nest, (ElementwiseNest, UnrolledRowsNest))
                                    for t in nest.aligned)
             if t in schedule.stack]
    lines += [buffer(names[t], n, ir.value(t).dtype, t in schedule.stack)
              for t, n in schedule.buffers]
    for nest, nest_local in zip(schedule.nests, local):
        if nest.threads == 1 and isinstance(nest, (ElementwiseNest, RowsNest)):
            lines += tile_allocations(ir, nest, nest_local, schedule.stack)
        if nest.threads == 1 and isinstance(nest, StencilNest):
            lines += stencil_allocations(ir, nest, nest_local)
        if isinstance(nest, MatmulNest):
            sums = nest.row_block * nest.columns
            lines.append(buffer(nest_local.accumulators[nest.ops[0].output], sums, "int32",
                                sums * 4 <= MATMUL_STACK_BYTES))
            lines += [buffer(name, nest.depth * nest.columns, "int8",
                             nest.depth * nest.columns <= MATMUL_STACK_BYTES)
                      for name in nest_local.rows.values()]
    return lines


#: A matmul nest's sums (at most schedule.MATMUL_SUMS int32) and its copy of rhs stay on the
#: stack up to this many bytes each, beside the kernel's STACK_BYTES of buffers; a larger copy
#: is allocated.
MATMUL_STACK_BYTES = 16 << 10


def stencil_allocations(ir: KernelIR, nest: StencilNest, local: NestNames) -> list[str]:
    """A stencil tile's sums (float32, or int32 for an int8 convolution) and with runs, its
    weights repeated for a tile (codegen.stencil), on the stack up to STENCIL_STACK_BYTES."""
    dtype = "int32" if ir.value(nest.conv.output).quantized else "float32"
    lines = [buffer(local.accumulators[nest.conv.output], nest.pixels * nest.channels, dtype,
                    True)]
    for tensor, name in local.rows.items():
        value = ir.value(tensor)
        elements = nest.pixels * nest.channels * (math.prod(nest.window.kernel)
                                                  if tensor == nest.conv.inputs[1] else 1)
        lines.append(buffer(name, elements, value.dtype,
                            elements * np.dtype(value.dtype).itemsize <= STENCIL_STACK_BYTES))
    return lines


#: A stencil's weights repeated for its tile's runs stay on the stack up to this many bytes
#: (a 3x3 convolution's for a tile of 192 float32 sums: 7 KB), else they are allocated.
STENCIL_STACK_BYTES = 16 << 10


def buffer(name: str, elements: int, dtype: str, on_stack: bool = False) -> str:
    """An uninitialised array: on the kernel's stack (codegen.native.stack_empty) or
    allocated."""
    if on_stack:
        return f"{name} = stack_empty({elements}, np.{dtype})"
    return f"{name} = np.empty({elements}, np.{dtype})"


def tile_allocations(ir: KernelIR, nest: ElementwiseNest | RowsNest, local: NestNames,
                     stack: frozenset[int] = frozenset()) -> list[str]:
    """The stage buffers of a tile (in a rows nest, `row_stride` elements a row), those padded
    past the row's end filled with their padding, the others on the stack if in `stack`."""
    size = nest.tile_elements
    fills = dict(nest.padding) if isinstance(nest, RowsNest) else {}
    return [f"{name} = np.full({size}, {fills[t]}, np.{ir.value(t).dtype})" if t in fills
            else buffer(name, size, ir.value(t).dtype, t in stack)
            for t, name in local.stages.items()]


def table_nest(ir: KernelIR, names: dict[int, str], nest: TableNest, number: int,
               local: NestNames, fast: FastPath | None) -> list[str]:
    """One call looking up the whole tensor."""
    op = nest.op
    how = ", 64 elements a step with byte shuffles where the CPU has them (codegen.lut)"
    return [*nest_comment(names, nest, number, how),
            f"{lookup(nest)}({names[op.inputs[0]]}, {names[op.output]}, {table_name(names, op)})"]


def elementwise_nest(ir: KernelIR, names: dict[int, str], nest: ElementwiseNest, number: int,
                     local: NestNames, fast: FastPath | None) -> list[str]:
    """The loops of the nest (loop_nest) between what they need first (row-tile copies,
    reductions' initial values, per-lane checks) and what follows (a reduction's finish)."""
    n = nest.threads
    depth = len(nest.levels) + 1 + (n > 1) + (nest.tile > 0)
    lanes, cols = "", nest.loops.sizes[-1]
    misses_into = "misses"
    if fast and local.lane_misses and checks_in(nest, fast):
        lanes, inner = local.lane_misses, f"i{len(nest.loops.sizes) - 1}"
        misses_into = f"{lanes}[{inner if n == 1 else f'part * {cols} + {inner}'}]"
    loops = loop_nest(ir, nest, names, local,
                      loop_body(ir, names, nest, local, fast, depth, misses_into=misses_into))
    if local.values:
        loops.append("stream_fence()")
    how = ""
    if nest.periodic:
        period = nest.periodic[0][1]
        how = f" in tiles of {nest.tile // period} rows of {period}"
    elif nest.tile:
        how = f" in tiles of {nest.tile}, stage by stage"
    if nest.streamed:
        how += ", its outputs streamed but by the exact loop"
    return [*nest_comment(names, nest, number, how),
            *periodic_copies(ir, names, nest, local),
            *(f"{names[op.output]}[:] = {op.init}" for op in nest.ops if op.reduction),
            *([f"{lanes} = stack_empty({n * cols}, np.int32)", f"{lanes}[:] = 0"]
              if lanes else []),
            *loops,
            *([f"misses = max(misses, {lanes}.max())"] if lanes else []),
            *(line for op in nest.ops if op.reduction for line in finish(ir, names, op))]


def row_block_nest(ir: KernelIR, names: dict[int, str], nest: RowBlockNest, number: int,
                   local: NestNames, fast: FastPath | None) -> list[str]:
    """The rows block by block (with threads, parts of whole blocks), the fast loop's checks
    of a block's outputs after it (block_checks)."""
    rows, cols = nest.loops.sizes
    first = f"block * {nest.rows_per_block}"
    lines, depth = outer_loop(nest, *nest.levels[0])
    (body,) = loop_body(ir, names, nest, local, fast, depth + 3)
    pad = INDENT * depth
    return [*nest_comment(names, nest, number, f" in blocks of {nest.rows_per_block} rows"),
            *lines, f"{pad}for i0 in range({first}, min({first} + {nest.rows_per_block}, {rows})):",
            f"{pad}{INDENT}for i1 in range({cols}):",
            *(pad + 2 * INDENT + line for line in body),
            *(pad + line for line in block_checks(names, nest, fast))]


def unrolled_rows_nest(ir: KernelIR, names: dict[int, str], nest: UnrolledRowsNest,
                       number: int, local: NestNames, fast: FastPath | None) -> list[str]:
    """Unrolled rows: the rows `nest.unroll` at a time (with threads, parts of a whole number
    of them), each iteration of the inner loop over them all; the rows left over, one at a
    time."""
    depth = 3 + (nest.threads > 1)
    (body,) = loop_body(ir, names, nest, local, fast, depth, nest.unroll)
    (one_row,) = loop_body(ir, names, nest, local, fast, depth)
    (rows, cols), unroll = nest.loops.sizes, nest.unroll
    whole = rows - rows % unroll
    inner = [f"for i1 in range({cols}):", *(INDENT + line for line in body)]
    if nest.threads > 1:
        lines = [*part_loop(nest, "i0", whole, unroll), *(INDENT + line for line in inner)]
    else:
        lines = [f"for i0 in range(0, {whole}, {unroll}):", *(INDENT + line for line in inner)]
    if whole < rows:
        rest = [f"for i0 in range({whole}, {rows}):", f"{INDENT}for i1 in range({cols}):",
                *(2 * INDENT + line for line in one_row)]
        # With threads, the last part (it has the fewest rows) takes the rows left over.
        lines += ([f"if part == {nest.threads - 1}:", *(INDENT + line for line in rest)]
                  if nest.threads > 1 else rest)
    return [*nest_comment(names, nest, number, f", {nest.unroll} rows an iteration"), *lines]


def outer_loop(nest: Nest, name: str, count: int,
               setup: list[str] = ()) -> tuple[list[str], int]:
    """The outermost loop over `count` iterations, and the depth of its body: with threads,
    over part `part` of them (the kernel runs each part as a task on the interpreter's pool,
    codegen.render), after that part's own `setup`."""
    if nest.threads == 1:
        return [f"for {name} in range({count}):"], 1
    return [*setup, *part_loop(nest, name, count)], 1


def part_loop(nest: Nest, name: str, count: int, unroll: int = 1) -> list[str]:
    """A loop of `name` over the part's iterations, counted from 0 on: numba makes a negative
    index wrap around, so LLVM vectorises an inner loop indexed by `name` with contiguous
    loads only where it knows `name` is not negative, which it does from a count up from a
    known first value (`part_first` bounds `part`), not from a range starting at `part *
    step` (gathers instead: 7x slower)."""
    step = f", {unroll}" if unroll > 1 else ""
    return [f"first = part_first(part, {nest.threads}) * {nest.part}",
            f"for offset in range(0, min({nest.part}, {count} - first){step}):",
            f"{INDENT}{name} = first + offset"]


def loop_nest(ir: KernelIR, nest: ElementwiseNest, names: dict[int, str], local: NestNames,
              bodies: list[list[str]]) -> list[str]:
    """The loops around the stage bodies. Tiled, the innermost dimension runs tile by tile,
    each stage's loop over the whole tile before the next stage's. With threads, each part of
    the outermost loop has its own tile buffers."""
    inner = len(nest.loops.sizes) - 1
    (name, n), *levels = nest.levels
    lines, depth = outer_loop(nest, name, n, tile_allocations(ir, nest, local))
    for name, n in levels:
        lines.append(f"{INDENT * depth}for {name} in range({n}):")
        depth += 1
    pad = INDENT * depth
    if not nest.tile:
        return lines + [pad + line for line in bodies[0]]
    lines += [f"{pad}start = tile * {nest.tile}",
              f"{pad}stop = min(start + {nest.tile}, {nest.loops.sizes[inner]})"]
    bases = {index(nest, t, inner=False) for t in local.slices} - {"0"}
    base_names = {base: f"base_{k}" if len(bases) > 1 else "base"
                  for k, base in enumerate(sorted(bases), 1)}
    width = LINE_LIMIT - len(pad)
    for base, name in base_names.items():
        lines += [pad + line for line in assignment(name, base, width)]
    for t, name in local.slices.items():
        base = base_names.get(index(nest, t, inner=False))
        bounds = f"{base} + start:{base} + stop" if base else "start:stop"
        lines.append(f"{pad}{name} = {names[t]}[{bounds}]")
    for ops, body in zip(nest.stages, bodies):
        if ops[0].output in nest.lookups:     # one call over the tile
            lines += [pad + line for line in body]
            continue
        lines.append(f"{pad}for i{inner} in range(stop - start):")
        lines += [pad + INDENT + line for line in body]
    return lines


def loop_body(ir: KernelIR, names: dict[int, str], nest: Nest, local: NestNames,
              fast: FastPath | None, body_depth: int, rows: int = 1,
              misses_into: str = "misses") -> list[list[str]]:
    """Per stage, one statement per op, into a temporary named after its output tensor, or
    straight into the output or nest buffer it is written to (later uses read it back), or
    into a tile buffer when a later stage uses it; a streamed output into its value, then
    stream_store'd. With `fast`, the fast loop's forms and its counts, one update of
    `misses_into` for all. With `rows`, the statements of rows i0 .. i0 + rows - 1 one row
    after another. Lines fit in LINE_LIMIT at `body_depth` indents."""
    width = LINE_LIMIT - len(INDENT) * body_depth
    literals = {v.tensor: value_literal(v) for v in ir.values if v.literal is not None}
    exprs = [{**literals, **{t: element(names, nest, local, t, row) for t in nest.reads}}
             for row in range(rows)]
    lookups = nest.lookups if isinstance(nest, ElementwiseNest) else ()
    bodies = []
    for ops in nest.stages:
        if ops[0].output in lookups:
            (op,) = ops
            target = op.output
            for row, row_exprs in enumerate(exprs):
                row_exprs[target] = (element(names, nest, local, target, row)
                                     if target in nest.writes else
                                     f"{local.stages[target]}[i{len(nest.loops.sizes) - 1}]")
            bodies.append([f"{lookup(nest)}({tile_array(nest, local, op.inputs[0])}, "
                           f"{tile_array(nest, local, target)}, {table_name(names, op)})"])
            continue
        lines, misses = [], []
        for row in range(rows):
            if rows > 1:
                lines.append(f"# Row i0 + {row}" if row else "# Row i0")
            lines += row_statements(ir, names, nest, local, fast, ops, row, misses, exprs[row],
                                    width)
        bodies.append(lines + count_misses(misses, width, misses_into))
    return bodies


def row_statements(ir: KernelIR, names: dict[int, str], nest: Nest, local: NestNames,
                   fast: FastPath | None, ops: tuple[Op, ...], row: int, misses: list[str],
                   exprs: dict[int, str], width: int) -> list[str]:
    """loop_body's statements of one stage for one row (`row` rows after i0's), its checks
    appended to `misses`; `exprs` (how the row's statements read each tensor) updated."""
    inner = f"i{len(nest.loops.sizes) - 1}"
    lines = []
    for op in ops:
        target = local.unrolled.get((op.output, row), names[op.output])
        if op.output in local.values:
            target = local.values[op.output]
        elif op.output in nest.writes:
            target = element(names, nest, local, op.output, row)
        elif op.output in local.stages:
            target = f"{local.stages[op.output]}[{inner}]"
        args = [exprs[t] for t in op.inputs]
        if fast and op.node in fast.guarded:
            misses.append(f"miss_if({op.spec.guard.format(a=args[0])})")
        if op.reduction:           # into its result's element, in the input's order
            expr = op.spec.combine.format(acc=target, a=args[0])
        else:
            expr = op_expression(ir, names, op, args, bool(fast))
        lines += assignment(target, expr, width)
        if op.output in local.values:
            array, at = element_at(names, nest, local, op.output, row)
            lines += wrap_call("stream_store(", [array, at, target], ")", width=width)
        if fast and op.output in fast.checked and not (
                isinstance(nest, RowBlockNest) and op.output in nest.writes):
            misses.append(f"magnitude({target})")
        exprs[op.output] = target
    return lines


def count_misses(misses: list[str], width: int, into: str = "misses") -> list[str]:
    """`into` (`misses`, or a lane's element of the nest's lane_misses) updated with the
    largest of the values `misses` lists: one int32 max per element, of all the checks joined
    (with one update per check LLVM does not see a reduction, and leaves the loop scalar)."""
    if len(misses) == 1:
        return wrap_call(f"{into} = max(", [into, *misses], ")", width=width)
    if misses:
        return wrap_call(f"{into} = max({into}, max(", misses, "))", width=width)
    return []


def block_checks(names: dict[int, str], nest: RowBlockNest, fast: FastPath | None) -> list[str]:
    """After a row block, the fast loop's checks of what the block stored: one flat loop over
    the block's elements, still in L1, instead of a check per element in the short inner loop
    (which would finish its max-reduction every row). The loop counts from 0: from the block's
    first element, LLVM vectorised it with gathers at some row lengths."""
    checked = [t for t in nest.writes if fast and t in fast.checked]
    if not checked:
        return []
    rows, cols = nest.loops.sizes
    first = f"block * {nest.rows_per_block}"
    return [f"for j in range((min({first} + {nest.rows_per_block}, {rows}) - {first}) * {cols}):",
            *(INDENT + line for line in count_misses(
                [f"magnitude({names[t]}[{first} * {cols} + j])" for t in checked],
                LINE_LIMIT - 4 * len(INDENT)))]


def checks_in(nest: Nest, fast: FastPath) -> bool:
    """Whether the fast loop counts anything in `nest`."""
    return any(op.output in fast.checked or op.node in fast.guarded for op in nest.ops)


def periodic_copies(ir: KernelIR, names: dict[int, str], nest: Nest,
                    local: NestNames) -> list[str]:
    """Row tiles' copies of the periodic operands, one tile long, each made by a loop over
    periods (numba's slice assignment copies one element at a time). A period of a vector or
    more is copied by a loop of bounded_length (`bounded_copies`: a literal one becomes scalar
    copies); a shorter one LLVM unrolls into vectors."""
    period = dict(nest.periodic)
    lines = []
    for t, rows in local.rows.items():
        length = bounded_length(names[t], period[t]) if nest.bounded_copies else str(period[t])
        lines += [f"{rows} = np.empty({nest.tile}, np.{ir.value(t).dtype})",
                  f"for start in range(0, {nest.tile}, {period[t]}):",
                  INDENT + f"for j in range({length}):",
                  2 * INDENT + f"{rows}[start + j] = {names[t]}[j]"]
    return lines


def bounded_length(array: str, bound: int) -> str:
    """A loop length of `bound` that LLVM knows at run time only, and knows to be at most
    `bound` (`array` holds at least that many elements). A literal length it unrolls completely
    when short, into scalar code; an unknown one it vectorises with a main loop of 4 vectors,
    which a shorter loop never enters."""
    return f"min({array}.shape[0], {bound})"


def finish(ir: KernelIR, names: dict[int, str], op: Op) -> list[str]:
    """After a reduction's nest: its accumulators made its result (MEAN: divided by n)."""
    if op.spec.finish == "{acc}":
        return []
    size = math.prod(ir.value(op.output).shape)
    acc = f"{names[op.output]}[k]"
    return [f"for k in range({size}):",
            INDENT + f"{acc} = " + op.spec.finish.format(acc=acc, n=reduced_count(ir, op))]


def reduced_count(ir: KernelIR, op: Op) -> int:
    """How many elements each result of a reduction takes in."""
    shape = ir.value(op.inputs[0]).shape
    return math.prod(shape[a] for a in dict(op.params)["axes"])


def nest_comment(names: dict[int, str], nest: Nest, number: int, how: str = "") -> list[str]:
    """`# Nest 2 over [1, 56, 56, 16], as [50176] in tiles of 16 rows: ADD, MUL -> out`: `how`
    after the nest's collapsed loops, if they differ from its domain."""
    if not how.startswith(" as ") and list(nest.loops.sizes) != list(nest.domain):
        how = f" as {list(nest.loops.sizes)}{how}"
    if nest.threads > 1:
        how += f", in {nest.threads} parts (one a thread)"
    ops = ", ".join(dict.fromkeys(name for op in nest.ops for name in op.source_ops)
                    or map(op_title, nest.ops))
    writes = ", ".join(names[t] for t in nest.writes)
    text = f"Nest {number} over {list(nest.domain) or [1]}{how}: {ops} -> {writes}"
    return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT))]


def op_title(op: Op) -> str:
    """The op, or for a kernel op what it computes: `LUT(HARD_SWISH, RELU)`, or the helper it
    calls when it computes part of a node: `QCALL(add_block_input)` (a LUT computing part of a
    node: `LUT(part)`). Node numbers are left to the partition's legend (codegen.render)."""
    params = dict(op.params)
    source = params.get("source")
    if source is None:
        return op.op
    if not source:
        return f"{op.op}({params.get('call', 'part')})"
    return f"{op.op}({', '.join(name for _, name in source)})"


def index(nest: Nest, tensor: int, inner: bool = True, row: int = 0) -> str:
    """The flat element index of `tensor` in the nest: `i0 * 16 + i1`, or 0 for one value;
    without `inner`, that of the innermost loop's first element; `row` rows after i0's."""
    last = len(nest.loops.sizes) - 1
    terms = []
    for d, stride in nest.loops.strides(tensor):
        if inner or d != last:
            var = f"(i{d} + {row})" if d == 0 and row else f"i{d}"
            terms.append(f"{var} * {stride}" if stride != 1 else var.strip("()"))
    return " + ".join(terms) or "0"


def element(names: dict[int, str], nest: Nest, local: NestNames, tensor: int,
            row: int = 0) -> str:
    """How the loop body reads or writes one element of an array of the nest (`row` rows
    after i0's, in unrolled rows)."""
    array, at = element_at(names, nest, local, tensor, row)
    return f"{array}[{at}]"


def element_at(names: dict[int, str], nest: Nest, local: NestNames, tensor: int,
               row: int = 0) -> tuple[str, str]:
    """element()'s array and index."""
    inner = f"i{len(nest.loops.sizes) - 1}"
    if tensor in local.rows:
        return local.rows[tensor], inner
    if tensor in local.slices:
        return local.slices[tensor], inner
    return names[tensor], index(nest, tensor, row=row)


def lookup(nest: ElementwiseNest | TableNest) -> str:
    """The helper a nest looks bytes up with (codegen.lut): by byte shuffles where it may."""
    return "lookup_bytes" if nest.shuffles else "lookup_bytes_scalar"


def tile_array(nest: ElementwiseNest, local: NestNames, tensor: int) -> str:
    """A tile of `tensor` as an array: its slice of a nest array, or its stage buffer, cut to
    the tile's length where the last tile is shorter."""
    if tensor in local.slices:
        return local.slices[tensor]
    whole = nest.loops.sizes[-1] % nest.tile == 0
    return local.stages[tensor] + ("" if whole else "[:stop - start]")


def op_expression(ir: KernelIR, names: dict[int, str], op: Op, args: list[str],
                  fast: bool, kernel: dict[int, str] | None = None) -> str:
    """The op over its operands' expressions: a table lookup (in the table named after
    `kernel`, the kernel's names, where `names` are a row's), a fixed-point helper call, or
    the op table's template."""
    params = dict(op.params)
    if op.op == "LUT":
        offset = -DTYPE_MIN[ir.value(op.inputs[0]).dtype]
        return f"{table_name(kernel or names, op)}[{args[0]}{f' + {offset}' if offset else ''}]"
    if op.op == "ROW_LUT":            # the code's offset from its row's: table[q - m + 255]
        return f"{table_name(kernel or names, op)}[{args[0]} - {args[1]} + 255]"
    if op.op == "QCALL":              # constants by name: add_block(a, b, input1_offset=-3, ...)
        constants = [f"{key}={c}" for key, c in qcall_arguments(ir, op)]
        return f"{params['call']}({', '.join([*args, *constants])})"
    return op.spec.render(args, params, fast, ir.precision)


def value_literal(value: Value) -> str:
    """A one-value constant as the kernel writes it: a float32 literal, or an int8/uint8 code."""
    return str(int(value.literal)) if value.quantized else literal(value.literal)


#: The smallest value of each integer dtype: a table is indexed by value - smallest.
DTYPE_MIN = {"int8": -128, "uint8": 0}


