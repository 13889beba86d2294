"""Planning a stencil nest: which ops join a depthwise convolution's epilogue, and its tiles.

A scheduler query over the IR (codegen.schedule asks it); it imports no numba.

The epilogue: the elementwise float32 ops after the convolution, over its output shape, that
read its values (the convolution's or an earlier epilogue op's) and otherwise only values
complete before the convolution's nest runs (partition inputs, constants, values of earlier
phases): they run on each sum while it is in a register, and only the values something else
reads are stored.

The tiles (Halide's and TVM's schedule for a depthwise convolution): output pixels along a row
times a block of channels, so LLVM keeps the tile's sums in vector registers across the taps
and, unrolling the taps along the row, loads each input vector once for every pixel of the tile
that reads it. A block's channels divide C, so every block is the same loop, and C need not be
a multiple of the vector width. Where C is not whole half vectors and the stride along a row is
1, a tile is `runs`: all of C, and each tap's products for the tile one run of the input row
(its pixels x channels are contiguous there), against the weights repeated for the tile's
pixels; LLVM vectorised a channel loop of 12 or 28 with a scalar remainder, 0.2-0.5x of
XNNPACK at 3x3, and the runs 1.2-2.6x (perf/README.md, "3x3 depthwise convolutions").

What LLVM makes of the loops was measured per register file (perf/stencil.py; tune with its
shapes): blocks of whole vectors, 2 or 3 of them, do best; blocks of one vector, or of a part
of a vector beside whole ones, ran up to 4x slower when the channel loop was inside the taps'
(LLVM unrolled it before vectorising, and left it scalar), except where the block is all of a
C of a few vectors; a tile of about 12 sums did best with 32 registers, of 8 (4 pixels of 2
vectors) with 16; tiles of 2 or 3 pixels of 2 vectors ran 3-9x slower than 4 there.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from .ir import KernelIR, Op
from .nests import LoopNest, StencilNest
from .ops import CHAIN_OPS, OPS
from .target import Target
from .window import window

@dataclass(frozen=True)
class Tiles:
    """A target's tile shape: output pixels along a row, at most; a block of 2 to
    `block_vectors` whole vectors of channels, or all of C up to `block_max_vectors` vectors
    where no such block divides C; and the tile's sums, about."""
    pixels: int
    block_vectors: int
    block_max_vectors: int
    sums: int

    def pixels_of(self, block: int, lanes: int) -> int:
        """Output pixels of a tile of `block` channels."""
        return max(1, min(self.pixels, self.sums // -(-block // lanes)))


#: By the target's vector registers. 32 (AVX-512): measured on Zen 4 (znver4, 16 lanes). 16
#: (AVX2, SSE): measured on the same machine with kernels compiled for haswell (8 lanes),
#: where the 32-register tiles ran 0.14-0.4x of XNNPACK at C = 16 and 32 (tiles of 2 or 3
#: pixels of two vectors), and these 1.2-2.4x (perf/README.md, "Kernels for other CPUs").
TILES = {32: Tiles(pixels=8, block_vectors=3, block_max_vectors=6, sums=12),
         16: Tiles(pixels=4, block_vectors=3, block_max_vectors=12, sums=8)}


def joins_epilogue(ir: KernelIR, op: Op, conv: Op) -> bool:
    """Whether `op` may run in `conv`'s epilogue, given that it reads one of its values: an
    elementwise float32 op over the convolution's output shape, or after an int8 convolution
    an int8 op as codegen.lower made it, a table lookup or a fixed-point call (its other
    operands are the caller's to check)."""
    if ir.value(op.output).shape != ir.value(conv.output).shape:
        return False
    if ir.value(conv.output).quantized:
        return op.op in ("LUT", "QCALL")
    elementwise = op.op in OPS or op.op in CHAIN_OPS
    return elementwise and all(ir.value(t).dtype == "float32" for t in (*op.inputs, op.output))


def stencil_nest(ir: KernelIR, ops: tuple[Op, ...], writes: tuple[int, ...],
                 target: Target) -> StencilNest:
    """The nest of a convolution `ops[0]` and its epilogue `ops[1:]`, storing `writes`."""
    conv = ops[0]
    data, weights, _ = (ir.value(t) for t in conv.inputs)
    domain = ir.value(conv.output).shape
    channels = domain[3]
    computed = {op.output for op in ops}
    operands = tuple(dict.fromkeys(t for op in ops[1:] for t in op.inputs
                                   if t not in computed and ir.value(t).literal is None))
    reads = tuple(dict.fromkeys([t for t in conv.inputs if ir.value(t).literal is None]
                                + list(operands)))
    geometry = window(data.shape, weights.shape[1:3], dict(conv.params))
    multiplier = channels // data.shape[3]
    tiles = TILES[target.vector_registers]
    first, end = geometry.inside(1, data.shape[2], domain[2])
    runs = (_run_pixels(channels, target.lanes, tiles)
            if geometry.strides[1] == 1 and multiplier == 1 and channels % (target.lanes // 2)
            and all(ir.value(t).literal is None for t in conv.inputs[1:]) else 0)
    if runs:
        block, pixels = channels, runs
    else:
        block = _channel_block(channels, multiplier, target.lanes, tiles)
        pixels = tiles.pixels_of(block, target.lanes)
        first = min(domain[2], -(-first // pixels) * pixels)      # whole tiles before it
        end = first + max(0, end - first) // pixels * pixels
    return StencilNest(
        domain=domain, ops=ops,
        loops=LoopNest(domain, {t: _broadcast(ir.value(t).shape, domain)
                                for t in (*operands, *writes)}),
        reads=reads, writes=writes, window=geometry,
        depth_multiplier=multiplier, pixels=pixels, channels=block,
        interior=(first, end), runs=bool(runs))


def _run_pixels(channels: int, lanes: int, tiles: Tiles) -> int:
    """The pixels of a tile whose taps are runs (stride 1: a tap reads the tile's pixels x
    channels as one run of the input row): the most whose run is whole vectors and at most
    the tile's sums; 0 where fewer than 2 pixels would."""
    unit = lanes // gcd(channels, lanes)
    pixels = tiles.sums * lanes // channels // unit * unit
    return pixels if pixels >= 2 else 0


def _channel_block(channels: int, multiplier: int, lanes: int, tiles: Tiles) -> int:
    """The channels of a block: whole input channels (a multiple of the depth multiplier) and
    a divisor of C; of 2 to block_vectors whole vectors, the one whose tile holds the most sums
    (ties: the larger), else all of C up to block_max_vectors vectors, else the largest up to
    block_vectors vectors, of whole half vectors if one is (184 channels in blocks of 46 ran
    0.82x of XNNPACK's 3x3 convolution, in blocks of 8 1.55x)."""
    most = tiles.block_vectors * lanes
    divisors = [d for d in range(multiplier, channels + 1, multiplier) if channels % d == 0]
    whole = [d for d in divisors if d % lanes == 0 and 2 * lanes <= d <= most]
    if whole:
        return max(whole, key=lambda d: (tiles.pixels_of(d, lanes) * d, d))
    if channels <= tiles.block_max_vectors * lanes:
        return channels
    fitting = [d for d in divisors if d <= most]
    return max([d for d in fitting if d % (lanes // 2) == 0] or fitting, default=channels)


def _broadcast(shape: tuple[int, ...], domain: tuple[int, ...]) -> tuple[bool, ...]:
    """Per dim of the domain, whether a tensor of `shape` is broadcast along it."""
    aligned = (1,) * (len(domain) - len(shape)) + tuple(shape)
    return tuple(a == 1 and d != 1 for a, d in zip(aligned, domain))
