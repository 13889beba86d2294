"""Writing a rows nest (codegen.nests.RowsNest): the reductions over each row and the ops around
them, a pass over the row per stage and the per-row ops on scalars between passes."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .emit import (NestNames, bounded_length, count_misses, kernel_names,
                   nest_comment, op_expression, reduced_count, tile_allocations, outer_loop,
                   value_literal)
from .fastpath import FastPath
from .ir import KernelIR, Op
from .names import fresh_name
from .nests import Nest, RowsNest
from .writer import INDENT, LINE_LIMIT, assignment, wrap_call


#: Float reductions whose result is inf or NaN whenever an operand is: the fast loop checks a
#: value a rows pass sums through the sum (rows_nest).
SUMS = ("SUM", "MEAN", "ROW_SUM")


def rows_nest(ir: KernelIR, names: dict[int, str], nest: RowsNest, number: int,
              local: NestNames, fast: FastPath | None) -> list[str]:
    """A rows nest: one loop over steps of `nest.step_rows` rows (split over threads), in it
    the per-row scalar ops and one pass over the rows' elements per stage, each reduction a
    scalar accumulator per row named after its result; the rows of a step go through the
    passes together (rows_together) or, with the per-row ops across them, one by one
    (rows_across)."""
    rows, cols = nest.loops.sizes
    if nest.across:
        how = (f" as {rows} rows of {cols} in blocks of {nest.step_rows}: a pass over each row "
               "per phase, the per-row ops over the block's rows at once")
        body = rows_across(ir, names, nest, local, fast)
    else:
        how = (f" as {rows} rows of {cols}, {nest.step_rows} row"
               f"{'s' if nest.step_rows > 1 else ''} a step: one pass over the step's rows per "
               "phase, the per-row values in registers")
        body = rows_together(ir, names, nest, local, fast)
    return [*nest_comment(names, nest, number, how), *body]


def rows_together(ir: KernelIR, names: dict[int, str], nest: RowsNest, local: NestNames,
                  fast: FastPath | None) -> list[str]:
    """Arrays the passes read or write whole are sliced to the row. The rows of a step go
    through each pass together, each under its own names (`mean_a`, `mean_b`): their
    reductions are independent, so one row's horizontal sums, divisions and square roots
    overlap with the other's loads and adds."""
    rows, cols = nest.loops.sizes
    lines, length, padded_length = row_lengths(names, nest, local)
    in_step = row_names(ir, names, nest, local, fast)
    per_step = len(in_step)
    steps = -(-rows // per_step)
    step = "i0" if per_step == 1 else fresh_name("step", kernel_names(names, local))
    if steps * per_step > rows:
        lines.append(f"# With {rows} rows, the last step has row {rows - 1} more than once.")
    lines, depth = step_loop(ir, nest, local, lines, step, steps)
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


def rows_across(ir: KernelIR, names: dict[int, str], nest: RowsNest, local: NestNames,
                fast: FastPath | None) -> list[str]:
    """A rows nest over blocks of `nest.step_rows` rows: each pass runs over the block's rows
    one after another, and the per-row ops between passes in one loop over the block, which
    LLVM vectorises across rows (fixed-point per-row ops cost more than the passes over short
    rows). The per-row values read outside their loop are arrays of the block's rows
    (`mean_rows[r]`); a pass accumulates each row in a scalar."""
    rows, cols = nest.loops.sizes
    block = nest.step_rows
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
    lines, depth = step_loop(ir, nest, local, lines, step, steps)
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


def step_loop(ir: KernelIR, nest: RowsNest, local: NestNames, setup: list[str], step: str,
              steps: int) -> tuple[list[str], int]:
    """A rows nest's loop over its steps after `setup` (its lengths and arrays), and the depth
    of the loop's body. With threads, each part has its own setup and row buffers: there LLVM
    sees the lengths' bound as in the one-thread kernel, so it sums a row in the same order,
    and so to the same bits."""
    if nest.threads == 1:
        return [*setup, f"for {step} in range({steps}):"], 1
    return outer_loop(nest, step, steps, [*setup, *tile_allocations(ir, nest, local)])


def row_lengths(names: dict[int, str], nest: RowsNest, local: NestNames) -> tuple[list[str], str,
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
            f"# vectors of {nest.lanes}: the buffers hold there what its reductions ignore. Not",
            "# bounded: the vectoriser would interleave softmax's exp pass less.",
            f"padded_length = ({tensor}.shape[0] // {rows} + {nest.lanes - 1}) // {nest.lanes}"
            f" * {nest.lanes}"], "row_length", "padded_length"


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


def row_names(ir: KernelIR, names: dict[int, str], nest: RowsNest, local: NestNames,
              fast: FastPath | None) -> list[RowNames]:
    """Per row of a step, names suffixed `_a`, `_b`, ... (none for one row a step) for all that
    differs from row to row; a [cols] operand's slice is the step's."""
    per_step = nest.step_rows
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
