"""Writing a matmul nest (codegen.nests.MatmulNest): an int8 BATCH_MATMUL.

The loops of a hand-written int8 matrix product: the output rows in blocks of `row_block`, the
block's sums in a stack array of int32, each the exact sum over K of (lhs code + lhs_offset) *
(rhs code + rhs_offset) as LiteRT's reference kernel adds them (exact in any order: integers),
then each requantized as it does (codegen.quant_matmul). The block's sums advance together down
rhs's rows: each rhs row is loaded once for the block's rows, its columns the inner loop
(contiguous, vectorised), the block's sums in registers. An rhs stored [N, K] (adj_y) is first
copied as [K, N], per matrix.
"""
from __future__ import annotations

import textwrap

from .emit import NestNames, nest_comment
from .fastpath import FastPath
from .ir import KernelIR
from .literals import plus
from .nests import MatmulNest
from .writer import INDENT, LINE_LIMIT, assignment


def matmul_nest(ir: KernelIR, names: dict[int, str], nest: MatmulNest, number: int,
                local: NestNames, fast: FastPath | None) -> list[str]:
    """The batch loops; in them adj_y's copy of rhs, then the rows in blocks (and the rows
    after the last whole block one by one)."""
    op = nest.ops[0]
    requantize = dict(op.params)["requantize"]
    lhs, rhs = (names[t] for t in op.inputs)
    sums = local.accumulators[op.output]
    rows, depth, columns, block = nest.rows, nest.depth, nest.columns, nest.row_block
    loops = [f"for b{d} in range({size}):" for d, (size, _, _) in enumerate(nest.batch)]
    lhs_base = _sum(*(f"b{d} * {stride}" for d, (_, stride, _) in enumerate(nest.batch)
                      if stride))
    rhs_base = _sum(*(f"b{d} * {stride}" for d, (_, _, stride) in enumerate(nest.batch)
                      if stride))
    matrix = ""                                  # the output matrix's index, batch dims flat
    for d, (size, _, _) in enumerate(nest.batch):
        matrix = f"{_grouped(matrix)} * {size} + b{d}" if matrix else f"b{d}"
    out_base = f"{_grouped(matrix)} * {rows * columns}" if matrix else ""
    copy = []
    if nest.adj_y:
        copy = ["# rhs is stored [N, K]: its matrix copied as [K, N]",
                f"for k in range({depth}):",
                f"{INDENT}for col in range({columns}):",
                f"{INDENT * 2}{local.rows[op.inputs[1]]}[k * {columns} + col] = "
                f"{rhs}[{_sum(rhs_base, f'col * {depth} + k')}]"]
        rhs, rhs_base = local.rows[op.inputs[1]], ""
    code = (f"saturate(multiply_by_quantized_multiplier({{}}, {requantize.multiplier}, "
            f"{requantize.shift}){plus(requantize.output_zero_point)}, {requantize.qmin}, "
            f"{requantize.qmax})")
    width = LINE_LIMIT - len(INDENT) * (len(loops) + 3)

    def rows_of(height: int, first: str) -> list[str]:
        """The block of `height` rows from row `first`: sums, products, requantization."""
        row = [first if r == 0 else f"{first} + {r}" for r in range(height)]

        def lhs_at(r: int) -> str:
            along = (f"k * {rows} + {row[r]}" if nest.adj_x else
                     f"{_grouped(row[r])} * {depth} + k")
            return f"np.int32({lhs}[{_sum(lhs_base, along)}]){plus(requantize.lhs_offset)}"
        sum_at = [f"{sums}[{f'{r * columns} + ' if r else ''}col]" for r in range(height)]
        products = [f"{INDENT * 2}{sum_at[r]} += a{r} * b" for r in range(height)]
        stores = [line for r in range(height) for line in assignment(
            f"{names[op.output]}[{_sum(out_base, f'{_grouped(row[r])} * {columns}', 'col')}]",
            code.format(sum_at[r]), width)]
        return [f"for col in range({height * columns}):",
                f"{INDENT}{sums}[col] = 0",
                f"for k in range({depth}):",
                f"{INDENT}rhs_row = {rhs}[{_sum(rhs_base, f'k * {columns}')}:]",
                *(f"{INDENT}a{r} = {lhs_at(r)}" for r in range(height)),
                f"{INDENT}for col in range({columns}):",
                f"{INDENT * 2}b = np.int32(rhs_row[col]){plus(requantize.rhs_offset)}",
                *products,
                f"for col in range({columns}):",
                *(INDENT + line for line in stores)]
    whole = rows - rows % block
    body = copy + [f"for row in range(0, {whole}, {block}):" if block > 1 else
                   f"for row in range({whole}):",
                   *(INDENT + line for line in rows_of(block, "row"))]
    if whole < rows:
        body += [f"for row in range({whole}, {rows}):",
                 *(INDENT + line for line in rows_of(1, "row"))]
    how = (f"int32 sums over K = {depth}, in blocks of {block} output rows that read each rhs "
           "row once, each sum requantized as LiteRT's reference kernel does")
    lines = [*nest_comment(names, nest, number),
             *("# " + line for line in textwrap.wrap(how, LINE_LIMIT - 2 - len(INDENT)))]
    for level, loop in enumerate(loops):
        lines.append(INDENT * level + loop)
    return lines + [INDENT * len(loops) + line for line in body]


def _sum(*terms: str) -> str:
    """`terms` added, without empty ones and zeros; "0" if none is left."""
    kept = [t for t in terms if t and t != "0"]
    return " + ".join(kept) or "0"


def _grouped(expression: str) -> str:
    """`expression` as a factor: in parentheses if it is a sum."""
    return f"({expression})" if " " in expression else expression
