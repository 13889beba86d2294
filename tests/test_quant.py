"""int8/uint8 semantics (codegen.quant_*, codegen.fixedpoint) against LiteRT's builtin kernels.

Every comparison is bit for bit: all 256 inputs of a unary op in one tensor, all 65536 pairs
of a binary op in one tensor pair, on grids of scales and zero points that include the
extremes. Position matters in LiteRT (NEON blocks vs scalar loops, see
docs/quantized_semantics.md), so expected outputs follow `binary_paths` / `UnaryLookup`.
"""
import itertools
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import codegen.fixedpoint_numba  # noqa: F401 - registers the helpers with numba, as in kernels
from codegen import fixedpoint as fp
from codegen.qcall import QCALL_HELPERS
from codegen.qparams import DTYPE_RANGES, ChannelQParams, QParams, QuantError
from codegen.quant_ops import QUANT_OPS
from codegen.quant_parts import binary_parts
from codegen.quant_paths import (ELEMENTWISE_BLOCK, REFERENCE, SCALAR_BLOCK, binary_paths,
                                 chain_regions)
from codegen.quant_prepare import (activation_range_quantized, prepare_add, prepare_binary,
                                   prepare_requantize, quantize_multiplier, quantize_multipliers,
                                   quantize_multiplier_smaller_than_one_exp)
from codegen.quant_reference import (binary, binary_call, binary_grid, binary_scalar_table,
                                     dequantize, quantize, unary_call, unary_lookup, unary_table)
from codegen.quant_support import quant_unsupported
from conftest import BUILTIN, ROOT, foreign_calls
from fusion_delegate.model import ModelBuilder, Quantization, write_model

NP = {"int8": np.int8, "uint8": np.uint8, "float32": np.float32, "float16": np.float16}


def _quantization(q) -> Quantization | None:
    if q is None:
        return None
    if isinstance(q, ChannelQParams):
        return Quantization(np.array(q.scales, np.float32), np.array(q.zero_points),
                            q.axis)
    return Quantization(np.array([q.scale], np.float32), np.array([q.zero_point]))


def op_model(op: str, inputs: list[tuple], out_dtype: str, out_q, options=None) -> bytes:
    """One `op` node; inputs: (shape, dtype, quantization, constant data or None)."""
    b = ModelBuilder()
    indices = []
    for k, (shape, dtype, q, data) in enumerate(inputs):
        indices.append(b.input(f"x{k}", shape, NP[dtype]) if data is None
                       else b.const(f"c{k}", np.asarray(data, NP[dtype]).reshape(shape)))
    out = b.op(op, indices, options, dtype=NP[out_dtype], name="y")
    b.output(out)
    model = b.build()
    tensors = model.subgraphs[0].tensors
    for index, (_, _, q, _) in zip(indices, inputs):
        tensors[index].quantization = _quantization(q)
    tensors[out].quantization = _quantization(out_q)
    return write_model(model)


def interpreter(model: bytes):
    from fusion_delegate.runtime import Interpreter
    it = Interpreter(model_content=model, experimental_op_resolver_type=BUILTIN)
    it.allocate_tensors()
    return it


def invoke(it, *arrays) -> np.ndarray:
    for detail, array in zip(it.get_input_details(), arrays):
        it.set_tensor(detail["index"], array)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def run_op(op, inputs, out_dtype, out_q, arrays, options=None) -> np.ndarray:
    return invoke(interpreter(op_model(op, inputs, out_dtype, out_q, options)), *arrays)


def codes(dtype: str) -> np.ndarray:
    lo, hi = DTYPE_RANGES[dtype]
    return np.arange(lo, hi + 1).astype(NP[dtype])


def shifted(zero_point: int, dtype: str) -> int:
    """An int8 zero point moved into the dtype's range."""
    return zero_point + 128 if dtype == "uint8" else zero_point


# Grids of (input scale, input zp, output scale, output zp), zero points given for int8.
UNARY_GRID = [
    (0.05, 3, 0.04, -2), (0.1, 0, 1 / 256, -128), (0.02, -128, 0.07, 127),
    (1e-3, 10, 2.0, 0), (3.0, -50, 0.01, 5), (0.5, 127, 0.5, -128), (1 / 16, 0, 1 / 128, 0),
    (1e-6, 1, 1e-6, -1), (250.0, -3, 300.0, 40), (1e-9, -100, 1e-3, 100),
    (7.5, 64, 0.02, -64), (2 ** -20, 0, 2 ** -12, 17), (0.1, 3, 1e-45, 5),
    (1e30, 1, 1e-30, 0), (1e-30, 0, 1e30, 0),
]
LUT_AND_FIXED_OPS = [("TANH", None), ("LOGISTIC", None), ("ELU", None), ("EXP", None),
                     ("LOG", None), ("GELU", {"approximate": True}),
                     ("GELU", {"approximate": False}), ("HARD_SWISH", None), ("RELU", None),
                     ("RELU6", None), ("RELU_N1_TO_1", None), ("RELU_0_TO_1", None),
                     ("LEAKY_RELU", {"alpha": 0.1}), ("LEAKY_RELU", {"alpha": -0.75}),
                     ("LEAKY_RELU", {"alpha": 3.0}), ("ABS", None), ("NEG", None),
                     ("SQRT", None), ("RSQRT", None)]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("op, options", LUT_AND_FIXED_OPS,
                         ids=[f"{op}-{o}" if o else op for op, o in LUT_AND_FIXED_OPS])
def test_unary_tables_equal_the_builtin_on_all_256_inputs(op, options, dtype):
    if dtype not in QUANT_OPS[op].dtypes:
        with pytest.raises((RuntimeError, ValueError)):
            run_op(op, [((256,), dtype, QParams(0.1, 0, dtype), None)], dtype,
                   QParams(0.1, 0, dtype), [codes(dtype)], options)
        assert quant_unsupported(op, (dtype, dtype), (QParams(0.1, 0, dtype),),
                                 QParams(0.1, 0, dtype), options) \
            == f"{dtype} {op} not supported by the builtin kernel"
        return
    compared = 0
    for s_in, z_in, s_out, z_out in UNARY_GRID:
        if op == "LOGISTIC":
            s_out = 1 / 256
        iq = QParams(s_in, shifted(z_in, dtype), dtype)
        oq = QParams(s_out, shifted(z_out, dtype), dtype)
        reason = quant_unsupported(op, (dtype, dtype), (iq,), oq, options, eval_errors=True)
        model = op_model(op, [((256,), dtype, iq, None)], dtype, oq, options)
        if reason is not None:
            if "Prepare fails" in reason:
                with pytest.raises(RuntimeError):
                    interpreter(model)
            continue
        lookup = unary_lookup(op, iq, oq, options)
        x = codes(dtype)
        valid = np.ones(256, bool) if lookup.invalid is None else ~lookup.invalid
        it = interpreter(model)
        got = invoke(it, np.where(valid, x, x[valid][0]).astype(x.dtype))
        assert np.array_equal(got[valid], lookup.table[valid]), (op, iq, oq)
        if not valid.all():                     # the builtin's Eval fails on these inputs
            with pytest.raises(RuntimeError):
                invoke(it, x)
        compared += 1
    assert compared >= 6


def test_lut_tables_cover_overflow_and_nan_as_the_wheel_does():
    """LUTPopulate's float->int cast in the wheel: for int8, NaN (0 * inf with a denormal
    output scale) gives 0 and values beyond int32 saturate (EXP of large inputs gives 127);
    for uint8 both give INT32_MIN, hence 0."""
    for op, iq, oq in (("TANH", QParams(0.05, 0), QParams(1e-45, 5)),
                       ("EXP", QParams(1.0, 0), QParams(1.0, -3)),
                       ("EXP", QParams(1.0, 0), QParams(1e-30, 3)),
                       ("TANH", QParams(0.1, 131, "uint8"), QParams(1e-45, 133, "uint8")),
                       ("GELU", QParams(1e30, 129, "uint8"), QParams(1e-30, 128, "uint8"))):
        table = unary_table(op, iq, oq)
        got = run_op(op, [((256,), iq.dtype, iq, None)], oq.dtype, oq, [codes(iq.dtype)])
        assert np.array_equal(got, table), (op, iq, oq)
    assert unary_table("TANH", QParams(0.05, 0), QParams(1e-45, 5))[128] == 0      # NaN
    assert unary_table("EXP", QParams(1.0, 0), QParams(1.0, -3))[-1] == 127        # inf
    assert unary_table("TANH", QParams(0.1, 131, "uint8"),                         # inf,
                       QParams(1e-45, 133, "uint8"))[-1] == 0                      # uint8


def position_runs(op, inputs, out_dtype, out_q, values, block: int):
    """The builtin on `values` twice: inside NEON blocks (a tensor of len(values), a
    multiple of `block`) and in the scalar loop (tensors of block - 1 elements)."""
    n = len(values)
    assert n % block == 0
    (_, dtype, q, _), = inputs
    blocks = run_op(op, [((n,), dtype, q, None)], out_dtype, out_q, [values])
    it = interpreter(op_model(op, [((block - 1,), dtype, q, None)], out_dtype, out_q))
    tail = []
    for start in range(0, n, block - 1):
        chunk = values[start:start + block - 1]
        padded = np.concatenate([chunk, np.resize(values[:1], block - 1 - len(chunk))])
        tail.append(invoke(it, padded.astype(values.dtype))[:len(chunk)])
    return blocks, np.concatenate(tail)


REQUANTIZE_GRID = [(0.05, 3, 0.04, -2), (0.02, 0, 0.08, 0), (0.1, -128, 0.1, 127),
                   (0.5, 0, 2.0, 0), (1e-3, 100, 1e-3, -100), (4.0, 1, 0.01, 0),
                   (0.25, 7, 1.0, 7), (1e-6, 0, 3.0, 1), (0.03, -1, 0.007, 1)]


@pytest.mark.parametrize("in_dtype, out_dtype", [("int8", "int8"), ("int8", "uint8"),
                                                 ("uint8", "int8"), ("uint8", "uint8")])
def test_requantize_block_and_scalar_paths(in_dtype, out_dtype):
    refused_where_they_differ = 0
    for s_in, z_in, s_out, z_out in REQUANTIZE_GRID:
        iq = QParams(s_in, shifted(z_in, in_dtype), in_dtype)
        oq = QParams(s_out, shifted(z_out, out_dtype), out_dtype)
        reason = quant_unsupported("QUANTIZE", (in_dtype, out_dtype), (iq,), oq,
                                   position_aware=True)
        if reason:
            assert "overflows" in reason
            continue
        lookup = unary_lookup("QUANTIZE", iq, oq)
        assert lookup.block == 16
        blocks, tail = position_runs("QUANTIZE", [((256,), in_dtype, iq, None)], out_dtype,
                                     oq, codes(in_dtype), 16)
        assert np.array_equal(blocks, lookup.block_table), (iq, oq)
        assert np.array_equal(tail, lookup.table), (iq, oq)
        naive = quant_unsupported("QUANTIZE", (in_dtype, out_dtype), (iq,), oq)
        assert (naive is not None) == (not np.array_equal(blocks, tail))
        refused_where_they_differ += naive is not None
    assert refused_where_they_differ >= 2


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_dequantize_block_and_scalar_paths(dtype):
    for s, z, *_ in UNARY_GRID:
        iq = QParams(s, shifted(z, dtype), dtype)
        lookup = unary_lookup("DEQUANTIZE", iq, None)
        assert lookup.block == 8
        blocks, tail = position_runs("DEQUANTIZE", [((256,), dtype, iq, None)], "float32",
                                     None, codes(dtype), 8)
        assert np.array_equal(blocks.view(np.int32), lookup.block_table.view(np.int32))
        assert np.array_equal(tail.view(np.int32), lookup.table.view(np.int32))
        assert np.array_equal(dequantize(codes(dtype), iq), lookup.table)
        position_dependent = not np.array_equal(blocks.view(np.int32), tail.view(np.int32))
        assert position_dependent == (quant_unsupported(
            "DEQUANTIZE", (dtype, "float32"), (iq,), None) is not None)
        assert not position_dependent or iq.zero_point != 0     # zp 0: one rounding each


def special_floats(scale: float) -> np.ndarray:
    """NaN, +-inf, -0.0, huge values, exact ties (k + 1/2) * scale and their neighbours."""
    ties = (np.arange(-140, 140) + 0.5).astype(np.float64) * scale
    with np.errstate(over="ignore"):
        ties = ties.astype(np.float32)
        big = np.float32(2 ** 31) * np.float32(scale)
    values = np.concatenate([
        [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 3e9, -3e9, 1e30, -1e30,
         big, np.finfo(np.float32).max,
         np.finfo(np.float32).tiny, 1e-45],
        ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, -np.float32(np.inf)),
        np.random.default_rng(7).standard_normal(1000) * 200 * scale]).astype(np.float32)
    return values[:len(values) - len(values) % 8]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("scale, zero_point", [(0.5, 0), (0.05, -7), (1e-3, 127),
                                               (1.7e-38, 3), (1e30, -128), (1 / 3, 100)])
def test_quantize_float_special_values_on_both_paths(dtype, scale, zero_point):
    """What LiteRT does with NaN/inf: the cast gives INT32_MIN, so with zero point >= 0
    NaN and +-inf all become qmin, and a negative zero point wraps them to qmax."""
    oq = QParams(scale, shifted(zero_point, dtype), dtype)
    x = special_floats(oq.scale)
    blocks, tail = position_runs("QUANTIZE", [((len(x),), "float32", None, None)], dtype, oq,
                                 x, 8)
    assert np.array_equal(blocks, quantize(x, oq, ELEMENTWISE_BLOCK))
    assert np.array_equal(tail, quantize(x, oq, REFERENCE))
    nan_value = oq.qmax if oq.zero_point < 0 else oq.qmin
    assert tail[0] == tail[1] == tail[2] == tail[3] == nan_value
    assert not np.array_equal(blocks, tail)                      # ties: even vs away
    assert quant_unsupported("QUANTIZE", ("float32", dtype), (None,), oq) is not None
    assert quant_unsupported("QUANTIZE", ("float32", dtype), (None,), oq,
                             position_aware=True) is None


def test_per_channel_quantize_and_dequantize():
    """The only kernels that take per-channel params: QUANTIZE's output and DEQUANTIZE's
    input (reference loops, one path: roundf of a float32 quotient for QUANTIZE)."""
    cq = ChannelQParams((0.1, 0.02, 3.0), (0, -5, 7), axis=1, dtype="int8")
    x = (np.random.default_rng(3).standard_normal((50, 3)) * 4).astype(np.float32)
    x[:3] = [[np.nan, np.inf, -np.inf], [0.05, 0.01, 1.5], [-0.05, -0.03, 4.5]]
    got = run_op("QUANTIZE", [((50, 3), "float32", None, None)], "int8", cq, [x])
    assert np.array_equal(got, quantize(x, cq))
    assert quant_unsupported("QUANTIZE", ("float32", "int8"), (None,), cq) is None
    q = np.resize(codes("int8"), (86, 3))
    got = run_op("DEQUANTIZE", [((86, 3), "int8", cq, None)], "float32", None, [q])
    assert np.array_equal(got.view(np.int32), dequantize(q, cq).view(np.int32))
    assert quant_unsupported("DEQUANTIZE", ("int8", "float32"), (cq,), None) is None
    assert "per-channel" in quant_unsupported(
        "ADD", ("int8",) * 3, (cq, QParams(0.1, 0)), QParams(0.1, 0))


def test_float16_constant_dequantize_is_an_exact_conversion():
    bits = np.arange(0, 65536, 97, dtype=np.uint16)
    half = bits.view(np.float16)
    got = run_op("DEQUANTIZE", [(half.shape, "float16", None, half)], "float32", None, [])
    want = dequantize(half, None)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))
    assert quant_unsupported("DEQUANTIZE", ("float16", "float32"), (None,), None) is None


# ------------------------------------------------------------------------------ binary

BINARY_GRID = [  # (s1, z1, s2, z2, s_out, z_out), int8 zero points
    (0.05, 3, 0.03, -7, 0.06, 2), (0.1, 0, 0.1, 0, 0.2, -128), (0.5, -128, 0.125, 127, 0.25, 0),
    (0.02, 10, 0.7, -3, 0.9, 4), (1e-4, 127, 1e-4, -128, 3e-4, 127), (30.0, 1, 0.01, 2, 40.0, 3),
    (0.003, -20, 0.002, 20, 1e-4, -1), (1e-8, 0, 3e-8, 5, 2e-8, -3),
    (1e3, -128, 4e3, 127, 5e3, 0),
]


def grid_layouts(q1: QParams, q2: QParams):
    """Operand layouts that reach each LiteRT path with (all) 65536 pairs."""
    a, b = binary_grid(q1, q2)
    c1, c2 = q1.codes(), q2.codes()
    return {
        "same_shape": ((65536,), a, (65536,), b),            # elementwise NEON blocks
        "same_shape_tail": ((65549,), np.resize(a, 65549), (65549,), np.resize(b, 65549)),
        "generic": ((16, 1, 16, 1), c1, (1, 16, 1, 16), c2),  # reference broadcast
        "scalar_rows": ((256, 1), c1, (1, 256), c2),           # scalar-broadcast blocks
        "scalar_tail": ((256, 1), c1, (1, 7), c2[:7]),         # their scalar loop
        "rows_of_15": ((4370, 15), np.resize(a, 65550), (15,), c2[100:115]),  # scalar loop
    }


def expected_binary(op, prepared, dtype, shape1, a, shape2, b) -> np.ndarray:
    paths = binary_paths(op, dtype, shape1, shape2)
    want = np.zeros(paths.shape, np.int64)
    for path in np.unique(paths):
        full = binary(op, a.reshape(shape1), b.reshape(shape2), prepared, dtype, int(path))
        want[paths == path] = np.broadcast_to(full, paths.shape)[paths == path]
    return want


def check_binary(op, q1, q2, qo, activation=0, layouts=None):
    dtype = qo.dtype
    options = {"fused_activation_function": activation} if op in ("ADD", "SUB", "MUL") \
        else None
    params = {"activation": activation}
    prepared = prepare_binary(op, q1, q2, qo, params)
    checked = []
    for name, (shape1, a, shape2, b) in grid_layouts(q1, q2).items():
        if layouts and name not in layouts:
            continue
        if op == "PRELU" and np.broadcast_shapes(shape1, shape2) != shape1:
            continue
        assert quant_unsupported(op, (dtype,) * 3, (q1, q2), qo, params,
                                 shapes=(shape1, shape2), position_aware=True) is None
        got = run_op(op, [(shape1, dtype, q1, None), (shape2, dtype, q2, None)], dtype, qo,
                     [a.reshape(shape1).astype(NP[dtype]), b.reshape(shape2).astype(NP[dtype])],
                     options)
        want = expected_binary(op, prepared, dtype, shape1, a, shape2, b)
        assert np.array_equal(got.astype(np.int64), want), (op, name, q1, q2, qo, activation)
        checked.append(name)
    return checked


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
def test_arithmetic_on_all_pairs_every_path_and_activation(op, dtype):
    compared = 0
    for k, (s1, z1, s2, z2, so, zo) in enumerate(BINARY_GRID):
        q1, q2 = QParams(s1, shifted(z1, dtype), dtype), QParams(s2, shifted(z2, dtype), dtype)
        qo = QParams(so, shifted(zo, dtype), dtype)
        for activation in (0, 1, 2, 3, 4):
            reason = quant_unsupported(op, (dtype,) * 3, (q1, q2), qo,
                                       {"activation": activation}, position_aware=True)
            if reason:
                assert "LiteRT aborts" in reason or "overflows" in reason or "SUB output" \
                    in reason, reason
                continue
            # every layout for one activation per grid point, the plain same-shape grid else
            layouts = None if activation == k % 5 else ("same_shape", "generic")
            compared += len(check_binary(op, q1, q2, qo, activation, layouts))
    assert compared >= 30


@pytest.mark.parametrize("op, dtypes", [("SQUARED_DIFFERENCE", ["int8"]),
                                        ("MAXIMUM", ["int8", "uint8"]),
                                        ("MINIMUM", ["int8", "uint8"]),
                                        ("PRELU", ["int8", "uint8"])])
def test_other_binary_ops_on_all_pairs(op, dtypes):
    for dtype in dtypes:
        for s1, z1, s2, z2, so, zo in BINARY_GRID:
            q1, q2 = QParams(s1, shifted(z1, dtype), dtype), QParams(s2, shifted(z2, dtype),
                                                                     dtype)
            qo = QParams(so, shifted(zo, dtype), dtype)
            reason = quant_unsupported(op, (dtype,) * 3, (q1, q2), qo)
            if reason:
                assert "LiteRT aborts" in reason or "overflows" in reason, reason
                continue
            check_binary(op, q1, q2, qo, layouts=("same_shape", "generic", "rows_of_15"))


def test_squared_difference_uint8_is_refused_and_fails_in_litert():
    q = QParams(0.1, 128, "uint8")
    with pytest.raises(RuntimeError):
        run_op("SQUARED_DIFFERENCE", [((4,), "uint8", q, None)] * 2, "uint8", q,
               [np.zeros(4, np.uint8)] * 2)
    assert quant_unsupported("SQUARED_DIFFERENCE", ("uint8",) * 3, (q, q), q) is not None


@pytest.mark.parametrize("op", ["ADD", "MUL", "SUB", "MAXIMUM", "PRELU"])
@pytest.mark.parametrize("scalar_index", [0, 1])
def test_binary_scalar_tables_with_a_constant_operand(op, scalar_index):
    """x (op) c and c (op) x for a constant scalar c: LiteRT's scalar-broadcast kernels (for
    ADD/MUL NEON blocks of 8/16 and a scalar loop), as 256-entry tables."""
    if op == "PRELU" and scalar_index == 0:
        return
    dtype = "int8"
    q1, q2, qo = QParams(0.02, 5, dtype), QParams(0.3, -4, dtype), QParams(0.25, -2, dtype)
    scalar = 77
    for n in (256, 255):                      # 255: the last 255 % 8 (or % 16) in the loop
        x = np.resize(codes(dtype), n)
        inputs = [((n,), dtype, q1, None), ((1,), dtype, q2, np.array([scalar]))]
        if scalar_index == 0:
            inputs = [((1,), dtype, q1, np.array([scalar])), ((n,), dtype, q2, None)]
        options = {"fused_activation_function": 0} if op in ("ADD", "SUB", "MUL") else None
        got = run_op(op, inputs, dtype, qo, [x], options)
        shapes = ((n,), (1,)) if scalar_index == 1 else ((1,), (n,))
        paths = binary_paths(op, dtype, *shapes)
        want = np.empty(n, np.int64)
        for path in np.unique(paths):
            table = binary_scalar_table(op, q1, q2, qo, scalar, scalar_index, path=int(path))
            want[paths == path] = table[x.astype(np.int64) + 128][paths == path]
        assert np.array_equal(got.astype(np.int64), want), (op, scalar_index, n)


def test_broadcast_paths_follow_litert_five_fold_decomposition():
    assert (binary_paths("ADD", "int8", (40,), (40,)).tolist()
            == [ELEMENTWISE_BLOCK] * 32 + [REFERENCE] * 8)
    rows = binary_paths("ADD", "int8", (3, 20), (20,))
    assert (rows == ([ELEMENTWISE_BLOCK] * 16 + [REFERENCE] * 4)).all()
    scalar = binary_paths("MUL", "uint8", (2, 1), (2, 10))
    assert (scalar == ([SCALAR_BLOCK] * 8 + [REFERENCE] * 2)).all()
    assert not binary_paths("ADD", "int8", (2, 1, 2, 1), (1, 2, 1, 2)).any()   # generic
    assert not binary_paths("SUB", "int8", (64,), (64,)).any()                 # reference


# --------------------------------------------------------------------- refusals, Prepare

def test_quantize_multiplier_matches_the_definition():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75) == (round(0.75 * 2 ** 31), 0)
    assert quantize_multiplier(1 - 2 ** -40) == (1 << 30, 1)    # rounds up to 2**31
    assert quantize_multiplier(2.0 ** -40) == (0, 0)            # shift < -31 flushes
    assert quantize_multiplier(-0.3)[0] < 0
    with pytest.raises(QuantError):
        quantize_multiplier_smaller_than_one_exp(1 - 2 ** -40)
    for real in np.exp(np.random.default_rng(0).uniform(-20, 20, 200)):
        m, s = quantize_multiplier(float(real))
        assert 1 << 30 <= m < 1 << 31 and abs(m * 2.0 ** (s - 31) / real - 1) < 2 ** -30


def test_quantize_multipliers_is_quantize_multiplier_of_each():
    """The array form (per-channel convolutions) gives the scalar form's pairs, edges too."""
    rng = np.random.default_rng(1)
    reals = np.concatenate([np.exp(rng.uniform(-30, 30, 5000)), -np.exp(rng.uniform(-5, 5, 50)),
                            [0.0, 0.5, 1.0, 0.75, 1 - 2 ** -40, 2.0 ** -40, 2.0 ** -32,
                             2.0 ** -31, 1 - 2 ** -33, 5e-324]])
    multipliers, shifts = quantize_multipliers(reals)
    assert [(int(m), int(s)) for m, s in zip(multipliers, shifts)] == \
        [quantize_multiplier(float(r)) for r in reals]
    with pytest.raises(QuantError):
        quantize_multipliers(np.array([1.0, np.inf]))


@pytest.mark.parametrize("activation, bounds", [(0, (-128, 127)), (1, (3, 127)),
                                                (3, (3, 63)), (2, (-7, 13)), (4, (-128, 127)),
                                                (5, (-128, 127))])
def test_activation_range_quantized(activation, bounds):
    assert activation_range_quantized(activation, QParams(0.1, 3, "int8")) == bounds


def single_rounding(x, multiplier, shift):
    """MultiplyByQuantizedMultiplier as common.cc computes it with TFLITE_SINGLE_ROUNDING:
    (x * multiplier + 2**(30 - shift)) >> (31 - shift)."""
    total = 31 - shift
    return (x * multiplier + (1 << (total - 1))) >> total


def test_the_wheel_rounds_twice_not_once():
    """TFLITE_SINGLE_ROUNDING is unset in the 2.3 wheel: a requantization whose double and
    single rounding differ follows the double rounding (SRDHM then RoundingDivideByPOT)."""
    iq, oq = QParams(0.007, -1), QParams(0.03, 1)
    p = prepare_requantize(iq, oq)
    x = iq.codes() - iq.zero_point
    double = fp.multiply_by_quantized_multiplier(x, p.multiplier, p.shift)
    single = single_rounding(x, p.multiplier, p.shift)
    assert p.shift < 0 and (double != single).any()
    _, tail = position_runs("QUANTIZE", [((256,), "int8", iq, None)], "int8", oq,
                            codes("int8"), 16)
    assert np.array_equal(tail, np.clip(double + oq.zero_point, -128, 127))
    assert not np.array_equal(tail, np.clip(single + oq.zero_point, -128, 127))


def litert_aborts(script: str) -> bool:
    """Run a builtin-kernel snippet in a child process: TFLITE_CHECK failures abort."""
    code = ("import sys; sys.path[:0] = [%r, %r]\n" % (str(ROOT), str(ROOT / "tests"))
            + "from test_quant import *\n" + script)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    return result.returncode < 0


def test_refusals_name_the_reason_and_the_refused_combos_differ_or_fail():
    i8 = QParams(0.1, 0, "int8")
    cases = {
        ("LOGISTIC", (i8,), QParams(0.01, -128)): "output scale must be 1/256",
        ("ABS", (QParams(0.1, 128, "uint8"),), QParams(0.1, 128, "uint8")): "not supported",
        ("SQRT", (QParams(0.1, 3),), QParams(0.1, 0)): "fails Eval",
        ("RSQRT", (QParams(0.1, -128),), QParams(0.1, 0)): None,
        ("ADD", (i8, i8), QParams(1e-7, 0)): "LiteRT aborts",
        ("SUB", (i8, i8), QParams(1e-7, 0)): "SUB output multiplier > 1",
        ("MUL", (QParams(1.0, 0), QParams(1.0, 0)), QParams(1e-6, 0)): "overflows",
        ("HARD_SWISH", (QParams(3.0, 0),), QParams(0.01, 0)): "Prepare fails",
        ("TANH", (QParams(0.1, 200),), i8): "zero point 200 outside int8",
        ("ADD", (i8, QParams(0.1, 0, "uint8")), i8): "quantization dtype",
    }
    for (op, inputs, output), expected in cases.items():
        dtypes = tuple(q.dtype for q in inputs) + (output.dtype,)
        if op == "ADD" and inputs[1].dtype == "uint8":
            dtypes = ("int8", "int8", "int8")
        reason = quant_unsupported(op, dtypes, inputs, output)
        assert (reason is None) if expected is None else (expected in (reason or "")), \
            (op, reason)
    # LiteRT's Prepare really fails / its Eval really fails on these:
    with pytest.raises(RuntimeError, match="1. / 256|scale"):
        interpreter(op_model("LOGISTIC", [((4,), "int8", i8, None)], "int8", QParams(0.01, -128)))
    with pytest.raises(RuntimeError):
        run_op("SQRT", [((2,), "int8", QParams(0.1, 3), None)], "int8", QParams(0.1, 0),
               [np.array([5, 1], np.int8)])
    # ... and ADD with an output multiplier >= 1 aborts the process (TFLITE_CHECK).
    assert litert_aborts("interpreter(op_model('ADD', [((4,), 'int8', QParams(0.1, 0), None)]"
                         " * 2, 'int8', QParams(1e-7, 0), {'fused_activation_function': 0}))")
    # The position-dependent refusals: LiteRT's output for the same inputs differs by place.
    q1, q2, qo = QParams(1.0, 0), QParams(1.0, 0), QParams(0.02, 100)
    reason = quant_unsupported("MUL", ("int8",) * 3, (q1, q2), qo)
    assert "position dependent" in reason
    a, b = binary_grid(q1, q2)
    in_blocks = run_op("MUL", [((65536,), "int8", q1, None), ((65536,), "int8", q2, None)],
                       "int8", qo, [a.astype(np.int8), b.astype(np.int8)],
                       {"fused_activation_function": 0})
    generic = run_op("MUL", [((16, 1, 16, 1), "int8", q1, None), ((1, 16, 1, 16), "int8", q2,
                                                                   None)],
                     "int8", qo, [codes("int8").reshape(16, 1, 16, 1),
                                  codes("int8").reshape(1, 16, 1, 16)],
                     {"fused_activation_function": 0})
    assert not np.array_equal(in_blocks, generic.reshape(-1))


# -------------------------------------------------------------------------- hypothesis

scales = st.floats(1e-5, 1e3).map(lambda s: float(np.float32(s)))
zero_points = st.integers(-128, 127)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(s1=scales, z1=zero_points, s2=scales, z2=zero_points, so=scales, zo=zero_points,
       op=st.sampled_from(["ADD", "MUL", "SUB"]), dtype=st.sampled_from(["int8", "uint8"]),
       activation=st.sampled_from([0, 1, 2, 3]))
def test_random_scales_binary(s1, z1, s2, z2, so, zo, op, dtype, activation):
    q1, q2 = QParams(s1, shifted(z1, dtype), dtype), QParams(s2, shifted(z2, dtype), dtype)
    qo = QParams(so, shifted(zo, dtype), dtype)
    if quant_unsupported(op, (dtype,) * 3, (q1, q2), qo, {"activation": activation},
                         position_aware=True):
        return
    check_binary(op, q1, q2, qo, activation, layouts=("same_shape", "scalar_rows", "generic"))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(si=scales, zi=zero_points, so=scales, zo=zero_points,
       op=st.sampled_from(["TANH", "GELU", "HARD_SWISH", "LEAKY_RELU", "ELU", "QUANTIZE"]),
       dtype=st.sampled_from(["int8", "uint8"]))
def test_random_scales_unary(si, zi, so, zo, op, dtype):
    if dtype not in QUANT_OPS[op].dtypes:
        return
    iq = QParams(si, shifted(zi, dtype), dtype)
    oq = QParams(so, shifted(zo, dtype), dtype)
    options = {"alpha": 0.3} if op == "LEAKY_RELU" else {"approximate": True} \
        if op == "GELU" else None
    if quant_unsupported(op, (dtype, dtype), (iq,), oq, options, position_aware=True):
        return
    lookup = unary_lookup(op, iq, oq, options)
    got = run_op(op, [((256,), dtype, iq, None)], dtype, oq, [codes(dtype)], options)
    assert np.array_equal(got, lookup.table_at(0, 256))


# ------------------------------------------------------------------- chains of tables

def test_a_chain_of_unary_ops_composes_into_per_region_tables():
    """requantize -> TANH -> requantize over 37 elements: LiteRT runs op by op; the chain's
    tables (one per run of positions with the same paths) give the same bytes."""
    q0, q1 = QParams(0.03, -1), QParams(0.007, 1)
    q2, q3 = QParams(1 / 128, 0), QParams(0.25, 7, "uint8")
    b = ModelBuilder()
    x = b.input("x", (37,), np.int8)
    r = b.op("QUANTIZE", [x], dtype=np.int8)
    t = b.op("TANH", [r], dtype=np.int8)
    y = b.op("QUANTIZE", [t], dtype=np.uint8)
    b.output(y)
    model = b.build()
    for index, q in zip((x, r, t, y), (q0, q1, q2, q3)):
        model.subgraphs[0].tensors[index].quantization = _quantization(q)
    it = interpreter(write_model(model))
    lookups = [unary_lookup("QUANTIZE", q0, q1), unary_lookup("TANH", q1, q2),
               unary_lookup("QUANTIZE", q2, q3)]
    regions = chain_regions(lookups, 37)
    assert [(start, stop) for start, stop, _ in regions] == [(0, 32), (32, 37)]
    for start in range(0, 256, 37):
        values = np.resize(codes("int8")[start:], 37)
        got = invoke(it, values)
        want = np.concatenate([table[values[lo:hi].astype(np.int64) + 128]
                               for lo, hi, table in regions])
        assert np.array_equal(got, want)


# ------------------------------------------------------- numba: same helpers, compiled

def compiled_loop(helper: str, args: tuple) -> callable:
    """An @njit loop calling the QCALL helper <helper>(a[i], b[i], *literal args), as a
    generated kernel would (constants as literals)."""
    literal = ", ".join(repr(a) for a in args)
    source = (f"def loop(a, b, out):\n    for i in range(out.shape[0]):\n"
              f"        out[i] = {helper}(a[i], b[i]{', ' if literal else ''}{literal})\n")
    scope = {**QCALL_HELPERS, "np": np}
    exec(source, scope)
    return njit(error_model="numpy")(scope["loop"])


@pytest.mark.parametrize("op, dtype, path", [("ADD", "int8", REFERENCE),
                                             ("ADD", "int8", ELEMENTWISE_BLOCK),
                                             ("ADD", "uint8", SCALAR_BLOCK),
                                             ("SUB", "uint8", REFERENCE),
                                             ("MUL", "int8", REFERENCE),
                                             ("MUL", "uint8", SCALAR_BLOCK),
                                             ("SQUARED_DIFFERENCE", "int8", REFERENCE),
                                             ("PRELU", "int8", REFERENCE)])
def test_numba_helpers_equal_numpy_on_all_pairs(op, dtype, path):
    q1, q2 = QParams(0.05, shifted(3, dtype), dtype), QParams(0.03, shifted(-7, dtype), dtype)
    qo = QParams(0.011, shifted(2, dtype), dtype)
    prepared = prepare_binary(op, q1, q2, qo, {"activation": 3})
    name, args = binary_call(op, prepared, dtype, path)
    a, b = binary_grid(q1, q2)
    a, b = a.astype(NP[dtype]), b.astype(NP[dtype])
    out = np.empty(a.size, NP[dtype])
    compiled_loop(name, args)(a, b, out)
    assert np.array_equal(out, binary(op, a, b, prepared, dtype, path))


@pytest.mark.parametrize("path", [REFERENCE, ELEMENTWISE_BLOCK])
def test_numba_quantize_dequantize_requantize_equal_numpy(path):
    oq = QParams(0.05, -7, "int8")
    x = special_floats(oq.scale)
    name, args = unary_call("QUANTIZE", None, oq, path)
    out = np.empty(x.size, np.int8)
    unary_loop(name, args)(x, out)
    assert np.array_equal(out, quantize(x, oq, path))
    iq = QParams(0.03, -3, "int8")
    for op, output, out_dtype in (("DEQUANTIZE", None, np.int32), ("QUANTIZE", oq, np.int8)):
        name, args = unary_call(op, iq, output, path)
        out = np.empty(256, np.float32 if op == "DEQUANTIZE" else np.int8)
        unary_loop(name, args)(codes("int8"), out)
        want = unary_table(op, iq, output, path=path)
        assert np.array_equal(out.view(out_dtype), want.view(out_dtype))


def unary_loop(helper: str, args: tuple) -> callable:
    scope = {**QCALL_HELPERS, "np": np}
    exec(f"def loop(x, out):\n    for i in range(x.shape[0]):\n"
         f"        out[i] = {helper}(x[i], {', '.join(map(repr, args))})\n", scope)
    return njit(error_model="numpy")(scope["loop"])


def test_the_add_helper_vectorises_and_calls_nothing():
    q = QParams(0.05, 3)
    prepared = prepare_add(q, QParams(0.03, -7), QParams(0.06, 2), 3)
    name, args = binary_call("ADD", prepared, "int8", REFERENCE)
    loop = compiled_loop(name, args)
    a = np.zeros(1024, np.int8)
    loop(a, a, np.empty(1024, np.int8))
    signature = loop.signatures[0]
    asm = loop.inspect_asm(signature)
    packed = re.findall(r"\bvp(?:mul|add|sub|sra|srl|sll|cmp|blend|max|min)\w*\s[^\n]*%[xyz]mm",
                        asm)
    assert len(packed) > 20
    assert foreign_calls(loop.inspect_llvm(signature)) == set()


def test_integer_helpers_match_their_definitions_exhaustively_on_int16():
    """SRDHM and RoundingDivideByPOT against the arithmetic definitions (Python ints)."""
    x = np.arange(-32768, 32768, 7, dtype=np.int64) * 65537
    for multiplier in (1 << 30, 1518500250, 2147483647, 1):
        got = fp.saturating_rounding_doubling_high_mul(x, multiplier)
        ab = x * multiplier
        want = np.where(ab >= 0, (ab + (1 << 30)) >> 31, -((-ab + (1 << 30) - 1) >> 31))
        assert np.array_equal(got, want)
    for exponent in range(0, 31):
        got = fp.rounding_divide_by_pot(x, exponent)
        want = [math.floor(abs(v) / 2 ** exponent + 0.5) * (1 if v >= 0 else -1)
                for v in x[::97].tolist()]
        assert got[::97].tolist() == want
    assert fp.saturating_rounding_doubling_high_mul(fp.INT32_MIN, fp.INT32_MIN) == fp.INT32_MAX


# --------------------------------------- int32 lanes: the int64 definitions, bit for bit
# The per-element helpers compute in int32 (codegen.fixedpoint, "int32 lanes"). Below are
# the int64 formulas they replaced, written with the generic helpers straight from LiteRT's
# and gemmlowp's definitions; the int32 helpers must equal them on every operand pair for
# every parameter set Prepare can produce.

def add_sub_int64(a, b, sign, o1, m1, s1, o2, m2, s2, left_shift, mo, so, oo, lo, hi):
    x1 = fp.multiply_by_quantized_multiplier_smaller_than_one((a + o1) << left_shift, m1, s1)
    x2 = fp.multiply_by_quantized_multiplier_smaller_than_one((b + o2) << left_shift, m2, s2)
    raw = fp.multiply_by_quantized_multiplier_smaller_than_one(x1 + sign * x2, mo, so) + oo
    return fp.saturate(raw, lo, hi)


def add_block_int64(a, b, o1, m1, s1, o2, m2, s2, left_shift, mo, so, oo, lo, hi, merged,
                    qmin, qmax):
    def rescale(q, offset, multiplier, shift):
        x = fp.saturating_rounding_doubling_high_mul(
            fp.shift_left_or_floor_right(q + offset, left_shift + merged * shift), multiplier)
        return fp.shift_left_or_floor_right(x, (1 - merged) * shift)
    total = fp.wrap_int32(rescale(a, o1, m1, s1) + rescale(b, o2, m2, s2))
    raw = fp.multiply_by_quantized_multiplier_smaller_than_one(total, mo, so)
    narrowed = fp.saturate(fp.wrap_int16(fp.wrap_int16(raw) + oo), qmin, qmax)
    return fp.saturate(narrowed, lo, hi)


def squared_difference_int64(a, b, o1, m1, s1, o2, m2, s2, left_shift, mo, so, oo, lo, hi):
    x1 = fp.multiply_by_quantized_multiplier_smaller_than_one((a + o1) << left_shift, m1, s1)
    x2 = fp.multiply_by_quantized_multiplier_smaller_than_one((b + o2) << left_shift, m2, s2)
    raw = fp.multiply_by_quantized_multiplier_smaller_than_one((x1 - x2) ** 2, mo, so) + oo
    return fp.saturate(raw, lo, hi)


def mul_reference_int64(a, b, o1, o2, m, s, oo, lo, hi):
    return fp.saturate(oo + fp.multiply_by_quantized_multiplier((a + o1) * (b + o2), m, s),
                       lo, hi)


def mul_block_int64(a, b, o1, o2, m, s, oo, lo, hi, saturate16, qmin, qmax):
    p = fp.saturating_rounding_doubling_high_mul(
        fp.shift_left_or_floor_right((a + o1) * (b + o2), max(s, 0)), m)
    p = fp.rounding_divide_by_pot(p, max(-s, 0))
    p16 = fp.saturate(p, -32768, 32767) if saturate16 else fp.wrap_int16(p)
    return fp.saturate(fp.saturate(fp.wrap_int16(p16 + oo), qmin, qmax), lo, hi)


INT64_DEFINITIONS = {"add_sub_reference": add_sub_int64, "add_block": add_block_int64,
                     "squared_difference_reference": squared_difference_int64,
                     "mul_reference": mul_reference_int64, "mul_block": mul_block_int64}


def random_binary_params(rng, op: str, dtype: str) -> tuple:
    """(q1, q2, qo, activation) with log-uniform scales; a third of the output scales are
    tiny (int16 wrap in ADD, MUL's largest left shifts)."""
    s1, s2 = (float(np.float32(10 ** rng.uniform(-4, 2))) for _ in range(2))
    if rng.random() < 1 / 3:
        so = s1 * s2 / 2 ** rng.uniform(10, 15.9) if op == "MUL" \
            else max(s1, s2) * 10 ** rng.uniform(-5, -2)
    else:
        so = 10 ** rng.uniform(-4, 2)
    lo, hi = DTYPE_RANGES[dtype]
    z1, z2, zo = (int(rng.integers(lo, hi + 1)) for _ in range(3))
    return (QParams(s1, z1, dtype), QParams(s2, z2, dtype),
            QParams(float(np.float32(so)), zo, dtype), int(rng.integers(0, 4)))


def supported_binary_cases(rng, op: str, dtype: str):
    """Endless random_binary_params the delegate claims, as (q1, q2, qo, activation, prepared,
    a, b): a and b every operand pair, int64."""
    while True:
        q1, q2, qo, activation = random_binary_params(rng, op, dtype)
        params = {"activation": activation}
        if quant_unsupported(op, (dtype,) * 3, (q1, q2), qo, params, position_aware=True):
            continue
        a, b = (x.astype(np.int64) for x in binary_grid(q1, q2))
        yield q1, q2, qo, activation, prepare_binary(op, q1, q2, qo, params), a, b


@pytest.mark.parametrize("op, dtype, path", [
    ("ADD", "int8", REFERENCE), ("ADD", "int8", ELEMENTWISE_BLOCK),
    ("ADD", "int8", SCALAR_BLOCK), ("ADD", "uint8", REFERENCE),
    ("ADD", "uint8", ELEMENTWISE_BLOCK), ("SUB", "int8", REFERENCE),
    ("SUB", "uint8", REFERENCE), ("MUL", "int8", REFERENCE), ("MUL", "int8", ELEMENTWISE_BLOCK),
    ("MUL", "uint8", SCALAR_BLOCK), ("SQUARED_DIFFERENCE", "int8", REFERENCE)])
def test_int32_helpers_equal_the_int64_definitions_on_all_pairs(op, dtype, path):
    """200 random parameter sets each, all 65536 operand pairs, the numpy path (the numba
    path runs the same code: test_numba_int32_helpers_equal_the_int64_definitions)."""
    rng = np.random.default_rng(list(f"{op} {dtype} {path}".encode()))
    left_shifts = 0
    for q1, q2, qo, activation, prepared, a, b in itertools.islice(
            supported_binary_cases(rng, op, dtype), 200):
        name, args = binary_call(op, prepared, dtype, path)
        got = QCALL_HELPERS[name](a, b, *args)
        want = INT64_DEFINITIONS[name](a, b, *args)
        assert np.array_equal(got, want), (op, dtype, path, q1, q2, qo, activation)
        left_shifts += op == "MUL" and prepared.output_shift > 13
    assert op != "MUL" or left_shifts > 5      # the wide doubling high mul was reached


@pytest.mark.parametrize("op, dtype, path", [
    ("ADD", "int8", REFERENCE), ("ADD", "int8", ELEMENTWISE_BLOCK), ("ADD", "int8", SCALAR_BLOCK),
    ("ADD", "uint8", ELEMENTWISE_BLOCK), ("SUB", "uint8", REFERENCE),
    ("SQUARED_DIFFERENCE", "int8", REFERENCE)])
def test_binary_parts_compose_to_the_whole_helper(op, dtype, path):
    """The three calls a kernel makes of an op rescaled apart (codegen.lower): each input's,
    then the output's from both, equal `binary_call`'s one call on all 65536 pairs."""
    rng = np.random.default_rng(list(f"parts {op} {dtype} {path}".encode()))
    outputs, ties = set(), set()
    for *_, prepared, a, b in itertools.islice(supported_binary_cases(rng, op, dtype), 20):
        (in1, args1), (in2, args2), (out, args) = binary_parts(op, prepared, dtype, path)
        x1, x2 = QCALL_HELPERS[in1](a, *args1), QCALL_HELPERS[in2](b, *args2)
        assert x1.dtype == x2.dtype == np.int32
        name, whole = binary_call(op, prepared, dtype, path)
        assert np.array_equal(QCALL_HELPERS[out](x1, x2, *args), QCALL_HELPERS[name](a, b, *whole))
        outputs.add(out)
        ties |= {args[-1]} if out == "add_block_output_quadrupled" else set()
    if op == "ADD" and path != REFERENCE:      # tiny output scales wrap in int16, others not;
        assert outputs == {"add_block_output", "add_block_output_quadrupled"}
        assert ties == {False}                 # random scales meet no tie of the rounding


@pytest.mark.parametrize("scales, ties_reached", [((0.04, 0.03, 0.06), True),
                                                   ((0.03, 0.04, 0.06), True),
                                                   ((0.0437, 0.0291, 0.0613), False)])
def test_add_blocks_keep_the_tie_correction_where_a_tie_is_met(scales, ties_reached):
    """Scales in simple ratios (int8_block's 0.04 + 0.03 -> 0.06) make RoundingDivideByPOT
    meet negative ties, so the quadrupled ADD keeps its correction; the plain shift is the
    input of the larger scale, first or second."""
    s1, s2, so = scales
    prepared = prepare_binary("ADD", QParams(s1, -5), QParams(s2, 0), QParams(so, 2),
                              {"activation": 0})
    parts = binary_parts("ADD", prepared, "int8", ELEMENTWISE_BLOCK)
    assert parts[2][0] == "add_block_output_quadrupled" and parts[2][1][-1] == ties_reached
    assert parts[0 if s1 > s2 else 1][0] == "shifted_code_int32"
    a, b = (x.astype(np.int64) for x in binary_grid(QParams(s1, -5), QParams(s2, 0)))
    (in1, args1), (in2, args2), (out, args) = parts
    got = QCALL_HELPERS[out](QCALL_HELPERS[in1](a, *args1), QCALL_HELPERS[in2](b, *args2), *args)
    name, whole = binary_call("ADD", prepared, "int8", ELEMENTWISE_BLOCK)
    assert np.array_equal(got, QCALL_HELPERS[name](a, b, *whole))


@pytest.mark.parametrize("scales", [(0.04, 0.03, 0.06), (0.0437, 0.0291, 0.0613)])
@pytest.mark.parametrize("once", [0, 1])
def test_add_blocks_in_int16_lanes_equal_the_whole_helper(scales, once):
    """An int8 ADD with an input rescaled once per channel (int8_block's scales, and ones in
    no simple ratio) runs in int16 lanes: that input a table of pairs, the other times 128;
    composed, the three parts equal `binary_call`'s helper on all 65536 pairs."""
    s1, s2, so = scales
    q1, q2 = QParams(s1, -5), QParams(s2, 0)
    prepared = prepare_binary("ADD", q1, q2, QParams(so, 2), {"activation": 0})
    parts = binary_parts("ADD", prepared, "int8", ELEMENTWISE_BLOCK, once)
    assert parts[once][0] == "LUT" and parts[1 - once][0] == "code_times_128_int16"
    a, b = binary_grid(q1, q2)
    x1, x2 = (np.array(args[0], np.int32)[codes.astype(np.int64) + 128] if name == "LUT"
              else QCALL_HELPERS[name](codes, *args)
              for codes, (name, args) in zip((a, b), parts))
    name, whole = binary_call("ADD", prepared, "int8", ELEMENTWISE_BLOCK)
    assert np.array_equal(QCALL_HELPERS[parts[2][0]](x1, x2, *parts[2][1]),
                          QCALL_HELPERS[name](a.astype(np.int64), b.astype(np.int64), *whole))


def test_doubling_high_mul_rounded_int32_equals_the_two_roundings():
    """SRDHM then RoundingDivideByPOT in one rounding, plus an offset, over its operand range
    and every exponent, edges included."""
    rng = np.random.default_rng(11)
    edges = np.array([0, 1, -1, 2, -2, 3, -3, 2 ** 29 - 1, -(2 ** 29) + 1])
    a = np.concatenate([edges, rng.integers(-(2 ** 29) + 1, 2 ** 29, 50_000)])
    for m in [0, 1, -1, 1 << 30, fp.INT32_MAX, fp.INT32_MIN, 1431655765,
              *rng.integers(1, fp.INT32_MAX, 6).tolist()]:
        for exponent in range(32):
            want = fp.rounding_divide_by_pot(fp.saturating_rounding_doubling_high_mul(a, m),
                                             exponent)
            for offset in (0, -128, 255):
                got = fp.doubling_high_mul_rounded_int32(a.astype(np.int32), m, exponent,
                                                         offset)
                assert np.array_equal(got, want + offset), (m, exponent, offset)


@pytest.mark.parametrize("op, dtype, path", [("ADD", "int8", ELEMENTWISE_BLOCK),
                                             ("ADD", "uint8", SCALAR_BLOCK),
                                             ("SUB", "int8", REFERENCE),
                                             ("MUL", "int8", ELEMENTWISE_BLOCK),
                                             ("MUL", "uint8", REFERENCE)])
def test_numba_int32_helpers_equal_the_int64_definitions(op, dtype, path):
    """Compiled as a kernel compiles them (constants inlined, LLVM free to fold them), at
    parameters that wrap to int16, shift MUL's product by 14 and 15 bits, or neither."""
    cases = {"ADD": [(0.05, 0.03, 0.06), (0.5, 0.01, 1e-5), (1.0, 1.0, 2.0)],
             "SUB": [(0.05, 0.03, 0.06), (0.5, 0.01, 1e-5)],
             "MUL": [(0.05, 0.03, 0.06), (0.5, 0.25, 0.5 * 0.25 / 2 ** 14.5),
                     (1.0, 1.0, 2 ** -15.5), (0.02, 0.3, 1e-3)]}[op]
    lo = DTYPE_RANGES[dtype][0]
    for k, (s1, s2, so) in enumerate(cases):
        q1, q2 = QParams(s1, lo + 120 + k, dtype), QParams(s2, lo + 131 - k, dtype)
        qo = QParams(float(np.float32(so)), lo + 126, dtype)
        prepared = prepare_binary(op, q1, q2, qo, {"activation": k % 4})
        name, args = binary_call(op, prepared, dtype, path)
        a, b = (x.astype(NP[dtype]) for x in binary_grid(q1, q2))
        out = np.empty(a.size, NP[dtype])
        compiled_loop(name, args)(a, b, out)
        want = INT64_DEFINITIONS[name](a.astype(np.int64), b.astype(np.int64), *args)
        assert np.array_equal(out, want), (op, dtype, path, s1, s2, so)


def test_int32_primitives_equal_the_int64_helpers():
    """The int32 doubling high muls and RoundingDivideByPOT against the generic int64
    helpers, over their stated operand ranges, edges included."""
    rng = np.random.default_rng(9)
    edges = np.array([0, 1, -1, 2 ** 29 - 1, -(2 ** 29) + 1, 12345, -12345])
    small = np.concatenate([edges, rng.integers(-(2 ** 29) + 1, 2 ** 29, 200_000)])
    wide = np.concatenate([edges, [fp.INT32_MAX, fp.INT32_MIN, fp.INT32_MIN + 1],
                           rng.integers(fp.INT32_MIN, fp.INT32_MAX + 1, 200_000)])
    multipliers = [0, 1, -1, 1 << 30, (1 << 30) + 1, fp.INT32_MAX, -(1 << 30), fp.INT32_MIN + 1,
                   *rng.integers(fp.INT32_MIN + 1, fp.INT32_MAX + 1, 20).tolist()]
    for m in multipliers:
        want = fp.saturating_rounding_doubling_high_mul(small, m)
        assert np.array_equal(fp.doubling_high_mul_int32(small.astype(np.int32), m), want), m
        want = fp.saturating_rounding_doubling_high_mul(wide, m)
        assert np.array_equal(fp.doubling_high_mul_int32_wide(wide.astype(np.int32), m),
                              want), m
    x = np.concatenate([edges, [2 ** 30 - 1, -(2 ** 30) + 1],
                        rng.integers(-(2 ** 30) + 1, 2 ** 30, 100_000)])
    for exponent in range(32):
        want = fp.rounding_divide_by_pot(x, exponent)
        assert np.array_equal(fp.rounding_divide_by_pot_int32(x.astype(np.int32), exponent),
                              want), exponent
    for shift in range(-31, 32):
        v = np.arange(-255, 256)
        assert np.array_equal(fp.shift_left_or_floor_right_int32(v.astype(np.int32), shift),
                              fp.shift_left_or_floor_right(v, shift)), shift


def test_float32_to_int32_matches_the_int64_cast():
    x = np.concatenate([special_floats(1.0), np.float32([2 ** 31, -2 ** 31, 2 ** 31 - 128,
                                                         -2 ** 31 + 128, 0.5, -0.5, -0.0])])
    x = x.astype(np.float32)
    assert np.array_equal(fp.float32_to_int32(x), fp.float_to_int32(x))


@pytest.mark.parametrize("op, dtype, path", [("ADD", "int8", ELEMENTWISE_BLOCK),
                                             ("SUB", "uint8", REFERENCE),
                                             ("MUL", "int8", ELEMENTWISE_BLOCK)])
def test_kernel_helpers_compute_in_32_bit_lanes(op, dtype, path):
    """No packed 64-bit arithmetic in the loop: the only 64-bit products are vpmuldq's
    (even/odd lanes of a high multiply), so each register holds 16 lanes (AVX-512) or 8."""
    q1, q2 = QParams(0.05, shifted(3, dtype), dtype), QParams(0.03, shifted(-7, dtype), dtype)
    prepared = prepare_binary(op, q1, q2, QParams(0.06, shifted(2, dtype), dtype),
                              {"activation": 0})
    loop = compiled_loop(*binary_call(op, prepared, dtype, path))
    a = np.zeros(1024, NP[dtype])
    loop(a, a, np.empty(1024, NP[dtype]))
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(r"\bvpmuldq\s", asm)
    assert not re.findall(r"\bvp(?:addq|subq|sraq|sllq|mullq|cmpgtq|blendmq)\s[^\n]*%[yz]mm",
                          asm)
