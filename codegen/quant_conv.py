"""What LiteRT's int8 DEPTHWISE_CONV_2D computes, and the cases the stencil nest reproduces.

LiteRT 2.3.0 on x86 (tflite/kernels/depthwise_conv.cc, EvalQuantizedPerChannel with
kGenericOptimized; optimized/integer_ops/depthwise_conv.h DepthwiseConvGeneral: its 3x3
kernels are compiled for aarch64 only):

- Prepare (kernel_util.cc PopulateConvolutionQuantizationParams): per output channel c,
  QuantizeMultiplier(double(input_scale) * double(filter_scale[c]) / double(output_scale)),
  a per-tensor filter scale broadcast to every channel; the activation's range
  (CalculateActivationRangeQuantized). The filter's zero points are never read
  (weights_offset = 0), nor the bias's scale.
- Eval: acc = bias[c] + sum over the taps inside the input of (x - input_zp) * w, in int32
  (padding taps are skipped); then optimized_ops::Quantize (optimized_ops.h, double rounding):
  channels [0, C - C % 8) in NEON blocks, MultiplyByQuantizedMultiplier4Rows (vshlq,
  vqrdmulhq, then vrshlq: ties up), the last C % 8 channels the scalar
  MultiplyByQuantizedMultiplier (ties away from zero); + output_zp, clamped to the range.

The kernel computes the sums exactly in int64 and the same roundings per channel. Where
LiteRT's int32 arithmetic could overflow (the sum, or its left shift before the multiply) its
result is the wrap-around of C's undefined behaviour: such a convolution is not claimed
(`depthwise_unsupported`). docs/quantized_semantics.md, "DEPTHWISE_CONV_2D".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .fixedpoint import multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_4rows
from .qparams import QParams, QuantError
from .quant_prepare import activation_range_quantized, quantize_multipliers

#: Output channels optimized_ops::Quantize takes per NEON block.
QUANTIZE_BLOCK = 8


@dataclass(frozen=True)
class DepthwiseRequant:
    """Prepare's constants of an int8 depthwise convolution: acc -> output code."""
    input_offset: int                    # -input zero point, added to each input code
    output_zero_point: int
    qmin: int                            # the activation's range
    qmax: int
    multipliers: tuple[int, ...]         # per output channel
    shifts: tuple[int, ...]
    vector_channels: int                 # channels [0, this) round as the NEON blocks do
    sum_bound: int                       # the largest |sum| any input makes (`sum_bound`)

    @property
    def uniform(self) -> bool:
        """One multiplier and shift for every channel (per-tensor filter scale, say)."""
        return len(set(self.multipliers)) == 1 and len(set(self.shifts)) == 1

    @property
    def int32_lanes(self) -> bool:
        """Whether the sums fit `depthwise_requantize_int32` (codegen.fixedpoint), which
        computes the requantization in int32 lanes, 4x fewer instructions than in int64."""
        return self.sum_bound < 1 << 29 and max(self.shifts) <= 0


def channel_sums(data: QParams, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Per output channel of `weights` [1, KH, KW, C], the largest |bias + sum of
    (x - input_zp) * w| any input makes."""
    largest = max(abs(data.qmin - data.zero_point), abs(data.qmax - data.zero_point))
    taps = np.abs(weights.astype(np.int64)).reshape(-1, weights.shape[-1]).sum(axis=0)
    return taps * largest + np.abs(bias.astype(np.int64))


def sum_bound(data: QParams, weights: np.ndarray, bias: np.ndarray) -> int:
    """The largest |sum| of any channel and input (`channel_sums`)."""
    return int(channel_sums(data, weights, bias).max(initial=0))


@functools.lru_cache(maxsize=4096)
def prepare_depthwise(data: QParams, filter_scales: tuple[float, ...], output: QParams,
                      activation: int, channels: int, bound: int = 1 << 31) -> DepthwiseRequant:
    """PopulateConvolutionQuantizationParams for `channels` output channels (QuantError
    where Prepare fails); `bound` the sums' (`sum_bound`). Kept for the process: a second
    interpreter of a model checks its convolutions again."""
    if len(filter_scales) not in (1, channels):
        raise QuantError(f"{len(filter_scales)} filter scales for {channels} channels")
    scales = filter_scales * channels if len(filter_scales) == 1 else filter_scales
    multipliers, shifts = quantize_multipliers(
        float(data.scale) * np.asarray(scales, np.float32).astype(np.float64)
        / float(output.scale))
    qmin, qmax = activation_range_quantized(activation, output)
    return DepthwiseRequant(-data.zero_point, output.zero_point, qmin, qmax,
                            tuple(multipliers.tolist()), tuple(shifts.tolist()),
                            channels - channels % QUANTIZE_BLOCK, bound)


def depthwise_unsupported(data: QParams, filter_scales: tuple[float, ...], output: QParams,
                          activation: int, weights: np.ndarray, bias: np.ndarray) -> str | None:
    """Why the int8 convolution of constant `weights` [1, KH, KW, C] and `bias` [C] is not
    reproduced bit for bit, or None: Prepare fails, or LiteRT's int32 sum or its shift left
    could overflow for some input."""
    if data.dtype != "int8" or output.dtype != "int8":
        return f"DEPTHWISE_CONV_2D of {data.dtype} not supported (int8 only)"
    channels = weights.shape[-1]
    try:
        prepared = prepare_depthwise(data, filter_scales, output, activation, channels)
    except QuantError as error:
        return f"DEPTHWISE_CONV_2D: {error}"
    if output.scale <= 0 or data.scale <= 0:
        return "DEPTHWISE_CONV_2D with a scale <= 0 not supported"
    scaled = channel_sums(data, weights, bias) << np.maximum(np.array(prepared.shifts), 0)
    if (scaled >= 1 << 31).any():
        return ("DEPTHWISE_CONV_2D whose int32 sums could overflow (LiteRT's result is then "
                "undefined)")
    return None


def depthwise_reference(x: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                        prepared: DepthwiseRequant, strides: tuple[int, int],
                        dilations: tuple[int, int], padding: tuple[int, int],
                        out_shape: tuple[int, ...]) -> np.ndarray:
    """The convolution on numpy arrays as LiteRT computes it (for tests and tools): int8 x
    [N, H, W, C], weights [1, KH, KW, C * M], bias [C * M] -> int8 [N, OH, OW, C * M]."""
    n, height, width, in_channels = x.shape
    _, kh, kw, channels = weights.shape
    xs = x.astype(np.int64) + prepared.input_offset
    acc = np.broadcast_to(bias.astype(np.int64), out_shape).copy()
    oy = np.arange(out_shape[1]) * strides[0] - padding[0]
    ox = np.arange(out_shape[2]) * strides[1] - padding[1]
    source = np.arange(channels) // (channels // in_channels)
    for ky in range(kh):
        rows = oy + ky * dilations[0]
        for kx in range(kw):
            cols = ox + kx * dilations[1]
            inside = ((rows >= 0) & (rows < height))[:, None] & \
                ((cols >= 0) & (cols < width))[None, :]
            taps = xs[:, np.clip(rows, 0, height - 1)][:, :, np.clip(cols, 0, width - 1)]
            acc += np.where(inside[None, :, :, None], taps[..., source] * weights[0, ky, kx], 0)
    m = np.array(prepared.multipliers, np.int64)
    s = np.array(prepared.shifts, np.int64)
    vector = np.arange(channels) < prepared.vector_channels
    q = np.where(vector, multiply_by_quantized_multiplier_4rows(acc, m, s),
                 multiply_by_quantized_multiplier(acc, m, s))
    return np.clip(q + prepared.output_zero_point, prepared.qmin, prepared.qmax).astype(np.int8)
