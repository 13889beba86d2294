"""The performance suite's workloads: whole elementwise models, built at a given size.

Each workload is a complete model (inputs -> chain of elementwise ops -> outputs) written the
way converters emit it, so the delegate claims every node in one partition and the timings
compare whole kernels. Tensors are [rows, channels]; per-channel constants are [channels].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fusion_delegate.model import ModelBuilder, Quantization

NONE, RELU6 = 0, 3
ARITHMETIC = ("ADD", "SUB", "MUL", "DIV")  # the ops with a fused activation
CHANNELS = 256


@dataclass(frozen=True)
class Case:
    """One workload at one size: the model and the inputs to run it with."""
    workload: str
    elements: int
    model: bytes
    inputs: dict[str, np.ndarray]
    ops: int

    @property
    def io_bytes(self) -> int:
        """Inputs read once plus the output written once, from the model's view."""
        itemsize = max(a.itemsize for a in self.inputs.values())
        return sum(a.nbytes for a in self.inputs.values()) + itemsize * self.elements


class Graph:
    """A ModelBuilder with the few helpers the workloads share, recording input data."""

    def __init__(self, name: str, rows: int, channels: int, seed: int) -> None:
        self.name, self.builder = name, ModelBuilder(name)
        self.rows, self.channels = rows, channels
        self.rng = np.random.default_rng(seed)
        self.inputs: dict[str, np.ndarray] = {}
        self.ops = self.consts = 0

    def input(self, name: str, data: np.ndarray) -> int:
        self.inputs[name] = data.astype(np.float32)
        return self.builder.input(name, data.shape)

    def normal_input(self, name: str, scale: float = 1.0) -> int:
        return self.input(name, self.rng.standard_normal((self.rows, self.channels)) * scale)

    def const(self, data: np.ndarray) -> int:
        self.consts += 1
        return self.builder.const(f"const_{self.consts}", data.astype(np.float32))

    def scalar(self, value: float) -> int:
        return self.const(np.array(value))

    def per_channel(self, low: float, high: float) -> int:
        return self.const(self.rng.uniform(low, high, self.channels))

    def int8_input(self, name: str, quantization: Quantization) -> int:
        self.inputs[name] = self.rng.integers(-128, 128, (self.rows, self.channels), np.int8)
        return self.builder.input(name, (self.rows, self.channels), np.int8, quantization)

    def op(self, op: str, *inputs: int, activation: int = NONE,
           quantization: Quantization | None = None) -> int:
        """`op` over `inputs`; arithmetic ops get `activation` fused."""
        options = {"fused_activation_function": activation} if op in ARITHMETIC else None
        self.ops += 1
        return self.builder.op(op, list(inputs), options, name=f"{op.lower()}_{self.ops}",
                               quantization=quantization)

    def reduce(self, op: str, x: int, axis: int) -> int:
        """MEAN, SUM, ... of a [rows, channels] tensor over the last axis, keep_dims."""
        self.ops += 1
        return self.builder.op(op, [x, axis], {"keep_dims": True}, name=f"{op.lower()}_{self.ops}",
                               shape=(self.rows, 1))

    def softmax(self, x: int, beta: float = 1.0) -> int:
        self.ops += 1
        return self.builder.op("SOFTMAX", [x], {"beta": beta}, name=f"softmax_{self.ops}")

    def case(self, output: int, elements: int) -> Case:
        self.builder.output(output)
        return Case(self.name, elements, self.builder.to_bytes(), self.inputs, self.ops)


def gelu_tanh(g: Graph) -> int:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as MUL / ADD / TANH."""
    x = g.normal_input("x", 2.0)
    cube = g.op("MUL", g.op("MUL", x, x), x)
    inner = g.op("ADD", x, g.op("MUL", cube, g.scalar(0.044715)))
    tanh = g.op("TANH", g.op("MUL", inner, g.scalar(0.7978845608)))
    return g.op("MUL", g.op("MUL", x, g.scalar(0.5)), g.op("ADD", tanh, g.scalar(1.0)))


def swish(g: Graph) -> int:
    """x * logistic(x)."""
    x = g.normal_input("x", 3.0)
    return g.op("MUL", x, g.op("LOGISTIC", x))


def mish(g: Graph) -> int:
    """x * tanh(softplus(x)), softplus written log(exp(x) + 1) (it overflows for large x,
    in LiteRT and in the delegate alike)."""
    x = g.normal_input("x", 3.0)
    softplus = g.op("LOG", g.op("ADD", g.op("EXP", x), g.scalar(1.0)))
    return g.op("MUL", x, g.op("TANH", softplus))


def gelu(g: Graph, approximate: bool = False) -> int:
    """The builtin GELU op in its erf form (approximate=False, the op's default)."""
    x = g.normal_input("x", 2.0)
    g.ops += 1
    return g.builder.op("GELU", [x], {"approximate": approximate}, name=f"gelu_{g.ops}")


def gelu_approx(g: Graph) -> int:
    """The builtin GELU op in its tanh form (approximate=True)."""
    return gelu(g, approximate=True)


def bias_relu6_scale(g: Graph) -> int:
    """A conv epilogue: per-channel bias with RELU6 fused into the ADD, then per-channel scale."""
    x = g.normal_input("x", 4.0)
    biased = g.op("ADD", x, g.per_channel(-1.0, 1.0), activation=RELU6)
    return g.op("MUL", biased, g.per_channel(0.5, 1.5))


def chain16(g: Graph) -> int:
    """16 ops alternating ADD and MUL with per-channel constants (kept near 0 and 1)."""
    y = g.normal_input("x")
    for _ in range(8):
        y = g.op("ADD", y, g.per_channel(-0.1, 0.1))
        y = g.op("MUL", y, g.per_channel(0.9, 1.1))
    return y


def layernorm_tail(g: Graph) -> int:
    """(x - mean) * rsqrt(var + eps) * gamma + beta; mean and var come in as [rows, 1] inputs
    (MEAN itself is not fused), gamma and beta are per-channel constants."""
    x = g.normal_input("x", 2.0)
    mean = g.input("mean", g.rng.standard_normal((g.rows, 1)) * 0.1)
    var = g.input("var", g.rng.uniform(0.5, 4.0, (g.rows, 1)))
    inv_std = g.op("RSQRT", g.op("ADD", var, g.scalar(1e-5)))
    normed = g.op("MUL", g.op("SUB", x, mean), inv_std)
    return g.op("ADD", g.op("MUL", normed, g.per_channel(0.5, 1.5)), g.per_channel(-0.5, 0.5))


def layernorm(g: Graph) -> int:
    """LayerNorm over the channels as the TF converter emits it: MEAN, SQUARED_DIFFERENCE,
    MEAN, ADD eps, RSQRT, then gamma folded into the scale and the mean into the shift
    (x * s + (beta - mean * s)); MEAN with keep_dims over the last axis."""
    x = g.normal_input("x", 2.0)
    axis = g.builder.const("axis", np.array([-1], np.int32))
    mean = g.reduce("MEAN", x, axis)
    var = g.reduce("MEAN", g.op("SQUARED_DIFFERENCE", x, mean), axis)
    inv_std = g.op("RSQRT", g.op("ADD", var, g.scalar(1e-6)))
    scale = g.op("MUL", inv_std, g.per_channel(0.5, 1.5))
    shift = g.op("SUB", g.per_channel(-0.5, 0.5), g.op("MUL", mean, scale))
    return g.op("ADD", g.op("MUL", x, scale), shift)


def softmax(g: Graph) -> int:
    """Attention probabilities: SOFTMAX (beta 1) over rows of the channel count after the
    scale MUL by 1/sqrt(64)."""
    x = g.normal_input("x", 4.0)
    return g.softmax(g.op("MUL", x, g.scalar(0.125)))


def se_gate(g: Graph) -> int:
    """A squeeze-excite gate: x * LOGISTIC(s), s one value per channel ([1, channels])."""
    x = g.normal_input("x", 2.0)
    s = g.input("s", g.rng.standard_normal((1, g.channels)) * 2.0)
    return g.op("MUL", x, g.op("LOGISTIC", s))


def transcendental(g: Graph) -> int:
    """Six transcendental ops out of nine, all inside their well-conditioned ranges."""
    x = g.normal_input("x", 2.0)
    tanh = g.op("TANH", x)
    sigmoid = g.op("LOGISTIC", x)
    exp = g.op("EXP", tanh)
    waves = g.op("MUL", g.op("SIN", sigmoid), g.op("COS", exp))
    return g.op("ADD", waves, g.op("LOG", g.op("ADD", exp, sigmoid)))


def hard_swish_int8(g: Graph) -> int:
    """int8 HARD_SWISH, which XNNPACK leaves to LiteRT's builtin kernel: one table lookup."""
    x = g.int8_input("x", Quantization.per_tensor(0.05, 3))
    return g.op("HARD_SWISH", x, quantization=Quantization.per_tensor(0.04, -5))


def int8_block(g: Graph) -> int:
    """int8 HARD_SWISH, per-channel ADD, RELU6 and TANH: a table, a fixed-point ADD and a
    composed table in one loop."""
    x = g.int8_input("x", Quantization.per_tensor(0.05, 3))
    h = g.op("HARD_SWISH", x, quantization=Quantization.per_tensor(0.04, -5))
    bias = g.builder.const("bias", g.rng.integers(-20, 20, g.channels).astype(np.int8),
                           Quantization.per_tensor(0.03, 0))
    a = g.op("ADD", h, bias, quantization=Quantization.per_tensor(0.06, 2))
    r = g.op("RELU6", a, quantization=Quantization.per_tensor(0.06, 2))
    return g.op("TANH", r, quantization=Quantization.per_tensor(1 / 128, 0))


def int8_island(g: Graph) -> int:
    """DEQUANTIZE -> GELU -> QUANTIZE on int8 tensors: float math XNNPACK runs as one table
    lookup, and so does the delegate (codegen.islands)."""
    x = g.int8_input("x", Quantization.per_tensor(0.05, 3))
    g.ops += 3
    f = g.builder.op("DEQUANTIZE", [x], dtype=np.float32, name="dequantize")
    f = g.builder.op("GELU", [f], {"approximate": False}, name="gelu")
    return g.builder.op("QUANTIZE", [f], dtype=np.int8, name="quantize",
                        quantization=Quantization.per_tensor(0.04, -5))


def add_mul(g: Graph) -> int:
    """ADD then MUL by scalars: one small partition, to time invoking rather than computing."""
    x = g.normal_input("x")
    return g.op("MUL", g.op("ADD", x, g.scalar(1.0)), g.scalar(0.5))


@dataclass(frozen=True)
class Workload:
    name: str
    body: Callable[[Graph], int]
    channels: int = CHANNELS

    @property
    def description(self) -> str:
        """The body's docstring, first paragraph, on one line."""
        return " ".join((self.body.__doc__ or "").split("\n\n")[0].split())

    def case(self, elements: int, seed: int = 0) -> Case:
        """The model at about `elements` elements: [elements // channels, channels], or
        [1, elements] if small."""
        channels = min(self.channels, elements)
        rows = max(1, elements // channels)       # whole rows: about `elements` if C is odd
        graph = Graph(self.name, rows, channels, seed)
        return graph.case(self.body(graph), rows * channels)


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("gelu_tanh", gelu_tanh),
    Workload("swish", swish),
    Workload("mish", mish),
    Workload("gelu", gelu),
    Workload("gelu_approx", gelu_approx),
    Workload("bias_relu6_scale", bias_relu6_scale),
    Workload("chain16", chain16),
    Workload("layernorm_tail", layernorm_tail),
    Workload("transcendental", transcendental),
    Workload("hard_swish_int8", hard_swish_int8),
    Workload("int8_block", int8_block),
    Workload("int8_island", int8_island),
)}

#: Per-channel math with short channel dims, as in mobile CNNs: the schedule's row tiles.
CHANNEL_COUNTS = (8, 16, 24, 32, 64, 96)
CHANNEL_WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    *(Workload(f"{body.__name__}_c{c}", body, c)
      for body in (bias_relu6_scale, se_gate) for c in CHANNEL_COUNTS),
    *(Workload(f"chain16_c{c}", chain16, c) for c in (16, 64)))}

#: Normalizations at the sizes of ViT-S/16 ([197, 192] tokens), BERT-tiny ([128, 128]) and a
#: ConvNeXt stage ([3136, 96] pixels), and over the short rows of the corpus's ConvNeXt
#: ([1024, 24], [256, 48]); softmax over attention rows of 197 and 128 (sizes: rows * channels,
#: e.g. 197 * 192 = 37824, `suite.py --sizes 37824`).
NORM_WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    *(Workload(f"layernorm_c{c}", layernorm, c) for c in (192, 128, 96, 48, 24)),
    *(Workload(f"softmax_c{c}", softmax, c) for c in (197, 128)))}

#: The invoke-overhead workload, run on a tiny tensor; not part of the size sweep.
TINY = Workload("add_mul", add_mul)
