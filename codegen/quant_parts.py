"""A binary int8/uint8 op as three fixed-point calls, and cheaper calls that compute the same.

ADD, SUB and SQUARED_DIFFERENCE rescale each input on its own before combining them:
`binary_parts` gives the rescaling of each input and the output's from both as separate
codegen.fixedpoint calls, so a kernel rescales a per-channel operand once per channel instead
of once per element. For LiteRT's int8/uint8 ADD blocks it then searches for cheaper
equivalents (int16 lanes, a plain shift, a table per channel code), each checked equal to the
calls it replaces on every pair of input codes.
"""
from __future__ import annotations

import numpy as np

from .fixedpoint import doubling_high_mul_rounded_int32
from .fixedpoint_binary import add_block_input
from .qparams import DTYPE_RANGES
from .quant_paths import ELEMENTWISE_BLOCK, REFERENCE
from .quant_prepare import ArithParams
from .quant_reference import run_qcall

Call = tuple[str, tuple]
#: The int16-lanes ADD output by the operand its table stands for (binary_parts' `once`): the
#: table is the first operand, or the second.
_INT16_LANES_OUTPUT = {0: "add_block_output_int16_lanes_table_first",
                       1: "add_block_output_int16_lanes"}


def binary_parts(op: str, prepared, dtype: str, path: int = REFERENCE,
                 once: int | None = None) -> tuple[Call, Call, Call] | None:
    """`binary_call`'s helper as its three parts, each input rescaled on its own and the
    output from both (int32 values): (input 1's call, input 2's, the output's, which takes
    them in that order). A kernel then rescales an operand in the nest of its own shape:
    once per channel for a per-channel operand instead of once per element. None for an op
    that does not rescale its inputs apart (MUL, PRELU, MAXIMUM, MINIMUM). once: the input
    (0 or 1) a kernel rescales once per channel, if one is: an int8 ADD block may then look
    it up in a table (a ("LUT", (table,)) part: int32 values indexed by q - qmin)."""
    if op not in ("ADD", "SUB", "SQUARED_DIFFERENCE"):
        return None
    p = prepared
    if op == "ADD" and path != REFERENCE:
        merged = int(dtype == "int8" and path == ELEMENTWISE_BLOCK)
        inputs = (("add_block_input", (p.input1_offset, p.input1_multiplier, p.input1_shift,
                                       p.left_shift, merged)),
                  ("add_block_input", (p.input2_offset, p.input2_multiplier, p.input2_shift,
                                       p.left_shift, merged)))
        if _add_block_stays_in_int16(p, dtype, inputs):
            output = ("add_block_output_in_int16", (p.output_multiplier, p.output_shift,
                                                    p.output_offset, p.act_min, p.act_max))
            whole = (*inputs, output)
            expected = _on_all_pairs(whole, dtype)
            return ((once is not None and _add_block_int16_lanes(output, dtype, once, expected))
                    or _add_block_quadrupled(inputs, output, dtype, expected) or whole)
        return (*inputs, ("add_block_output", (p.output_multiplier, p.output_shift,
                                               p.output_offset, p.act_min, p.act_max,
                                               *DTYPE_RANGES[dtype])))
    inputs = (("rescale_input_int32", (p.input1_offset, p.left_shift, p.input1_multiplier,
                                       p.input1_shift)),
              ("rescale_input_int32", (p.input2_offset, p.left_shift, p.input2_multiplier,
                                       p.input2_shift)))
    output = (p.output_multiplier, p.output_shift, p.output_offset, p.act_min, p.act_max)
    if op == "SQUARED_DIFFERENCE":
        return (*inputs, ("squared_difference_output", output))
    return (*inputs, ("add_sub_output", (-1 if op == "SUB" else 1, *output)))


def _add_block_quadrupled(inputs: tuple, output: Call, dtype: str,
                          expected: np.ndarray) -> tuple | None:
    """The int16 ADD blocks with one input a plain shift (`_plain_shift`: the larger scale's
    input, multiplier 2**30) as `shifted_code_int32`, its offset and the 4 of the output's
    high multiply folded into the other input (`add_block_input_quadrupled`): a per-channel
    operand then carries them, once per channel, and each element costs one shift instead of
    six operations. The tie correction of the rounding is dropped where no input pair meets
    it. Checked against the three calls it replaces over all input pairs (`expected`, theirs);
    None if no input is a plain shift."""
    shifts = [_plain_shift(args, dtype) for _, args in inputs]
    if shifts[0] is None and shifts[1] is None:
        return None
    plain = 0 if shifts[0] is not None else 1
    offset, shift = inputs[plain][1][0], shifts[plain]
    parts = [None, None]
    parts[plain] = ("shifted_code_int32", (shift + 2,))
    parts[1 - plain] = ("add_block_input_quadrupled",
                        (*inputs[1 - plain][1], 4 * (offset << shift)))
    for ties_reached in (False, True):
        candidate = (*parts, ("add_block_output_quadrupled", (*output[1], ties_reached)))
        if np.array_equal(_on_all_pairs(candidate, dtype), expected):
            return candidate
    return None


def _add_block_int16_lanes(output: Call, dtype: str, once: int,
                           expected: np.ndarray) -> tuple | None:
    """The int8 ADD blocks in int16 lanes (`add_block_output_int16_lanes`): input `once`
    (rescaled once per channel) as a table of its pair (c, d) per code, the other as
    `code_times_128_int16`. The multiplier comes from the output's slope in the other
    input's code; each code's (c, d) from the intervals the exact outputs leave it
    (`_pair_per_code`). `expected`: the int32 parts' outputs on all input pairs, which the
    result equals. None if no multiplier fits every input pair."""
    if dtype != "int8":
        return None
    exact = (expected.T if once == 0 else expected).astype(np.int64)  # [q, tabled code]
    act_min, act_max = output[1][3], output[1][4]
    slope = _slope_per_code(exact, act_min, act_max)
    if slope is None:
        return None
    for shift in range(7):
        middle = round(slope * 2 ** (9 + shift))
        for multiplier in sorted(range(middle - 2, middle + 3), key=lambda m: abs(m - middle)):
            if not 0 < multiplier < 2 ** 15:
                continue
            table = _pair_per_code(exact, multiplier, 16 + shift, act_min, act_max)
            if table is not None:
                inputs = [("code_times_128_int16", ()), ("LUT", (tuple(table.tolist()),))]
                output = (_INT16_LANES_OUTPUT[once], (multiplier, shift, act_min, act_max))
                candidate = (*(inputs[::-1] if once == 0 else inputs), output)
                if np.array_equal(_on_all_pairs(candidate, dtype), expected):
                    return candidate
    return None


def _slope_per_code(exact: np.ndarray, act_min: int, act_max: int) -> float | None:
    """The outputs' rise per code q (exact's first axis), over the codes no clamp reaches."""
    column = exact[:, exact.shape[1] // 2]
    inside = np.flatnonzero((column > act_min) & (column < act_max))
    if len(inside) < 2:
        return None
    return (column[inside[-1]] - column[inside[0]]) / (inside[-1] - inside[0])


def _pair_per_code(exact: np.ndarray, multiplier: int, shift: int, act_min: int,
                   act_max: int) -> np.ndarray | None:
    """Per code of the tabled input, d << 16 | c (c as uint16) with
    clamp(floor((128 q + c) * multiplier / 2**shift) + d) = exact[q + 128] for every code q
    of the other input and 128 q + c within int16; None if a code has none. For each d
    near the output at q = 0, each q bounds c from both sides (only from one at a clamp)."""
    x = (np.arange(-128, 128, dtype=np.int64) * 128)[:, None]
    lowest, highest = -2 ** 15 + 128 * 128, 2 ** 15 - 1 - 127 * 128
    table = np.full(exact.shape[1], -1, np.int64)
    found = np.zeros(exact.shape[1], bool)
    for step in range(-3, 4):
        d = exact[128] + step
        low = -(-((exact - d) << shift) // multiplier) - x         # ceil
        high = -(-((exact - d + 1) << shift) // multiplier) - x - 1
        low = np.where(exact == act_min, lowest, low).max(0).clip(lowest)
        high = np.where(exact == act_max, highest, high).min(0).clip(None, highest)
        fits = (low <= high) & ~found
        table[fits] = (d[fits] << 16) | (low[fits] & 0xFFFF)
        found |= fits
    return table if found.all() else None


def _on_all_pairs(parts: tuple, dtype: str) -> np.ndarray:
    """The three calls of `binary_parts` composed, on every pair of codes of `dtype`."""
    (name1, args1), (name2, args2), (name, args) = parts
    a, b = np.meshgrid(*[np.arange(*_code_range(dtype), dtype=np.int32)] * 2, indexing="ij")
    return run_qcall(name, _part(name1, a, args1, dtype), _part(name2, b, args2, dtype), *args)


def _part(name: str, codes: np.ndarray, args: tuple, dtype: str) -> np.ndarray:
    """One input's part of `binary_parts` on codes: its call, or its table's entries."""
    if name == "LUT":
        return np.array(args[0], np.int32)[codes - DTYPE_RANGES[dtype][0]]
    return run_qcall(name, codes, *args)


def _plain_shift(args: tuple, dtype: str) -> int | None:
    """k where `add_block_input` with these arguments is (q + offset) << k for every code q,
    else None. k <= 20 keeps `shifted_code_int32`'s q << (k + 2) within int32 (|q| <= 255)."""
    codes = np.arange(*_code_range(dtype), dtype=np.int64)
    rescaled = add_block_input(codes, *args)
    offset = codes + args[0]
    return next((k for k in range(21) if np.array_equal(rescaled, offset << k)), None)


def _code_range(dtype: str) -> tuple[int, int]:
    """The codes of `dtype` as np.arange's (start, stop)."""
    low, high = DTYPE_RANGES[dtype]
    return low, high + 1


def _add_block_stays_in_int16(p: ArithParams, dtype: str, inputs: tuple) -> bool:
    """Whether the NEON ADD blocks' rescaled sum, and it plus the output offset, lie within
    int16 for every input pair. Each input's rescaling and the output's are non-decreasing
    (multipliers >= 0), so the pairs (qmin, qmin) and (qmax, qmax) bound them."""
    extremes = np.array(DTYPE_RANGES[dtype], np.int64)
    (_, args1), (_, args2) = inputs
    total = add_block_input(extremes, *args1) + add_block_input(extremes, *args2)
    raw = doubling_high_mul_rounded_int32(total.astype(np.int32), p.output_multiplier,
                                           -p.output_shift, 0).astype(np.int64)
    low, high = -(1 << 15), (1 << 15) - 1
    return bool(np.all((low <= raw) & (raw <= high) & (low <= raw + p.output_offset)
                       & (raw + p.output_offset <= high)))
