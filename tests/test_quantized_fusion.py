"""Quantized partitions in the real interpreter, bit for bit against LiteRT's builtin kernels.

codegen.quant_*'s semantics are tested op by op in tests/test_quant.py; here the whole path runs:
claims, lowering to tables and fixed-point calls (codegen.lower), composed tables, the byte
lookup nests (codegen.lut), int8 next to float32 in one kernel, the generated source.
"""
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from codegen.qparams import QParams
from codegen.quant_support import quant_unsupported
from conftest import builtin_interpreter, run
from fusion_delegate import FusionDelegate
from fusion_delegate.model import ModelBuilder, Quantization

NONE = {"fused_activation_function": 0}
UNARY = ("HARD_SWISH", "LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU",
         "ELU", "GELU", "EXP", "LOG", "ABS", "NEG")
BINARY = ("ADD", "SUB", "MUL", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM")
OPTIONS = {"LEAKY_RELU": {"alpha": 0.25}, "GELU": {"approximate": True}}
#: Output quantization a kernel requires (LOGISTIC fails Prepare with any other).
FIXED_OUTPUT = {"LOGISTIC": (1 / 256, -128)}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def q(scale: float, zero_point: int) -> Quantization:
    return Quantization.per_tensor(scale, zero_point)


def delegated(model: bytes, cache_dir: str, **options) -> tuple[FusionDelegate, object]:
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, **options)
    return delegate, builtin_interpreter(model, [delegate])


def same_as_builtin(model: bytes, interpreter, inputs: list[np.ndarray]) -> None:
    for got, want in zip(run(interpreter, inputs), run(builtin_interpreter(model), inputs)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8) if got.dtype != np.float32 else got,
                                      want.view(np.uint8) if want.dtype != np.float32 else want)


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("scales", [(0.05, 3, 0.04, -5), (0.5, -100, 0.02, 10),
                                    (0.003, 127, 0.1, -128)])
def test_every_unary_op_over_all_256_inputs(cache_dir, op, scales):
    """One node on all 256 int8 values: a byte-lookup nest, claimed, and LiteRT's answers."""
    s_in, z_in, s_out, z_out = scales
    s_out, z_out = FIXED_OUTPUT.get(op, (s_out, z_out))
    b = ModelBuilder()
    x = b.input("x", (256,), np.int8, q(s_in, z_in))
    b.output(b.op(op, [x], OPTIONS.get(op), quantization=q(s_out, z_out)))
    model = b.to_bytes()
    delegate, interpreter = delegated(model, cache_dir, min_nodes_per_partition=1)
    reasons = [c.reason for c in delegate.claims.values()]
    expected = quant_unsupported(op, ["int8", "int8"], [QParams(s_in, z_in)],
                                 QParams(s_out, z_out), OPTIONS.get(op),
                                 position_aware=True)
    assert reasons == [expected]
    if expected is None:
        assert "lookup_bytes(" in delegate.kernels[0].kernel.source
    same_as_builtin(model, interpreter, [np.arange(-128, 128, dtype=np.int8)])


def hard_swish_block(shape: tuple[int, ...]) -> bytes:
    """MobileNetV3's int8 tail: HARD_SWISH, a per-channel ADD, RELU, then a chain of two
    unary ops that compose into one table."""
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(0.05, 3))
    h = b.op("HARD_SWISH", [x], quantization=q(0.04, -5))
    c = b.const("c", (np.arange(shape[-1]) % 17 - 8).astype(np.int8), q(0.03, 0))
    a = b.op("ADD", [h, c], NONE, quantization=q(0.06, 2))
    r = b.op("RELU", [a], quantization=q(0.06, 2))
    b.output(b.op("LOGISTIC", [b.op("TANH", [r], quantization=q(1 / 128, 0))],
                  quantization=q(1 / 256, -128)))
    return b.to_bytes()


@pytest.mark.parametrize("shape", [(1, 20, 20, 16), (1, 7, 9, 24), (3, 5)])
def test_a_chain_of_int8_ops_is_one_kernel_with_composed_tables(cache_dir, rng, shape):
    model = hard_swish_block(shape)
    delegate, interpreter = delegated(model, cache_dir)
    reasons = {i: c.reason for i, c in delegate.claims.items()}
    if reasons[1] is not None:           # ADD: LiteRT's paths differ at this shape
        assert "differently" in reasons[1] or "position" in reasons[1]
    else:
        source = delegate.kernels[0].kernel.source
        assert "LUT(RELU, TANH, LOGISTIC)" in source
        # HARD_SWISH's, the composed one and, where the ADD runs in int16 lanes, its pairs
        # per code of c.
        in_int16 = "add_block_output_int16_lanes(" in source
        # (Tables are the partition's data, which the entry point passes: codegen.kernel_data.)
        assert source.count("_table = carray(") == 2 + in_int16
        # Both tables a stage of byte lookups over each tile, where a tile is long enough.
        assert source.count("lookup_bytes(") == (2 if math.prod(shape) >= 64 else 0)
    same_as_builtin(model, interpreter, [rng.integers(-128, 128, shape).astype(np.int8)])


def test_an_int8_swish_is_one_table(cache_dir):
    """x * LOGISTIC(x), a binary op lowered to one fixed-point call whose operands are x and a
    table of x: a function of x alone, one byte lookup (EfficientNet int8's swish: 3.2x
    XNNPACK's kernel at 401K elements, where the fixed-point MUL ran 0.28x); on all 256 codes
    LiteRT's answers. Where the LOGISTIC is an output too, its table stays. (ADD and SUB are
    three calls, each input rescaled apart: not tabulated.)"""
    for logistic_out in (False, True):
        b = ModelBuilder()
        x = b.input("x", (256,), np.int8, q(0.0589, 1))
        s = b.op("LOGISTIC", [x], quantization=q(1 / 256, -128))
        y = b.op("MUL", [x, s], NONE, quantization=q(0.0307, -119))
        b.output(*([y, s] if logistic_out else [y]))
        model = b.to_bytes()
        delegate, interpreter = delegated(model, cache_dir)
        assert [c.reason for c in delegate.claims.values()] == [None, None]
        kernel = delegate.kernels[0]
        assert "QCALL" not in kernel.kernel.source
        # One table alone is the shared lookup kernel, its table data (codegen.shared).
        assert ("LUT(MUL)" if logistic_out else "LUT(LOGISTIC, MUL)") in (
            kernel.kernel.source if logistic_out else kernel.legend)
        assert kernel.kernel.source.count("_table = carray(") == 2 * logistic_out
        same_as_builtin(model, interpreter, [np.arange(-128, 128, dtype=np.int8)])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_table_lookups_of_any_table_and_size_share_one_compiled_kernel(tmp_path, rng, dtype):
    """A partition that is one lookup over a whole tensor runs the shared kernel, its table and
    size the partition's data (codegen.shared): other ops, tables and shapes, in other
    interpreters and after a resize, load the kernel compiled for the first, and each gives
    LiteRT's answers."""
    zero = 0 if dtype == np.int8 else 128
    cases = [("HARD_SWISH", (1, 14, 14, 24), q(0.043, zero - 3), q(0.023, zero + 5)),
             ("TANH", (1000,), q(0.02, zero + 7), q(1 / 128, zero)),
             ("LOGISTIC", (3, 5, 7), q(0.1, zero - 20), q(1 / 256, -128 + zero))]
    info = np.iinfo(dtype)
    paths = set()
    for number, (op, shape, q_in, q_out) in enumerate(cases):
        b = ModelBuilder()
        x = b.input("x", shape, dtype, q_in)
        b.output(b.op(op, [x], quantization=q_out))
        model = b.to_bytes()
        delegate, interpreter = delegated(model, str(tmp_path))
        kernel = delegate.kernels[0]
        assert kernel.kernel.name == f"table_lookup_{np.dtype(dtype).name}_{np.dtype(dtype).name}"
        assert kernel.kernel.cache_hit == ("" if number == 0 else "memory")
        assert f"LUT({op})" in kernel.legend
        paths.add(kernel.kernel.path)
        same_as_builtin(model, interpreter, [rng.integers(info.min, info.max + 1, shape, dtype)])
    assert len(paths) == 1
    resized = (2, *shape[1:])
    reference = builtin_interpreter(model)
    for runner in (interpreter, reference):
        runner.resize_tensor_input(runner.get_input_details()[0]["index"], resized)
        runner.allocate_tensors()
    x = rng.integers(info.min, info.max + 1, resized, dtype)
    np.testing.assert_array_equal(run(interpreter, [x])[0], run(reference, [x])[0])
    assert delegate.kernels[0].kernel.path in paths


def test_shared_lookups_of_one_interpreter_read_their_own_tensors_and_tables(tmp_path, rng):
    """Two lookup partitions in one interpreter (a node left to LiteRT between them), the
    first a MUL whose node lists its constant operand first: each reads its own input and
    table, and the model gives LiteRT's answers."""
    b = ModelBuilder()
    c = b.const("c", np.array([90], np.int8), q(0.01, 0))
    x = b.input("x", (1, 16, 16, 8), np.int8, q(0.05, 3))
    m = b.op("MUL", [c, x], NONE, quantization=q(0.04, -2))
    r = b.op("RELU", [m], quantization=q(0.04, -2))
    b.output(b.op("TANH", [r], quantization=q(1 / 128, 0)))
    model = b.to_bytes()
    delegate, interpreter = delegated(model, str(tmp_path), exclude_nodes="1")
    assert [k.kernel.name for k in delegate.kernels.values()] == ["table_lookup_int8_int8"] * 2
    same_as_builtin(model, interpreter, [rng.integers(-128, 128, (1, 16, 16, 8), np.int8)])


def test_per_channel_and_one_value_operands_are_rescaled_once_each(cache_dir, rng):
    """ADD, SUB and SQUARED_DIFFERENCE with a [C] input and a [1] input (not constants, so
    not tables): each such operand is rescaled in a nest of its own shape, once per channel,
    and the full tensor's elements only combine the two."""
    shape = (6, 64)
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(0.05, 3))
    c = b.input("c", (64,), np.int8, q(0.02, -9))
    s = b.input("s", (1,), np.int8, q(0.1, 4))
    a = b.op("ADD", [x, c], NONE, quantization=q(0.06, 2))
    d = b.op("SUB", [s, a], NONE, quantization=q(0.08, -1))
    b.output(b.op("SQUARED_DIFFERENCE", [d, c], quantization=q(0.3, -120)))
    model = b.to_bytes()
    delegate, interpreter = delegated(model, cache_dir)
    assert delegate.summary() == "3 of 3 nodes delegated in 1 partitions"
    source = delegate.kernels[0].kernel.source
    assert "Nest 1 over [1] as [1]: QCALL(rescale_input_int32)" in source
    assert "Nest 2 over [64]: LUT(part), QCALL(rescale_input_int32)" in source
    assert "Nest 3 over [6, 64]" in source and "Nest 4" not in source
    same_as_builtin(model, interpreter, [rng.integers(-128, 128, shape).astype(np.int8),
                                         rng.integers(-128, 128, 64).astype(np.int8),
                                         rng.integers(-128, 128, 1).astype(np.int8)])


def test_float_islands_between_quantize_and_dequantize_fuse(cache_dir, rng):
    """DEQUANTIZE -> float ADD, MUL, RELU -> QUANTIZE, as converters leave them: one kernel
    that reads and writes int8; the float math in between is exact, so the result is too."""
    shape = (1, 16, 16, 32)
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(0.1, -3))
    f = b.op("DEQUANTIZE", [x], dtype=np.float32)
    g = b.op("MUL", [b.op("ADD", [f, b.const("bias", np.float32(0.5))], NONE),
                     b.const("scale", np.linspace(0.5, 2, 32, dtype=np.float32))], NONE)
    y = b.op("QUANTIZE", [b.op("RELU", [g])], dtype=np.int8, quantization=q(0.07, -128))
    b.output(y)
    model = b.to_bytes()
    delegate, interpreter = delegated(model, cache_dir)
    assert delegate.summary() == "5 of 5 nodes delegated in 1 partitions"
    source = delegate.kernels[0].kernel.source
    assert "int8[::1], float32[::1], int8[::1]" in source and "quantize_block(" in source
    same_as_builtin(model, interpreter, [rng.integers(-128, 128, shape).astype(np.int8)])


def float_island(shape: tuple[int, ...], expose_float: bool, scale: float = 0.05) -> bytes:
    """int8 x (of `scale`) -> DEQUANTIZE -> GELU -> MUL by a scalar -> TANH -> QUANTIZE; with
    `expose_float`, the TANH's float output is a model output too."""
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(scale, 7))
    f = b.op("GELU", [b.op("DEQUANTIZE", [x], dtype=np.float32)], {"approximate": False})
    t = b.op("TANH", [b.op("MUL", [f, b.const("k", np.float32(0.75))], NONE)])
    b.output(b.op("QUANTIZE", [t], dtype=np.int8, quantization=q(1 / 128, 0)))
    if expose_float:
        b.output(t)
    return b.to_bytes()


def test_islands_of_other_constants_share_their_kernel_and_keep_their_own_tables(tmp_path, rng):
    """Two islands that differ in their quantization alone run one compiled island kernel (its
    tables and constants are data, codegen.kernel_data), each keeping its own table beside it,
    the per-element kernel's."""
    shape = (1, 8, 8, 16)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    for scale in (0.05, 0.11):
        _, interpreter = delegated(float_island(shape, False, scale), str(tmp_path))
        _, whole = delegated(float_island(shape, True, scale), str(tmp_path))
        np.testing.assert_array_equal(run(interpreter, [x])[0], run(whole, [x])[0])
    # The island's kernel and the per-element one, each compiled once.
    assert len(list(tmp_path.glob("fused_dequantize_gelu_*.py"))) == 2
    assert len(list(tmp_path.glob("fused_dequantize_gelu_*.npy"))) == 2


@pytest.mark.parametrize("precision", ["fast", "exact"])
def test_a_float_island_on_one_int8_tensor_is_the_table_of_the_per_element_kernel(
        cache_dir, rng, precision):
    """Float math between an int8 input and an int8 output is a function of 256 codes: the
    kernel looks it up (codegen.islands), and each entry is what the per-element kernel (the
    same island, its float value needed as an output) computes."""
    shape = (1, 30, 30, 24)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    delegate, interpreter = delegated(float_island(shape, False), cache_dir, precision=precision)
    assert delegate.summary() == "5 of 5 nodes delegated in 1 partitions"
    gelu_call = re.compile(r"\bgelu\w*\(")
    assert "lookup_bytes(" in delegate.kernels[0].kernel.source
    assert not gelu_call.search(delegate.kernels[0].kernel.source)
    per_element, whole = delegated(float_island(shape, True), cache_dir, precision=precision)
    assert gelu_call.search(per_element.kernels[0].kernel.source)
    [table_result] = run(interpreter, [x])
    np.testing.assert_array_equal(table_result, run(whole, [x])[0])
    [litert] = run(builtin_interpreter(float_island(shape, False)), [x])
    assert np.abs(table_result.astype(int) - litert).max() <= 1   # float rounding at a step


def test_quantize_of_a_tensor_whose_paths_differ_is_not_claimed(cache_dir):
    """LiteRT rounds QUANTIZE's blocks of 8 to even and its tail away from zero: at 13
    elements both run, which one kernel does not follow."""
    b = ModelBuilder()
    x = b.input("x", (13,))
    b.output(b.op("QUANTIZE", [b.op("RELU", [x])], dtype=np.int8, quantization=q(0.1, 0)))
    delegate, _ = delegated(b.to_bytes(), cache_dir, min_nodes_per_partition=1)
    assert delegate.claims[1].reason.startswith("kernel cannot be built")
    assert "differently" in delegate.claims[1].reason


@st.composite
def quantized_graphs(draw, dtypes=(np.int8,)):
    """Random int8 (or uint8) DAGs: unary and binary ops on earlier values, per-channel and
    one-value constants, random scales and zero points; some models enter from float
    (QUANTIZE) and leave to float (DEQUANTIZE). Returns (model, shape, float_entry, dtype)."""
    shape = draw(st.sampled_from([(4, 16), (2, 3, 32), (5, 8), (64,)]))
    dtype = draw(st.sampled_from(dtypes))
    low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    b = ModelBuilder()
    scale = st.floats(0.002, 0.5)
    zero = st.integers(low, high)
    float_entry = draw(st.booleans())
    if float_entry:
        x = b.input("x", shape)
        values = [b.op("QUANTIZE", [x], dtype=dtype, quantization=q(draw(scale), draw(zero)))]
    else:
        values = [b.input("x", shape, dtype, q(draw(scale), draw(zero)))]
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(UNARY + BINARY))
        a = draw(st.sampled_from(values))
        if op in FIXED_OUTPUT:
            out_scale, int8_zero = FIXED_OUTPUT[op]
            out_zero = int8_zero + 128 + low  # the same real range in uint8 codes
        else:
            out_scale, out_zero = draw(scale), draw(zero)
        if op in BINARY:
            kind = draw(st.sampled_from(["value", "channel", "scalar"]))
            if kind == "value":
                other = draw(st.sampled_from(values))
            else:
                size = shape[-1] if kind == "channel" else 1
                data = np.array(draw(st.lists(st.integers(low, high), min_size=size,
                                              max_size=size)), dtype)
                other = b.const(f"c{len(values)}", data if kind == "channel" else data[0],
                                q(draw(scale), draw(zero)))
            options = NONE if op in ("ADD", "SUB", "MUL") else None
            values.append(b.op(op, [a, other], options, quantization=q(out_scale, out_zero)))
        else:
            values.append(b.op(op, [a], OPTIONS.get(op), quantization=q(out_scale, out_zero)))
    out = values[-1]
    if draw(st.booleans()):
        out = b.op("DEQUANTIZE", [out], dtype=np.float32)
    b.output(out)
    return b.to_bytes(), shape, float_entry, dtype


def graph_input(graph: tuple, rng: np.random.Generator) -> np.ndarray:
    """An input for a model of quantized_graphs: floats where it enters through QUANTIZE,
    else every code of its dtype."""
    _, shape, float_entry, dtype = graph
    if float_entry:
        return rng.standard_normal(shape).astype(np.float32) * 4
    return rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)


#: What may keep a node of a random model from being claimed: LiteRT's paths differ at these
#: shapes or scales, its Prepare or Eval would fail, or its int32 arithmetic would overflow.
ACCEPTED_REFUSALS = ("differently", "position dependent", "Prepare", "Eval", "fails",
                     "overflows", "aborts", "undefined", "cannot be negated", "not finite",
                     "outside")


@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=quantized_graphs((np.int8, np.uint8)), seed=st.integers(0, 2**32 - 1))
def test_random_quantized_models_match_builtin_kernels_bit_for_bit(graph, seed, cache_dir):
    """Every node is claimed but where LiteRT itself rounds by position at these shapes or
    would fail (ACCEPTED_REFUSALS), and every output equals LiteRT's, bit for bit; models the
    builtin kernels reject (Prepare or Eval fails for these scales or this dtype) are skipped
    by hypothesis."""
    model = graph[0]
    x = graph_input(graph, np.random.default_rng(seed))
    try:
        expected = run(builtin_interpreter(model), [x])
    except RuntimeError:
        from hypothesis import reject
        reject()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, min_nodes_per_partition=1)
    interpreter = builtin_interpreter(model, [delegate])
    refused = {c.reason for c in delegate.claims.values() if c.reason is not None}
    assert all(any(word in reason for word in ACCEPTED_REFUSALS) for reason in refused), refused
    for got, want in zip(run(interpreter, [x]), expected):
        if got.dtype == np.float32:
            np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
        else:
            np.testing.assert_array_equal(got, want)


def test_a_lone_int8_add_of_two_tensors_is_left_to_xnnpack(cache_dir):
    shape = (1, 50, 40, 25)
    b = ModelBuilder()
    x, y = b.input("x", shape, np.int8, q(0.05, 3)), b.input("y", shape, np.int8, q(0.04, -2))
    b.output(b.op("ADD", [x, y], {"fused_activation_function": 3}, quantization=q(0.06, -128)))
    defaults = FusionDelegate(cache_dir=cache_dir)
    builtin_interpreter(b.to_bytes(), [defaults])
    assert "nothing to fuse" in defaults.claims[0].reason
    claimed, _ = delegated(b.to_bytes(), cache_dir)
    assert claimed.claims[0].reason is None
