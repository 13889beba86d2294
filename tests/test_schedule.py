"""codegen.schedule: a kernel as loop nests over their own domains, and the kernels it makes in
the real interpreter (LiteRT's builtin kernels are the oracle)."""
import math

import numpy as np
import pytest

from conftest import AVX512, HOST, builtin_interpreter, ir_of, kernel_source, run, same_bits
from codegen.ir import KernelIR, Op, Value
from codegen.nests import ElementwiseNest, RowBlockNest, RowsNest, StencilNest, UnrolledRowsNest
from codegen.window import Window
from codegen.schedule import (PART_MIN_ELEMENTS, ROW_COPIES_BYTES, ROW_TILE, STREAM_MIN_BYTES,
                              UNROLL_MAX_ELEMENTS, UNROLL_ROWS, plan, vector_block)
from fusion_delegate import FusionDelegate
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.model import ModelBuilder

NONE = {"fused_activation_function": 0}
RELU6 = {"fused_activation_function": 3}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def test_branches_of_shapes_that_do_not_broadcast_get_a_nest_each():
    ir = ir_of({0: (1, 24, 24, 24), 1: (1, 48, 48, 48), 2: (1, 24, 24, 24), 3: (1, 48, 48, 48)},
               [("RELU", (0,), 2), ("RELU", (1,), 3)], inputs=(0, 1), outputs=(2, 3))
    schedule = plan(ir, AVX512)
    assert [nest.domain for nest in schedule.nests] == [(24, 24, 24), (48, 48, 48)]
    assert schedule.buffers == ()
    source = kernel_source(ir, LAYOUT)
    assert "# Nest 1 over [24, 24, 24] as [13824]: RELU -> relu_1" in source
    assert "# Nest 2 over [48, 48, 48] as [110592]: RELU -> relu_2" in source


def test_an_op_on_a_smaller_shape_is_computed_once_at_its_own_shape():
    """The squeeze-excite gate: LOGISTIC of [1,1,1,C] once per channel, not per pixel."""
    ir = ir_of({0: (1, 8, 8, 24), 1: (1, 1, 1, 24), 2: (1, 1, 1, 24), 3: (1, 8, 8, 24)},
               [("LOGISTIC", (1,), 2), ("MUL", (0, 2), 3)], inputs=(0, 1), outputs=(3,))
    first, second = plan(ir, AVX512).nests
    assert first.domain == (24,) and [op.op for op in first.ops] == ["LOGISTIC"]
    assert first.writes == (2,) and plan(ir, AVX512).buffers == ((2, 24),)
    assert second.domain == (8, 8, 24) and second.periodic == ((2, 24),)
    source = kernel_source(ir, LAYOUT)
    assert source.count("logistic_eigen(") == 1 and "logistic[i0] = logistic_eigen(x1[i0])" in source


def test_nests_run_after_what_they_read_whatever_the_op_order():
    """y = x + b; gate = f(s); out = y * gate: the gate's nest first, then one nest for both."""
    ir = ir_of({0: (6, 16), 1: (16,), 2: (6, 16), 3: (16,), 4: (16,), 5: (6, 16)},
               [("ADD", (0, 1), 2), ("TANH", (3,), 4), ("MUL", (2, 4), 5)],
               inputs=(0, 1, 3), outputs=(5,))
    nests = plan(ir, AVX512).nests
    assert [n.domain for n in nests] == [(16,), (6, 16)]
    assert [op.op for op in nests[1].ops] == ["ADD", "MUL"]


@pytest.mark.parametrize("channels", [8, 16, 24, 32, 40, 100])
def test_short_channel_dims_are_tiled_into_long_inner_loops(channels):
    ir = ir_of({0: (1, 40, 40, channels), 1: (channels,), 2: (1, 40, 40, channels)},
               [("ADD", (0, 1), 2)], inputs=(0, 1), outputs=(2,))
    (nest,) = plan(ir, AVX512).nests
    assert isinstance(nest, ElementwiseNest) and nest.loops.sizes == (40 * 40 * channels,)
    unit = math.lcm(channels, vector_block(AVX512))     # whole rows, whole vector iterations
    assert nest.tile % unit == 0 and ROW_TILE <= nest.tile < ROW_TILE + unit
    assert nest.periodic == ((1, channels),)


def chain(rows: int, channels: int, constants: int = 16) -> KernelIR:
    """Per-channel constants, alternately multiplied and added (chain16)."""
    values = {0: (rows, channels), **{1 + k: (channels,) for k in range(constants)}}
    ops, h = [], 0
    for k in range(constants):
        values[100 + k] = (rows, channels)
        ops.append(("ADD" if k % 2 else "MUL", (h, 1 + k), 100 + k))
        h = 100 + k
    return ir_of(values, ops, inputs=tuple(range(constants + 1)), outputs=(h,))


@pytest.mark.parametrize("channels", [4, 8])
def test_the_row_copies_of_many_per_channel_constants_stay_within_half_of_l1(channels):
    """16 per-channel constants in rows shorter than a vector: row tiles, whose 1024-element
    copies would be 64 KiB."""
    (nest,) = plan(chain(256, channels), AVX512).nests
    assert isinstance(nest, ElementwiseNest) and len(nest.periodic) == 16
    assert 16 * 4 * nest.tile <= ROW_COPIES_BYTES
    assert nest.tile % math.lcm(channels, vector_block(AVX512)) == 0


@pytest.mark.parametrize("channels, constants", [(16, 16), (16, 8), (24, 12), (48, 8)])
def test_many_per_channel_constants_that_fit_in_registers_run_in_row_blocks(channels,
                                                                            constants):
    """The plain [M, C] nest, its constants in registers, about ROW_TILE elements a block."""
    (nest,) = plan(chain(256, channels, constants), AVX512).nests
    assert isinstance(nest, RowBlockNest) and nest.loops.sizes == (256, channels)
    assert nest.rows_per_block == ROW_TILE // channels


@pytest.mark.parametrize("channels, constants", [(48, 1), (64, 2), (96, 4), (240, 1)])
def test_rows_of_three_vectors_or_more_with_few_constants_run_in_row_blocks(channels,
                                                                           constants):
    """Their constants in registers too, and LLVM vectorises the rows, not the loop across
    them (no gathers), so the blocks need no tile copies."""
    (nest,) = plan(chain(256, channels, constants), AVX512).nests
    assert isinstance(nest, RowBlockNest) and nest.loops.sizes == (256, channels)
    assert nest.rows_per_block == max(1, ROW_TILE // channels)
    (beyond_l2,) = plan(chain(UNROLL_MAX_ELEMENTS // channels + 1, channels, constants),
                        AVX512).nests
    assert isinstance(beyond_l2, ElementwiseNest) and beyond_l2.tile > 0  # blocks: slower


@pytest.mark.parametrize("channels", [48, 96, 144])
def test_int8_rows_that_are_not_whole_byte_vectors_stay_row_tiled(channels):
    """An int8 squeeze-excite gate x[M, C] * s[C]: LLVM vectorises a row loop of int8 data 64
    elements a step, so rows of 48 in blocks ran scalar (76800 elements: 71 us; XNNPACK 15,
    the row tiles 10.6); row tiles are whole multiples of 64."""
    gate = KernelIR((Value(0, (256, channels), dtype="int8"),
                        Value(1, (channels,), dtype="int8"),
                        Value(2, (256, channels), dtype="int8")),
                    (Op(0, "MUL", (0, 1), 2, (("activation", 0),)),), (0, 1), (2,))
    (nest,) = plan(gate, AVX512).nests
    assert isinstance(nest, ElementwiseNest)
    assert nest.tile % math.lcm(channels, vector_block(AVX512)) == 0
    (nest,) = plan(ir_of({0: (256, 64), 1: (64,), 2: (256, 64)}, [("MUL", (0, 1), 2)],
                         inputs=(0, 1), outputs=(2,)), AVX512).nests
    assert nest.rows_per_block == ROW_TILE // 64     # float32: four whole vectors a row


@pytest.mark.parametrize("channels, constants", [(8, 16), (16, 4), (32, 4), (192, 4)])
def test_short_rows_or_few_constants_stay_row_tiled(channels, constants):
    """Rows of one or two vectors with few constants (LLVM vectorised the loop across rows,
    with gathers), or more constants than registers in rows shorter than TILE."""
    (nest,) = plan(chain(256, channels, constants), AVX512).nests
    assert isinstance(nest, ElementwiseNest) and len(nest.periodic) == constants


@pytest.mark.parametrize("channels", [32, 64, 256, 1000])
def test_many_constants_beyond_the_registers_are_shared_by_unrolled_rows(channels):
    """Each load of a per-channel constant serves UNROLL_ROWS rows: the plain [M, C] nest."""
    (nest,) = plan(chain(256, channels, 16), AVX512).nests
    assert isinstance(nest, UnrolledRowsNest) and nest.unroll == UNROLL_ROWS
    assert nest.loops.sizes == (256, channels)


def test_fewer_rows_than_unrolled_or_few_constants_or_a_nest_out_of_cache_leave_rows_plain():
    for ir in (chain(UNROLL_ROWS - 1, 256, 16), chain(256, 256, 4),
               chain(UNROLL_MAX_ELEMENTS // 256 + 1, 256, 16),
               chain(UNROLL_MAX_ELEMENTS // 128 + 1, 128, 16)):
        (nest,) = plan(ir, AVX512).nests
        assert isinstance(nest, ElementwiseNest) and nest.tile == 0 and nest.periodic == ()


@pytest.mark.parametrize("channels", [32, 64])
def test_short_rows_out_of_cache_stay_unrolled(channels):
    """The unrolled rows of C <= 64 are one stream through memory: unrolled at any size, out
    of L2 from cache-aligned copies of the per-channel constants."""
    (nest,) = plan(chain(UNROLL_MAX_ELEMENTS // channels + 1, channels, 16), AVX512).nests
    assert isinstance(nest, UnrolledRowsNest) and nest.unroll == UNROLL_ROWS
    assert nest.aligned == tuple(range(1, 17))


@pytest.mark.skipif(not HOST.streaming_stores, reason="streaming stores are x86's")
@pytest.mark.parametrize("channels, constants", [(16, 16), (64, 16), (96, 2), (256, 16)])
def test_outputs_of_whole_vector_rows_that_leave_the_caches_are_streamed(channels, constants):
    """From STREAM_MIN_BYTES of output on, a nest of rows of whole vectors is the plain [M, C]
    nest (no blocks, unrolled rows or tiles), its constants read from aligned copies, its
    output streamed; below, or with rows that end mid-vector, it is not."""
    rows = -(-STREAM_MIN_BYTES // (4 * channels))
    (nest,) = plan(chain(rows, channels, constants), AVX512).nests
    assert nest.streamed == (99 + constants,) and nest.loops.sizes == (rows, channels)
    assert isinstance(nest, ElementwiseNest) and nest.tile == 0 and nest.periodic == ()
    assert nest.aligned == tuple(range(1, constants + 1))
    (below,) = plan(chain(rows - 1, channels, constants), AVX512).nests
    assert not isinstance(below, ElementwiseNest) or below.streamed == ()


@pytest.mark.skipif(not HOST.streaming_stores, reason="streaming stores are x86's")
@pytest.mark.parametrize("channels, constants", [(16, 4), (32, 2), (8, 16), (24, 4)])
def test_other_large_per_channel_nests_stream_from_row_tiles(channels, constants):
    """Rows of one or two vectors with few constants (LLVM vectorised their plain nest across
    rows, with scatters) and rows that end mid-vector: row tiles, each a whole number of
    vectors, streamed; rows of 264 (no tiles, rows ending mid-vector) are not."""
    (nest,) = plan(chain(-(-STREAM_MIN_BYTES // (4 * channels)), channels, constants),
                   AVX512).nests
    assert len(nest.periodic) == constants and nest.tile % 16 == 0
    assert nest.streamed == (99 + constants,)
    (long_rows,) = plan(chain(STREAM_MIN_BYTES // (4 * 264) + 1, 264, 16), AVX512).nests
    assert long_rows.tile == 0 and long_rows.streamed == ()


def test_long_rows_and_row_statistics_are_not_row_tiled():
    wide = ir_of({0: (10, 512), 1: (512,), 2: (10, 512)}, [("ADD", (0, 1), 2)], (0, 1), (2,))
    rows = ir_of({0: (10, 16), 1: (10, 1), 2: (16,), 3: (10, 16), 4: (10, 16)},
                 [("SUB", (0, 1), 3), ("MUL", (3, 2), 4)], (0, 1, 2), (4,))
    assert plan(wide, AVX512).nests[0].tile == 0 and plan(wide, AVX512).nests[0].periodic == ()
    (row_nest,) = plan(rows, AVX512).nests
    assert row_nest.periodic == () and row_nest.loops.sizes == (10, 16)


def two_branches(first: tuple[int, ...], second: tuple[int, ...]) -> bytes:
    """Independent chains of shapes that do not broadcast, as TFLite puts them in one
    partition (the MediaPipe face models)."""
    b = ModelBuilder()
    x, y = b.input("x", first), b.input("y", second)
    for name, value in (("a", x), ("b", y)):
        h = b.op("MUL", [value, b.const(f"{name}_scale", np.float32(1.5))], NONE)
        b.output(b.op("ADD", [h, b.const(f"{name}_bias", np.float32(0.25))], RELU6,
                      name=f"{name}_out"))
    return b.to_bytes()


def test_a_partition_of_branches_with_different_shapes_runs(cache_dir, rng):
    model = two_branches((1, 24, 24, 24), (1, 48, 48, 48))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    assert delegate.summary() == "4 of 4 nodes delegated in 1 partitions"
    inputs = [rng.standard_normal((1, 24, 24, 24)).astype(np.float32) * 4,
              rng.standard_normal((1, 48, 48, 48)).astype(np.float32) * 4]
    for got, want in zip(run(interpreter, inputs), run(builtin_interpreter(model), inputs)):
        assert same_bits(got, want)


@pytest.mark.skipif(not HOST.streaming_stores, reason="streaming stores are x86's")
def test_a_flat_streamed_nest_splits_between_threads_at_whole_vectors(cache_dir, rng):
    """x * 1.5 + 0.25 over STREAM_MIN_BYTES + 48 floats on 2 threads: half of it ends mid-vector,
    so the second thread's part starts at the next whole vector (a streaming vector store off
    one faults). Fast loop, and the exact loop for an inf in the last part, a NaN in the first."""
    elements = STREAM_MIN_BYTES // 4 + 48
    b = ModelBuilder()
    h = b.op("MUL", [b.input("x", (elements,)), b.const("scale", np.float32(1.5))], NONE)
    b.output(b.op("ADD", [h, b.const("bias", np.float32(0.25))], NONE, name="out"))
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=2)
    ours = builtin_interpreter(model, [delegate], num_threads=2)
    oracle = builtin_interpreter(model)
    (kernel,) = delegate.kernels.values()
    step = -(-elements // (2 * HOST.lanes)) * HOST.lanes    # the delegate plans for the host
    assert f"first = part_first(part, 2) * {step}" in kernel.kernel.source
    assert f"for offset in range(0, min({step}, {elements} - first)):" in kernel.kernel.source
    assert "stream_store(" in kernel.kernel.source
    x = rng.standard_normal(elements).astype(np.float32) * 4
    inf_last, nan_first = x.copy(), x.copy()
    inf_last[-1], nan_first[3] = np.inf, np.nan
    for inputs in ([x], [inf_last], [nan_first]):
        (got,), (want,) = run(ours, inputs), run(oracle, inputs)
        assert same_bits(got, want)


def per_channel_gate(shape: tuple[int, ...]) -> bytes:
    """bias + RELU6, per-channel scale, and a squeeze-excite gate LOGISTIC(s[1,1,1,C])."""
    channels = shape[-1]
    b = ModelBuilder()
    x, s = b.input("x", shape), b.input("s", (1, 1, 1, channels))
    bias = b.const("bias", np.linspace(-1, 1, channels, dtype=np.float32))
    scale = b.const("scale", np.linspace(0.5, 2, channels, dtype=np.float32))
    h = b.op("MUL", [b.op("ADD", [x, bias], RELU6), scale], NONE)
    b.output(b.op("MUL", [h, b.op("LOGISTIC", [s], name="gate")], NONE, name="out"))
    return b.to_bytes()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 37, 41, 8), (1, 56, 56, 16), (1, 29, 31, 24),
                                   (1, 64, 33, 96), (1, 3, 5, 300)])
def test_per_channel_and_gate_chains_match_litert_bit_for_bit(cache_dir, rng, shape, threads):
    """Odd row counts leave a partial last tile; 2 threads split the tiles."""
    model = per_channel_gate(shape)
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=threads)
    interpreter = builtin_interpreter(model, [delegate], num_threads=threads)
    assert delegate.summary() == "4 of 4 nodes delegated in 1 partitions"
    inputs = [rng.standard_normal(shape).astype(np.float32) * 4,
              rng.standard_normal((1, 1, 1, shape[-1])).astype(np.float32) * 4]
    got, = run(interpreter, inputs)
    want, = run(builtin_interpreter(model), inputs)
    # LOGISTIC: LiteRT's result depends on the element's position (README); the gate is
    # computed on C elements here, so compare against the op table's tolerance.
    ulp = np.spacing(np.abs(want)).astype(np.float32)
    assert np.all(np.abs(got - want) <= 8 * ulp * 3)


def test_exclude_nodes_leaves_those_nodes_to_litert(cache_dir):
    model = per_channel_gate((1, 8, 8, 16))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, exclude_nodes="2",
                              min_nodes_per_partition=1)
    builtin_interpreter(model, [delegate])
    reasons = {index: claim.reason for index, claim in delegate.claims.items()}
    assert reasons[2] == "excluded by the exclude_nodes option"
    assert sum(reason is None for reason in reasons.values()) == 3


def per_channel_chain(shape: tuple[int, ...]) -> bytes:
    """((x * scale_0 + bias_1) * scale_2 ...) * x with 8 per-channel constants (row blocks at
    C = 16, unrolled rows at C = 256):
    clamps the fast loop leaves out, and values that overflow (scale_0 up to 4e37)."""
    channels = shape[-1]
    b = ModelBuilder()
    x = b.input("x", shape)
    h = x
    for k in range(8):
        top = 4e37 if k == 0 else 2.0
        values = np.linspace(-1 if k % 2 else 0.5, top, channels, dtype=np.float32)
        h = b.op("ADD" if k % 2 else "MUL", [h, b.const(f"c{k}", values)], NONE)
    b.output(b.op("MUL", [h, x], NONE, name="out"))
    return b.to_bytes()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("special", [None, np.inf, -np.inf, np.nan, -0.0, 3e38])
@pytest.mark.parametrize("shape, form", [((1, 67, 65, 16), "for block in range("),
                                         ((1, 37, 7, 256), "# Row i0 + 3")])
def test_row_blocks_and_unrolled_rows_keep_litert_semantics_for_inf_nan_and_negative_zero(
        cache_dir, rng, shape, form, special, threads):
    """One special value (or an overflow to inf) in one row block, or in rows unrolled (259
    rows: 3 left over): the exact loop reruns, and every output is LiteRT's, bit for bit."""
    model = per_channel_chain(shape)
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=threads)
    interpreter = builtin_interpreter(model, [delegate], num_threads=threads)
    assert delegate.summary() == "9 of 9 nodes delegated in 1 partitions"
    # In parts, each part counts its blocks from its first.
    threaded = "block = first + offset" if threads > 1 and form.startswith("for") else form
    assert threaded in delegate.kernels[0].kernel.source
    x = rng.standard_normal(shape).astype(np.float32)
    if special is not None:
        x[0, 36, 3, 5] = special
    got, = run(interpreter, [x])
    want, = run(builtin_interpreter(model), [x])
    assert same_bits(got, want)


def test_the_plan_decides_threads_stack_memory_and_the_fast_loop():
    """What the renderer only writes out: each nest's threads and parts, the buffers on the
    kernel's stack, and the fast loop, only where the clamps it drops outnumber its checks."""
    def gated(muls: int, threads: int) -> KernelIR:
        ops, h = [("TANH", (1,), 2)], 0
        values = {0: (512, 256), 1: (256,), 2: (256,)}
        for k in range(muls):
            values[10 + k] = (512, 256)
            ops.append(("MUL", (h, 2), 10 + k))
            h = 10 + k
        ir = ir_of(values, ops, inputs=(0, 1), outputs=(h,))
        return KernelIR(ir.values, ir.ops, ir.inputs, ir.outputs, threads=threads)

    schedule = plan(gated(1, threads=2), AVX512)
    gate, product = schedule.nests
    assert (gate.threads, product.threads, product.part) == (1, 2, 256)
    assert schedule.buffers == ((2, 256),) and schedule.stack == {2}
    assert schedule.fast is None                  # one clamp dropped, one output checked
    fast = plan(gated(3, threads=1), AVX512).fast
    assert fast is not None and (fast.dropped, fast.checked) == (3, (12,))
    assert [nest.threads for nest in plan(gated(3, threads=1), AVX512).nests] == [1, 1]
    # Many threads: each part keeps at least PART_MIN_ELEMENTS (512 x 256 = 4 of them).
    _, many = plan(gated(1, threads=64), AVX512).nests
    assert many.threads == 512 * 256 // PART_MIN_ELEMENTS == 4 and many.part == 128


def depthwise_ir(readers: list[tuple[str, tuple[int, ...], int]], outputs: tuple[int, ...],
                 extra: dict[int, tuple[int, ...]] | None = None) -> KernelIR:
    """x [1, 20, 20, 24] -> DEPTHWISE_CONV_2D 7x7 SAME (t3), then `readers` (op, inputs,
    output) over [1, 20, 20, 24] unless `extra` gives an output's shape; t4 is a [24] gate."""
    shape = (1, 20, 20, 24)
    shapes = {0: shape, 1: (1, 7, 7, 24), 2: (24,), 3: shape, 4: (24,),
              **{out: shape for _, _, out in readers}, **(extra or {})}
    conv = Op(0, "DEPTHWISE_CONV_2D", (0, 1, 2), 3, (
        ("activation", 0), ("dilations", (1, 1)), ("padding", "same"), ("strides", (1, 1))))
    params = {"ADD": (("activation", 0),), "MUL": (("activation", 0),),
              "MEAN": (("axes", (3,)), ("keep_dims", True))}
    ops = (conv, *(Op(n, op, ins, out, params.get(op, ()))
                   for n, (op, ins, out) in enumerate(readers, 1)))
    return KernelIR(tuple(Value(t, s) for t, s in sorted(shapes.items())), ops,
                    (0, 1, 2, 4), outputs)


def test_a_depthwise_convolution_and_the_chain_it_feeds_are_one_stencil_nest():
    """The residual ADD, a per-channel gate and RELU6 run on each sum before it is stored;
    nothing but the chain's end goes to memory."""
    ir = depthwise_ir([("ADD", (3, 0), 5), ("MUL", (5, 4), 6), ("RELU6", (6,), 7)], (7,))
    schedule = plan(ir, AVX512)
    (nest,) = schedule.nests
    assert isinstance(nest, StencilNest) and schedule.buffers == ()
    assert [op.op for op in nest.ops] == ["DEPTHWISE_CONV_2D", "ADD", "MUL", "RELU6"]
    assert nest.conv is nest.ops[0] and nest.epilogue == nest.ops[1:]
    assert nest.writes == (7,) and set(nest.reads) == {0, 1, 2, 4}
    assert nest.window == Window(kernel=(7, 7), strides=(1, 1), dilations=(1, 1),
                                 padding=(3, 3))
    assert nest.depth_multiplier == 1 and 24 % nest.channels == 0
    first, end = nest.interior            # whole tiles of columns whose windows are inside
    assert first >= 3 and end <= 17 and first % nest.pixels == 0
    assert (end - first) % nest.pixels == 0 and end - first >= 17 - 3 - 2 * nest.pixels
    assert nest.loops.broadcast[4] == (False, True, True, False)     # the gate: per channel


@pytest.mark.parametrize("channels, avx512, avx2", [
    (32, (32, 6), (16, 4)), (48, (48, 4), (16, 4)), (120, (40, 4), (24, 2)),
    (240, (48, 4), (16, 4)), (88, (88, 2), (88, 1))])
def test_stencil_tiles_follow_the_targets_register_file(channels, avx512, avx2):
    """(channels of a block, pixels of a tile): with 32 registers (16 lanes) about 12 sums,
    blocks of 2 or 3 vectors the larger; with 16 (AVX2, 8 lanes) 4 pixels of 2 vectors before
    2 of 3 (tiles of 2 or 3 pixels of 2 vectors ran 3-9x slower there); all of a C without
    such a divisor."""
    from codegen.stencil import TILES, _channel_block
    for registers, lanes, (block, pixels) in ((32, 16, avx512), (16, 8, avx2)):
        tiles = TILES[registers]
        assert _channel_block(channels, 1, lanes, tiles) == block
        assert tiles.pixels_of(block, lanes) == pixels


def test_what_else_reads_the_convolution_runs_after_its_nest_from_memory():
    """A LayerNorm's MEAN reads the sums: they are stored, and its rows nest runs after the
    stencil nest; an op reading the MEAN's result too joins no epilogue."""
    ir = depthwise_ir([("RELU", (3,), 5), ("MEAN", (5,), 6), ("SUB", (5, 6), 7)], (7,),
                      extra={6: (1, 20, 20, 1)})
    schedule = plan(ir, AVX512)
    stencil, rows = schedule.nests
    assert isinstance(stencil, StencilNest) and isinstance(rows, RowsNest)
    assert [op.op for op in stencil.ops] == ["DEPTHWISE_CONV_2D", "RELU"]
    assert stencil.writes == (5,) and schedule.buffers == ((5, 20 * 20 * 24),)
    assert [op.op for op in rows.ops] == ["MEAN", "SUB"] and 5 in rows.reads


@pytest.mark.parametrize("per_row, chain, length", [
    ((1, 8, 8, 1), ("EXP", "LOGISTIC"), 11),    # a value per row, two transcendental ops
    ((1, 8, 8, 1), ("EXP", "ABS"), 0),          # one
    ((11,), ("EXP", "LOGISTIC"), 0),            # a value per channel: row tiles, stages
])
def test_row_chain_length_finds_transcendental_chains_in_rows_read_with_a_value_per_row(
        per_row, chain, length):
    from fusion_delegate.features import row_chain_length
    shape = (1, 8, 8, 11)
    ir = ir_of({0: shape, 1: per_row, 2: shape, 3: shape, 4: shape},
               [("MAXIMUM", (0, 1), 2), (chain[0], (2,), 3), (chain[1], (3,), 4)],
               inputs=(0, 1), outputs=(4,))
    assert row_chain_length(plan(ir, AVX512)) == length


def test_int8_lookups_in_rows_read_with_a_value_per_row_count_as_a_row_chain(cache_dir):
    """Two int8 LOGISTICs (table lookups) in rows of 95 read with a per-pixel operand: the
    shape of a performance-fuzz case that ran 0.76-0.88x of LiteRT on Zen 4 and Emerald Rapids.
    Left to LiteRT by default; claimed with min_speedup=0."""
    from fusion_delegate.model import Quantization
    q = Quantization.per_tensor(0.05, 0)
    logistic_q = Quantization.per_tensor(1 / 256, -128)
    b = ModelBuilder("int8_row_lookups")
    x = b.input("x", (1, 11, 16, 95), np.int8, q)
    per_pixel = b.input("y", (1, 11, 16, 1), np.int8, q)
    h = b.op("ADD", [x, per_pixel], NONE, quantization=q)
    h = b.op("LOGISTIC", [h], quantization=logistic_q)
    h = b.op("MUL", [h, x], NONE, quantization=q)
    b.output(b.op("LOGISTIC", [h], quantization=logistic_q))
    model = b.to_bytes()
    default = FusionDelegate(cache_dir=cache_dir)
    builtin_interpreter(model, [default])
    assert all("lookups in rows of 95" in (claim.reason or "")
               for claim in default.claims.values())
    everything = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    builtin_interpreter(model, [everything])
    assert all(claim.reason is None for claim in everything.claims.values())
