"""What LiteRT's int8 BATCH_MATMUL computes, and the cases the matmul nest reproduces.

LiteRT 2.3.0 on x86 (tflite/kernels/batch_matmul.cc, EvalInt8Int8, the same for every kernel
type: reference_ops::BatchMatMul<int8_t, int32_t> in internal/reference/batch_matmul.h):

- Prepare: QuantizeMultiplier(double(float(lhs_scale * rhs_scale)) / double(output_scale))
  (GetQuantizedConvolutionMultipler without a bias: the scales' product rounded to float32
  first); the activation range is the whole int8 range (BATCH_MATMUL has no fused activation).
- Eval: out[..., m, n] = sum over k of (lhs[..., m, k] - lhs_zp) * (rhs[..., k, n] - rhs_zp)
  in int32 (adj_x / adj_y: the operand stored transposed; the batch dims broadcast), then
  MultiplyByQuantizedMultiplier (double rounding), + output_zp, clamped to [-128, 127].

The kernel sums exactly and rounds the same way. Where LiteRT's int32 arithmetic could overflow
(the sum, or its shift left before the multiply), its result is the wrap-around of C's undefined
behaviour: such a product is not claimed (`matmul_unsupported`). docs/quantized_semantics.md,
"BATCH_MATMUL".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .fixedpoint import multiply_by_quantized_multiplier
from .qparams import QParams, QuantError
from .quant_prepare import quantize_multiplier


@dataclass(frozen=True)
class MatmulRequant:
    """Prepare's constants of an int8 BATCH_MATMUL: sum -> output code."""
    lhs_offset: int                      # -lhs zero point, added to each lhs code
    rhs_offset: int                      # -rhs zero point
    multiplier: int
    shift: int
    output_zero_point: int
    qmin: int
    qmax: int


@functools.lru_cache(maxsize=4096)
def prepare_matmul(lhs: QParams, rhs: QParams, output: QParams) -> MatmulRequant:
    """BATCH_MATMUL's Prepare for int8 operands and output (QuantError where it fails)."""
    product = float(np.float32(lhs.scale) * np.float32(rhs.scale))
    multiplier, shift = quantize_multiplier(product / float(output.scale))
    return MatmulRequant(-lhs.zero_point, -rhs.zero_point, multiplier, shift,
                         output.zero_point, output.qmin, output.qmax)


def sum_bound(lhs: QParams, rhs: QParams, depth: int) -> int:
    """The largest |sum| of `depth` centred code products any operands make."""
    def largest(q: QParams) -> int:
        return max(abs(q.qmin - q.zero_point), abs(q.qmax - q.zero_point))
    return depth * largest(lhs) * largest(rhs)


def matmul_unsupported(lhs: QParams | None, rhs: QParams | None, output: QParams | None,
                       depth: int) -> str | None:
    """Why the int8 BATCH_MATMUL of these quantizations and depth K is not reproduced bit for
    bit, or None: not int8 throughout, a scale <= 0, or LiteRT's int32 sum or its shift left
    could overflow for some operands."""
    if any(q is None or q.dtype != "int8" for q in (lhs, rhs, output)):
        return "BATCH_MATMUL not of int8 operands and output"
    if min(lhs.scale, rhs.scale, output.scale) <= 0:
        return "BATCH_MATMUL with a scale <= 0 not supported"
    try:
        prepared = prepare_matmul(lhs, rhs, output)
    except QuantError as error:
        return f"BATCH_MATMUL: {error}"
    if sum_bound(lhs, rhs, depth) << max(prepared.shift, 0) >= 1 << 31:
        return ("BATCH_MATMUL whose int32 sums could overflow (LiteRT's result is then "
                "undefined)")
    return None


def matmul_reference(lhs: np.ndarray, rhs: np.ndarray, adj_x: bool, adj_y: bool,
                     prepared: MatmulRequant) -> np.ndarray:
    """The product on numpy arrays as LiteRT computes it (for tests and tools)."""
    a = lhs.astype(np.int64) + prepared.lhs_offset
    b = rhs.astype(np.int64) + prepared.rhs_offset
    sums = np.matmul(np.swapaxes(a, -1, -2) if adj_x else a,
                     np.swapaxes(b, -1, -2) if adj_y else b)
    scaled = multiply_by_quantized_multiplier(sums, prepared.multiplier, prepared.shift)
    return np.clip(scaled + prepared.output_zero_point, prepared.qmin,
                   prepared.qmax).astype(np.int8)
