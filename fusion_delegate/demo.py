"""The bundled demo models, made by the project's own writer.

- A float32 transformer-style block in the shapes TFLite converters emit: LayerNorm written as
  MEAN / SQUARED_DIFFERENCE / RSQRT / MUL / ADD (one kernel, the MEANs included), an
  MLP whose GELU is written as MUL / ADD / TANH, and a swish (x * logistic(x)) gate.
- A full-integer int8 MobileNetV3-style block: depthwise convolution, HARD_SWISH, residual
  ADD. XNNPACK does not take int8 HARD_SWISH, so LiteRT runs it on its slow builtin kernel;
  the delegate runs it as one table lookup.
"""
from __future__ import annotations

import numpy as np

from .model import ModelBuilder, Quantization

NONE = {"fused_activation_function": 0}


def build_demo_model(tokens: int = 256, width: int = 256, seed: int = 0) -> bytes:
    """LayerNorm tail -> FC -> GELU(tanh) chain -> FC -> swish gate -> residual add."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("demo_block")
    x = b.input("x", (1, tokens, width))

    def const(name, shape, scale=1.0):
        return b.const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def scalar(name, value):
        return b.const(name, np.array(value, np.float32))

    axis = b.const("axis", np.array([2], np.int32))
    mean = b.op("MEAN", [x, axis], {"keep_dims": True}, name="ln/mean", shape=(1, tokens, 1))
    sq = b.op("SQUARED_DIFFERENCE", [x, mean], name="ln/sqdiff")
    var = b.op("MEAN", [sq, axis], {"keep_dims": True}, name="ln/var", shape=(1, tokens, 1))
    var_eps = b.op("ADD", [var, scalar("ln/eps", 1e-5)], NONE, name="ln/var_eps")
    inv = b.op("RSQRT", [var_eps], name="ln/inv_std")
    centered = b.op("SUB", [x, mean], NONE, name="ln/centered")
    normed = b.op("MUL", [centered, inv], NONE, name="ln/normed")
    scaled = b.op("MUL", [normed, const("ln/gamma", (width,), 0.1)], NONE, name="ln/scaled")
    ln = b.op("ADD", [scaled, const("ln/beta", (width,), 0.1)], NONE, name="ln/out")

    w1 = const("mlp/w1", (width, width), width ** -0.5)
    h = b.op("FULLY_CONNECTED", [ln, w1, const("mlp/b1", (width,), 0.1)],
             {"fused_activation_function": 0, "keep_num_dims": True}, name="mlp/fc1",
             shape=(1, tokens, width))
    # GELU, tanh approximation, decomposed the way converters emit it.
    cube = b.op("MUL", [b.op("MUL", [h, h], NONE, name="gelu/sq"), h], NONE, name="gelu/cube")
    inner = b.op("ADD", [h, b.op("MUL", [cube, scalar("gelu/c", 0.044715)], NONE,
                                 name="gelu/cube_c")], NONE, name="gelu/inner")
    scaled_inner = b.op("MUL", [inner, scalar("gelu/sqrt_2_pi", 0.7978845608)], NONE,
                        name="gelu/scaled")
    tanh = b.op("TANH", [scaled_inner], name="gelu/tanh")
    one_plus = b.op("ADD", [tanh, scalar("gelu/one", 1.0)], NONE, name="gelu/one_plus")
    half_x = b.op("MUL", [h, scalar("gelu/half", 0.5)], NONE, name="gelu/half_x")
    gelu = b.op("MUL", [half_x, one_plus], NONE, name="gelu/out")

    w2 = const("mlp/w2", (width, width), width ** -0.5)
    g = b.op("FULLY_CONNECTED", [gelu, w2, const("mlp/b2", (width,), 0.1)],
             {"fused_activation_function": 0, "keep_num_dims": True}, name="mlp/fc2",
             shape=(1, tokens, width))
    # swish gate, bias + per-channel scale, residual.
    swish = b.op("MUL", [g, b.op("LOGISTIC", [g], name="swish/sigmoid")], NONE, name="swish/out")
    biased = b.op("ADD", [swish, const("out/bias", (width,), 0.1)], NONE, name="out/biased")
    gated = b.op("MUL", [biased, const("out/scale", (width,), 0.5)], NONE, name="out/scaled")
    out = b.op("ADD", [gated, x], NONE, name="out/residual")
    b.output(out)
    return b.to_bytes()


def build_quantized_demo_model(size: int = 56, channels: int = 48, seed: int = 0) -> bytes:
    """int8: depthwise 3x3 convolution -> HARD_SWISH -> ADD of the block's input."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("demo_int8_block")
    x_scale, w_scales = 0.05, rng.uniform(0.004, 0.01, channels).astype(np.float32)
    x = b.input("x", (1, size, size, channels), np.int8, Quantization.per_tensor(x_scale, 0))
    weights = b.const("dw/weights", rng.integers(-127, 128, (1, 3, 3, channels)).astype(np.int8),
                      Quantization(w_scales, np.zeros(channels, np.int64), 3))
    bias = b.const("dw/bias", rng.integers(-500, 500, channels).astype(np.int32),
                   Quantization(w_scales * np.float32(x_scale), np.zeros(channels, np.int64)))
    conv = b.op("DEPTHWISE_CONV_2D", [x, weights, bias],
                {"padding": 0, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
                 "fused_activation_function": 0}, name="dw/conv",
                shape=(1, size, size, channels), quantization=Quantization.per_tensor(0.08, -10))
    swish = b.op("HARD_SWISH", [conv], name="hard_swish",
                 quantization=Quantization.per_tensor(0.06, -20))
    b.output(b.op("ADD", [swish, x], NONE, name="residual",
                  quantization=Quantization.per_tensor(0.1, 0)))
    return b.to_bytes()
