"""Where a convolution's window lies in its input: LiteRT's geometry (tflite/kernels/padding.h).

A pure description with no numba, shared by the IR's shape check, the claims, the schedule and
the emitter. Output pixel (oy, ox) reads the input at rows oy * stride - top + ky * dilation and
columns ox * stride - left + kx * dilation, for each tap (ky, kx) of the kernel; taps outside
the input add nothing (LiteRT skips them).
"""
from __future__ import annotations

from dataclasses import dataclass

#: The paddings LiteRT computes windows for (TfLitePadding, tflite's schema: SAME 0, VALID 1).
PADDINGS = ("same", "valid")


@dataclass(frozen=True)
class Window:
    """A 2-D window over an [N, H, W, C] input: (height, width) pairs."""
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    padding: tuple[int, int]           # rows above, columns left of the input (LiteRT's offsets)

    def span(self, axis: int) -> int:
        """Input rows (axis 0) or columns (axis 1) one window covers."""
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def first_tap(self, axis: int, out: int) -> int:
        """The input row or column of the window's first tap at output row or column `out`."""
        return out * self.strides[axis] - self.padding[axis]

    def inside(self, axis: int, size: int, outputs: int) -> tuple[int, int]:
        """[first, end) of the output rows or columns whose whole window lies inside an input
        of `size` rows or columns (first == end where none does)."""
        stride, pad, span = self.strides[axis], self.padding[axis], self.span(axis)
        first = min(outputs, -(-pad // stride))
        end = max(first, min(outputs, (size + pad - span) // stride + 1))
        return first, end


def output_size(padding: str, size: int, kernel: int, stride: int, dilation: int) -> int:
    """LiteRT's ComputeOutSize: SAME keeps ceil(size / stride), VALID only whole windows."""
    span = (kernel - 1) * dilation + 1
    return -(-size // stride) if padding == "same" else max(0, (size - span) // stride + 1)


def window(input_shape: tuple[int, ...], kernel: tuple[int, int], params: dict) -> Window:
    """The window of a convolution over `input_shape` [N, H, W, C] with params `padding`
    ("same" or "valid"), `strides` and `dilations`: SAME pads half the overshoot before
    the input, rounded down (ComputePaddingWithOffset)."""
    pads = []
    for axis in (0, 1):
        size, stride = input_shape[1 + axis], params["strides"][axis]
        span = (kernel[axis] - 1) * params["dilations"][axis] + 1
        out = output_size(params["padding"], size, kernel[axis], stride, params["dilations"][axis])
        pads.append(max(0, (out - 1) * stride + span - size) // 2)
    return Window(kernel, params["strides"], params["dilations"], (pads[0], pads[1]))


def conv_output_shape(input_shape: tuple[int, ...], weights_shape: tuple[int, ...],
                      params: dict) -> tuple[int, ...]:
    """A depthwise convolution's output [N, OH, OW, C * depth multiplier], its weights
    [1, KH, KW, C * depth multiplier]."""
    n, h, w, _ = input_shape
    _, kh, kw, channels = weights_shape
    return (n, *(output_size(params["padding"], size, k, s, d) for size, k, s, d in zip(
        (h, w), (kh, kw), params["strides"], params["dilations"])), channels)
