"""Reductions and the normalizations made of them: schedules, one kernel per LayerNorm, softmax
and squeeze, and random reduction models against LiteRT's builtin kernels (the oracle).

The tolerance of each reduction, checked by fusion_delegate.tolerances.reduction_bound (its
docstring is the statement):
SUM, REDUCE_MAX and REDUCE_MIN accumulate in the builtin's order and are bit-exact; MEAN over
a row adds in another order than Eigen's; SOFTMAX and LOG_SOFTMAX add exps of another exp.
"""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from codegen.composites import expand
from codegen.ir import KernelIR, Op, Value
from codegen.nests import ElementwiseNest, RowsNest
from codegen.ops import OPS
from codegen.qparams import QParams
from codegen.quant_rows import reduction_unsupported
from codegen.schedule import plan
from conftest import AVX512, builtin_interpreter, kernel_source, run, same_bits
from equivalence import SPECIALS, Graph, oracle_tensors
from fusion_delegate import FusionDelegate
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.model import ModelBuilder, Quantization
from fusion_delegate.tolerances import (EXP_RELATIVE, REDUCE, ROWS, SUBNORMAL, U, error_bounds,
                                         mismatches)

NONE = {"fused_activation_function": 0}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


# ----------------------------------------------------------------------------------- schedules

def ir_of(values, ops, inputs, outputs) -> KernelIR:
    return expand(KernelIR(tuple(Value(t, s) for t, s in sorted(values.items())),
                           tuple(Op(n, op, ins, out, params)
                                 for n, (op, ins, out, params) in enumerate(ops)), inputs,
                           outputs))


def row(axes=(1,)):
    return (("axes", axes), ("keep_dims", True))


ACT = (("activation", 0),)


def layernorm_ir(n: int, c: int) -> KernelIR:
    """MEAN, SQUARED_DIFFERENCE, MEAN, ADD eps, RSQRT, (x - mean) * inv * gamma + beta."""
    return ir_of({0: (n, c), 1: (n, 1), 2: (n, c), 3: (n, 1), 4: (), 5: (n, 1), 6: (n, 1),
                  7: (n, c), 8: (n, c), 9: (c,), 10: (n, c)},
                 [("MEAN", (0,), 1, row()), ("SQUARED_DIFFERENCE", (0, 1), 2, ()),
                  ("MEAN", (2,), 3, row()), ("ADD", (3, 4), 5, ACT), ("RSQRT", (5,), 6, ()),
                  ("SUB", (0, 1), 7, ACT), ("MUL", (7, 6), 8, ACT), ("MUL", (8, 9), 10, ACT)],
                 (0, 9), (10,))


def test_layernorm_is_one_rows_nest_with_a_pass_per_phase():
    ir = layernorm_ir(197, 192)
    ir = KernelIR(tuple(Value(v.tensor, v.shape, 1e-6 if v.tensor == 4 else None)
                           for v in ir.values), ir.ops, ir.inputs, ir.outputs)
    (nest,) = plan(ir, AVX512).nests
    assert isinstance(nest, RowsNest) and nest.loops.sizes == (197, 192)
    assert [[op.op for op in stage] for stage in nest.stages] == [
        ["MEAN"], ["SQUARED_DIFFERENCE", "MEAN"], ["SUB", "MUL", "MUL"]]
    assert [[op.op for op in ops] for ops in nest.per_row] == [[], [], ["ADD", "RSQRT"], []]
    assert plan(ir, AVX512).buffers == ()
    assert nest.step_rows == 2                  # two rows a step, the last one 196 twice
    source = kernel_source(ir, LAYOUT)
    assert "for step in range(99):" in source and source.count("for i1 in range(row_length):") >= 3
    assert "i0_a = 2 * step" in source and "i0_b = min(2 * step + 1, 196)" in source
    assert "row_length = min(x0.shape[0], 192)" in source      # bounded by the row
    for row in "ab":                           # each row of the step under its own names
        assert f"mean_{row} = add_reassoc(mean_{row}, x0_t_{row}[i1])" in source
        assert f"mean_{row} = mean_{row} / np.float32(192)" in source
        assert f"rsqrt_1_{row} = rsqrt(add_{row})" in source       # per row, a register
    # The fast loop counts an inf or NaN output per row, as a sum of 0 * value.
    assert "checks_a = add_reassoc(checks_a, mul_1_t_a[i1] * np.float32(0.0))" in source
    assert "misses = max(misses, magnitude(checks_a), magnitude(checks_b))" in source


def test_softmax_lowers_to_row_max_exp_sum_and_one_multiply():
    ir = ir_of({0: (6, 197), 1: (6, 197)}, [("SOFTMAX", (0,), 1, (("beta", 1.0),))], (0,), (1,))
    assert [op.op for op in ir.ops] == ["ROW_MAX", "SCALED_EXP", "ROW_SUM", "RECIPROCAL",
                                        "MUL_RAW"]
    (nest,) = plan(ir, AVX512).nests
    assert isinstance(nest, RowsNest) and len(nest.stages) == 3
    assert [[op.op for op in ops] for ops in nest.per_row][2] == ["RECIPROCAL"]
    assert nest.step_rows == 1                 # exp keeps the core busy: one row a step
    assert "for i0 in range(6):" in kernel_source(ir, LAYOUT)


def test_softmax_exp_pass_over_a_scaled_row_runs_on_to_whole_vectors():
    """Rows of 197: the exp pass reads only the scaled row's buffer, padded with -INF (exp 0)
    to 208; rows of 128 need no padding, and without the MUL the pass reads x from memory."""
    def scaled(c: int) -> KernelIR:
        return ir_of({0: (6, c), 1: (), 2: (6, c), 3: (6, c)},
                     [("MUL", (0, 1), 2, ACT), ("SOFTMAX", (2,), 3, (("beta", 1.0),))],
                     (0, 1), (3,))
    (nest,) = plan(scaled(197), AVX512).nests
    assert nest.padded == (1,) and nest.padding == ((2, "-INF"),) and nest.row_stride == 208
    source = kernel_source(scaled(197), LAYOUT)
    assert "mul_buf = np.full(208, -INF, np.float32)" in source
    assert "padded_length = (x0.shape[0] // 6 + 15) // 16 * 16" in source
    assert source.count("for i1 in range(padded_length):") == 1    # one text for both loops
    assert plan(scaled(128), AVX512).nests[0].padded == ()
    plain = ir_of({0: (6, 197), 1: (6, 197)}, [("SOFTMAX", (0,), 1, (("beta", 1.0),))],
                  (0,), (1,))
    assert plan(plain, AVX512).nests[0].padded == ()


def test_squeeze_over_h_w_accumulates_in_its_input_nest():
    """MEAN over H, W of NHWC: a nest over the input accumulating per channel, on one thread."""
    ir = ir_of({0: (1, 14, 14, 24), 1: (1, 14, 14, 24), 2: (1, 1, 1, 24)},
               [("HARD_SWISH", (0,), 1, ()), ("MEAN", (1,), 2, row((1, 2)))], (0,), (1, 2))
    (nest,) = plan(ir, AVX512).nests
    assert isinstance(nest, ElementwiseNest) and nest.loops.sizes == (196, 24)
    assert nest.loops.broadcast[2] == (True, False) and not nest.tile
    source = kernel_source(KernelIR(ir.values, ir.ops, ir.inputs, ir.outputs, threads=2),
                           LAYOUT)
    assert "mean[i1] = mean[i1] + hard_swish_1[i0 * 24 + i1]" in source
    assert " parts (one a thread)" not in source


def test_a_reduction_result_read_in_a_later_phase_of_another_domain():
    """Column sums over [N, C] (axis 0: not rows), a [C] op on them, then [N, C] again: nests
    by (domain, phase), smaller domains first within a phase, buffers between them."""
    ir = ir_of({0: (5, 8), 1: (1, 8), 2: (1, 8), 3: (5, 8)},
               [("SUM", (0,), 1, row((0,))), ("NEG", (1,), 2, ()), ("MUL", (0, 2), 3, ACT)],
               (0,), (3,))
    nests = plan(ir, AVX512).nests
    assert [(n.domain, [op.op for op in n.ops]) for n in nests] == [
        ((5, 8), ["SUM"]), ((8,), ["NEG"]), ((5, 8), ["MUL"])]
    assert dict(plan(ir, AVX512).buffers) == {1: 8, 2: 8}


def test_a_pool_after_a_layernorm_is_a_nest_after_its_rows_nest():
    """ViT's last block: LayerNorm over channels, then MEAN over the tokens (axis 0): the rows
    nest takes the LayerNorm and writes what the pool reads to a buffer."""
    ir = ir_of({0: (64, 32), 1: (64, 1), 2: (64, 32), 3: (32,)},
               [("MEAN", (0,), 1, row()), ("SUB", (0, 1), 2, ACT),
                ("MEAN", (2,), 3, (("axes", (0,)), ("keep_dims", False)))], (0,), (3,))
    rows, pool = plan(ir, AVX512).nests
    assert isinstance(rows, RowsNest) and [op.op for op in rows.ops] == ["MEAN", "SUB"]
    assert rows.writes == (2,) and dict(plan(ir, AVX512).buffers) == {2: 64 * 32}
    assert isinstance(pool, ElementwiseNest) and [op.op for op in pool.ops] == ["MEAN"]
    source = kernel_source(ir, LAYOUT)
    assert "sub_t_b[i1] = clamp_overflow(x_t_b[i1] - mean_b)" in source
    assert "mean_1[i1] = mean_1[i1] + sub[i0 * 32 + i1]" in source


# ------------------------------------------------------------------ one kernel per normalization

def converter_layernorm(shape: tuple[int, ...]) -> bytes:
    """LayerNorm as the TF converter writes it (keras LayerNormalization, axis -1)."""
    b = ModelBuilder()
    x = b.input("x", shape)
    axis = b.const("axis", np.array([-1], np.int32))
    stats = tuple(shape[:-1]) + (1,)
    mean = b.op("MEAN", [x, axis], {"keep_dims": True}, shape=stats, name="mean")
    var = b.op("MEAN", [b.op("SQUARED_DIFFERENCE", [x, mean], name="sqd"), axis],
               {"keep_dims": True}, shape=stats, name="var")
    inv = b.op("RSQRT", [b.op("ADD", [var, b.const("eps", np.float32(1e-6))], NONE)],
               name="inv")
    scale = b.op("MUL", [inv, b.const("gamma", np.linspace(0.5, 1.5, shape[-1],
                                                           dtype=np.float32))], NONE)
    shift = b.op("SUB", [b.const("beta", np.linspace(-1, 1, shape[-1], dtype=np.float32)),
                         b.op("MUL", [mean, scale], NONE)], NONE)
    b.output(b.op("ADD", [b.op("MUL", [x, scale], NONE), shift], NONE, name="out"))
    return b.to_bytes()


def scaled_softmax(shape: tuple[int, ...], beta: float = 1.0) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape)
    scaled = b.op("MUL", [x, b.const("scale", np.float32(0.125))], NONE, name="scaled")
    b.output(b.op("SOFTMAX", [scaled], {"beta": beta}, name="probs"))
    return b.to_bytes()


def se_squeeze(shape: tuple[int, ...]) -> bytes:
    """HARD_SWISH, then its mean over H, W: the squeeze of a squeeze-excite block."""
    b = ModelBuilder()
    x = b.input("x", shape)
    h = b.op("HARD_SWISH", [x], name="h")
    squeeze = b.op("MEAN", [h, b.const("axes", np.array([1, 2], np.int32))],
                   {"keep_dims": True}, shape=(1, 1, 1, shape[-1]), name="squeeze")
    b.output(h, squeeze)
    return b.to_bytes()


def one_kernel(model: bytes, cache_dir: str, threads: int = 1):
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=threads)
    interpreter = builtin_interpreter(model, [delegate], num_threads=threads)
    nodes = len(delegate.claims)
    assert delegate.summary() == f"{nodes} of {nodes} nodes delegated in 1 partitions"
    (kernel,) = delegate.kernels.values()
    return interpreter, kernel.kernel.source


def test_a_summed_output_is_checked_through_its_sum(cache_dir, rng):
    """A residual ADD that is both a partition output and the MEAN's operand (MLP-Mixer's
    LayerNorm): the fast loop checks the row's mean instead of each sum, and a row with an
    inf or NaN still goes to the exact loop and gives LiteRT's values."""
    shape = (1, 9, 64)
    b = ModelBuilder()
    s = b.op("ADD", [b.input("x", shape), b.input("y", shape)], NONE, name="s")
    mean = b.op("MEAN", [s, b.const("axis", np.array([-1], np.int32))], {"keep_dims": True},
                shape=(1, 9, 1), name="mean")
    b.output(s, b.op("SUB", [s, mean], NONE, name="d"))
    model = b.to_bytes()
    interpreter, source = one_kernel(model, cache_dir)
    fast = source[:source.index("# Exact loop")]
    first = fast[fast.index("# Pass 1"):fast.index("# Pass 2")]
    assert "checks_a" not in first and "misses = max(misses, magnitude(mean_a)" in first
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    x[0, 2, 5], x[0, 4, 0], y[0, 6, 63], y[0, 7, 1] = np.inf, np.nan, -np.inf, 3e38
    x[0, 7, 1] = 3e38                                    # overflows to inf in the fast loop
    (s_got, d_got), (s_want, d_want) = run(interpreter, [x, y]), run(builtin_interpreter(model),
                                                                    [x, y])
    assert same_bits(s_got, s_want)                  # the sums, FLT_MAX for the overflow
    assert same_bits(np.isnan(d_got), np.isnan(d_want))
    ok = ~np.isnan(d_want)                           # the mean: summed in another order
    scale = np.broadcast_to(np.abs(np.where(np.isnan(s_want), 0, s_want)).max(
        axis=-1, keepdims=True), shape)
    with np.errstate(over="ignore"):                 # the FLT_MAX row: any difference
        bound = 8 * np.spacing(scale.astype(np.float32))
    assert np.all(np.abs(d_got - d_want)[ok] <= bound[ok])


@pytest.mark.parametrize("shape", [(1, 197, 192), (5, 1)])
def test_converter_layernorm_is_one_kernel_reading_its_input_once(cache_dir, rng, shape):
    model = converter_layernorm(shape)
    interpreter, source = one_kernel(model, cache_dir)
    assert "2 rows a step: one pass over the step's rows per" in source
    assert ("# Pass 3 over the row" in source) == (shape[-1] > 1)   # else all per row
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    got, = run(interpreter, [x])
    want, = run(builtin_interpreter(model), [x])
    # x * s + (beta - mean * s) cancels: errors in the mean show against the row's magnitude.
    scale = np.abs(x).max(axis=-1, keepdims=True) * 1.5 + 1
    assert np.all(np.abs(got - want) <= 8 * np.spacing(scale.astype(np.float32)))


def test_layernorm_rows_in_pairs_odd_rows_threads_and_inf_rows(cache_dir, rng):
    """701 rows two a step (the last has row 700 twice), on 1 and 2 threads alike; a row with
    inf or NaN sends the fast loop's check to the exact loop, which gives LiteRT's values."""
    shape = (1, 701, 96)
    model = converter_layernorm(shape)
    one, source = one_kernel(model, cache_dir)
    assert "i0_b = min(2 * step + 1, 700)" in source
    two, parallel = one_kernel(model, cache_dir, threads=2)
    assert "in 2 parts (one a thread)" in parallel
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    special = x.copy()
    special[0, 5, 7], special[0, 700, 0], special[0, 8, 95] = np.inf, np.nan, -np.inf
    scale = np.abs(x).max(axis=-1, keepdims=True) * 1.5 + 1
    for data in (x, special):
        got, = run(one, [data])
        assert same_bits(run(two, [data])[0], got)
        want, = run(builtin_interpreter(model), [data])
        assert same_bits(np.isnan(got), np.isnan(want))
        assert np.all(np.isnan(got[0, [5, 8, 700]])) == (data is special)
        ok = ~np.isnan(want)
        assert np.all(np.abs(got - want)[ok] <= np.broadcast_to(
            8 * np.spacing(scale.astype(np.float32)), got.shape)[ok])


def test_softmax_with_its_scale_is_one_kernel_and_thread_count_does_not_change_it(cache_dir, rng):
    shape = (1, 3, 197, 197)
    model = scaled_softmax(shape)
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    interpreter, source = one_kernel(model, cache_dir)
    assert "max_reassoc" in source and "add_reassoc" in source
    got, = run(interpreter, [x])
    two, parallel = one_kernel(model, cache_dir, threads=2)
    assert "in 2 parts (one a thread)" in parallel   # rows split, each row summed alike
    assert same_bits(run(two, [x])[0], got)
    want, = run(builtin_interpreter(model), [x])
    assert np.all(np.abs(got - want) <= want * ((2 * 197 + 4) * U + 2 * EXP_RELATIVE) + 1e-37)
    # Rows with +inf (FLT_MAX once scaled), NaN, all -inf: the exact loop, padded alike.
    x[0, 0, 3, 7], x[0, 1, 5, 196], x[0, 2, 9] = np.inf, np.nan, -np.inf
    got, = run(interpreter, [x])
    want, = run(builtin_interpreter(model), [x])
    assert same_bits(np.isnan(got), np.isnan(want)) and np.all(np.isnan(got[0, 1, 5]))
    assert same_bits(run(two, [x])[0], got)
    assert got[0, 0, 3, 7] == 1.0 and np.all(got[0, 2, 9] == np.float32(1 / 197))
    ok = ~np.isnan(want)
    assert np.all(np.abs(got - want)[ok] <= (want * ((2 * 197 + 4) * U + 2 * EXP_RELATIVE))[ok]
                  + 1e-37)


def test_se_squeeze_and_the_op_before_it_are_one_kernel_bit_exact(cache_dir, rng):
    model = se_squeeze((1, 14, 14, 24))
    interpreter, source = one_kernel(model, cache_dir)
    assert source.count("# Nest 1 ") >= 1 and "# Nest 2 " not in source
    x = (rng.standard_normal((1, 14, 14, 24)) * 3).astype(np.float32)
    got = run(interpreter, [x])
    want = run(builtin_interpreter(model), [x])
    assert same_bits(got[1], want[1])             # the mean, in LiteRT's order


def test_the_cost_model_prices_a_layernorm_by_the_ops_it_amounts_to(cache_dir):
    """MEAN is not measured on its own (worth.PROXIES): priced as ADDs, the converter's
    LayerNorm is predicted to pay and claimed with the default options."""
    delegate = FusionDelegate(cache_dir=cache_dir)
    builtin_interpreter(converter_layernorm((197, 192)), [delegate])
    (prediction,) = delegate.predictions.values()
    assert prediction.speedup >= delegate.options.min_speedup
    assert delegate.summary() == "10 of 10 nodes delegated in 1 partitions"


def test_a_non_constant_axis_is_not_claimed(cache_dir):
    b = ModelBuilder()
    x, axis = b.input("x", (4, 8)), b.input("axis", (1,), np.int32)
    b.output(b.op("SUM", [x, axis], {"keep_dims": True}, shape=(4, 1)))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    builtin_interpreter(b.to_bytes(), [delegate])
    assert delegate.claims[0].reason == "axis tensor not a constant int32 tensor"


def test_softmax_exp_is_exp_fast_where_normal_and_flushes_below():
    """_exp_nonpositive_fast5 (softmax's exp with beta >= 0) against exp_fast_f32 on every
    257th float32 in [-88, -0] and the edges: the same bits wherever exp_fast_f32's result is
    normal, within 2^-126 of it below (+0 under 2^-126.5), +0 for -inf, NaN for NaN."""
    from numba import njit

    from codegen.mathf32_fast import _exp_nonpositive_fast5, exp_fast_f32

    @njit
    def both(xs):
        fused, fast = np.empty_like(xs), np.empty_like(xs)
        for i in range(xs.size):
            fused[i], fast[i] = _exp_nonpositive_fast5(xs[i]), exp_fast_f32(xs[i])
        return fused, fast

    bits = np.arange(0x80000000, 0xC2B00001, 257, dtype=np.uint64).astype(np.uint32)
    edges = np.float32([-0.0, 0.0, -87.33654, -87.68, -88.0, -100.0, -1e30, -np.inf, np.nan])
    got, fast = both(np.concatenate([bits.view(np.float32), edges]))
    normal = fast >= np.float32(SUBNORMAL)
    assert same_bits(got[normal], fast[normal]) and normal.sum() > 4_000_000
    below = ~normal & ~np.isnan(fast)
    assert np.all(np.abs(got[below] - fast[below]) <= SUBNORMAL)
    assert list(got[-5:-1]) == [0.0] * 4 and np.isnan(got[-1]) and got[-9] == got[-8] == 1.0


# --------------------------------------------------------------- random models with reductions

#: Bit-exact elementwise ops a reduction's producers and consumers are drawn from.
EXACT = ("ADD", "SUB", "MUL", "MAXIMUM", "ABS", "NEG", "RELU", "SQUARE")


@st.composite
def reduction_graphs(draw):
    """x -> exact elementwise ops -> a reduction or row op -> exact ops on its result (and x),
    rows of 1 element included; [N, C] rows or NHWC with H, W or mixed axes."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 1, 2, 3, 5, 17, 40])) for _ in range(rank))
    b = ModelBuilder("reductions")
    x = b.input("x", shape)
    graph = Graph(model=b"", input_shapes=[shape])
    h = x
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(EXACT))
        args = [h] if OPS[name].arity == 1 else [
            h, b.const(f"c{len(graph.ops)}", np.float32(draw(st.sampled_from([0.5, -2.0, 3.0]))))]
        options = NONE if OPS[name].fused_activation else None
        out = b.op(name, args, options)
        graph.ops.append((name, tuple(args), out, {"activation": 0} if options else {}))
        h = out
    name = draw(st.sampled_from(REDUCE + ROWS))
    if name in REDUCE:
        axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))))
        keep = draw(st.booleans())
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape)
                          if keep or d not in axes)
        axis_data = np.array([a - rank if draw(st.booleans()) else a for a in axes], np.int32)
        r = b.op(name, [h, b.const("axis", axis_data)], {"keep_dims": keep}, shape=out_shape)
        params = {"axes": axes, "keep_dims": keep}
    else:
        beta = draw(st.sampled_from([1.0, 0.5, 2.0]))
        r = b.op(name, [h], {"beta": beta} if name == "SOFTMAX" else None)
        params = {"beta": beta} if name == "SOFTMAX" else {}
    graph.ops.append((name, (h,), r, params))
    outputs = [r]
    if draw(st.booleans()):
        k = b.const("k", np.float32(2.0))
        after = b.op("MUL", [r, k], NONE)
        graph.ops.append(("MUL", (r, k), after, {"activation": 0}))
        outputs = [after]
    if h != x and draw(st.booleans()):
        outputs.append(h)
    b.output(*outputs)
    graph.model = b.to_bytes()
    return graph


def reduction_inputs(rng, shape, kind: str) -> np.ndarray:
    """Normal values, or with NaN/inf/huge/tiny mixed in, or all huge or all tiny."""
    x = rng.standard_normal(shape)
    if kind == "huge":
        x = x * 1e37
    elif kind == "tiny":
        x = x * 1e-38
    x = x.astype(np.float32)
    if kind == "special":
        mask = rng.random(shape) < 0.1
        x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    return x


SETTINGS = settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.reuse,
                                                            Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(graph=reduction_graphs(), seed=st.integers(0, 2**32 - 1))
def test_random_reduction_models_match_builtin_kernels_within_their_tolerance(graph, seed,
                                                                              cache_dir):
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(graph.model, [delegate])
    refused = {i: c.reason for i, c in delegate.claims.items() if c.reason}
    assert not refused, f"not claimed: {refused}"
    rng = np.random.default_rng(seed)
    for kind in ("normal", "special", "huge", "tiny"):
        x = reduction_inputs(rng, graph.input_shapes[0], kind)
        fused = run(interpreter, [x])
        values = oracle_tensors(graph.model, [x])
        bounds = error_bounds(graph.ops, values)
        for detail, got in zip(interpreter.get_output_details(), fused):
            t = detail["index"]
            bad = mismatches(got, values[t], bounds[t])
            assert not len(bad), (
                f"{kind} input: output t{t}: {len(bad)} mismatches, first at {tuple(bad[0])}: "
                f"fused {got[tuple(bad[0])]!r} vs LiteRT {values[t][tuple(bad[0])]!r} "
                f"(bound {np.broadcast_to(bounds[t], got.shape)[tuple(bad[0])]!r})\n"
                f"ops: {graph.ops}\n" + "\n".join(k.kernel.source
                                                   for k in delegate.kernels.values()))


# ------------------------------------------------------------------ int8 / uint8 reductions

def qp(scale: float, zero_point: int) -> Quantization:
    return Quantization.per_tensor(scale, zero_point)


@st.composite
def quantized_reductions(draw):
    """x (int8 or uint8) -> MEAN, SUM, REDUCE_MAX or REDUCE_MIN over random axes, keep_dims or
    not (4-D over H, W included: LiteRT's optimized mean), -> HARD_SWISH of the result (a
    LUT reading it in the same kernel)."""
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    low = -128 if dtype == np.int8 else 0
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 7, 24, 33])) for _ in range(rank))
    name = draw(st.sampled_from(REDUCE))
    if rank == 4 and draw(st.booleans()):
        axes, keep = (1, 2), True
    else:
        axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))))
        keep = draw(st.booleans())
    count = math.prod(shape[a] for a in axes)
    scale = draw(st.sampled_from([0.003, 0.02, 0.1]))
    zero = draw(st.integers(low, low + 255))
    out_scale = scale * draw(st.sampled_from([0.05, 0.3, 1.0, 2.5])) * (
        count if name == "SUM" else 1)
    out = (scale, zero) if name.startswith("REDUCE") else (out_scale,
                                                          draw(st.integers(low, low + 255)))
    b = ModelBuilder("quantized_reductions")
    x = b.input("x", shape, dtype, qp(scale, zero))
    out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape) if keep or d not in axes)
    r = b.op(name, [x, b.const("axes", np.array(axes, np.int32))], {"keep_dims": keep},
             shape=out_shape, quantization=qp(*out))
    # HARD_SWISH's Prepare needs its output scale above its input's / 128: take its input's.
    b.output(r, b.op("HARD_SWISH", [r], quantization=qp(out[0], low + 10)))
    # As the delegate reads them from the runtime: float32 scales.
    q_in, q_out = (QParams(float(np.float32(s)), z, dtype.__name__)
                   for s, z in ((scale, zero), out))
    return b.to_bytes(), dtype, (name, q_in, q_out, shape, axes, keep)


@SETTINGS
@given(case=quantized_reductions(), seed=st.integers(0, 2**32 - 1))
def test_random_quantized_reductions_match_builtin_kernels_bit_for_bit(case, seed, cache_dir):
    """Claimed wherever codegen.quant_rows says the kernel reproduces LiteRT's (with
    min_speedup=0), and then equal to the builtin kernels on 1 and 2 threads."""
    model, dtype, where = case
    shape = where[3]
    expected = reduction_unsupported(*where)
    rng = np.random.default_rng(seed)
    for threads in (1, 2):
        delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=threads,
                                  min_nodes_per_partition=1)
        interpreter = builtin_interpreter(model, [delegate], num_threads=threads)
        assert delegate.claims[0].reason == expected
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
        for x in (rng.integers(low, high + 1, shape), np.full(shape, low), np.full(shape, high)):
            x = x.astype(dtype)
            for got, want in zip(run(interpreter, [x]),
                                 run(builtin_interpreter(model, num_threads=threads), [x])):
                np.testing.assert_array_equal(got, want)


@settings(max_examples=400, deadline=None)
@given(count=st.integers(1, 4096), uint8=st.booleans(), multiplier=st.integers(0, 2**31 - 1),
       shift=st.integers(-31, 2), bias=st.integers(-300, 300))
def test_hw_mean_tie_check_agrees_with_trying_every_sum(count, uint8, multiplier, shift, bias):
    """The closed form of quant_rows._hw_mean_rounds_alike (the ties of the shared
    SRDHM, by its ends) gives the verdict of computing both roundings of every sum."""
    from codegen.quant_rows import _hw_mean_rounds_alike, _hw_mean_sums_alike
    qmin, qmax = (0, 255) if uint8 else (-128, 127)
    args = (count * qmin, count * qmax, multiplier, shift, bias, qmin, qmax)
    assert _hw_mean_rounds_alike(*args) == _hw_mean_sums_alike(*args)


def test_hw_mean_tie_check_finds_a_tie_that_changes_a_code():
    """Multiplier 2**30 halves the sum, shift -1 halves it again: every negative odd half is a
    tie the two roundings put one code apart, and bias 0 keeps them inside int8's range."""
    from codegen.quant_rows import _hw_mean_rounds_alike, _hw_mean_sums_alike
    args = (2 * -128, 2 * 127, 1 << 30, -1, 0, -128, 127)
    assert not _hw_mean_sums_alike(*args)
    assert not _hw_mean_rounds_alike(*args)


def int8_layernorm(shape: tuple[int, ...]) -> bytes:
    """An int8 LayerNorm as the TF converter writes it (the corpus ConvNeXt's)."""
    b = ModelBuilder()
    stats = tuple(shape[:-1]) + (1,)
    x = b.input("x", shape, np.int8, qp(0.01, -2))
    axis = b.const("axis", np.array([-1], np.int32))
    mean = b.op("MEAN", [x, axis], {"keep_dims": True}, shape=stats, quantization=qp(0.0016, 2))
    negated = b.op("QUANTIZE", [b.op("NEG", [b.op("DEQUANTIZE", [mean], dtype=np.float32)])],
                   dtype=np.int8, quantization=qp(0.0016, -3))
    square = b.op("SQUARED_DIFFERENCE", [x, mean], quantization=qp(0.0064, -128))
    var = b.op("MEAN", [square, axis], {"keep_dims": True}, shape=stats,
               quantization=qp(0.00077, -128))
    eps = b.const("eps", np.array(-43, np.int8), qp(5.9e-9, -43))
    inv = b.op("RSQRT", [b.op("ADD", [var, eps], NONE, quantization=qp(0.00077, -128))],
               quantization=qp(0.031, -128))
    gamma = b.const("gamma", np.arange(shape[-1], dtype=np.int8), qp(0.0039, -128))
    scale = b.op("MUL", [inv, gamma], NONE, quantization=qp(0.031, -128))
    shift = b.op("MUL", [negated, scale], NONE, quantization=qp(0.007, 8))
    b.output(b.op("ADD", [b.op("MUL", [x, scale], NONE, quantization=qp(0.03, 1)), shift],
                  NONE, quantization=qp(0.028, 2)))
    return b.to_bytes()


@pytest.mark.parametrize("shape", [(1, 96, 24), (1, 64, 64), (1, 5, 192)])
def test_int8_layernorm_is_one_kernel_in_row_blocks_bit_exact(cache_dir, rng, shape):
    """Its per-row fixed-point ops run over blocks of rows (FIXED_POINT_ROW_BLOCK), the passes
    row by row; equal to the builtin kernels on 1 and 2 threads, the last block partial."""
    model = int8_layernorm(shape)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want, = run(builtin_interpreter(model), [x])
    for threads in (1, 2):
        interpreter, source = one_kernel(model, cache_dir, threads)
        assert f"rows of {shape[-1]} in blocks of {min(64, shape[1])}" in source
        assert "# The per-row ops over the block's rows: DEQUANTIZE, NEG, QUANTIZE" in source
        got, = run(interpreter, [x])
        np.testing.assert_array_equal(got, want)


def test_int8_reductions_are_left_to_xnnpack_by_default(cache_dir):
    delegate = FusionDelegate(cache_dir=cache_dir)
    builtin_interpreter(int8_layernorm((1, 64, 64)), [delegate])
    assert delegate.claims[0].reason == \
        "int8 MEAN left to XNNPACK, faster than fused (claimed with min_speedup=0)"


#: The output quantization each quantized row op's Prepare requires, by dtype.
ROW_OUTPUTS = {"SOFTMAX": {np.int8: (1 / 256, -128), np.uint8: (1 / 256, 0)},
               "LOG_SOFTMAX": {np.int8: (16 / 256, 127), np.uint8: (16 / 256, 255)},
               "L2_NORMALIZATION": {np.int8: (1 / 128, 0), np.uint8: (1 / 128, 128)}}
ROW_OPTIONS = {"SOFTMAX": {"beta": 0.5}, "L2_NORMALIZATION": NONE}


@pytest.mark.parametrize("op", sorted(ROW_OUTPUTS))
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("shape", [(1, 12), (2, 65, 65), (3, 1), (4, 197)])
def test_quantized_row_ops_match_builtin_kernels_bit_for_bit(cache_dir, rng, op, dtype, shape):
    """A scale (MUL by a constant), then the row op, as converters write attention: one kernel
    (softmax: LiteRT's float table and ordered sum), equal on 1 and 2 threads, on random codes,
    on rows all at the lowest code and all at the input's zero point (L2: a zero norm)."""
    low = np.iinfo(dtype).min
    b = ModelBuilder()
    x = b.input("x", shape, dtype, qp(0.04, low + 100))
    scaled = b.op("MUL", [x, b.const("scale", np.array(low + 200, dtype), qp(0.001, low))],
                  NONE, quantization=qp(0.03, low + 120))
    b.output(b.op(op, [scaled], ROW_OPTIONS.get(op), quantization=qp(*ROW_OUTPUTS[op][dtype])))
    model = b.to_bytes()
    for threads in (1, 2):
        interpreter, _ = one_kernel(model, cache_dir, threads)
        for x in (rng.integers(low, low + 256, shape), np.full(shape, low),
                  np.full(shape, low + 100)):
            x = x.astype(dtype)
            np.testing.assert_array_equal(run(interpreter, [x])[0],
                                          run(builtin_interpreter(model), [x])[0])


def test_int8_softmax_with_an_output_prepare_rejects_is_not_claimed(cache_dir):
    b = ModelBuilder()
    x = b.input("x", (2, 8), np.int8, qp(0.04, 0))
    b.output(b.op("SOFTMAX", [x], {"beta": 1.0}, quantization=qp(1 / 256, 0)))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    with pytest.raises(RuntimeError):
        builtin_interpreter(b.to_bytes(), [delegate])
    assert delegate.claims[0].reason == \
        "int8 SOFTMAX output must be scale 0.00390625, zero point -128 (Prepare fails)"
