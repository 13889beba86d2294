"""The quantization of an int8/uint8 tensor, and the error of a Prepare that fails on it.

Shared by the modules that reproduce LiteRT's int8/uint8 kernels: quant_prepare (Prepare-time
math), quant_paths (which elements take LiteRT's vector blocks), quant_reference (the kernels
on numpy arrays), quant_parts (cheaper equivalent fixed-point calls), quant_support (what is
reproduced exactly), quant_rows (reductions and row ops); quant_ops holds the op facts.
docs/quantized_semantics.md has the formulas and the source references.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

DTYPE_RANGES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255)}
NUMPY_DTYPES: dict[str, type] = {"int8": np.int8, "uint8": np.uint8}

# TfLiteFusedActivation (builtin_op_data.h).
ACTIVATION_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
                    5: "SIGN_BIT", 6: "SIGMOID"}


class QuantError(ValueError):
    """The builtin kernel's Prepare fails for these parameters (or LiteRT aborts on a
    TFLITE_CHECK): there is no result to reproduce."""


@dataclass(frozen=True)
class QParams:
    """Per-tensor affine quantization: real = scale * (q - zero_point); scale is float32."""
    scale: float
    zero_point: int
    dtype: str = "int8"

    def __post_init__(self):
        if self.dtype not in DTYPE_RANGES:
            raise ValueError(f"dtype {self.dtype!r} is not int8 or uint8")
        object.__setattr__(self, "scale", float(np.float32(self.scale)))
        object.__setattr__(self, "zero_point", int(self.zero_point))

    @property
    def qmin(self) -> int:
        return DTYPE_RANGES[self.dtype][0]

    @property
    def qmax(self) -> int:
        return DTYPE_RANGES[self.dtype][1]

    @property
    def numpy_dtype(self) -> type:
        return NUMPY_DTYPES[self.dtype]

    def codes(self) -> np.ndarray:
        """All 256 values of the dtype, in table order (q - qmin), as int64."""
        return np.arange(self.qmin, self.qmax + 1, dtype=np.int64)


@dataclass(frozen=True)
class ChannelQParams:
    """Per-channel affine quantization along `axis` (only QUANTIZE's output and DEQUANTIZE's
    input accept it; every other kernel reads the legacy per-tensor params, which are 0)."""
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int
    dtype: str = "int8"


Quant = QParams | ChannelQParams | None


def same_dtype(*tensors: QParams) -> str:
    """The one dtype of `tensors`: a kernel's Prepare fails on mixed ones."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise QuantError(f"mixed dtypes {sorted(dtypes)}")
    return dtypes.pop()


def float_warnings_off(function):
    """Run with numpy's float warnings off: overflow to inf and NaN are part of what the
    kernels compute (and what quant_support refuses)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return function(*args, **kwargs)
    return wrapper
