"""Writing a stencil nest (codegen.nests.StencilNest): a depthwise convolution and its epilogue.

The loops are those of a hand-written depthwise convolution over NHWC data: output rows, the
tiles of a row, the taps, the channels innermost. Each sum starts at the bias and adds the
taps' products row by row, as LiteRT's float kernel does (bias first, then
`acc += weight * input` for each tap inside the input, product and sum each rounded), so the
sums are LiteRT's bit for bit; the epilogue then runs on each sum in its register.
"""
from __future__ import annotations

from .emit import NestNames, count_misses, nest_comment, op_expression, outer_loop, value_literal
from .fastpath import FastPath
from .ir import KernelIR
from .nests import StencilNest
from .writer import INDENT, LINE_LIMIT, assignment


def stencil_nest(ir: KernelIR, names: dict[int, str], nest: StencilNest, number: int,
                 local: NestNames, fast: FastPath | None) -> list[str]:
    """The output rows (with threads, parts of them), in each the tiles, then the columns
    outside them one at a time (the nest's docstring)."""
    n, rows = nest.domain[:2]
    acc = local.accumulators[nest.conv.output]
    setup = [f"{acc} = stack_empty({nest.pixels * nest.channels}, np.float32)"]
    lines, depth = outer_loop(nest, *nest.levels[0], setup if nest.threads > 1 else ())
    if n > 1:
        lines.append(f"{INDENT * depth}for oy in range({rows}):")
        depth += 1
    body = [*_row_taps(ir, names, nest), *_tiles(ir, names, nest, acc, fast, depth + 1),
            *_columns(ir, names, nest, acc, fast, depth + 1)]
    return [*nest_comment(names, nest, number), *_window_comment(nest),
            *lines, *(INDENT * depth + line for line in body)]


def _window_comment(nest: StencilNest) -> list[str]:
    (kh, kw), (sh, sw), (dh, dw), (top, left) = (nest.window.kernel, nest.window.strides,
                                                  nest.window.dilations, nest.window.padding)
    first, end = nest.interior
    tiles = (f"columns {first} to {end - 1} in tiles of {nest.pixels} pixels x {nest.channels} "
             "channels, the others one at a time" if end > first else "column by column")
    text = (f"{kh}x{kw} taps, stride {sh}x{sw}, dilation {dh}x{dw}, the window from {top} above "
            f"and {left} left of the output pixel; {tiles}")
    width = LINE_LIMIT - 2 - len(INDENT)
    words, out = text.split(), [""]
    for word in words:
        if len(out[-1]) + len(word) + 1 > width:
            out.append("")
        out[-1] = f"{out[-1]} {word}".strip()
    return [f"# {line}" for line in out]


def _row_taps(ir: KernelIR, names: dict[int, str], nest: StencilNest) -> list[str]:
    """The input row of the window's first tap, `iy`, and unless every window lies inside the
    input's rows, the taps [ky0, ky1) inside them."""
    height = ir.value(nest.conv.inputs[0]).shape[1]
    lines = [f"iy = {_affine('oy', nest.window.strides[0], -nest.window.padding[0])}"]
    if nest.window.inside(0, height, nest.domain[1]) != (0, nest.domain[1]):
        lines += _tap_range("ky", "iy", nest.window.kernel[0], nest.window.dilations[0], height)
    return lines


def _tap_range(tap: str, first: str, kernel: int, dilation: int, size: int) -> list[str]:
    """`{tap}0, {tap}1`: the taps whose row or column `first + tap * dilation` is inside
    [0, size)."""
    if dilation == 1:
        return [f"{tap}0 = max(0, -{first})", f"{tap}1 = min({kernel}, {size} - {first})"]
    return [f"{tap}0 = max(0, ({dilation - 1} - {first}) // {dilation})",
            f"{tap}1 = min({kernel}, ({size + dilation - 1} - {first}) // {dilation})"]


def _tiles(ir: KernelIR, names: dict[int, str], nest: StencilNest, acc: str,
           fast: FastPath | None, depth: int) -> list[str]:
    """The interior columns, a tile of `pixels` x `channels` at a time: every tap inside the
    row, the pixels' sums side by side in `acc`. (`depth`: the indentation of the loop in the
    kernel's module, for the width of its lines.)"""
    first, end = nest.interior
    if end == first:
        return []
    pixels, block = nest.pixels, nest.channels
    channel = _channel(nest)
    stride = nest.window.strides[1] * ir.value(nest.conv.inputs[0]).shape[3]
    taps = []
    for pixel in range(pixels):
        offset = f" + {pixel * stride}" if pixel else ""
        at = f"{acc}[{pixel * block} + ch]" if pixel else f"{acc}[ch]"
        taps.append(f"{at} += {_data(ir, names, nest, f'at{offset}')} * "
                    f"{_weight(ir, names, nest)}")
    body = [*_block_loop(nest, [
        f"for px in range({pixels}):",
        f"{INDENT}for ch in range({block}):",
        f"{INDENT * 2}{acc}[px * {block} + ch] = {_bias(ir, names, nest)}",
        *_taps(ir, names, nest, range_x=f"range({nest.window.kernel[1]})",
               channel_loop=[f"for ch in range({block}):", *(INDENT + t for t in taps)]),
        f"for px in range({pixels}):",
        f"{INDENT}for ch in range({block}):",
        *(INDENT * 2 + line for line in _epilogue(
            ir, names, nest, fast, "ox + px", channel, f"{acc}[px * {block} + ch]",
            depth + 3 + (block < _channels(nest))))])]
    return [f"for ox in range({first}, {end}, {pixels}):",
            f"{INDENT}ix = {_affine('ox', nest.window.strides[1], -nest.window.padding[1])}",
            *(INDENT + line for line in body)]


def _columns(ir: KernelIR, names: dict[int, str], nest: StencilNest, acc: str,
             fast: FastPath | None, depth: int) -> list[str]:
    """The columns outside the tiles, one at a time, over their taps inside the input."""
    width, columns = ir.value(nest.conv.inputs[0]).shape[2], nest.domain[2]
    first, end = nest.interior
    if end - first == columns:
        return []
    if first == end:
        loop = [f"for ox in range({columns}):"]
    elif first == 0:
        loop = [f"for ox in range({end}, {columns}):"]
    elif end == columns:
        loop = [f"for ox in range({first}):"]
    else:
        loop = [f"for k in range({columns - (end - first)}):",
                f"{INDENT}ox = k if k < {first} else k + {end - first}"]
    kw, dw = nest.window.kernel[1], nest.window.dilations[1]
    clamped = nest.window.inside(1, width, columns) != (0, columns)
    channel = _channel(nest)
    body = [*_block_loop(nest, [
        f"for ch in range({nest.channels}):",
        f"{INDENT}{acc}[ch] = {_bias(ir, names, nest)}",
        *_taps(ir, names, nest, range_x="range(kx0, kx1)" if clamped else f"range({kw})",
               channel_loop=[f"for ch in range({nest.channels}):",
                             f"{INDENT}{acc}[ch] += {_data(ir, names, nest, 'at')} * "
                             f"{_weight(ir, names, nest)}"]),
        f"for ch in range({nest.channels}):",
        *(INDENT + line for line in _epilogue(
            ir, names, nest, fast, "ox", channel, f"{acc}[ch]",
            depth + 2 + (nest.channels < _channels(nest))))])]
    return [*loop,
            f"{INDENT}ix = {_affine('ox', nest.window.strides[1], -nest.window.padding[1])}",
            *(INDENT + line for line in (_tap_range("kx", "ix", kw, dw, width) if clamped
                                          else [])),
            *(INDENT + line for line in body)]


def _block_loop(nest: StencilNest, lines: list[str]) -> list[str]:
    """`lines` once per block of channels, where there is more than one."""
    if nest.channels == _channels(nest):
        return lines
    return [f"for cb in range(0, {_channels(nest)}, {nest.channels}):",
            *(INDENT + line for line in lines)]


def _taps(ir: KernelIR, names: dict[int, str], nest: StencilNest, range_x: str,
          channel_loop: list[str]) -> list[str]:
    """The loops over the taps, rows then columns (LiteRT's order), and in each tap the
    channels: `at`, the data element of the tap's first pixel and channel, `wt` the weights'
    of its first channel."""
    data = ir.value(nest.conv.inputs[0]).shape
    height, width, depth = data[1:]
    (kh, kw), (dh, dw) = nest.window.kernel, nest.window.dilations
    rows_clamped = nest.window.inside(0, height, nest.domain[1]) != (0, nest.domain[1])
    row = f"{'n * ' + str(height) + ' + ' if data[0] > 1 else ''}iy + {_scaled('ky', dh)}"
    return [f"for ky in range({'ky0, ky1' if rows_clamped else kh}):",
            f"{INDENT}for kx in {range_x}:",
            f"{INDENT * 2}at = (({row}) * {width} + ix + {_scaled('kx', dw)}) * {depth}",
            f"{INDENT * 2}wt = (ky * {kw} + kx) * {_channels(nest)}",
            *(INDENT * 2 + line for line in channel_loop)]


def _epilogue(ir: KernelIR, names: dict[int, str], nest: StencilNest, fast: FastPath | None,
              pixel: str, channel: str, acc: str, depth: int) -> list[str]:
    """The convolution's activation on the sum `acc` and the epilogue, at output column
    `pixel` and channel `channel`: each value stored where a later nest or the partition reads
    it, else a temporary; with `fast`, the fast loop's forms and checks."""
    width = LINE_LIMIT - len(INDENT) * depth
    exprs = {v.tensor: value_literal(v) for v in ir.values if v.literal is not None}
    exprs |= {t: _element(names, nest, t, pixel, channel) for t in nest.loops.broadcast
              if t not in nest.writes}
    lines, misses = [], []
    for op in nest.ops:
        args = [acc] if op is nest.conv else [exprs[t] for t in op.inputs]
        target = (_element(names, nest, op.output, pixel, channel) if op.output in nest.writes
                  else names[op.output])
        lines += assignment(target, op_expression(ir, names, op, args, bool(fast)), width)
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
        if nest.domain[d] > 1:
            term = f"({variables[d]})" if " " in variables[d] and stride > 1 else variables[d]
            terms.append(term if stride == 1 else f"{term} * {stride}")
    return f"{names[tensor]}[{' + '.join(terms) or '0'}]"


def _channels(nest: StencilNest) -> int:
    return nest.domain[3]


def _channel(nest: StencilNest) -> str:
    """The output channel of the channel loop's `ch`."""
    return "ch" if nest.channels == _channels(nest) else "cb + ch"


def _data(ir: KernelIR, names: dict[int, str], nest: StencilNest, at: str) -> str:
    """The data element of output channel `_channel` at the tap element `at`: its input
    channel is the output channel // depth_multiplier."""
    channel = _channel(nest)
    if nest.depth_multiplier > 1:
        channel = f"({channel}) // {nest.depth_multiplier}" if " " in channel \
            else f"{channel} // {nest.depth_multiplier}"
    return _array(ir, names, nest.conv.inputs[0], f"{at} + {channel}")


def _weight(ir: KernelIR, names: dict[int, str], nest: StencilNest) -> str:
    return _array(ir, names, nest.conv.inputs[1], f"wt + {_channel(nest)}")


def _bias(ir: KernelIR, names: dict[int, str], nest: StencilNest) -> str:
    return _array(ir, names, nest.conv.inputs[2], _channel(nest))


def _array(ir: KernelIR, names: dict[int, str], tensor: int, index: str) -> str:
    """`tensor[index]`, or its value where it is a one-element constant."""
    value = ir.value(tensor)
    return value_literal(value) if value.literal is not None else f"{names[tensor]}[{index}]"


def _affine(variable: str, scale: int, offset: int) -> str:
    """`variable * scale + offset`, without a scale of 1 or an offset of 0."""
    text = _scaled(variable, scale)
    return text if not offset else f"{text} - {-offset}" if offset < 0 else f"{text} + {offset}"


def _scaled(variable: str, scale: int) -> str:
    return variable if scale == 1 else f"{variable} * {scale}"
