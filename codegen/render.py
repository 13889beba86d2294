"""A schedule to Python source, as readable as hand-written code.

Plain functions from data to text, keeping no state: the same IR gives the same schedule
(codegen.schedule) and the same text, byte for byte, and the text is the compile cache's key.
The generated module holds two functions: the kernel (`@njit`, over flat numpy arrays), one
commented block per loop nest, and its native entry point (`@cfunc`), which reads the tensor
addresses from the TfLiteContext on every call, at offsets the caller passes in.
"""
from __future__ import annotations

import dataclasses
import inspect
import keyword
import math
import re
import textwrap
from dataclasses import dataclass

import numpy as np

from .ir import KernelIR, Op, Value, verify
from .literals import float32_text, literal
from .lut import byte_table
from .native import POINTERS
from .ops import ACTIVATIONS, CHAIN_OPS, HELPER_MODULES
from .qcall import QCALL_HELPERS
from .schedule import LANES, Nest, Schedule, plan

#: Float reductions whose result is inf or NaN whenever an operand is: the fast loop checks a
#: value a rows pass sums through the sum (rows_nest).
SUMS = ("SUM", "MEAN", "ROW_SUM")

INDENT = "    "
NAME_LIMIT = 24
LINE_LIMIT = 100
#: Below this many elements a kernel runs on one thread: waking threads costs more.
PARALLEL_MIN_ELEMENTS = 1 << 16
#: Bytes of its buffers and aligned copies a kernel may keep on its stack (render.allocations):
#: a few pages, within any thread's stack that calls the interpreter.
STACK_BYTES = 64 << 10
#: A streamed nest (schedule.Nest.streamed) with rows shorter than this keeps the fast loop's
#: checks per lane of a row, a max per element in an array of the row's length, and takes
#: their largest after the nest: the check per element into `misses` is a horizontal max at
#: the end of every row, chain16 at C = 16 and 4M elements ran 3.3x slower for it (C = 64
#: 1.9x, C = 96 1.9x), and the per-lane max 1.4x slower from C = 128 on.
LANE_CHECKS_BELOW = 128
#: Helpers the generated code calls: the op table's, the stack's buffers (aligned copies,
#: schedule.Nest) and the fixed-point arithmetic of quantized ops (codegen.lower's QCALL).
KERNEL_HELPERS = {**HELPER_MODULES, "aligned_copy": "codegen.native",
                  "stack_empty": "codegen.native", "stream_store": "codegen.native",
                  "stream_fence": "codegen.native", "line_aligned": "codegen.native",
                  "lookup_bytes": "codegen.lut",
                  **{name: helper.__module__ for name, helper in QCALL_HELPERS.items()}}
RESERVED = {"np", "carray", "cfunc", "njit", "prange", "context", "node", "tensors", "range",
            "min", "max", "misses", "part", "tile", "block", "start", "stop", "base", "j", "k",
            "row_length", "padded_length", "FLT_MAX", "NAN", "INF", "INF_BITS", "NoAliasCompiler",
            *KERNEL_HELPERS}


@dataclass(frozen=True)
class TensorTableLayout:
    """Where tensor data pointers live in the runtime's structs (checked by the ABI layer)."""
    context_tensors_offset: int
    tensor_size: int
    tensor_data_offset: int


def value_literal(value: Value) -> str:
    """A one-value constant as the kernel writes it: a float32 literal, or an int8/uint8 code."""
    return str(int(value.literal)) if value.quantized else literal(value.literal)


def identifiers(ir: KernelIR) -> dict[int, str]:
    """Tensor id -> Python identifier from the tensor name: deduplicated, cut, or t{id}."""
    names: dict[int, str] = {}
    taken = set(RESERVED)
    for value in sorted(ir.values, key=lambda v: v.tensor):
        base = re.sub(r"[^0-9a-zA-Z]+", "_", value.name.split("/")[-1] or "").strip("_").lower()
        base = base[:NAME_LIMIT].rstrip("_")
        if (not base or base[0].isdigit() or keyword.iskeyword(base)
                or re.fullmatch(r"i\d+|base_\d+", base)):
            base = f"t{value.tensor}"
        name, suffix = base, 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names[value.tensor] = name
    return names


#: Params the header leaves out of an op's line: a LUT's table, the nodes it computes (in its
#: title), a QCALL's call and constants (in its statement), what a lowering op makes (the
#: value after `->`).
UNLISTED_PARAMS = ("table", "source", "call", "args", "made")


def header(ir: KernelIR, names: dict[int, str], schedule: Schedule) -> list[str]:
    source = f", generated from {ir.model}" if ir.model else ""
    nests = len(schedule.nests)
    source_nodes = sorted(node for op in ir.ops for node, _ in op.sources)
    # Only where some op's math depends on it: kernels that read the same either way are one
    # text, so one compiled kernel serves both precisions.
    precision = f"precision {ir.precision} | " if any(
        op.spec.approximated or op.op in CHAIN_OPS for op in ir.ops) else ""
    lines = [f"# fusion_delegate kernel {ir.name}{source}. Do not edit.",
             f"# partition {ir.partition} | nodes {', '.join(str(n) for n in source_nodes)} | "
             f"{', '.join(sorted({v.dtype for v in ir.values}))} | "
             f"{precision}{nests} loop nest{'s' if nests > 1 else ''}"]
    for op in ir.ops:
        operands = []
        for t in op.inputs:
            value = ir.value(t)
            kind = "const " if value.literal is not None else ""
            operands.append(f"{names[t]} {annotation(t, kind + describe(value))}")
        params = "".join(f" {k}={ACTIVATIONS[v][0] if k == 'activation' else v}"
                         for k, v in op.params if k not in UNLISTED_PARAMS)
        out = ir.value(op.output)
        typed = describe(out) if out.quantized or any(
            ir.value(t).quantized for t in op.inputs) else ""
        result = " ".join(filter(None, (names[op.output], annotation(op.output, typed))))
        lines.append(f"#   node {op.node:<4} {op_title(op):<18} {', '.join(operands)}{params} "
                     f"-> {result}")
    return lines


def annotation(tensor: int, text: str) -> str:
    """`(t5, text)`: the model tensor's id (none for a value of the kernel's own, whose id is
    negative) and `text`; empty without either."""
    parts = [part for part in (f"t{tensor}" * (tensor >= 0), text) if part]
    return f"({', '.join(parts)})" if parts else ""


def op_title(op: Op) -> str:
    """The op, or for a kernel op what it computes: `LUT(HARD_SWISH 4, RELU 5)`, or the
    helper it calls when it computes part of a node: `QCALL(add_block_input)` (a LUT
    computing part of a node: `LUT(part)`)."""
    params = dict(op.params)
    source = params.get("source")
    if source is None:
        return op.op
    if not source:
        return f"{op.op}({params.get('call', 'part')})"
    nodes = ", ".join(f"{name} {node}" for node, name in source)
    return f"{op.op}({nodes})"


def describe(value: Value) -> str:
    """`[1, 8]`, or with its dtype and quantization: `int8[1, 8] 0.0235 * (q - 3)`, or
    `int32[8]` for a value of the kernel's own."""
    if value.dtype == "int32":
        return f"int32{list(value.shape)}"
    if not value.quantized:
        return str(list(value.shape))
    q = value.quant
    offset = f" - {q.zero_point}" if q.zero_point > 0 else f" + {-q.zero_point}" \
        if q.zero_point < 0 else ""
    return f"{value.dtype}{list(value.shape)} {q.scale:.6g} * (q{offset})"


def render_kernel(ir: KernelIR, layout: TensorTableLayout) -> str:
    """The whole kernel module's source."""
    verify(ir)
    names = identifiers(ir)
    schedule = plan(ir)
    memory = list(ir.inputs) + [t for t in ir.outputs if t not in ir.inputs]
    threads = [parallel_threads(ir.threads, nest) for nest in schedule.nests]
    local = nest_names(schedule, names)
    fast = FastPath.of(ir, schedule)
    unstreamed = [dataclasses.replace(nest_local, values={}, lane_misses="")
                  for nest_local in local]
    exact = nest_blocks(ir, names, schedule, threads, unstreamed, None)
    streamed = [t for nest in schedule.nests if nest.elements for t in nest.streamed]
    if fast.pays:
        first = [*fast.comment(1 + bool(streamed)), "misses = np.int32(0)",
                 *nest_blocks(ir, names, schedule, threads, local, fast),
                 "if misses < INF_BITS:", INDENT + "return"]
    elif streamed:
        first = [*EXACT_LOOP_COMMENT, *nest_blocks(ir, names, schedule, threads, local, None),
                 "return"]
    else:
        first = []
    if streamed:
        first = [*STREAMED_COMMENT, *all_line_aligned([names[t] for t in streamed]),
                 *(INDENT + line for line in first)]
    lines = [*first, *EXACT_LOOP_COMMENT, *exact] if first else exact
    lines = allocations(ir, names, schedule, threads, local) + lines
    parallel = ", parallel=True" if max(threads, default=1) > 1 else ""
    signature = "void(" + ", ".join(f"{ir.value(t).dtype}[::1]" for t in memory) + ")"
    kernel = [f"@njit('{signature}',",
              f"      error_model='numpy', nogil=True, cache=True{parallel}, "
              "pipeline_class=NoAliasCompiler)",
              *wrap_call(f"def {ir.name}(", [names[t] for t in memory], "):"),
              *(INDENT + line for line in lines)]
    lines = header(ir, names, schedule) + [
        "", *module_imports(lines, bool(parallel), {ir.value(t).dtype for t in memory}),
        *tables(ir, names, schedule), "", *kernel, "", "",
        *entry_point(ir, names, memory, layout), ""]
    return "\n".join(lines)


def all_line_aligned(arrays: list[str]) -> list[str]:
    """`if line_aligned(a) and line_aligned(b) ...:`, a condition per line."""
    checks = [f"line_aligned({array})" for array in arrays]
    if len(checks) == 1:
        return [f"if {checks[0]}:"]
    return [f"if ({checks[0]}", *(f"{INDENT * 2}and {check}" for check in checks[1:-1]),
            f"{INDENT * 2}and {checks[-1]}):"]


@dataclass(frozen=True)
class NestNames:
    """A nest's local arrays: stage buffers carrying values from one stage to a later one of
    the same tile (partition outputs and nest buffers are read back instead), the row-tile
    copies of its periodic operands, and, tiled, each tile's slice of the arrays it reads and
    writes along the innermost loop (indices from 0 in a slice are what LLVM can prove
    non-negative, so numba's negative-index wraparound vanishes and the loop vectorises)."""
    stages: dict
    rows: dict
    slices: dict
    accumulators: dict                 # rows nests: a reduction's register, if stored too
    unrolled: dict                     # unrolled rows: (tensor, row) -> row's temporary
    values: dict                       # streamed nests: output -> its value, stream_store'd
    lane_misses: str                   # ... with short rows: the fast loop's checks per lane


def nest_names(schedule: Schedule, names: dict[int, str]) -> list[NestNames]:
    taken = set(names.values()) | RESERVED

    def fresh(base: str) -> str:
        return fresh_name(base, taken)

    result = []
    for nest in schedule.nests:
        stage_of = {op.output: n for n, group in enumerate(nest.stages) for op in group
                    if not op.reduction}
        crossing = sorted({t for n, group in enumerate(nest.stages) for op in group
                           for t in op.inputs if stage_of.get(t, n) < n} - set(nest.writes))
        inner = len(nest.loops.sizes) - 1
        sliced = [t for t in (*nest.reads, *nest.writes) if nest.tile and t not in
                  dict(nest.periodic) and not nest.loops.broadcast[t][inner]]
        stored = [op.output for op in nest.ops if op.reduction and op.output in nest.writes
                  and nest.kind == "rows"]
        temporaries = [op.output for op in nest.ops if op.output not in nest.writes]
        short_rows = nest.streamed and nest.loops.sizes[-1] < LANE_CHECKS_BELOW
        result.append(NestNames({t: fresh(f"{names[t]}_buf") for t in crossing},
                                {t: fresh(f"{names[t]}_rows") for t, _ in nest.periodic},
                                {t: fresh(f"{names[t]}_t") for t in dict.fromkeys(sliced)},
                                {t: fresh(f"{names[t]}_acc") for t in stored},
                                {(t, row): fresh(f"{names[t]}_r{row}") for row in
                                 range(1, nest.row_unroll) for t in temporaries},
                                {t: fresh(f"{names[t]}_value") for t in nest.streamed},
                                fresh("lane_misses") if short_rows else ""))
    return result


def allocations(ir: KernelIR, names: dict[int, str], schedule: Schedule, threads: list[int],
                local: list[NestNames]) -> list[str]:
    """What the kernel sets up before its first nest: the aligned copies of periodic operands
    (schedule.Nest.aligned), the buffers between nests and the stage buffers of one-thread
    tiles. Up to STACK_BYTES of them go on the stack, in that order (codegen.native's
    aligned_copy and stack_empty: an allocator's call costs about 0.1 us, a tenth of a kernel
    over 16K elements); the buffers beyond are allocated, and the aligned copies beyond are
    not made (the operands are read in place)."""
    room = STACK_BYTES

    def on_stack(elements: int, dtype: str) -> bool:
        nonlocal room
        size = elements * np.dtype(dtype).itemsize
        if size > room:
            return False
        room -= size
        return True

    def buffer(name: str, elements: int, dtype: str) -> str:
        if on_stack(elements, dtype):
            return f"{name} = stack_empty({elements}, np.{dtype})"
        return allocated(name, elements, dtype)

    lines = [f"{names[t]} = aligned_copy({names[t]})"
             for t in dict.fromkeys(t for nest in schedule.nests for t in nest.aligned)
             if on_stack(math.prod(ir.value(t).shape), ir.value(t).dtype)]
    lines += [buffer(names[t], n, ir.value(t).dtype) for t, n in schedule.buffers]
    for nest, nest_local, n in zip(schedule.nests, local, threads):
        if n == 1:
            lines += tile_allocations(ir, nest, nest_local, buffer)
    return lines


def allocated(name: str, elements: int, dtype: str) -> str:
    return f"{name} = np.empty({elements}, np.{dtype})"


def tile_allocations(ir: KernelIR, nest: Nest, local: NestNames, buffer=allocated) -> list[str]:
    """The stage buffers of a tile (in a rows nest, `row_stride` elements a row), those padded
    past the row's end filled with their padding, the others made by `buffer`."""
    size = nest.tile
    if nest.kind == "rows":
        size = nest.row_stride * (nest.tile // nest.loops.sizes[1])
    fills = dict(nest.padding)
    return [f"{name} = np.full({size}, {fills[t]}, np.{ir.value(t).dtype})" if t in fills
            else buffer(name, size, ir.value(t).dtype) for t, name in local.stages.items()]


def nest_blocks(ir: KernelIR, names: dict[int, str], schedule: Schedule, threads: list[int],
                local: list[NestNames], fast: FastPath | None) -> list[str]:
    """Every nest in order, each under a comment saying what it computes and how it loops."""
    lines = []
    for number, (nest, n, nest_local) in enumerate(zip(schedule.nests, threads, local), 1):
        if nest.elements == 0:
            continue
        if nest.kind == "table":
            (op,) = nest.ops
            lines += [*nest_comment(names, nest, number, n),
                      f"lookup_bytes({names[op.inputs[0]]}, {names[op.output]}, "
                      f"{table_name(names, op)})"]
            continue
        if nest.kind == "rows":
            lines += [*nest_comment(names, nest, number, n),
                      *rows_nest(ir, names, nest, n, nest_local, fast)]
            continue
        depth = len(outer_levels(nest)) + 1 + (n > 1) + (nest.tile > 0)
        lanes, cols = "", nest.loops.sizes[-1]
        misses_into = "misses"
        if fast and nest_local.lane_misses and checks_in(nest, fast):
            lanes, inner = nest_local.lane_misses, f"i{len(nest.loops.sizes) - 1}"
            misses_into = f"{lanes}[{inner if n == 1 else f'part * {cols} + {inner}'}]"
        bodies = loop_body(ir, names, nest, nest_local, fast, depth, nest.row_unroll or 1,
                           misses_into)
        if nest.row_unroll:
            loops = unrolled_nest(nest, n, bodies[0],
                                  loop_body(ir, names, nest, nest_local, fast, depth)[0])
        else:
            loops = loop_nest(ir, nest, n, names, nest_local, bodies,
                              block_checks(names, nest, fast))
        if nest_local.values:
            loops.append(INDENT * (n > 1) + "stream_fence()")
        lines += [*nest_comment(names, nest, number, n, bool(nest_local.values)),
                  *periodic_copies(ir, names, nest, nest_local),
                  *(f"{names[op.output]}[:] = {op.init}" for op in nest.ops
                    if op.reduction),
                  *([f"{lanes} = stack_empty({n * cols}, np.int32)", f"{lanes}[:] = 0"]
                    if lanes else []),
                  *loops,
                  *([f"misses = max(misses, {lanes}.max())"] if lanes else []),
                  *(line for op in nest.ops if op.reduction for line in finish(ir, names, op))]
    return lines


def checks_in(nest: Nest, fast: FastPath) -> bool:
    """Whether the fast loop counts anything in `nest`."""
    return any(op.output in fast.checked or op.node in fast.guarded for op in nest.ops)


def bounded_length(array: str, bound: int) -> str:
    """A loop length of `bound` that LLVM knows at run time only, and knows to be at most
    `bound` (`array` holds at least that many elements). A literal length it unrolls completely
    when short, into scalar code; an unknown one it vectorises with a main loop of 4 vectors,
    which a shorter loop never enters (docs/chain_performance.md, "Short loops")."""
    return f"min({array}.shape[0], {bound})"


def periodic_copies(ir: KernelIR, names: dict[int, str], nest: Nest,
                    local: NestNames) -> list[str]:
    """Row tiles' copies of the periodic operands, one tile long, each made by a loop over
    periods (numba's slice assignment copied them one element at a time, 0.4-0.5 us an
    operand a call: docs/chain_performance.md). A period of a vector or more is copied by a
    loop of bounded_length (a literal one became scalar copies, 0.25 us more a 1024-element
    tile); a shorter one LLVM unrolls into vectors."""
    period = dict(nest.periodic)
    lines = []
    for t, rows in local.rows.items():
        length = (bounded_length(names[t], period[t]) if period[t] >= LANES
                  else str(period[t]))
        lines += [f"{rows} = np.empty({nest.tile}, np.{ir.value(t).dtype})",
                  f"for start in range(0, {nest.tile}, {period[t]}):",
                  INDENT + f"for j in range({length}):",
                  2 * INDENT + f"{rows}[start + j] = {names[t]}[j]"]
    return lines


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


def rows_nest(ir: KernelIR, names: dict[int, str], nest: Nest, threads: int, local: NestNames,
              fast: FastPath | None) -> list[str]:
    """A `rows` nest: one loop over steps of `nest.tile // cols` rows (split over threads), in
    it the per-row scalar ops and one pass over the rows' elements per stage, each reduction a
    scalar accumulator per row named after its result. Arrays the passes read or write whole
    are sliced to the row. The rows of a step go through each pass together, each under its
    own names (`mean_a`, `mean_b`): their reductions are independent, so one row's horizontal
    sums, divisions and square roots overlap with the other's loads and adds."""
    if nest.row_block:
        return blocked_rows_nest(ir, names, nest, threads, local, fast)
    rows, cols = nest.loops.sizes
    lines, length, padded_length = row_lengths(names, nest, local)
    in_step = row_names(ir, names, nest, local, fast)
    per_step = len(in_step)
    steps = -(-rows // per_step)
    step = "i0" if per_step == 1 else fresh_name("step", kernel_names(names, local))
    if steps * per_step > rows:
        lines.append(f"# With {rows} rows, the last step has row {rows - 1} more than once.")
    lines, depth = step_loop(ir, nest, local, lines, step, steps, threads)
    width = LINE_LIMIT - len(INDENT) * (depth + 1)
    body = []
    for k, row in enumerate(in_step if per_step > 1 else ()):
        first = f"{per_step} * {step}" + (f" + {k}" if k else "")
        body.append(f"{row.row} = min({first}, {rows - 1})" if k and steps * per_step > rows
                    else f"{row.row} = {first}")
    for t, name in local.slices.items():
        if nest.loops.broadcast[t][0]:         # the same [cols] row for every row
            body.append(f"{name} = {names[t]}[:{cols}]")
            continue
        for row in in_step:
            base = row_index(nest, t, row.row, inner=False)
            body.append(f"{row.local.slices[t]} = {names[t]}[{base}:{base} + {cols}]")
    if per_step > 1:
        stride = nest.row_stride
        body += [f"{row.local.stages[t]} = {name}[{k * stride}:{(k + 1) * stride}]"
                 for t, name in local.stages.items() for k, row in enumerate(in_step)]
    literals = {v.tensor: value_literal(v) for v in ir.values if v.literal is not None}
    exprs = [{**literals, **{t: row_element(row.names, nest, row.local, t, row.row)
                             for t in nest.reads}} for row in in_step]
    for number, per_row in enumerate(nest.per_row):
        for row, row_exprs in zip(in_step, exprs):
            body += statements(ir, nest, row, fast, per_row, row_exprs, width)
        if number == len(nest.stages) or not nest.stages[number]:
            continue
        stage = nest.stages[number]
        reductions = [op for op in stage if op.reduction]
        # A checked value this pass sums is checked through its sum: inf or NaN in, inf or NaN
        # out (a sum that overflows only sends the row to the exact loop).
        covering = [op for op in reductions if fast is not None and op.op in SUMS
                    and op.inputs[0] in fast.checked]
        covered = frozenset(op.inputs[0] for op in covering)
        checked = fast is not None and any(op.output in fast.checked and op.output not in covered
                                           for op in stage)
        ops = ", ".join(dict.fromkeys(op.op for op in stage))
        padded = number in nest.padded
        body.append(f"# Pass {number + 1} over the row{'s' if per_step > 1 else ''}"
                    f"{' and past its end' if padded else ''}: {ops}")
        if checked:
            body += ["# 0 * v is NaN for an inf or NaN v, else 0: the sum of them over a row, "
                     "NaN if any.", *(f"{row.checks} = np.float32(0.0)" for row in in_step)]
        body += [f"{accumulator(row.names, row.local, op)} = {op.init}"
                 for row in in_step for op in reductions]
        body.append(f"for i1 in range({padded_length if padded else length}):")
        for row, row_exprs in zip(in_step, exprs):
            body += [INDENT + line for line in statements(
                ir, nest, row, fast, stage, row_exprs, width - len(INDENT), row.checks, covered)]
        for row in in_step:
            for op in reductions:
                acc = accumulator(row.names, row.local, op)
                if op.spec.finish != "{acc}":
                    body.append(f"{acc} = " + op.spec.finish.format(
                        acc=acc, n=reduced_count(ir, op)))
                if op.output in nest.writes:
                    body.append(f"{row_element(row.names, nest, row.local, op.output, row.row)}"
                                f" = {acc}")
        sums = [f"magnitude({accumulator(row.names, row.local, op)})"
                for row in in_step for op in covering]
        if checked or sums:
            body += wrap_call("misses = max(", ["misses", *(f"magnitude({row.checks})"
                                                            for row in in_step if checked),
                                                *sums], ")", width=width)
    return lines + [INDENT * depth + line for line in body]


def step_loop(ir: KernelIR, nest: Nest, local: NestNames, setup: list[str], step: str,
              steps: int, threads: int) -> tuple[list[str], int]:
    """A rows nest's loop over its steps after `setup` (its lengths and arrays), split over
    `threads` parts, and the depth of the loop's body. Each part has its own setup and row
    buffers: there LLVM sees the lengths' bound as in the one-thread kernel, so it sums a row
    in the same order, and so to the same bits."""
    if threads == 1:
        return [*setup, f"for {step} in range({steps}):"], 1
    part = -(-steps // threads)
    return [f"for part in prange({threads}):",
            *(INDENT + line for line in [*setup, *tile_allocations(ir, nest, local)]),
            f"{INDENT}for {step} in range(part * {part}, min(part * {part} + {part}, "
            f"{steps})):"], 2


def row_lengths(names: dict[int, str], nest: Nest, local: NestNames) -> tuple[list[str], str,
                                                                             str]:
    """The lines computing a rows nest's row lengths, and the length of a pass over the row
    and of one over it and past its end (schedule._padded_stages)."""
    rows, cols = nest.loops.sizes
    whole = [t for t in local.slices if nest.loops.broadcast[t] == (False, False)]
    if not whole:
        return [], str(cols), str(nest.row_stride)
    tensor = names[whole[0]]
    lines = ["# The row length as a value known at run time only, and at most the row:",
             "# LLVM unrolls a short loop of literal length completely (scalar code), and",
             "# vectorises one of unknown length with a main loop of 4 vectors, which a",
             "# shorter row never enters.",
             f"row_length = {bounded_length(tensor, cols)}"]
    if not nest.padded:
        return lines, "row_length", str(nest.row_stride)
    return [*lines,
            "# A pass over row buffers only runs on past the row's end to a whole number of",
            f"# vectors of {LANES}: the buffers hold there what its reductions ignore. Not",
            "# bounded: the vectoriser would interleave softmax's exp pass less.",
            f"padded_length = ({tensor}.shape[0] // {rows} + {LANES - 1}) // {LANES}"
            f" * {LANES}"], "row_length", "padded_length"


def blocked_rows_nest(ir: KernelIR, names: dict[int, str], nest: Nest, threads: int,
                      local: NestNames, fast: FastPath | None) -> list[str]:
    """A rows nest over blocks of `nest.row_block` rows: each pass runs over the block's rows
    one after another, and the per-row ops between passes in one loop over the block, which
    LLVM vectorises across rows (an int8 LayerNorm over 1024 rows of 24: 42 us with its
    fixed-point per-row ops two rows a step, 36 us in blocks). The per-row values read outside
    their loop are arrays of the block's rows (`mean_rows[r]`); a pass accumulates each row
    in a scalar."""
    rows, cols = nest.loops.sizes
    block = nest.row_block
    steps = -(-rows // block)
    lines, length, padded_length = row_lengths(names, nest, local)
    taken = kernel_names(names, local)
    step, r = fresh_name("step", taken), fresh_name("r", taken)
    # A per-row value read outside the loop that computes it is an array of the block's rows.
    made_in = {op.output: k for k, ops in enumerate(nest.per_row) for op in ops}
    read_elsewhere = {t for k, ops in enumerate((*nest.per_row, *nest.stages)) for op in ops
                      for t in op.inputs if t in made_in and made_in[t] != k}
    reduced = {op.output for op in nest.ops if op.reduction}
    arrays = {t: fresh_name(f"{names[t]}_rows", taken)
              for t in sorted(read_elsewhere | reduced) if t not in nest.writes}
    stride = nest.row_stride
    row_local = dataclasses.replace(
        local, stages={t: fresh_name(f"{n}_r", taken) for t, n in local.stages.items()},
        accumulators={**{t: names[t] for t in arrays if t in reduced}, **local.accumulators})
    checks = fresh_name("checks", taken) if fast is not None and fast.checked else ""
    row = RowNames("i0", {**names, **{t: f"{a}[{r}]" for t, a in arrays.items()}}, row_local,
                   checks, names)
    lines += [f"{a} = np.empty({block}, np.{ir.value(t).dtype})" for t, a in arrays.items()]
    block_length = bounded_length(next(iter(arrays.values())), block) if arrays else str(block)
    lines, depth = step_loop(ir, nest, local, lines, step, steps, threads)
    width = LINE_LIMIT - len(INDENT) * (depth + 2)
    first_row = [f"i0 = min({step} * {block} + {r}, {rows - 1})"]
    literals = {v.tensor: value_literal(v) for v in ir.values if v.literal is not None}
    exprs = {**literals, **{t: row_element(row.names, nest, row.local, t, "i0")
                            for t in nest.reads}}
    exprs.update({t: f"{a}[{r}]" for t, a in arrays.items()})
    memory = {*nest.reads, *nest.writes}
    body = []
    for number, ops in enumerate(nest.per_row):
        if ops:
            touched = {t for op in ops for t in (*op.inputs, op.output)}
            body += [f"# The per-row ops over the block's rows: {op_names(ops)}",
                     f"for {r} in range({block_length}):",
                     *(INDENT + line for line in [*(first_row if touched & memory else []),
                                                  *statements(ir, nest, row, fast, ops, exprs,
                                                              width)])]
        if number == len(nest.stages) or not nest.stages[number]:
            continue
        stage = nest.stages[number]
        reductions = [op for op in stage if op.reduction]
        padded = number in nest.padded
        checked = fast is not None and any(op.output in fast.checked for op in stage)
        inner = [*first_row]
        touched = {t for op in stage for t in (*op.inputs, op.output)}
        for t, name in local.slices.items():
            if t not in touched:
                continue
            base = row_index(nest, t, "i0", inner=False)
            inner.append(f"{name} = {names[t]}[:{cols}]" if nest.loops.broadcast[t][0]
                         else f"{name} = {names[t]}[{base}:{base} + {cols}]")
        inner += [f"{row_local.stages[t]} = {name}[{r} * {stride}:{r} * {stride} + {stride}]"
                  for t, name in local.stages.items() if t in touched]
        if checked:
            inner.append(f"{checks} = np.float32(0.0)")
        inner += [f"{accumulator(row.names, row.local, op)} = {op.init}" for op in reductions]
        inner.append(f"for i1 in range({padded_length if padded else length}):")
        inner += [INDENT + line for line in statements(
            ir, nest, row, fast, stage, exprs, width - len(INDENT), checks)]
        for op in reductions:
            acc = accumulator(row.names, row.local, op)
            if op.spec.finish != "{acc}":
                inner.append(f"{acc} = " + op.spec.finish.format(acc=acc,
                                                                 n=reduced_count(ir, op)))
            target = (row_element(row.names, nest, row.local, op.output, "i0")
                      if op.output in nest.writes else f"{arrays[op.output]}[{r}]")
            inner.append(f"{target} = {acc}")
            exprs[op.output] = target
        if checked:
            inner.append(f"misses = max(misses, magnitude({checks}))")
        body += [f"# Pass {number + 1} over each row of the block"
                 f"{' and past its end' if padded else ''}: {op_names(stage)}",
                 f"for {r} in range({block}):", *(INDENT + line for line in inner)]
    return lines + [INDENT * depth + line for line in body]


def op_names(ops: tuple[Op, ...]) -> str:
    """The TFLite ops a group of kernel ops computes, once each: `MEAN, DEQUANTIZE, NEG`."""
    return ", ".join(dict.fromkeys(name for op in ops for name in op.source_ops)
                     or dict.fromkeys(op.op for op in ops))


#: Rows of a rows nest a step goes through together (schedule._rows_nest sets the step).
ROW_SUFFIXES = ("_a", "_b", "_c", "_d")


@dataclass(frozen=True)
class RowNames:
    """What one row of a rows nest step is called: its index variable, the names of the values
    the nest computes for it and of its slices and row buffers, and its inf/NaN check; its
    LUTs' tables are the kernel's, named after `kernel`, the names before renaming."""
    row: str
    names: dict
    local: NestNames
    checks: str
    kernel: dict


def row_names(ir: KernelIR, names: dict[int, str], nest: Nest, local: NestNames,
              fast: FastPath | None) -> list[RowNames]:
    """Per row of a step, names suffixed `_a`, `_b`, ... (none for one row a step) for all that
    differs from row to row; a [cols] operand's slice is the step's."""
    rows, cols = nest.loops.sizes
    per_step = nest.tile // cols
    taken = kernel_names(names, local)
    suffixes = ROW_SUFFIXES[:per_step] if per_step > 1 else ("",)
    computed = {op.output for op in nest.ops} - set(nest.writes)    # scalars, not arrays
    result = []
    for suffix in suffixes:
        def rename(name: str) -> str:
            return fresh_name(name + suffix, taken) if suffix else name

        row_local = dataclasses.replace(
            local, stages={t: rename(n) for t, n in local.stages.items()},
            slices={t: n if nest.loops.broadcast[t][0] else rename(n)
                    for t, n in local.slices.items()},
            accumulators={t: rename(n) for t, n in local.accumulators.items()})
        row_names_ = {**names, **{t: rename(names[t]) for t in sorted(computed)}}
        checks = fresh_name("checks" + suffix, taken) if fast is not None and fast.checked \
            else ""
        result.append(RowNames(rename("i0"), row_names_, row_local, checks, names))
    return result


def kernel_names(names: dict[int, str], local: NestNames) -> set[str]:
    """The identifiers a nest's new names must not take: tensors', reserved and its locals."""
    return (set(names.values()) | RESERVED | set(local.stages.values())
            | set(local.rows.values()) | set(local.slices.values())
            | set(local.accumulators.values()))


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ... if taken; the name is taken from then on."""
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    taken.add(name)
    return name


def row_index(nest: Nest, tensor: int, row: str, inner: bool = True) -> str:
    """`index` in a rows nest, the row's index variable for the row loop's."""
    terms = []
    for d, stride in nest.loops.strides(tensor):
        if d == 1 and not inner:
            continue
        var = row if d == 0 else "i1"
        terms.append(f"{var} * {stride}" if stride != 1 else var)
    return " + ".join(terms) or "0"


def row_element(names: dict[int, str], nest: Nest, local: NestNames, tensor: int,
                row: str) -> str:
    """`element` in a rows nest for the row with index variable `row`."""
    if tensor in local.slices:
        return f"{local.slices[tensor]}[i1]"
    return f"{names[tensor]}[{row_index(nest, tensor, row)}]"


def accumulator(names: dict[int, str], local: NestNames, op: Op) -> str:
    """The scalar a rows nest accumulates a reduction in: named after its result."""
    return local.accumulators.get(op.output, names[op.output])


def statements(ir: KernelIR, nest: Nest, row: RowNames, fast: FastPath | None,
               ops: tuple[Op, ...], exprs: dict[int, str], width: int,
               checks: str = "", covered: frozenset[int] = frozenset()) -> list[str]:
    """One statement per op of a rows nest for one row, in a pass or per row: a reduction adds
    its operand to its accumulator; other ops as loop_body writes them. In a pass (`checks`,
    with `fast`), a value the fast loop checks is added to the row's check as 0 * value, a
    cheaper sum than an integer max of magnitude(); per row `misses` counts it; a `covered`
    one is not (a sum of it is checked instead). Updates `exprs` with how later statements
    read each result."""
    names, local = row.names, row.local
    lines, misses = [], []
    for op in ops:
        args = [exprs[t] for t in op.inputs]
        if op.reduction:
            acc = accumulator(names, local, op)
            combine = op.spec.row_combine or op.spec.combine
            lines += assignment(acc, combine.format(acc=acc, a=args[0]), width)
            exprs[op.output] = acc
            continue
        target = names[op.output]
        if op.output in nest.writes:
            target = row_element(names, nest, local, op.output, row.row)
        elif op.output in local.stages:
            target = f"{local.stages[op.output]}[i1]"
        lines += assignment(target, op_expression(ir, names, op, args, bool(fast), row.kernel),
                            width)
        if fast and op.node in fast.guarded:
            misses.append(f"miss_if({op.spec.guard.format(a=args[0])})")
        if fast and op.output in fast.checked and op.output not in covered:
            if checks:
                lines += assignment(checks, f"add_reassoc({checks}, {target} * np.float32(0.0))",
                                    width)
            else:
                misses.append(f"magnitude({target})")
        exprs[op.output] = target
    return lines + count_misses(misses, width)


def nest_comment(names: dict[int, str], nest: Nest, number: int, threads: int,
                 streamed: bool = False) -> list[str]:
    """`# Nest 2 over [1, 56, 56, 16], as [50176] in tiles of 16 rows: ADD, MUL -> out`."""
    how = f" as {list(nest.loops.sizes)}" if list(nest.loops.sizes) != list(nest.domain) else ""
    if nest.kind == "table":
        how += ", 64 elements a step with byte shuffles where the CPU has them (codegen.lut)"
    elif nest.kind == "rows":
        rows, cols = nest.loops.sizes
        per_step = nest.tile // cols
        how = (f" as {rows} rows of {cols} in blocks of {nest.row_block}: a pass over each row "
               "per phase, the per-row ops over the block's rows at once" if nest.row_block else
               f" as {rows} rows of {cols}, {per_step} row{'s' if per_step > 1 else ''} a step: "
               "one pass over the step's rows per phase, the per-row values in registers")
    elif nest.row_tiled:
        period = nest.periodic[0][1]
        how += f" in tiles of {nest.tile // period} rows of {period}"
    elif nest.row_block:
        how += f" in blocks of {nest.row_block} rows"
    elif nest.row_unroll:
        how += f", {nest.row_unroll} rows an iteration"
    elif nest.tile:
        how += f" in tiles of {nest.tile}, stage by stage"
    if streamed:
        how += ", its outputs streamed"
    if threads > 1:
        how += f", on {threads} threads"
    ops = ", ".join(dict.fromkeys(name for op in nest.ops for name in op.source_ops)
                    or map(op_title, nest.ops))
    writes = ", ".join(names[t] for t in nest.writes)
    text = f"Nest {number} over {list(nest.domain) or [1]}{how}: {ops} -> {writes}"
    return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT))]


EXACT_LOOP_COMMENT = ["# Exact loop, as LiteRT computes it."]
STREAMED_COMMENT = ["# Outputs that leave the caches anyway are stored past them (stream_store),",
                    "# where each starts on a cache line, as the vector stores need."]


@dataclass(frozen=True)
class FastPath:
    """A second, cheaper loop for a kernel, exact unless `misses` says otherwise.

    TFLite's float kernels clamp every ADD/SUB/MUL/DIV result to +-FLT_MAX, which only changes
    +-inf. The fast loop leaves those clamps out, so it differs from the exact loop only if an
    unclamped value is +-inf. Such a value stays inf or NaN through ops that propagate it
    (ADD, SUB, MUL, NEG, ...), so the fast loop checks the values where that propagation ends:
    partition outputs and operands of any other op. It also runs ops with a `fast_expr` (sin,
    cos) and counts their `guard`. No miss: the fast loop's results are the exact ones, bit for
    bit (NaN payloads aside); any miss: the kernel runs the exact loop over everything.
    """
    dropped: int                       # clamps left out
    checked: tuple[int, ...]           # tensors whose magnitude() is counted
    guarded: tuple[int, ...]           # nodes run with their fast_expr
    in_passes: int = 0                 # of `checked`, those a rows nest's passes sum instead

    @classmethod
    def of(cls, ir: KernelIR, schedule: Schedule | None = None) -> "FastPath":
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
        passes = {op.output for nest in (schedule.nests if schedule else ())
                  if nest.kind == "rows" for stage in nest.stages for op in stage}
        return cls(dropped, checked, guarded, sum(t in passes for t in checked))

    def comment(self, depth: int = 1) -> list[str]:
        """What the fast loop leaves out and counts, as a comment above it, `depth` indents
        in."""
        skipped = ["the clamps to +-FLT_MAX"] if self.dropped else []
        counted = ["inf/NaN values"] if self.checked else []
        if self.guarded:
            skipped.append("sin/cos's large-angle reduction")
            counted.append("angles of 2**16 or more")
        text = (f"Fast loop, without {' and '.join(skipped)}. `misses` keeps the largest "
                "magnitude() (the bits of |value|) of the values it checks; it reaches INF_BITS "
                f"with any of the {' and '.join(counted)} for which the fast loop could differ "
                "from LiteRT, and then the exact loop runs instead.")
        return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT) * depth)]

    @property
    def pays(self) -> bool:
        """Checks cost about what clamps do, but one a rows nest's pass sums (0 * value: a
        multiply and an add) half the clamp's and, compare, and, or; guarded ops save far more
        than their guard. (Softmax's scale MUL: 1.07x over rows of 197 without its clamp.)"""
        return bool(self.guarded) or self.dropped > len(self.checked) - self.in_passes / 2


def parallel_threads(requested: int, nest: Nest) -> int:
    """How many threads a nest's outer loop is split over: 1 unless the nest is large (and
    loops: a table nest is one call)."""
    if requested <= 1 or nest.elements < PARALLEL_MIN_ELEMENTS or nest.kind == "table":
        return 1
    if nest.kind != "rows" and any(op.reduction for op in nest.ops):
        return 1                       # its outer loop may run along a reduced dim
    return min(requested, outer_levels(nest)[0][1])


def outer_levels(nest: Nest) -> list[tuple[str, int]]:
    """(loop variable, trip count) of each loop level; tiled, the innermost is over tiles; in
    row blocks, the outermost over blocks (the rows of a block: at most `row_block`)."""
    sizes = nest.loops.sizes
    if nest.row_block:
        return [("block", -(-sizes[0] // nest.row_block)), ("i0", nest.row_block),
                ("i1", sizes[1])]
    levels = [(f"i{d}", n) for d, n in enumerate(sizes[:-1])]
    if nest.tile:
        return levels + [("tile", -(-sizes[-1] // nest.tile))]
    return levels + [(f"i{len(sizes) - 1}", sizes[-1])]


def loop_nest(ir: KernelIR, nest: Nest, threads: int, names: dict[int, str], local: NestNames,
              bodies: list[list[str]], after_block: list[str]) -> list[str]:
    """The loops around the stage bodies. Tiled, the innermost dimension runs tile by tile,
    each stage's loop over the whole tile before the next stage's. In row blocks, the rows
    run block by block, `after_block` after each block. With threads, the outermost loop is
    cut into one contiguous part per thread, a prange over the parts (numba's pool may be
    larger: the parts bound the threads used), and each part has its own tile buffers."""
    inner = len(nest.loops.sizes) - 1
    lines, depth = [], 0
    for level, (name, n) in enumerate(outer_levels(nest)):
        pad = INDENT * depth
        if nest.row_block and name == "i0":
            first = f"block * {nest.row_block}"
            lines.append(f"{pad}for i0 in range({first}, "
                         f"min({first} + {nest.row_block}, {nest.loops.sizes[0]})):")
            depth += 1
        elif level == 0 and threads > 1:
            unit = LANES if nest.streamed and not nest.tile else 1    # parts of whole vectors
            step = -(-n // (threads * unit)) * unit
            lines += [f"{pad}for part in prange({threads}):",
                      *(pad + INDENT + line for line in tile_allocations(ir, nest, local)),
                      f"{pad}{INDENT}for {name} in range(part * {step}, "
                      f"min(part * {step} + {step}, {n})):"]
            depth += 2
        else:
            lines.append(f"{pad}for {name} in range({n}):")
            depth += 1
    pad = INDENT * depth
    if nest.row_block:
        pad = INDENT * (depth - 2)
        return lines + [INDENT * depth + line for line in bodies[0]] + [
            pad + line for line in after_block]
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


def wrap_call(opening: str, args: list[str], closing: str, indent: str = "",
              width: int = LINE_LIMIT) -> list[str]:
    """`opening arg, arg, ...closing`, broken into lines within `width`: continuation lines
    aligned after `opening`, or, where that leaves too little room, indented one level."""
    for hanging in (False, True):
        follow = indent + (INDENT if hanging else " " * len(opening))
        lines, line = ([indent + opening], follow) if hanging and args else ([], indent + opening)
        for i, arg in enumerate(args):
            piece = arg + (", " if i < len(args) - 1 else closing)
            if len(line) + len(piece.rstrip()) > width and line.strip():
                lines.append(line.rstrip())
                line = follow
            line += piece
        lines.append(line if args else indent + opening + closing)
        if all(len(line) <= width for line in lines):
            break
    return lines


def assignment(target: str, expr: str, width: int) -> list[str]:
    """`target = expr`, broken within `width` at the outermost call's commas, else at the
    outermost binary operator (the expression then in parentheses)."""
    line = f"{target} = {expr}"
    if len(line) <= width:
        return [line]
    depth, commas, operator = 0, [], None
    for i, char in enumerate(expr):
        depth += (char in "([") - (char in ")]")
        if depth == 1 and expr[i:i + 2] == ", ":
            commas.append(i)
        if depth == 0 and operator is None and expr[i:i + 3] in (" + ", " - ", " * ", " / "):
            operator = i
    call = re.match(r"[\w.]+\(", expr)
    if call and expr.endswith(")") and operator is None:
        bounds = [call.end(), *(i + 2 for i in commas), len(expr) + 1]
        args = [expr[a:b - 2] for a, b in zip(bounds, bounds[1:])]
        return wrap_call(f"{target} = {call.group()}", args, ")", width=width)
    if operator is not None:
        opening = f"{target} = ("
        return [opening + expr[:operator], " " * len(opening) + expr[operator + 1:] + ")"]
    return [line]


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
    bodies = []
    for ops in nest.stages:
        if ops[0].output in nest.lookups:
            (op,) = ops
            target = op.output
            for row, row_exprs in enumerate(exprs):
                row_exprs[target] = (element(names, nest, local, target, row)
                                     if target in nest.writes else
                                     f"{local.stages[target]}[i{len(nest.loops.sizes) - 1}]")
            bodies.append([f"lookup_bytes({tile_array(nest, local, op.inputs[0])}, "
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


def tile_array(nest: Nest, local: NestNames, tensor: int) -> str:
    """A tile of `tensor` as an array: its slice of a nest array, or its stage buffer, cut to
    the tile's length where the last tile is shorter."""
    if tensor in local.slices:
        return local.slices[tensor]
    whole = nest.loops.sizes[-1] % nest.tile == 0
    return local.stages[tensor] + ("" if whole else "[:stop - start]")


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
                nest.row_block and op.output in nest.writes):
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


def unrolled_nest(nest: Nest, threads: int, body: list[str], one_row: list[str]) -> list[str]:
    """Unrolled rows: the rows `nest.row_unroll` at a time (with threads, parts of a whole
    number of them), each iteration of the inner loop `body` over them all; the rows left
    over, one at a time."""
    (rows, cols), unroll = nest.loops.sizes, nest.row_unroll
    whole = rows - rows % unroll
    inner = [f"for i1 in range({cols}):", *(INDENT + line for line in body)]
    if threads > 1:
        step = -(-whole // (threads * unroll)) * unroll
        lines = [f"for part in prange({threads}):",
                 f"{INDENT}for i0 in range(part * {step}, min(part * {step} + {step}, {whole}), "
                 f"{unroll}):", *(2 * INDENT + line for line in inner)]
    else:
        lines = [f"for i0 in range(0, {whole}, {unroll}):", *(INDENT + line for line in inner)]
    if whole < rows:
        lines += [f"for i0 in range({whole}, {rows}):", f"{INDENT}for i1 in range({cols}):",
                  *(2 * INDENT + line for line in one_row)]
    return lines


def block_checks(names: dict[int, str], nest: Nest, fast: FastPath | None) -> list[str]:
    """After a row block, the fast loop's checks of what the block stored: one flat loop over
    the block's elements, still in L1, instead of a check per element in the short inner loop
    (which would finish its max-reduction every row). The loop counts from 0: from the block's
    first element, LLVM vectorised it with gathers at some row lengths (48, 112, 144; 4x
    slower)."""
    checked = [t for t in nest.writes if fast and t in fast.checked]
    if not nest.row_block or not checked:
        return []
    rows, cols = nest.loops.sizes
    first = f"block * {nest.row_block}"
    return [f"for j in range((min({first} + {nest.row_block}, {rows}) - {first}) * {cols}):",
            *(INDENT + line for line in count_misses(
                [f"magnitude({names[t]}[{first} * {cols} + j])" for t in checked],
                LINE_LIMIT - 4 * len(INDENT)))]


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
        call = params["call"]
        keywords = ([] if call.startswith("np.") else
                    list(inspect.signature(QCALL_HELPERS[call]).parameters)[len(args):])
        constants = [f"{key}={literal(c) if isinstance(c, float) else c}"
                     for key, c in zip(keywords, params["args"], strict=True)]
        return f"{call}({', '.join([*args, *constants])})"
    return op.spec.render(args, params, fast, ir.precision)


#: The smallest value of each integer dtype: a table is indexed by value - smallest.
DTYPE_MIN = {"int8": -128, "uint8": 0}


def table_name(names: dict[int, str], op: Op) -> str:
    return f"{names[op.output].upper()}_TABLE"


def tables(ir: KernelIR, names: dict[int, str], schedule: Schedule) -> list[str]:
    """The module constants of the kernel's LUT ops (numba compiles them in as constants):
    indexed by q - qmin, or in table nests by the element's raw byte (codegen.lut)."""
    by_byte = {t for nest in schedule.nests
               for t in ((nest.ops[0].output,) if nest.kind == "table" else nest.lookups)}
    lines = []
    for op in ir.ops:
        if op.op not in ("LUT", "ROW_LUT"):
            continue
        dtype = ir.value(op.output).dtype
        table = np.array(dict(op.params)["table"], dtype)
        if op.output in by_byte:
            table = byte_table(table, ir.value(op.inputs[0]).dtype)
        entries = [float32_text(v) if dtype == "float32" else str(v) for v in table.tolist()]
        lines += ["", *wrap_call(f"{table_name(names, op)} = np.array([", entries,
                                 f"], np.{table.dtype})")]
    return lines


def module_imports(body: list[str], parallel: bool, dtypes: set[str]) -> list[str]:
    used = {name for line in body for name in re.findall(r"\b([a-z_0-9]+)\(", line)}
    numba_names = "carray, cfunc, njit" + (", prange" if parallel else "")
    lines = ["import numpy as np", f"from numba import {numba_names}", ""]
    by_module: dict[str, list[str]] = {}
    for name in sorted(used & set(KERNEL_HELPERS)):
        by_module.setdefault(KERNEL_HELPERS[name], []).append(name)
    entry_helpers = sorted({POINTERS[dtype] for dtype in dtypes}) + ["load_i64"]
    by_module["codegen.native"] = by_module.get("codegen.native", []) + entry_helpers
    for module, names in by_module.items():
        line = f"from {module} import {', '.join(names)}"
        lines += [line] if len(line) <= LINE_LIMIT else wrap_call(
            f"from {module} import (", names, ")")
    lines += ["from codegen.compile import NoAliasCompiler", "",
              "FLT_MAX = np.float32(3.4028234663852886e38)", "INF = np.float32(np.inf)",
              "NAN = np.float32(np.nan)", "INF_BITS = np.int32(0x7F800000)"]
    return lines


def entry_point(ir: KernelIR, names: dict[int, str], memory: list[int],
                layout: TensorTableLayout) -> list[str]:
    """The native invoke: tensor addresses are read from the context on every call."""
    lines = ["@cfunc('int32(int64, int64)', cache=True)",
             f"def {ir.name}_invoke(context, node):"]
    lines.append(f"{INDENT}tensors = load_i64(context + {layout.context_tensors_offset})")
    for t in memory:
        address = f"tensors + {t} * {layout.tensor_size} + {layout.tensor_data_offset}"
        elements = math.prod(ir.value(t).shape)
        pointer = POINTERS[ir.value(t).dtype]
        lines += [INDENT + line for line in assignment(
            names[t], f"carray({pointer}(load_i64({address})), ({elements},))",
            LINE_LIMIT - len(INDENT))]
    lines += [*wrap_call(f"{ir.name}(", [names[t] for t in memory], ")", INDENT),
              f"{INDENT}return 0"]
    return lines
