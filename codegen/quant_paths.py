"""Which elements LiteRT's int8/uint8 kernels compute on which path, on x86.

LiteRT's x86 build runs its NEON code through NEON_2_SSE, so several kernels compute vector
blocks ("block" paths) and the remaining elements ("reference" path, the scalar loop) with
different roundings: QUANTIZE, DEQUANTIZE, requantizing QUANTIZE, ADD and MUL. `binary_paths`
and `UnaryLookup` say which element takes which path; a kernel that cannot follow that is
refused the parameters for which the paths disagree (quant_support).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .qparams import DTYPE_RANGES

# LiteRT's paths through a kernel: its scalar loops and reference kernels; the NEON blocks of
# an elementwise kernel; those of a scalar-broadcast kernel.
REFERENCE, ELEMENTWISE_BLOCK, SCALAR_BLOCK = 0, 1, 2
PATH_NAMES = ("reference", "elementwise_block", "scalar_block")

# NEON block length of (op, dtype, path) in LiteRT's optimized kernels on x86.
_BLOCKS = {("ADD", "int8", ELEMENTWISE_BLOCK): 16, ("ADD", "int8", SCALAR_BLOCK): 8,
           ("ADD", "uint8", ELEMENTWISE_BLOCK): 8, ("ADD", "uint8", SCALAR_BLOCK): 8,
           ("MUL", "int8", ELEMENTWISE_BLOCK): 16, ("MUL", "int8", SCALAR_BLOCK): 16,
           ("MUL", "uint8", ELEMENTWISE_BLOCK): 8, ("MUL", "uint8", SCALAR_BLOCK): 8}


def _broadcast_params(shape1: Sequence[int], shape2: Sequence[int]) -> tuple[str, tuple]:
    """reference_ops::ProcessBroadcastShapes: ('none' | 'generic' | 'fivefold', y0..y4)."""
    rank = max(len(shape1), len(shape2))
    s0 = (1,) * (rank - len(shape1)) + tuple(shape1)
    s1 = (1,) * (rank - len(shape2)) + tuple(shape2)
    if s0 == s1:
        return "none", ()
    category = None
    for i in range(rank - 1, -1, -1):
        if s0[i] == s1[i]:
            continue
        if s0[i] == 1:
            category = "first"
        elif s1[i] == 1:
            category = "second"
        else:
            return "generic", ()
        break
    a, b = (s1, s0) if category == "second" else (s0, s1)
    y = [1, 1, 1, 1, 1]
    i = rank - 1
    for slot, test in ((4, lambda i: a[i] == b[i]), (3, lambda i: a[i] == 1),
                       (2, lambda i: a[i] == b[i]), (1, lambda i: b[i] == 1),
                       (0, lambda i: a[i] == b[i])):
        while i >= 0 and test(i):
            y[slot] *= (b[i] if slot in (4, 3, 0) else a[i])
            i -= 1
    return ("generic", ()) if i >= 0 else ("fivefold", tuple(y))


def binary_paths(op: str, dtype: str, shape1: Sequence[int],
                 shape2: Sequence[int]) -> np.ndarray:
    """Which path LiteRT takes for each output element (REFERENCE, ELEMENTWISE_BLOCK or
    SCALAR_BLOCK), shaped like the output. Same shapes: flat blocks of the elementwise
    kernel; BinaryBroadcastFiveFold: blocks within each innermost row of y4 elements (or
    within each y3-run of a scalar broadcast when y4 == 1); generic broadcasts: reference."""
    out_shape = np.broadcast_shapes(tuple(shape1), tuple(shape2))
    paths = np.zeros(out_shape, np.uint8)
    if op not in ("ADD", "MUL"):
        return paths
    kind, y = _broadcast_params(shape1, shape2)
    flat = paths.reshape(-1)
    if kind == "none":
        block = _BLOCKS[(op, dtype, ELEMENTWISE_BLOCK)]
        flat[:flat.size - flat.size % block] = ELEMENTWISE_BLOCK
    elif kind == "fivefold":
        path = ELEMENTWISE_BLOCK if y[4] > 1 else SCALAR_BLOCK
        row = y[4] if y[4] > 1 else y[3]
        block = _BLOCKS[(op, dtype, path)]
        if row and flat.size:
            flat.reshape(-1, row)[:, :row - row % block] = path
    return paths


def binary_path_set(op: str, dtype: str, shapes: tuple | None = None) -> tuple[int, ...]:
    """The paths an op may take (all of them when the shapes are not known)."""
    if op not in ("ADD", "MUL"):
        return (REFERENCE,)
    if shapes is None:
        return (REFERENCE, ELEMENTWISE_BLOCK, SCALAR_BLOCK)
    return tuple(sorted(set(paths_taken(op, dtype, *shapes)) | {REFERENCE}))


def paths_taken(op: str, dtype: str, shape1: Sequence[int],
                shape2: Sequence[int]) -> tuple[int, ...]:
    """The paths some output element takes, in order (bincount: np.unique would import
    numpy.ma, 30 ms at the first claim)."""
    counts = np.bincount(binary_paths(op, dtype, shape1, shape2).reshape(-1))
    return tuple(np.flatnonzero(counts).tolist())


def unary_block(op: str, in_dtype: str, out_dtype: str) -> int:
    """The NEON block length of a position-dependent unary kernel (0: one path): the first
    n - n % block elements of a flat tensor of n take the block path."""
    if op == "QUANTIZE" and in_dtype == "float32" and out_dtype in DTYPE_RANGES:
        return 8                              # optimized_ops::AffineQuantize<int8/uint8>
    if op == "QUANTIZE" and in_dtype in DTYPE_RANGES and out_dtype in DTYPE_RANGES:
        return 16                             # optimized_ops::Requantize specialisations
    if op == "DEQUANTIZE" and in_dtype in DTYPE_RANGES:
        return 8                              # optimized_ops::Dequantize<int8/uint8>
    return 0


@dataclass(frozen=True)
class UnaryLookup:
    """A unary op over a flat tensor as LiteRT runs it: `table` (indexed q - qmin) for the
    elements of its scalar loop; when `block` > 0, `block_table` for the elements of its
    NEON blocks, i.e. flat index < n - n % block. `invalid`: inputs for which the builtin's
    Eval fails (SQRT, RSQRT of values below the zero point), or None."""
    op: str
    table: np.ndarray
    block: int = 0
    block_table: np.ndarray | None = None
    invalid: np.ndarray | None = None

    @property
    def position_dependent(self) -> bool:
        return self.block_table is not None and not np.array_equal(self.table,
                                                                   self.block_table)

    def table_at(self, index: int, size: int) -> np.ndarray:
        if self.block and index < size - size % self.block:
            return self.block_table
        return self.table


def compose(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The table of `second` after `first` (first's output codes index second's table)."""
    qmin = DTYPE_RANGES[np.dtype(first.dtype).name][0]
    return second[first.astype(np.int64) - qmin]


def chain_regions(lookups: Sequence[UnaryLookup], size: int
                  ) -> list[tuple[int, int, np.ndarray]]:
    """A chain of unary int8/uint8 lookups over a flat tensor of `size` elements as
    [(start, stop, table)]: one composed table per run of flat indices that take the same
    paths through every op (one run unless some op is position dependent)."""
    cuts = {0, size}
    for lookup in lookups:
        if lookup.block and lookup.position_dependent:
            cuts.add(size - size % lookup.block)
    bounds = sorted(cuts)
    regions = []
    for start, stop in zip(bounds, bounds[1:]):
        table = lookups[0].table_at(start, size)
        for lookup in lookups[1:]:
            table = compose(table, lookup.table_at(start, size))
        regions.append((start, stop, table))
    return regions
