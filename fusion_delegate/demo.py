"""The bundled demo model, made by the project's own writer, and the demo run.

A transformer-style block in the shapes TFLite converters emit: LayerNorm written as
MEAN / SQUARED_DIFFERENCE / RSQRT / MUL / ADD (the MEANs stay on LiteRT, the tail fuses), an MLP
whose GELU is written as MUL / ADD / TANH, and a swish (x * logistic(x)) gate.
"""
from __future__ import annotations

import numpy as np

from .model import ModelBuilder

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
