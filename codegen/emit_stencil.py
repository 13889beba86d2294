"""Writing a stencil nest (codegen.nests.StencilNest): a depthwise convolution and its epilogue.

The loops are those of a hand-written depthwise convolution over NHWC data: output rows, the
tiles of a row, the rows of taps, the channels, the taps along the row innermost (a loop LLVM
unrolls: the tile's pixels then share each input value the taps load; with the channels
inside the taps, LLVM unrolled a 3-tap row before vectorising and a 3x3 convolution of 8
channels ran 10x slower). With runs (StencilNest.runs), a tap adds one run of the input row to
all the tile's sums instead. Each sum starts at the bias and adds the taps' products row by
row, as LiteRT's float kernel does (bias first, then `acc += input * weight` for each tap
inside the input, product and sum each rounded), so the sums are LiteRT's bit for bit; the
epilogue then runs on each sum while it is in a register.

Per row of taps, `data_row` and `weight_row` are the data and weights from the tile's first
tap inside the input and its block's first channel: indexed from there, every index is one LLVM
sees is not negative (numba wraps negative indices around, which keeps LLVM from vectorising
the channels).

An int8 convolution (codegen.quant_conv) is the same loops over int32 sums: each starts at the
bias and adds `(x + input_offset) * w` for each tap inside the input, exact in any order; the
epilogue requantizes each sum as LiteRT's optimized_ops::Quantize does for its channel, with
the multipliers and shifts its Prepare computes (module constants, `requantize_names`, or
literals where every channel has the same).
"""
from __future__ import annotations

import math
import textwrap

from .emit import (NestNames, count_misses, nest_comment, op_expression, outer_loop,
                   stencil_allocations, value_literal)
from .fastpath import FastPath
from .ir import KernelIR, Op
from .literals import plus
from .nests import StencilNest
from .writer import INDENT, LINE_LIMIT, assignment


def stencil_nest(ir: KernelIR, names: dict[int, str], nest: StencilNest, number: int,
                 local: NestNames, fast: FastPath | None) -> list[str]:
    """The output rows (with threads, parts of them); in each, the tiles before the interior,
    the interior's loop of tiles, the tiles after it (the nest's docstring), or in the exact
    loop of a kernel with a fast one, its columns one by one (`_Tile.columns`)."""
    n, rows = nest.domain[:2]
    acc = local.accumulators[nest.conv.output]
    runs = _weight_runs(ir, names, nest, local)
    if nest.threads > 1:
        lines, depth = outer_loop(nest, *nest.levels[0],
                                  [*stencil_allocations(ir, nest, local), *runs])
    else:
        lines, depth = outer_loop(nest, *nest.levels[0])
        lines = [*runs, *lines]
    if n > 1:
        lines.append(f"{INDENT * depth}for oy in range({rows}):")
        depth += 1
    tile = _Tile(ir, names, nest, acc, fast, depth + 1, local)
    first, end = nest.interior
    if fast is None and nest.exact_columns:
        tiles = tile.columns()
    else:
        tiles = [*(line for start in range(0, first, nest.pixels)
                   for line in tile.edge(start, min(first, start + nest.pixels))),
                 *tile.interior(),
                 *(line for start in range(end, nest.domain[2], nest.pixels)
                   for line in tile.edge(start, min(nest.domain[2], start + nest.pixels)))]
    body = [*_row_taps(ir, nest), *tiles]
    return [*nest_comment(names, nest, number), *_window_comment(nest),
            *lines, *(INDENT * depth + line for line in body)]


def _window_comment(nest: StencilNest) -> list[str]:
    (kh, kw), (sh, sw), (dh, dw), (top, left) = (nest.window.kernel, nest.window.strides,
                                                  nest.window.dilations, nest.window.padding)
    text = (f"{kh}x{kw} taps, stride {sh}x{sw}, dilation {dh}x{dw}, from {top} rows above and "
            f"{left} columns left of the output pixel, in tiles of {nest.pixels} pixels x "
            f"{nest.channels} channels")
    return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT))]


def _weight_runs(ir: KernelIR, names: dict[int, str], nest: StencilNest,
                 local: NestNames) -> list[str]:
    """With runs, each tap's weights and the bias repeated for a tile's pixels, once per
    invoke."""
    if not nest.runs:
        return []
    _, weights, bias = nest.conv.inputs
    taps, length, channels = math.prod(nest.window.kernel), nest.pixels * nest.channels, \
        nest.channels
    return [f"# The weights of each tap and the bias, repeated for the {nest.pixels} pixels "
            "of a tile",
            f"for tap in range({taps}):",
            f"{INDENT}for j in range({length}):",
            f"{INDENT * 2}{local.rows[weights]}[tap * {length} + j] = "
            f"{names[weights]}[tap * {channels} + j % {channels}]",
            f"for j in range({length}):",
            f"{INDENT}{local.rows[bias]}[j] = {names[bias]}[j % {channels}]"]


def _epilogue_runs(nest: StencilNest) -> bool:
    """Whether a tile's epilogue can run over its sums as one run: a float32 convolution's,
    every operand and stored value laid out as the output along its rows (indexed by the
    run's position, as the sums are)."""
    quantized = "requantize" in dict(nest.conv.params)
    return not quantized and not any(broadcast[2] or broadcast[3]
                                     for broadcast in nest.loops.broadcast.values())


def _row_taps(ir: KernelIR, nest: StencilNest) -> list[str]:
    """The input row of the window's first tap, `iy`, and unless every window lies inside the
    input's rows, the taps [ky0, ky1) inside them."""
    height = ir.value(nest.conv.inputs[0]).shape[1]
    kernel, dilation = nest.window.kernel[0], nest.window.dilations[0]
    first = f"iy = {_affine('oy', nest.window.strides[0], -nest.window.padding[0])}"
    if not _rows_clamped(ir, nest):
        return [first]
    return [first, *_taps_inside("y", kernel, dilation, height)]


def _taps_inside(axis: str, kernel: int, dilation: int, size: int) -> list[str]:
    """The taps [k0, k1) along `axis` ("y" or "x") whose input index, from `i{axis}` on,
    lies inside [0, size)."""
    start = f"i{axis}"
    if dilation == 1:
        return [f"k{axis}0 = max(0, -{start})", f"k{axis}1 = min({kernel}, {size} - {start})"]
    return [f"k{axis}0 = max(0, ({dilation - 1} - {start}) // {dilation})",
            f"k{axis}1 = min({kernel}, ({size + dilation - 1} - {start}) // {dilation})"]


def _rows_clamped(ir: KernelIR, nest: StencilNest) -> bool:
    """Whether some window leaves the input's rows."""
    height = ir.value(nest.conv.inputs[0]).shape[1]
    return nest.window.inside(0, height, nest.domain[1]) != (0, nest.domain[1])


class _Tile:
    """The text of a row's tiles: sums from the bias, the taps, the epilogue."""

    def __init__(self, ir: KernelIR, names: dict[int, str], nest: StencilNest, acc: str,
                 fast: FastPath | None, depth: int, local: NestNames) -> None:
        self.ir, self.names, self.nest, self.acc, self.fast = ir, names, nest, acc, fast
        self.runs = local.rows             # the weights' and bias's runs, if any
        self.indent = depth           # of a tile's first line in the kernel's module
        self.batch, self.height, self.width, self.in_channels = ir.value(nest.conv.inputs[0]).shape
        self.channels = nest.domain[3]
        self.blocked = nest.channels < self.channels
        self.weights = ir.value(nest.conv.inputs[1])

    def interior(self) -> list[str]:
        """The loop over the interior's whole tiles, then with runs the narrower tile of the
        columns left: every tap inside the row."""
        first, end = self.nest.interior
        nest, pixels = self.nest, self.nest.pixels
        whole = first + (end - first) // pixels * pixels
        lines = []
        if whole > first:
            lines += [f"# Columns {first} to {whole - 1}, {pixels} at a time: every tap inside "
                      "the input" + ", a run of the tile's sums" * nest.runs,
                      f"for ox in range({first}, {whole}, {pixels}):",
                      f"{INDENT}ix = "
                      f"{_affine('ox', nest.window.strides[1], -nest.window.padding[1])}",
                      *(INDENT + line for line in self._body(
                          "ox", pixels, "ix", self._taps(pixels), 1, nest.runs))]
        if end > whole:
            what = f"Column {whole}" if end - whole == 1 else f"Columns {whole} to {end - 1}"
            lines += [f"# {what}: every tap inside the input, a run of the tile's sums",
                      *self._body(str(whole), end - whole,
                                  str(whole * nest.window.strides[1] - nest.window.padding[1]),
                                  self._taps(end - whole), 0, nest.runs)]
        return lines

    def _taps(self, pixels: int) -> list[str]:
        """The taps along a row of the window, for a tile of `pixels` columns: per channel,
        each pixel's product written out; with runs, one loop over the tile's sums."""
        nest = self.nest
        step = nest.window.dilations[1] * self.in_channels
        if nest.runs:
            length = nest.pixels * nest.channels
            return [f"for kx in range({nest.window.kernel[1]}):",
                    f"{INDENT}for j in range({pixels * nest.channels}):",
                    f"{INDENT * 2}{self.acc}[j] += " + self._product(
                        f"data_row[{_scaled('kx', step)} + j]", f"weight_row[kx * {length} + j]")]
        stride = nest.window.strides[1] * self.in_channels
        taps = [f"{self._sum(p)} += " + self._product(
                    f"data_row[kx * {step}{f' + {p * stride}' * bool(p)} + "
                    f"{self._input_channel()}]", "weight") for p in range(pixels)]
        weight = (value_literal(self.weights) if self.weights.literal is not None
                  else f"weight_row[kx * {self.channels} + ch]")
        return [f"for ch in range({nest.channels}):",
                f"{INDENT}for kx in range({nest.window.kernel[1]}):",
                f"{INDENT * 2}weight = {weight}", *(INDENT * 2 + t for t in taps)]

    def columns(self) -> list[str]:
        """The exact loop's row: one column at a time, the taps along it a loop over those
        inside the input. It runs only where the fast loop found a miss, and as a loop it
        compiles in a fraction of the time of the tiles' written-out taps; each sum adds the
        same products in the same order (rows of taps, then columns), so it is the tiles' sum
        bit for bit."""
        nest = self.nest
        (_, kw), (_, sw), (_, dw) = nest.window.kernel, nest.window.strides, nest.window.dilations
        step = dw * self.in_channels
        weight = (value_literal(self.weights) if self.weights.literal is not None
                  else f"weight_row[(kx0 + kx) * {self.channels} + ch]")
        taps = ["for kx in range(kx1 - kx0):",
                f"{INDENT}for ch in range({nest.channels}):",
                f"{INDENT * 2}weight = {weight}",
                f"{INDENT * 2}{self._sum(0)} += " + self._product(
                    f"data_row[{_scaled('kx', step)} + {self._input_channel()}]", "weight")]
        bounds = _taps_inside("x", kw, dw, self.width)
        return ["# The exact loop: one column at a time, the taps inside the input a loop",
                f"for ox in range({nest.domain[2]}):",
                f"{INDENT}ix = {_affine('ox', sw, -nest.window.padding[1])}",
                *(INDENT + line for line in bounds),
                *(INDENT + line for line in self._body(
                    "ox", 1, f"ix + {_scaled('kx0', dw)}", taps, 1))]

    def edge(self, start: int, end: int) -> list[str]:
        """The tile of columns [start, end) before or after the interior: its geometry is
        known, so each tap inside the input is written out."""
        nest = self.nest
        (_, kw), (_, sw), (_, dw) = nest.window.kernel, nest.window.strides, nest.window.dilations
        first_column = start * sw - nest.window.padding[1]
        base = max(0, first_column)
        taps = []
        for kx in range(kw):
            for p in range(end - start):
                column = first_column + p * sw + kx * dw
                if 0 <= column < self.width:
                    data = (column - base) * self.in_channels
                    weight = (value_literal(self.weights) if self.weights.literal is not None
                              else f"weight_row[{f'{kx * self.channels} + ' * bool(kx)}ch]")
                    taps.append(f"{self._sum(p)} += " + self._product(
                        f"data_row[{f'{data} + ' * bool(data)}{self._input_channel()}]",
                        weight))
        loop = [f"for ch in range({nest.channels}):", *(INDENT + t for t in taps)] if taps \
            else []
        what = f"Column {start}" if end - start == 1 else f"Columns {start} to {end - 1}"
        return [f"# {what}: each tap inside the input written out",
                *self._body(str(start), end - start, str(base), loop, 0)]

    def _body(self, ox: str, pixels: int, column: str, taps: list[str], depth: int,
              runs: bool = False) -> list[str]:
        """A tile of `pixels` columns from `ox`: its sums from the bias, per row of taps
        `data_row` from input column `column` and `weight_row`, then `taps`, then the
        epilogue, all once per block of channels. (`depth`: its indents within the tile.)
        The bias and the epilogue loop over the pixels inside the channels: so LLVM
        vectorises the channel loop whatever the block's length (with the pixels outside,
        it unrolled a block of 24 before vectorising it, and left the clamps scalar). With
        `runs`, the tile's sums are one run from the bias's runs on, and the epilogue too
        where it can be (`_epilogue_runs`)."""
        nest, block = self.nest, self.nest.channels
        channel = "cb + ch" if self.blocked else "ch"
        pixel = ox if pixels == 1 else "px" if ox == "0" else f"{ox} + px"
        sum_at = f"{self.acc}[ch]" if pixels == 1 else f"{self.acc}[px * {block} + ch]"
        per_pixel = [] if pixels == 1 else [f"{INDENT}for px in range({pixels}):"]
        indent = INDENT * len(per_pixel)
        if runs:
            lines = [f"for j in range({pixels * block}):",
                     f"{INDENT}{self.acc}[j] = {self.runs[nest.conv.inputs[2]]}[j]"]
        else:
            bias = self._array(nest.conv.inputs[2], channel)
            lines = [f"for ch in range({block}):", *per_pixel,
                     f"{indent}{INDENT}{sum_at} = {bias}"]
        if taps:
            lines += self._tap_rows(column, taps, runs)
        if runs and _epilogue_runs(nest):
            epilogue = self._epilogue(ox, "j", f"{self.acc}[j]", self.indent + depth + 1)
            return [*lines, f"for j in range({pixels * block}):",
                    *(INDENT + line for line in epilogue)]
        epilogue = self._epilogue(pixel, channel, sum_at,
                                  self.indent + depth + 1 + self.blocked + len(per_pixel))
        lines += [f"for ch in range({block}):", *per_pixel,
                  *(indent + INDENT + line for line in epilogue)]
        if not self.blocked:
            return lines
        return [f"for cb in range(0, {self.channels}, {block}):", *(INDENT + x for x in lines)]

    def _tap_rows(self, column: str, taps: list[str], runs: bool) -> list[str]:
        """The rows of taps inside the input (LiteRT's order: rows, then columns), each with
        its `data_row` and `weight_row` (of the weights' runs if `runs`)."""
        nest = self.nest
        (kh, kw), dh = nest.window.kernel, nest.window.dilations[0]
        row = f"{f'n * {self.height} + ' if self.batch > 1 else ''}iy + {_scaled('ky', dh)}"
        start = (f"({row}) * {self.width * self.in_channels}" if column == "0" else
                 f"(({row}) * {self.width} + {column}) * {self.in_channels}")
        if self.blocked:
            multiplier = nest.depth_multiplier
            start += " + cb" if multiplier == 1 else f" + cb // {multiplier}"
        data = self.names[nest.conv.inputs[0]]
        lines = [f"for ky in range({'ky0, ky1' if _rows_clamped(self.ir, nest) else kh}):",
                 f"{INDENT}data_row = {data}[{start}:]"]
        if runs:
            lines.append(f"{INDENT}weight_row = {self.runs[self.weights.tensor]}"
                         f"[ky * {kw * nest.pixels * nest.channels}:]")
        elif self.weights.literal is None:
            lines.append(f"{INDENT}weight_row = {self.names[self.weights.tensor]}"
                         f"[ky * {kw * self.channels}{' + cb' * self.blocked}:]")
        return [*lines, *(INDENT + line for line in taps)]

    def _product(self, data: str, weight: str) -> str:
        """A tap's product: float32 `data * weight`; int8 `(data + input_offset) * weight`,
        exact in the int64 numba computes it in."""
        requantize = dict(self.nest.conv.params).get("requantize")
        offset = requantize.input_offset if requantize is not None else 0
        if not offset:
            return f"{data} * {weight}"
        return f"({data}{plus(offset)}) * {weight}"

    def _sum(self, pixel: int) -> str:
        return f"{self.acc}[{pixel * self.nest.channels} + ch]" if pixel else f"{self.acc}[ch]"

    def _input_channel(self) -> str:
        """The input channel of output channel `ch` (of the block): ch // depth_multiplier."""
        multiplier = self.nest.depth_multiplier
        return "ch" if multiplier == 1 else f"ch // {multiplier}"

    def _array(self, tensor: int, index: str) -> str:
        """`tensor[index]`, or its value where it is a one-element constant."""
        value = self.ir.value(tensor)
        return value_literal(value) if value.literal is not None \
            else f"{self.names[tensor]}[{index}]"

    def _epilogue(self, pixel: str, channel: str, acc: str, depth: int) -> list[str]:
        """The convolution's activation on the sum `acc` and the epilogue, at output column
        `pixel` and channel `channel`: each value stored where a later nest or the partition
        reads it, else a temporary; with `fast`, the fast loop's forms and checks."""
        ir, names, nest, fast = self.ir, self.names, self.nest, self.fast
        width = LINE_LIMIT - len(INDENT) * depth
        exprs = {v.tensor: value_literal(v) for v in ir.values if v.literal is not None}
        exprs |= {t: _element(names, nest, t, pixel, channel) for t in nest.loops.broadcast
                  if t not in nest.writes}
        lines, misses = [], []
        for op in nest.ops:
            args = [acc] if op is nest.conv else [exprs[t] for t in op.inputs]
            target = (_element(names, nest, op.output, pixel, channel)
                      if op.output in nest.writes else names[op.output])
            quantized = op is nest.conv and "requantize" in dict(op.params)
            expression = (requantized(names, op, acc, channel) if quantized
                          else op_expression(ir, names, op, args, bool(fast)))
            if op.output not in nest.writes and ir.value(op.output).dtype != "float32":
                expression = f"np.{ir.value(op.output).dtype}({expression})"    # as stored
            lines += assignment(target, expression, width)
            if fast and op.output in fast.checked:
                misses.append(f"magnitude({target})")
            exprs[op.output] = target
        return lines + count_misses(misses, width)


def _element(names: dict[int, str], nest: StencilNest, tensor: int, pixel: str,
             channel: str) -> str:
    """An epilogue operand's or output's element at output row `oy` (image `n`), column
    `pixel`, channel `channel`."""
    variables = ("n", "oy", pixel, channel)
    terms = []
    for d, stride in nest.loops.strides(tensor):
        if nest.domain[d] > 1 and variables[d] != "0":
            term = f"({variables[d]})" if " " in variables[d] and stride > 1 else variables[d]
            terms.append(term if stride == 1 else f"{term} * {stride}")
    return f"{names[tensor]}[{' + '.join(terms) or '0'}]"


def _affine(variable: str, scale: int, offset: int) -> str:
    """`variable * scale + offset`, without a scale of 1 or an offset of 0."""
    text = _scaled(variable, scale)
    return text if not offset else f"{text} - {-offset}" if offset < 0 else f"{text} + {offset}"


def _scaled(variable: str, scale: int) -> str:
    return variable if scale == 1 else f"{variable} * {scale}"


def requantize_names(names: dict[int, str], op: Op) -> tuple[str, str]:
    """The module constants of an int8 convolution's multipliers and shifts per channel: named
    after its output, never a tensor's name."""
    taken = set(names.values())
    base = names[op.output]
    while f"{base}_multipliers" in taken or f"{base}_shifts" in taken:
        base += "_"
    return f"{base}_multipliers", f"{base}_shifts"


def requantized(names: dict[int, str], op: Op, acc: str, channel: str) -> str:
    """The output code of the int8 sum `acc` at output channel `channel`: LiteRT's
    optimized_ops::Quantize, MultiplyByQuantizedMultiplier4Rows on the channels of its NEON
    blocks, MultiplyByQuantizedMultiplier on the rest, + the output zero point, clamped to
    the activation's range; in int32 lanes where the sums allow (`int32_lanes`)."""
    requantize = dict(op.params)["requantize"]
    if requantize.uniform:
        multiplier, shift = requantize.multipliers[0], requantize.shifts[0]
    else:
        multipliers, shifts = requantize_names(names, op)
        multiplier, shift = f"{multipliers}[{channel}]", f"{shifts}[{channel}]"
    offset = requantize.output_zero_point
    if requantize.int32_lanes:
        exponent = -shift if isinstance(shift, int) else f"-{shift}"
        ties_away = (int(requantize.vector_channels == 0)
                     if requantize.vector_channels in (0, len(requantize.multipliers))
                     else f"{channel} >= {requantize.vector_channels}")
        return (f"saturate(depthwise_requantize_int32({acc}, {multiplier}, {exponent}, "
                f"{offset}, {ties_away}), {requantize.qmin}, {requantize.qmax})")
    args = f"{acc}, {multiplier}, {shift}"
    vector = f"multiply_by_quantized_multiplier_4rows({args})"
    scalar = f"multiply_by_quantized_multiplier({args})"
    if requantize.vector_channels == len(requantize.multipliers):
        scaled = vector
    elif requantize.vector_channels == 0:
        scaled = scalar
    else:
        scaled = f"select({channel} < {requantize.vector_channels}, {vector}, {scalar})"
    return f"saturate({scaled}{plus(offset)}, {requantize.qmin}, {requantize.qmax})"
