"""int8 DEPTHWISE_CONV_2D as a stencil nest (codegen.quant_conv, codegen.emit_stencil) in the
real interpreter: bit for bit against LiteRT's builtin kernel, and what is not claimed and why."""
from dataclasses import replace

import numpy as np
import pytest

from codegen.nests import StencilNest
from codegen.pipeline import build
from codegen.qparams import QParams
from codegen.quant_conv import depthwise_reference, prepare_depthwise
from codegen.target import numba_target
from codegen.window import conv_output_shape, window
from conftest import AVX512, builtin_interpreter, run
from fusion_delegate import FusionDelegate
from fusion_delegate.claims import miscompiled_int8_channels
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.model import ModelBuilder, Quantization

NONE, RELU, RELU_N1_TO_1, RELU6 = 0, 1, 2, 3
SAME, VALID = 0, 1


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def int8_conv_model(shape: tuple[int, ...], kernel: tuple[int, int], stride: int = 1,
                    padding: int = SAME, multiplier: int = 1, dilation: int = 1,
                    activation: int = NONE, per_channel: bool = True,
                    x_quant: tuple[float, int] = (0.05, 3),
                    out_quant: tuple[float, int] = (0.08, -5), weight_scale: float = 0.02,
                    weights: np.ndarray | None = None, bias_range: int = 2000,
                    seed: int = 0) -> bytes:
    """One int8 DEPTHWISE_CONV_2D over an input of `shape`: random int8 weights (scales per
    output channel around `weight_scale`, or one), random int32 bias."""
    rng = np.random.default_rng(seed)
    channels = shape[3] * multiplier
    if weights is None:
        weights = rng.integers(-127, 128, (1, *kernel, channels)).astype(np.int8)
    bias = rng.integers(-bias_range, bias_range + 1, channels).astype(np.int32)
    scales = (weight_scale * rng.uniform(0.25, 4.0, channels) if per_channel
              else np.array([weight_scale])).astype(np.float32)
    out = conv_output_shape(shape, weights.shape, {
        "padding": ("same", "valid")[padding], "strides": (stride, stride),
        "dilations": (dilation, dilation)})
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, Quantization.per_tensor(*x_quant))
    w = b.const("weights", weights, Quantization(scales, np.zeros(len(scales), np.int64), 3))
    bias_q = Quantization((x_quant[0] * scales).astype(np.float32),
                          np.zeros(len(scales), np.int64), 0)
    bias_t = b.const("bias", bias, bias_q)
    b.output(b.op("DEPTHWISE_CONV_2D", [x, w, bias_t],
                  {"padding": padding, "stride_w": stride, "stride_h": stride,
                   "depth_multiplier": multiplier, "fused_activation_function": activation,
                   "dilation_w_factor": dilation, "dilation_h_factor": dilation},
                  shape=out, name="conv", quantization=Quantization.per_tensor(*out_quant)))
    return b.to_bytes()


def fused(model: bytes, cache_dir: str) -> tuple[FusionDelegate, object]:
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    return delegate, builtin_interpreter(model, [delegate])


def nests(delegate: FusionDelegate) -> list:
    (_, built), = delegate.main_graph.built.values()
    return built.schedule.nests


def codes(rng, shape: tuple[int, ...]) -> np.ndarray:
    """Random int8 codes, the extremes included."""
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x.reshape(-1)[::13] = -128
    x.reshape(-1)[::17] = 127
    return x


CASES = [  # shape, kernel, params: C not a multiple of 16 (nor of 8) unless said
    ((1, 13, 13, 20), (3, 3), {}),
    ((1, 13, 13, 20), (3, 3), {"stride": 2, "padding": VALID}),
    ((1, 12, 14, 21), (3, 3), {"stride": 2, "activation": RELU6}),
    ((1, 16, 16, 24), (5, 5), {}),
    ((1, 15, 17, 24), (5, 5), {"stride": 2, "padding": VALID, "activation": RELU}),
    ((1, 14, 14, 40), (7, 7), {}),
    ((1, 14, 14, 32), (7, 7), {"per_channel": False}),
    ((1, 8, 8, 96), (7, 7), {}),                      # no column's window inside: edge tiles
    ((1, 15, 15, 12), (3, 3), {"dilation": 2}),
    ((1, 15, 16, 13), (3, 3), {"dilation": 2, "padding": VALID, "activation": RELU}),
    ((1, 10, 10, 6), (3, 3), {"multiplier": 2}),
    ((1, 9, 9, 5), (5, 5), {"stride": 2, "multiplier": 3, "activation": RELU_N1_TO_1}),
    ((1, 10, 21, 17), (1, 5), {"per_channel": False}),
    ((2, 9, 9, 8), (3, 1), {"stride": 2, "padding": VALID}),
    ((1, 6, 6, 120), (5, 5), {}),                     # blocks of 40 channels
    ((1, 20, 20, 64), (3, 3), {"activation": RELU6}),
    ((1, 10, 10, 1), (3, 3), {}),                     # one channel: the scalar rounding only
    ((1, 5, 7, 3), (1, 1), {"multiplier": 3}),
    ((1, 4, 4, 2), (9, 9), {}),                       # a kernel larger than the input
]


@pytest.mark.parametrize("shape, kernel, params", CASES)
def test_the_int8_convolution_is_litert_bit_for_bit(cache_dir, rng, shape, kernel, params):
    model = int8_conv_model(shape, kernel, **params)
    delegate, interpreter = fused(model, cache_dir)
    channels = shape[3] * params.get("multiplier", 1)
    if channels == miscompiled_int8_channels(numba_target()):
        assert "AVX-512 code in 32-byte vectors" in delegate.claims[0].reason
    else:
        assert delegate.claims[0].reason is None
        assert [type(nest) for nest in nests(delegate)] == [StencilNest]
    x = codes(rng, shape)
    got, want = run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


QUANTS = [  # input (scale, zero point), output (scale, zero point), weight scale
    ((0.05, -128), (0.08, 127), 0.02),                # extreme zero points
    ((0.05, 127), (0.08, -128), 0.02),
    ((1e-3, 0), (50.0, 0), 1e-3),                     # tiny multipliers: long right shifts
    ((0.5, 10), (0.02, -3), 0.05),                    # multipliers > 1: left shifts
    ((0.1, -7), (0.07, 9), 0.009),                    # outputs saturate often
]


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("x_quant, out_quant, weight_scale", QUANTS)
def test_extreme_zero_points_and_scales(cache_dir, rng, per_channel, x_quant, out_quant,
                                        weight_scale):
    """C = 19: channels 0-15 take LiteRT's NEON rounding (ties up), 16-18 its scalar one
    (ties away from zero); every output code reachable."""
    shape = (1, 11, 11, 19)
    model = int8_conv_model(shape, (5, 5), x_quant=x_quant, out_quant=out_quant,
                            weight_scale=weight_scale, per_channel=per_channel,
                            bias_range=300)
    delegate, interpreter = fused(model, cache_dir)
    assert delegate.claims[0].reason is None
    for _ in range(3):
        x = codes(rng, shape)
        got, want = run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0]
        np.testing.assert_array_equal(got, want)


def test_both_roundings_are_reached_and_differ():
    """The reference (the same roundings per channel as the kernel) matches LiteRT where a
    single rounding for every channel would not: the test above can tell them apart."""
    shape, kernel = (1, 9, 9, 12), (3, 3)
    model = int8_conv_model(shape, kernel, x_quant=(0.5, 0), out_quant=(1.0, 0),
                            weight_scale=1 / 64, per_channel=False, bias_range=0)
    rng = np.random.default_rng(5)
    x = codes(rng, shape)
    want = run(builtin_interpreter(model), [x])[0]
    weights = np.random.default_rng(0).integers(-127, 128, (1, *kernel, 12)).astype(np.int8)
    prepared = prepare_depthwise(QParams(0.5, 0), (np.float32(1 / 64),), QParams(1.0, 0), 0, 12)
    geometry = window(shape, kernel, {"padding": "same", "strides": (1, 1),
                                      "dilations": (1, 1)})
    bias = np.zeros(12, np.int32)
    args = (x, weights, bias)
    where = ((1, 1), (1, 1), geometry.padding, want.shape)
    assert (depthwise_reference(*args, prepared, *where) == want).all()
    from dataclasses import replace
    for vector in (0, 12):              # every channel one rounding: some tie differs
        other = depthwise_reference(*args, replace(prepared, vector_channels=vector), *where)
        assert (other != want).any()


def test_int32_sums_that_could_overflow_are_not_claimed(cache_dir):
    weights = np.full((1, 7, 7, 16), -127, np.int8)
    model = int8_conv_model((1, 8, 8, 16), (7, 7), x_quant=(0.5, 10), out_quant=(1e-5, 0),
                            weight_scale=0.5, weights=weights, per_channel=False)
    delegate, _ = fused(model, cache_dir)
    assert delegate.claims[0].reason == ("DEPTHWISE_CONV_2D whose int32 sums could overflow "
                                         "(LiteRT's result is then undefined)")


def test_uint8_is_not_claimed_and_says_why(cache_dir):
    q = Quantization.per_tensor
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 16), np.uint8, q(0.05, 128))
    weights = b.const("w", np.full((1, 3, 3, 16), 130, np.uint8), q(0.01, 128))
    bias = b.const("b", np.zeros(16, np.int32), q(0.0005, 0))
    b.output(b.op("DEPTHWISE_CONV_2D", [x, weights, bias],
                  {"padding": SAME, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
                   "fused_activation_function": NONE, "dilation_w_factor": 1,
                   "dilation_h_factor": 1}, shape=(1, 8, 8, 16), quantization=q(0.1, 128)))
    delegate, _ = fused(b.to_bytes(), cache_dir)
    assert delegate.claims[0].reason == ("DEPTHWISE_CONV_2D data of dtype uint8 not supported "
                                         "(float32, or int8 with int32 bias, only)")


def kernel_lines(model: bytes, cache_dir: str) -> list[str]:
    """The kernel as planned for AVX512, which the texts below are written for."""
    delegate, _ = fused(model, cache_dir)
    (ir, _), = delegate.main_graph.built.values()
    return [line.strip() for line in build(ir, LAYOUT, AVX512).source.splitlines()]


@pytest.mark.parametrize("vector_bytes, channels, refused", [
    (32, 9, True), (32, 10, False), (32, 17, False), (64, 9, False), (64, 17, False)])
def test_half_width_avx512_kernels_of_one_channel_past_a_vector_are_not_claimed(
        cache_dir, monkeypatch, vector_bytes, channels, refused):
    """AVX-512 code in 32-byte vectors (LLVM's choice on Intel's servers) gave wrong codes for 9
    channels, one past a vector of int32, and for no other count tried."""
    from fusion_delegate import claims
    monkeypatch.setattr(claims, "numba_target", lambda: replace(AVX512,
                                                                vector_bytes=vector_bytes))
    delegate, _ = fused(int8_conv_model((1, 6, 6, channels), (3, 3)), cache_dir)
    reason = delegate.claims[0].reason
    assert (reason == f"int8 DEPTHWISE_CONV_2D of {channels} channels not claimed for AVX-512 "
                      f"code in {vector_bytes}-byte vectors: such a kernel gave wrong codes "
                      "there") if refused else reason is None


def test_the_int8_kernel_reads_like_the_loop(cache_dir):
    """int32 sums from the bias; the input offset in each tap (20 channels, stride 1: runs of
    a tile's 8 pixels); channels 0-15 rounded as LiteRT's NEON blocks, 16-19 as its scalar
    loop, in int32 lanes."""
    lines = kernel_lines(int8_conv_model((1, 20, 20, 20), (3, 3), x_quant=(0.05, 3)),
                         cache_dir)
    for line in ["acc = stack_empty(160, np.int32)", "x2_runs[j] = x2[j % 20]",
                 "acc[ch] = x2[ch]", "acc[j] = x2_runs[j]",
                 "acc[j] += (data_row[kx * 20 + j] - 3) * weight_row[kx * 160 + j]"]:
        assert line in lines, line
    assert any(line.startswith("depthwise_conv_2d_multipliers = np.array([") for line in lines)
    assert "depthwise_requantize_int32(acc[px * 20 + ch], depthwise_conv_2d_multipliers[ch], " \
        "-depthwise_conv_2d_shifts[ch], -5, ch >= 16)," in lines


def test_sums_beyond_int32_lanes_take_the_int64_helpers(cache_dir, rng):
    """A multiplier above 1 (a shift left): LiteRT's helpers in int64, literals for a
    per-tensor scale."""
    shape = (1, 9, 9, 12)
    model = int8_conv_model(shape, (3, 3), x_quant=(0.5, 10), out_quant=(0.02, -3),
                            weight_scale=0.05, per_channel=False, bias_range=100)
    lines = kernel_lines(model, cache_dir)
    assert any(line.startswith("select(ch < 8, multiply_by_quantized_multiplier_4rows(acc[")
               for line in lines)
    assert not any(line.startswith("depthwise_conv_2d_multipliers") for line in lines)
    _, interpreter = fused(model, cache_dir)
    x = codes(rng, shape)
    np.testing.assert_array_equal(run(interpreter, [x])[0],
                                  run(builtin_interpreter(model), [x])[0])


def test_by_default_only_int8_convolutions_of_49_taps_are_claimed(cache_dir):
    """XNNPACK's int8 3x3 and 5x5 depthwise convolutions are as fast as the nest or faster;
    its 7x7 ones are not (perf/README.md, "Depthwise convolutions")."""
    for threads, shortfall in ((1, 1.0), (2, 1.0), (1, 2.0)):    # the same rule everywhere
        small = FusionDelegate(cache_dir=cache_dir)
        small.policy = replace(small.policy, vector_shortfall=shortfall)
        builtin_interpreter(int8_conv_model((1, 16, 16, 32), (5, 5)), [small],
                            num_threads=threads)
        assert small.claims[0].reason == ("DEPTHWISE_CONV_2D int8 of 25 taps left to XNNPACK, "
                                          "faster than fused below 49 (claimed with "
                                          "min_speedup=0)")
    large = FusionDelegate(cache_dir=cache_dir)
    builtin_interpreter(int8_conv_model((1, 16, 16, 32), (7, 7)), [large])
    assert large.claims[0].reason is None and large.kernels


def int8_chain(shape: tuple[int, ...], kernel: tuple[int, int]) -> bytes:
    """int8 conv -> HARD_SWISH -> ADD of the block's input -> RELU6: MobileNetV3's block."""
    q = Quantization.per_tensor
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(0.05, 3))
    rng = np.random.default_rng(0)
    channels = shape[3]
    scales = (0.02 * rng.uniform(0.25, 4.0, channels)).astype(np.float32)
    w = b.const("weights", rng.integers(-127, 128, (1, *kernel, channels)).astype(np.int8),
                Quantization(scales, np.zeros(channels, np.int64), 3))
    bias = b.const("bias", rng.integers(-2000, 2000, channels).astype(np.int32),
                   Quantization(scales * np.float32(0.05), np.zeros(channels, np.int64), 0))
    y = b.op("DEPTHWISE_CONV_2D", [x, w, bias],
             {"padding": SAME, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
              "fused_activation_function": NONE, "dilation_w_factor": 1,
              "dilation_h_factor": 1}, shape=shape, name="conv", quantization=q(0.08, -5))
    y = b.op("HARD_SWISH", [y], name="hswish", quantization=q(0.06, -30))
    y = b.op("ADD", [y, x], {"fused_activation_function": NONE}, name="residual",
             quantization=q(0.1, 2))
    b.output(b.op("RELU6", [y], name="out", quantization=q(0.03, -128)))
    return b.to_bytes()


@pytest.mark.parametrize("shape", [(1, 12, 12, 24), (1, 12, 12, 20)])
def test_the_int8_chain_after_the_convolution_is_its_epilogue(cache_dir, rng, shape):
    """HARD_SWISH's table and the ADD's fixed-point calls run on each requantized code in
    the stencil nest, which stores only the chain's end (the residual's rescaled input is
    computed before it); bit for bit."""
    model = int8_chain(shape, (5, 5))
    delegate, interpreter = fused(model, cache_dir)
    stencil, = [n for n in nests(delegate) if isinstance(n, StencilNest)]
    assert [op.op for op in stencil.ops][:2] == ["DEPTHWISE_CONV_2D", "LUT"]
    assert len(stencil.ops) >= 3 and len(stencil.writes) == 1
    for _ in range(3):
        x = codes(rng, shape)
        np.testing.assert_array_equal(run(interpreter, [x])[0],
                                      run(builtin_interpreter(model), [x])[0])


def test_the_int32_requantization_is_litert_roundings():
    """depthwise_requantize_int32 equals MultiplyByQuantizedMultiplier (ties away) and its
    4Rows form (ties up) in int64 for |sum| < 2**29 and shifts 0 to -31, ties included."""
    from codegen.fixedpoint import (depthwise_requantize_int32, multiply_by_quantized_multiplier,
                                    multiply_by_quantized_multiplier_4rows)
    rng = np.random.default_rng(7)
    for shift in range(0, -32, -1):
        for multiplier in (1 << 30, (1 << 31) - 1, *rng.integers(1 << 30, 1 << 31, 3)):
            acc = rng.integers(-(1 << 29) + 1, 1 << 29, 4000).astype(np.int32)
            ties = np.concatenate([np.arange(-50, 50, dtype=np.int64) << max(0, -shift - k)
                                   for k in (0, 1)])    # ties of the last shift at 2**30
            ties = ties[np.abs(ties) < 1 << 29].astype(np.int32)
            acc = np.concatenate([acc, ties, np.array([0, 1, -1, (1 << 29) - 1,
                                                       -(1 << 29) + 1], np.int32)])
            wide = acc.astype(np.int64)
            for ties_away, exact in ((1, multiply_by_quantized_multiplier),
                                     (0, multiply_by_quantized_multiplier_4rows)):
                want = exact(wide, int(multiplier), shift) - 7
                got = depthwise_requantize_int32(acc, np.int32(multiplier), -shift, -7,
                                                 ties_away)
                assert np.array_equal(got, want), (shift, multiplier, ties_away)


def test_two_threads_split_the_int8_rows(cache_dir, rng):
    shape = (1, 64, 64, 36)
    model = int8_conv_model(shape, (7, 7))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=2)
    interpreter = builtin_interpreter(model, [delegate], num_threads=2)
    assert nests(delegate)[0].threads == 2
    x = codes(rng, shape)
    np.testing.assert_array_equal(run(interpreter, [x])[0],
                                  run(builtin_interpreter(model), [x])[0])
