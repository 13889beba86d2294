"""One entry per op the delegate fuses on int8/uint8 tensors: the facts about LiteRT 2.3's
builtin kernel for it that claiming, lowering and the cost model ask for.

`QUANT_OPS` is the int8 counterpart of codegen.ops.OPS (which holds the float semantics);
families are frozensets derived from it, next to it. What each kernel computes is in
quant_prepare, quant_reference and quant_rows; docs/quantized_semantics.md has the formulas.
"""
from __future__ import annotations

from dataclasses import dataclass

_BOTH = ("int8", "uint8")


@dataclass(frozen=True)
class QuantOpSpec:
    name: str
    dtypes: tuple[str, ...] = _BOTH   # input dtypes the builtin kernel takes
    arity: int = 1
    # "elementwise"; "reduction" (MEAN, SUM, REDUCE_MAX, REDUCE_MIN over constant axes) or
    # "row" (SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION over the last axis): quant_rows.
    kind: str = "elementwise"
    # Its Prepare fills a 256-entry table with a float function (LUTPopulate).
    lut: bool = False
    # XNNPACK runs it in int8 (read from LiteRT's execution plan once XNNPACK is applied:
    # tests/test_worth.py); LiteRT runs the others on its builtin kernels, on the
    # interpreter's thread alone.
    xnnpack: bool = False
    # The elementwise ops the cost model prices it as, per input element (reductions and row
    # ops, which perf/calibrate.py does not time on their own), in float and in int8.
    proxies: tuple[str, ...] = ()


QUANT_OPS: dict[str, QuantOpSpec] = {spec.name: spec for spec in (
    QuantOpSpec("ADD", arity=2, xnnpack=True),
    QuantOpSpec("SUB", arity=2, xnnpack=True),
    QuantOpSpec("MUL", arity=2, xnnpack=True),
    QuantOpSpec("SQUARED_DIFFERENCE", ("int8",), arity=2),
    QuantOpSpec("MAXIMUM", arity=2),
    QuantOpSpec("MINIMUM", arity=2),
    QuantOpSpec("PRELU", arity=2),
    QuantOpSpec("HARD_SWISH"),
    QuantOpSpec("LOGISTIC", lut=True, xnnpack=True),
    QuantOpSpec("TANH", lut=True, xnnpack=True),
    QuantOpSpec("RELU"),
    QuantOpSpec("RELU6"),
    QuantOpSpec("RELU_N1_TO_1"),
    QuantOpSpec("RELU_0_TO_1"),
    QuantOpSpec("LEAKY_RELU", xnnpack=True),
    QuantOpSpec("ELU", ("int8",), lut=True, xnnpack=True),
    QuantOpSpec("GELU", lut=True),
    QuantOpSpec("EXP", ("int8",), lut=True),
    QuantOpSpec("LOG", ("int8",), lut=True),
    QuantOpSpec("RSQRT", ("int8",)),
    QuantOpSpec("SQRT", ("int8",)),
    QuantOpSpec("ABS", ("int8",)),
    QuantOpSpec("NEG", ("int8",)),
    # Conversions between float and int8/uint8 (QUANTIZE also requantizes between the two).
    QuantOpSpec("QUANTIZE", ("float32", "int8", "uint8"), xnnpack=True),
    QuantOpSpec("DEQUANTIZE", ("int8", "uint8", "float16"), xnnpack=True),
    QuantOpSpec("MEAN", kind="reduction", proxies=("ADD",)),
    QuantOpSpec("SUM", kind="reduction", proxies=("ADD",)),
    QuantOpSpec("REDUCE_MAX", kind="reduction", proxies=("MAXIMUM",)),
    QuantOpSpec("REDUCE_MIN", kind="reduction", proxies=("MINIMUM",)),
    QuantOpSpec("SOFTMAX", kind="row", proxies=("MAXIMUM", "SUB", "EXP", "ADD", "MUL")),
    QuantOpSpec("LOG_SOFTMAX", kind="row", proxies=("MAXIMUM", "SUB", "EXP", "ADD", "SUB")),
    QuantOpSpec("L2_NORMALIZATION", kind="row", proxies=("SQUARE", "ADD", "DIV")),
)}

#: Elementwise ops with int8/uint8 kernels (quant_support says for which parameters).
ELEMENTWISE_OPS = frozenset(n for n, s in QUANT_OPS.items() if s.kind == "elementwise")
BINARY_OPS = frozenset(n for n in ELEMENTWISE_OPS if QUANT_OPS[n].arity == 2)
#: Ops whose table is LUTPopulate of a float function (quant_prepare.prepare_lut).
LUT_OPS = frozenset(n for n, s in QUANT_OPS.items() if s.lut)
#: Ops that convert between float and int8/uint8 (a float input dtype): fused only with
#: int8/uint8 tensors, and not priced as int8 ops of their own.
CONVERSIONS = frozenset(n for n, s in QUANT_OPS.items()
                        if any(d.startswith("float") for d in s.dtypes))
#: The int8/uint8 ops XNNPACK runs.
XNNPACK_INT8 = frozenset(n for n, s in QUANT_OPS.items() if s.xnnpack)
#: Reductions and row ops with int8/uint8 kernels (quant_rows).
ROW_REDUCTIONS = frozenset(n for n, s in QUANT_OPS.items() if s.kind != "elementwise")
