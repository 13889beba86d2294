"""DEPTHWISE_CONV_2D as a stencil nest (codegen.emit_stencil) in the real interpreter: bit for
bit against LiteRT's builtin kernels, the chain it feeds within its tolerance, what is claimed
and why not."""
from dataclasses import replace

import numpy as np
import pytest

from codegen.nests import RowsNest, StencilNest
from codegen.pipeline import build
from codegen.window import conv_output_shape
from conftest import AVX512, builtin_interpreter, run, same_bits
from fusion_delegate import FusionDelegate, runtime
from fusion_delegate.claims import STENCIL_RUNTIMES
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.model import ModelBuilder
from fusion_delegate.testing import assert_equivalent

NONE, RELU, RELU_N1_TO_1, RELU6 = 0, 1, 2, 3
SAME, VALID = 0, 1
FLT_MAX = np.finfo(np.float32).max


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def conv(b: ModelBuilder, x: int, shape: tuple[int, ...], kernel: tuple[int, int],
         stride: int = 1, padding: int = SAME, multiplier: int = 1, dilation: int = 1,
         activation: int = NONE, name: str = "conv", seed: int = 0) -> int:
    """A DEPTHWISE_CONV_2D over `x` of `shape`, random constant weights and bias."""
    rng = np.random.default_rng(seed)
    channels = shape[3] * multiplier
    weights = rng.standard_normal((1, *kernel, channels)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    out = conv_output_shape(shape, weights.shape, {
        "padding": ("same", "valid")[padding], "strides": (stride, stride),
        "dilations": (dilation, dilation)})
    return b.op("DEPTHWISE_CONV_2D", [x, b.const(f"{name}_weights", weights),
                                      b.const(f"{name}_bias", bias)],
                {"padding": padding, "stride_w": stride, "stride_h": stride,
                 "depth_multiplier": multiplier, "fused_activation_function": activation,
                 "dilation_w_factor": dilation, "dilation_h_factor": dilation},
                shape=out, name=name)


def conv_model(shape: tuple[int, ...], kernel: tuple[int, int], **params) -> bytes:
    b = ModelBuilder()
    b.output(conv(b, b.input("x", shape), shape, kernel, **params))
    return b.to_bytes()


def fused(model: bytes, cache_dir: str, **options) -> tuple[FusionDelegate, object]:
    delegate = FusionDelegate(cache_dir=cache_dir, **{"min_speedup": 0.0, **options})
    # Kernels split into at most the interpreter's threads (its pool runs the parts).
    threads = max(options.get("num_threads", 1), 1)
    return delegate, builtin_interpreter(model, [delegate], num_threads=threads)


def schedule(delegate: FusionDelegate):
    """The schedule of the delegate's one partition."""
    (_, built), = delegate.main_graph.built.values()
    return built.schedule


CASES = [  # shape, kernel, params: C not a multiple of 16 unless said
    ((1, 13, 13, 20), (3, 3), {}),
    ((1, 13, 13, 20), (3, 3), {"stride": 2, "padding": VALID}),
    ((1, 12, 14, 20), (3, 3), {"stride": 2, "activation": RELU6}),
    ((1, 16, 16, 24), (5, 5), {}),
    ((1, 15, 17, 24), (5, 5), {"stride": 2, "padding": VALID, "activation": RELU}),
    ((1, 14, 14, 40), (7, 7), {}),
    ((1, 8, 8, 96), (7, 7), {}),                      # no column's window inside: edge tiles
    ((1, 15, 15, 12), (3, 3), {"dilation": 2}),
    ((1, 15, 16, 12), (3, 3), {"dilation": 2, "padding": VALID, "activation": RELU}),
    ((1, 10, 10, 6), (3, 3), {"multiplier": 2}),
    ((1, 9, 9, 5), (5, 5), {"stride": 2, "multiplier": 3, "activation": RELU_N1_TO_1}),
    ((1, 10, 21, 17), (1, 5), {}),
    ((2, 9, 9, 8), (3, 1), {"stride": 2, "padding": VALID}),
    ((1, 6, 6, 120), (5, 5), {}),                     # blocks of 40 channels
    ((1, 20, 20, 64), (3, 3), {}),                    # blocks of 32
    ((1, 10, 10, 1), (3, 3), {}),                     # a one-element bias: a literal
    ((1, 5, 7, 1), (1, 1), {"multiplier": 3}),
    ((1, 4, 4, 2), (9, 9), {}),                       # a kernel larger than the input
]


@pytest.mark.parametrize("shape, kernel, params", CASES)
def test_the_convolution_is_litert_bit_for_bit(cache_dir, rng, shape, kernel, params):
    """Bias first, then each tap inside the input in LiteRT's order, every product and sum
    rounded: the same float32 sums, -0.0 included."""
    model = conv_model(shape, kernel, **params)
    delegate, interpreter = fused(model, cache_dir)
    assert [type(nest) for nest in schedule(delegate).nests] == [StencilNest]
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[::7] = 0.0
    x.reshape(-1)[::11] = -0.0
    assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])


@pytest.mark.parametrize("shape, kernel, params, threads",
                         [(*case, 1) for case in CASES] + [((1, 64, 64, 32), (7, 7), {}, 2)])
def test_the_exact_loop_runs_the_row_column_by_column_to_the_same_bits(cache_dir, rng, shape,
                                                                      kernel, params, threads):
    """With a chain after it that the fast loop leaves unclamped, the convolution's exact
    loop (run after an inf) is its columns one by one, its taps a loop: LiteRT's sums bit
    for bit, as the fast loop's tiles are on finite data."""
    b = ModelBuilder()
    y = conv(b, b.input("x", shape), shape, kernel, **params)
    y = b.op("ADD", [y, b.const("shift", np.float32(0.5))], {"fused_activation_function": NONE})
    b.output(b.op("SUB", [y, b.const("back", np.float32(0.25))],
                  {"fused_activation_function": NONE}, name="out"))
    model = b.to_bytes()
    delegate, interpreter = fused(model, cache_dir, num_threads=threads)
    (nest,) = schedule(delegate).nests
    assert schedule(delegate).fast is not None and nest.exact_columns
    assert nest.threads == threads
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[::11] = -0.0
    finite = x.copy()
    x.reshape(-1)[x.size // 2] = np.inf                # a miss: the exact loop runs
    x.reshape(-1)[::13] = FLT_MAX
    for data in (finite, x):
        assert same_bits(run(interpreter, [data])[0],
                         run(builtin_interpreter(model), [data])[0])


@pytest.mark.parametrize("activation", [NONE, RELU6])
def test_nan_and_inf_in_the_input_come_out_as_in_litert(cache_dir, rng, activation):
    """NaN reaches every window it is in; +-inf sums are clamped to +-FLT_MAX (NONE) or to
    the activation's range, inf - inf is NaN: all as LiteRT's kernel has them."""
    shape = (1, 11, 11, 20)
    model = conv_model(shape, (5, 5), activation=activation)
    _, interpreter = fused(model, cache_dir)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :5] = np.nan                 # a corner: edge tiles
    x[0, 5, 5, 3:9] = np.inf                # the interior
    x[0, 6, 4, 7:12] = -np.inf
    x[0, 10, 3, 15:] = FLT_MAX
    got, want = run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0]
    assert np.isnan(want).any() and (np.abs(want) == (6.0 if activation else FLT_MAX)).any()
    assert same_bits(got, want)


def gated_chain(shape: tuple[int, ...], runtime_gate: bool) -> bytes:
    """conv -> + x (a residual) -> * gate (per channel) -> HARD_SWISH."""
    b = ModelBuilder()
    x = b.input("x", shape)
    channels = shape[3]
    gate = b.input("gate", (1, 1, 1, channels)) if runtime_gate else \
        b.const("gate", np.linspace(-2, 2, channels).astype(np.float32))
    y = conv(b, x, shape, (7, 7))
    y = b.op("ADD", [y, x], {"fused_activation_function": NONE}, name="residual")
    y = b.op("MUL", [y, gate], {"fused_activation_function": NONE}, name="gated")
    b.output(b.op("HARD_SWISH", [y], name="out"))
    return b.to_bytes()


@pytest.mark.parametrize("runtime_gate", [False, True])
def test_the_chain_after_the_convolution_is_its_epilogue(cache_dir, rng, runtime_gate):
    """The residual ADD, the gate's MUL and HARD_SWISH run on each sum in its register: one
    nest, which stores only the chain's end; within the chain's tolerances of LiteRT."""
    shape = (1, 12, 12, 24)
    model = gated_chain(shape, runtime_gate)
    delegate, _ = fused(model, cache_dir)
    (nest,) = schedule(delegate).nests
    assert isinstance(nest, StencilNest)
    assert [op.op for op in nest.ops] == ["DEPTHWISE_CONV_2D", "ADD", "MUL", "HARD_SWISH"]
    assert len(nest.writes) == 1
    inputs = [(rng.standard_normal(shape) * 3).astype(np.float32)]
    if runtime_gate:
        inputs.append(rng.standard_normal((1, 1, 1, shape[3])).astype(np.float32))
    inputs[0][0, 3, 4, :4] = [np.nan, np.inf, -np.inf, -0.0]
    assert_equivalent(model, inputs, options={"min_speedup": 0.0, "cache_dir": cache_dir})


@pytest.mark.parametrize("shape, kernel, chain, threads", [
    ((1, 20, 70, 6), (3, 3), "residual", 1),    # 2 tiles of runs and a narrower one
    ((1, 12, 40, 10), (5, 5), "gate", 1),        # a per-channel operand
    ((1, 96, 96, 14), (3, 3), "residual", 2),
])
def test_a_tiles_taps_as_runs_are_litert_bit_for_bit(cache_dir, rng, shape, kernel, chain,
                                                     threads):
    """Stride 1 and channels that are not whole half vectors: each tap adds one run of the
    input row to the tile's sums (codegen.stencil), in LiteRT's order all the same; the
    epilogue runs along them where its operands are laid out as the output (the residual),
    else per channel (the gate)."""
    b = ModelBuilder()
    x = b.input("x", shape)
    y = conv(b, x, shape, kernel)
    other = x if chain == "residual" else \
        b.const("gate", np.linspace(-2, 2, shape[3]).astype(np.float32))
    b.output(b.op("ADD" if chain == "residual" else "MUL", [y, other],
                  {"fused_activation_function": NONE}, name="out"))
    model = b.to_bytes()
    delegate, interpreter = fused(model, cache_dir, num_threads=threads)
    (nest,) = schedule(delegate).nests
    assert nest.runs and nest.threads == threads and len(nest.ops) == 2
    finite = (rng.standard_normal(shape) * 4).astype(np.float32)
    finite.reshape(-1)[::11] = -0.0
    special = finite.copy()                  # a miss: the exact loop, a column at a time
    special[0, 3, 20, :3] = [np.nan, np.inf, -np.inf]
    for x in (finite, special):
        assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])


def test_a_buffer_the_convolution_reads_is_made_by_the_entry_point(cache_dir, rng):
    """A RELU before the convolution fills a buffer too large for the stack: the native entry
    point makes it and passes it in, so LLVM knows it apart from the tile's sums (made in the
    kernel, the 3x3 convolution reading it ran 8x slower); the same bits either way."""
    shape = (1, 96, 96, 8)
    b = ModelBuilder()
    b.output(conv(b, b.op("RELU", [b.input("x", shape)]), shape, (3, 3)))
    model = b.to_bytes()
    delegate, interpreter = fused(model, cache_dir)
    source = next(iter(delegate.kernels.values())).kernel.source
    kernel, entry = source.rsplit("@cfunc", 1)          # the native entry point comes last
    assert "np.empty(73728, np.float32)" not in kernel
    assert "relu_1 = np.empty(73728, np.float32)" in entry
    assert "depthwise_conv_2d, relu_1)" in entry
    x = rng.standard_normal(shape).astype(np.float32)
    assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])


def test_a_convolution_read_by_a_layer_norm_is_stored_for_its_rows_nest(cache_dir, rng):
    """ConvNeXt's block: the normalization's MEAN and SQUARED_DIFFERENCE read the conv's
    output, so the stencil nest stores it and a rows nest after it normalizes."""
    shape = (1, 10, 10, 24)
    b = ModelBuilder()
    y = conv(b, b.input("x", shape), shape, (7, 7))
    axis = b.const("axis", np.array([3], np.int32))
    mean = b.op("MEAN", [y, axis], {"keep_dims": True}, shape=(1, 10, 10, 1))
    variance = b.op("MEAN", [b.op("SQUARED_DIFFERENCE", [y, mean]), axis], {"keep_dims": True},
                    shape=(1, 10, 10, 1))
    scale = b.op("RSQRT", [b.op("ADD", [variance, b.const("eps", np.float32(1e-6))],
                                {"fused_activation_function": NONE})])
    centred = b.op("SUB", [y, mean], {"fused_activation_function": NONE})
    b.output(b.op("MUL", [centred, scale], {"fused_activation_function": NONE}, name="out"))
    model = b.to_bytes()
    delegate, _ = fused(model, cache_dir)
    assert [type(nest) for nest in schedule(delegate).nests] == [StencilNest, RowsNest]
    assert assert_equivalent(model, [rng.standard_normal(shape).astype(np.float32)],
                             options={"min_speedup": 0.0, "cache_dir": cache_dir}).ok


def test_two_threads_split_the_rows(cache_dir, rng):
    shape = (1, 64, 64, 32)
    model = conv_model(shape, (7, 7))
    delegate, interpreter = fused(model, cache_dir, num_threads=2)
    assert schedule(delegate).nests[0].threads == 2
    x = rng.standard_normal(shape).astype(np.float32)
    assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])


def test_the_kernel_reads_like_the_loop(cache_dir):
    model = conv_model((1, 20, 20, 32), (3, 3))
    delegate, _ = fused(model, cache_dir)
    (ir, _), = delegate.main_graph.built.values()
    source = build(ir, LAYOUT, AVX512).source      # the tiles of 64-byte vectors, on any host
    lines = [line.strip() for line in source.splitlines()]
    for line in ["for oy in range(20):", "iy = oy - 1", "ky0 = max(0, -iy)",
                 "ky1 = min(3, 20 - iy)",
                 "# Columns 0 to 5: each tap inside the input written out",
                 "# Columns 6 to 17, 6 at a time: every tap inside the input",
                 "for ox in range(6, 18, 6):", "ix = ox - 1", "for ky in range(ky0, ky1):",
                 "data_row = x0[((iy + ky) * 20 + ix) * 32:]",
                 "weight_row = x1[ky * 96:]", "for kx in range(3):",
                 "weight = weight_row[kx * 32 + ch]", "acc[ch] += data_row[kx * 32 + ch] * weight",
                 "acc[32 + ch] += data_row[kx * 32 + 32 + ch] * weight",
                 "depthwise_conv_2d[oy * 640 + (ox + px) * 32 + ch] = clamp_overflow(",
                 "acc[px * 32 + ch])"]:
        assert line in lines, line


def runtime_weights() -> bytes:
    b = ModelBuilder()
    x, weights = b.input("x", (1, 8, 8, 16)), b.input("w", (1, 3, 3, 16))
    bias = b.const("b", np.zeros(16, np.float32))
    b.output(b.op("DEPTHWISE_CONV_2D", [x, weights, bias],
                  {"padding": SAME, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
                   "fused_activation_function": NONE, "dilation_w_factor": 1,
                   "dilation_h_factor": 1}, shape=(1, 8, 8, 16)))
    return b.to_bytes()


def without_bias() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 16))
    b.output(b.op("DEPTHWISE_CONV_2D", [x, b.const("w", np.ones((1, 3, 3, 16), np.float32))],
                  {"padding": SAME, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
                   "fused_activation_function": NONE, "dilation_w_factor": 1,
                   "dilation_h_factor": 1}, shape=(1, 8, 8, 16)))
    return b.to_bytes()


@pytest.mark.parametrize("model, reason", [
    (runtime_weights, "DEPTHWISE_CONV_2D weights or bias not constant"),
    (without_bias, "DEPTHWISE_CONV_2D without a bias not supported"),
])
def test_what_is_not_reproduced_is_not_claimed_and_says_why(cache_dir, model, reason):
    delegate, _ = fused(model(), cache_dir)
    assert delegate.claims[0].reason == reason


def test_by_default_every_float_convolution_is_claimed_at_one_thread(cache_dir):
    """Claimed, the 3x3 ones made whole models faster too at one thread (perf/README.md,
    "3x3 depthwise convolutions"); at 2 threads, or with narrower vectors, only from 49 taps;
    after a PAD, which XNNPACK folds into its convolution, none."""
    def delegate(shortfall: float = 1.0) -> FusionDelegate:
        """Kernels as wide as the CPU's vectors, or `shortfall` times narrower (a haswell
        cache on an AVX-512 CPU; LLVM's own choice on Intel's AVX-512 servers)."""
        made = FusionDelegate(cache_dir=cache_dir)
        made.policy = replace(made.policy, vector_shortfall=shortfall)
        return made

    small = delegate()
    builtin_interpreter(conv_model((1, 16, 16, 32), (3, 3)), [small])
    assert small.claims[0].reason is None and small.kernels
    padded = delegate()
    builtin_interpreter(padded_conv_model((3, 3)), [padded])
    assert padded.claims[1].reason == ("DEPTHWISE_CONV_2D of 9 taps after a PAD left to "
                                       "XNNPACK, which pads in the convolution (claimed with "
                                       "min_speedup=0)")
    padded_7x7 = delegate()
    builtin_interpreter(padded_conv_model((7, 7)), [padded_7x7])
    assert padded_7x7.claims[1].reason is None and padded_7x7.kernels
    threaded = delegate()
    builtin_interpreter(conv_model((1, 16, 16, 32), (5, 5)), [threaded], num_threads=2)
    assert threaded.claims[0].reason == ("DEPTHWISE_CONV_2D of 25 taps left to XNNPACK, faster "
                                         "than fused below 49 at 2 threads (claimed with "
                                         "min_speedup=0)")
    widest = delegate()
    builtin_interpreter(conv_model((1, 16, 16, 32), (7, 7)), [widest], num_threads=2)
    assert widest.claims[0].reason is None and widest.kernels
    for taps, reason in ((5, "DEPTHWISE_CONV_2D of 25 taps left to XNNPACK, faster than fused "
                             "below 49 with vectors narrower than the CPU's (claimed with "
                             "min_speedup=0)"), (7, None)):
        narrow = delegate(2.0)
        builtin_interpreter(conv_model((1, 16, 16, 32), (taps, taps)), [narrow])
        assert narrow.claims[0].reason == reason


def padded_conv_model(kernel: tuple[int, int]) -> bytes:
    """PAD, then a VALID convolution: MediaPipe's full-range face detector's blocks (3x3)."""
    b = ModelBuilder()
    x = b.input("x", (1, 16, 16, 32))
    pad = kernel[0] // 2
    pads = b.const("pads", np.array([[0, 0], [pad, pad], [pad, pad], [0, 0]], np.int32))
    shape = (1, 16 + 2 * pad, 16 + 2 * pad, 32)
    padded = b.op("PAD", [x, pads], shape=shape)
    b.output(conv(b, padded, shape, kernel, padding=VALID))
    return b.to_bytes()


def test_convolutions_are_claimed_only_under_the_runtimes_reproduced(cache_dir, rng):
    """Under a runtime whose kernels compute otherwise (tests/compat runs this under each), the
    convolution is left to it, saying why, and the model gives that runtime's answers."""
    model = conv_model((1, 14, 14, 40), (7, 7))
    delegate, interpreter = fused(model, cache_dir)
    x = rng.standard_normal((1, 14, 14, 40)).astype(np.float32)
    x[0, 3, 4, :3] = [np.nan, np.inf, -0.0]
    assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])
    if runtime.NAME in STENCIL_RUNTIMES:
        assert delegate.claims[0].reason is None
    else:
        assert delegate.claims[0].reason == (f"DEPTHWISE_CONV_2D under {runtime.RUNTIME}: "
                                             f"reproduced only under ai-edge-litert")


def test_float16_weights_are_claimed_through_their_dequantize(cache_dir, rng):
    """A float16 model's weights and bias reach the convolution through DEQUANTIZE, which LiteRT
    converts exactly once per invoke: the convolution is claimed and reads what the DEQUANTIZEs
    (left to LiteRT) wrote, giving LiteRT's sums bit for bit."""
    shape, channels = (1, 12, 12, 24), 24
    b = ModelBuilder()
    weights = rng.standard_normal((1, 5, 5, channels)).astype(np.float16)
    bias = rng.standard_normal(channels).astype(np.float16)
    halves = [b.op("DEQUANTIZE", [b.const(name, array)], dtype=np.float32, name=f"{name}32")
              for name, array in (("w16", weights), ("b16", bias))]
    b.output(b.op("DEPTHWISE_CONV_2D", [b.input("x", shape), *halves],
                  {"padding": SAME, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1,
                   "fused_activation_function": RELU6, "dilation_w_factor": 1,
                   "dilation_h_factor": 1}, shape=shape))
    model = b.to_bytes()
    delegate, interpreter = fused(model, cache_dir)
    assert [c.reason is None for c in delegate.claims.values()] == [False, False, True]
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x[0, 2, 3, :2] = [np.nan, -0.0]
    assert same_bits(run(interpreter, [x])[0], run(builtin_interpreter(model), [x])[0])
