"""The fusion delegate in the real interpreter; LiteRT's builtin kernels are the oracle."""
import ast
import re

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conftest import ROOT, builtin_interpreter, foreign_calls, run, same_bits, wrong_op
from equivalence import graphs
from fusion_delegate import FusionDelegate
from fusion_delegate.demo import build_demo_model
import fusion_delegate.fusion
from fusion_delegate.fusion import advise_huge_pages
from fusion_delegate.model import ModelBuilder, read_model
from fusion_delegate.policy import ClaimPolicy
from fusion_delegate.tools.plan import describe

NONE = {"fused_activation_function": 0}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def swish_chain(shape=(2, 8)) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape)
    bias = b.const("bias", np.linspace(-1, 1, shape[-1]).astype(np.float32))
    h = b.op("ADD", [x, bias], NONE, name="biased")
    s = b.op("MUL", [h, b.op("LOGISTIC", [h], name="gate")], NONE, name="swish")
    b.output(b.op("RELU6", [s], name="out"))
    return b.to_bytes()


def test_resize_to_new_shapes_and_back_reuses_the_cached_kernel(cache_dir, rng):
    model = swish_chain()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    reference = builtin_interpreter(model)
    hits = []
    for shape in [(2, 8), (5, 3, 8), (1, 8), (2, 8)]:
        x = [rng.standard_normal(shape).astype(np.float32) * 8]
        got, want = run(interpreter, x)[0], run(reference, x)[0]
        assert got.shape == shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        hits.append(delegate.kernels[0].kernel.cache_hit)
    assert hits[-1] == "memory"


def test_a_partition_is_built_once_and_anew_after_a_resize(cache_dir, rng, monkeypatch):
    """The kernel built to decide on the partition is the one prepared; new shapes build anew."""
    builds = []
    build = fusion_delegate.fusion.build
    monkeypatch.setattr(fusion_delegate.fusion, "build",
                        lambda ir, layout, **kw: builds.append(ir.name) or build(ir, layout, **kw))
    interpreter = builtin_interpreter(swish_chain(), [FusionDelegate(cache_dir=cache_dir,
                                                                     min_speedup=0.0)])
    assert builds == ["fused_add_logistic_mul_relu6"]
    run(interpreter, [rng.standard_normal((5, 8)).astype(np.float32)])
    assert len(builds) == 2

def test_a_build_kept_for_the_process_tells_zero_from_minus_zero(cache_dir):
    """Two models that differ only in the sign of a zero constant compute different results at
    x = -0.0 (-0.0 + 0.0 is 0.0, -0.0 + -0.0 is -0.0), though the constants compare equal."""
    x = np.full((4, 8), -0.0, np.float32)
    for zero in (0.0, -0.0):
        b = ModelBuilder()
        doubled = b.op("MUL", [b.input("x", x.shape), b.const("two", np.float32(2))], NONE)
        b.output(b.op("ADD", [doubled, b.const("zero", np.float32(zero))], NONE, name="y"))
        model = b.to_bytes()
        delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
        got = run(builtin_interpreter(model, [delegate]), [x])[0]
        assert delegate.kernels, "not claimed"
        assert same_bits(got, run(builtin_interpreter(model), [x])[0]), zero



def test_many_invokes_read_fresh_inputs_every_time(cache_dir, rng):
    model = swish_chain((4, 16))
    interpreter = builtin_interpreter(model, [FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)])
    reference = builtin_interpreter(model)
    for _ in range(200):
        x = [rng.standard_normal((4, 16)).astype(np.float32) * 5]
        np.testing.assert_allclose(run(interpreter, x)[0], run(reference, x)[0],
                                   rtol=1e-6, atol=1e-7)


def test_two_interpreters_share_one_delegate(cache_dir, rng):
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    first = builtin_interpreter(swish_chain((2, 8)), [delegate])
    second = builtin_interpreter(swish_chain((3, 4)), [delegate])
    for interpreter, shape in [(first, (2, 8)), (second, (3, 4)), (first, (2, 8))]:
        x = [rng.standard_normal(shape).astype(np.float32)]
        want = run(builtin_interpreter(swish_chain(shape)), x)[0]
        np.testing.assert_allclose(run(interpreter, x)[0], want, rtol=1e-6, atol=1e-7)


def test_demo_model_runs_fused_and_matches_litert(cache_dir, rng):
    model = build_demo_model(tokens=16, width=32)
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    assert delegate.summary() == "23 of 25 nodes delegated in 3 partitions"   # MEANs too
    x = [rng.standard_normal((1, 16, 32)).astype(np.float32)]
    want = run(builtin_interpreter(model), x)[0]
    np.testing.assert_allclose(run(interpreter, x)[0], want, rtol=1e-5, atol=1e-6)


def test_partitions_predicted_slower_than_litert_are_left_alone_with_the_reason(cache_dir):
    """min_speedup between the demo's lowest and highest predicted speedups: the partitions
    below it are left to LiteRT, each node saying why, and those above it are claimed."""
    model = build_demo_model()
    probe = FusionDelegate(cache_dir=cache_dir, min_speedup=1e9)   # predicts, builds nothing
    builtin_interpreter(model, [probe])
    speedups = sorted(p.speedup for p in probe.predictions.values())
    threshold = (speedups[0] + speedups[-1]) / 2
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=threshold)
    builtin_interpreter(model, [delegate])
    kept = {p.nodes for p in delegate.last_partitions}
    assert kept and len(kept) < len(delegate.predictions)
    for nodes, prediction in delegate.predictions.items():
        assert (nodes in kept) == ClaimPolicy(threshold).pays(prediction)
        if nodes not in kept:
            assert all(delegate.claims[n].reason == f"not worth it (predicted "
                       f"{prediction.speedup:.2f}x LiteRT, "
                       f"{prediction.saving_us:+.1f} us)" for n in nodes)


def test_unclaimed_nodes_say_why():
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    q = b.input("q", (2, 3), np.int32)
    deep = b.input("deep", (1, 1, 1, 1, 1, 1, 2))
    outputs = [b.op("ADD", [q, q], NONE), b.op("ADD", [deep, deep], NONE),
               b.op("RESHAPE", [x, b.const("shape", np.array([3, 2], np.int32))],
                    {"new_shape": [3, 2]}, shape=(3, 2)),
               b.op("ABS", [x])]
    b.output(*outputs)
    delegate = FusionDelegate(cache_dir="", min_speedup=0.0, min_nodes_per_partition=2)
    builtin_interpreter(b.to_bytes(), [delegate])
    reasons = [c.reason for c in sorted(delegate.claims.values(), key=lambda c: c.index)]
    assert reasons == ["dtype int32 not supported", "rank 7 > 6", "op RESHAPE not supported",
                       "partition too small (1 < 2 nodes)"]
    assert [(r.phrase, r.values) for r in reasons[:2]] == [("dtype {} not supported", ("int32",)),
                                                          ("rank {} > {}", (7, 6))]


def test_nodes_whose_values_nothing_reads_are_claimed_and_computed_by_no_kernel(cache_dir, rng):
    """XNNPACK drops them from its subgraph: the kernel (and the cost model) leaves them out,
    and a partition of only such nodes is left to LiteRT, saying why."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 8))
    b.op("LOGISTIC", [x], name="dead_alone")
    y = b.op("CONV_2D", [x, b.const("w", np.ones((8, 1, 1, 8), np.float32)),
                         b.const("b", np.zeros(8, np.float32))],
             {"padding": 0, "stride_w": 1, "stride_h": 1}, name="conv")
    b.op("NEG", [b.op("EXP", [y], name="dead")], name="dead_after_dead")
    b.output(b.op("RELU", [y], name="out"))
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    assert [c.partition for c in delegate.claims.values()] == [None, None, 0, 0, 0]
    assert delegate.claims[0].reason == ("nothing reads what it computes (XNNPACK drops such "
                                         "nodes)")
    assert [op.op for op in delegate.kernels[0].ir.ops] == ["RELU"]
    x = [rng.standard_normal((1, 4, 4, 8)).astype(np.float32)]
    assert same_bits(run(interpreter, x)[0], run(builtin_interpreter(model), x)[0])


def test_generated_source_names_ops_and_keeps_float32_literals(cache_dir):
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, precision="exact")
    builtin_interpreter(swish_chain(), [delegate])
    source = delegate.kernels[0].kernel.source
    assert source.startswith("# fusion_delegate kernel fused_add_logistic_mul_relu6.")
    assert "\n#   LOGISTIC           add ([2, 8]) -> logistic\n" in source
    tree = ast.parse(source)
    bare_floats = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                   and isinstance(n.value, float)
                   and not _inside_float32_call(tree, n)]
    assert bare_floats == []
    assert max(len(line) for line in source.splitlines() if not line.startswith("#")) <= 100


def _inside_float32_call(tree, constant) -> bool:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "float32"
                and constant in node.args):
            return True
    return False


def test_claims_list_partitions_with_nodes_ops_tensors_and_source(cache_dir):
    model = swish_chain()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    builtin_interpreter(model, [delegate])
    plan = describe(read_model(model), delegate)
    assert plan.summary == "4 of 4 nodes delegated in 1 partitions"
    [partition] = plan.partitions
    assert partition.nodes == (0, 1, 2, 3)
    assert partition.ops == ["ADD", "LOGISTIC", "MUL", "RELU6"]
    assert partition.inputs == (0, 1) and partition.outputs == (5,)
    legend = "# nodes 0, 1, 2, 3; tensors x0 = t0, x1 = t1, relu6_1 = t5\n"
    assert partition.source.startswith(legend)
    assert "def fused_add_logistic_mul_relu6(" in partition.source


def test_partitions_that_compute_the_same_share_one_compiled_kernel(tmp_path, rng):
    """Two swish blocks with their own biases, a FULLY_CONNECTED between them: two partitions,
    one kernel compiled (its entry point finds each partition's tensors through its node), and
    each partition computes its own tensors."""
    b = ModelBuilder()
    h = b.input("x", (1, 8))
    for block in range(2):
        if block:
            w = b.const("w", rng.standard_normal((8, 8)).astype(np.float32))
            h = b.op("FULLY_CONNECTED", [h, w, b.const("b", np.zeros(8, np.float32))], NONE,
                     shape=(1, 8))
        bias = b.const(f"bias{block}", rng.standard_normal(8).astype(np.float32))
        h = b.op("ADD", [h, bias], NONE)
        h = b.op("RELU6", [b.op("MUL", [h, b.op("LOGISTIC", [h])], NONE)])
    b.output(h)
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    first, second = delegate.kernels[0], delegate.kernels[1]
    assert first.kernel.path == second.kernel.path
    assert sorted([first.kernel.cache_hit, second.kernel.cache_hit]) == ["", "memory"]
    for _ in range(3):
        x = [rng.standard_normal((1, 8)).astype(np.float32) * 4]
        np.testing.assert_allclose(run(interpreter, x)[0], run(builtin_interpreter(model), x)[0],
                                   rtol=1e-5, atol=1e-6)


def test_a_node_listing_other_tensors_than_its_partition_fails_prepare_clearly(cache_dir,
                                                                               monkeypatch):
    """The kernel finds its tensors at their places in its node's lists: a kernel made for
    inputs in another order is refused at prepare, never run on the wrong tensors."""
    init = fusion_delegate.fusion.FusionKernel.init

    def swapped(self, context, nodes, inputs, outputs):
        init(self, context, nodes, inputs[::-1], outputs)
    monkeypatch.setattr(fusion_delegate.fusion.FusionKernel, "init", swapped)
    with pytest.raises(RuntimeError, match="lists other tensors than the partition"):
        builtin_interpreter(swish_chain(), [FusionDelegate(cache_dir=cache_dir,
                                                           min_speedup=0.0)])


def test_codegen_knows_nothing_of_ctypes_or_the_delegate():
    for path in (ROOT / "codegen").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names} | {
            (node.module or "").split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)}
        assert not imported & {"ctypes", "fusion_delegate"}, path.name


def test_a_wrong_op_expression_is_caught_by_the_equivalence_check(monkeypatch, tmp_path):
    """Proves the harness can fail: ADD rendered as a subtraction must be reported."""
    from test_equivalence import check
    wrong_op(monkeypatch, "ADD", "{a} - {b}")

    @settings(max_examples=10, deadline=None, database=None, phases=[Phase.generate])
    @given(graph=graphs(op_names=("ADD",)), seed=st.integers(0, 2**32 - 1))
    def add_models(graph, seed):
        check(graph, seed, str(tmp_path))

    with pytest.raises(AssertionError, match="mismatches"):
        add_models()


def arithmetic_chain(shape=(2, 8)) -> bytes:
    """Kernels with a fast loop (see codegen.fastpath.FastPath)."""
    b = ModelBuilder()
    x = b.input("x", shape)
    scale = b.const("scale", np.linspace(0.5, 2, shape[-1]).astype(np.float32))
    y = b.op("MUL", [b.op("ADD", [x, scale], NONE), scale], NONE)
    b.output(b.op("SUB", [b.op("MUL", [y, y], NONE), x], NONE, name="out"))
    return b.to_bytes()


@pytest.mark.parametrize("chain", [swish_chain, arithmetic_chain])
@pytest.mark.parametrize("special", [None, np.inf])
def test_threads_split_large_partitions_with_identical_results(cache_dir, rng, chain, special):
    shape = (4, 1 << 15)
    model = chain(shape)
    x = [rng.standard_normal(shape).astype(np.float32) * 4]
    if special is not None:
        x[0][3, 1000] = special              # a miss in one thread's rows: the exact loop
    outputs, sources = {}, {}
    for threads in (1, 2):
        delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
        outputs[threads] = run(builtin_interpreter(model, [delegate], num_threads=threads), x)[0]
        sources[threads] = delegate.kernels[0].kernel.source
    assert "in 2 parts" not in sources[1]
    assert "in 2 parts (one a thread)" in sources[2]
    # The arithmetic chain runs a fast loop (its overflow clamps left out, the values counted);
    # the swish chain's MUL(h, LOGISTIC(h)) is one SWISH op under the default precision, which
    # saturates by itself, so only the ADD clamps and one loop runs.
    assert ("< INF_BITS:" in sources[2]) == (chain is arithmetic_chain)
    assert same_bits(outputs[1], outputs[2])
    np.testing.assert_allclose(outputs[2], run(builtin_interpreter(model), x)[0],
                               rtol=1e-6, atol=1e-7)


def test_small_partitions_stay_on_one_thread(cache_dir, rng):
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
    builtin_interpreter(swish_chain((2, 8)), [delegate], num_threads=2)
    assert " parts (one a thread)" not in delegate.kernels[0].kernel.source


def test_interpreters_sharing_a_delegate_invoke_concurrently_from_threads(cache_dir):
    import threading
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
    shape = (4, 1 << 15)
    model = swish_chain(shape)
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            interpreter = builtin_interpreter(model, [delegate], num_threads=2)
            reference = builtin_interpreter(model)
            for _ in range(20):
                x = [rng.standard_normal(shape).astype(np.float32)]
                np.testing.assert_allclose(run(interpreter, x)[0], run(reference, x)[0],
                                           rtol=1e-6, atol=1e-7)
        except Exception as error:  # noqa: BLE001 - reported below with the thread's seed
            errors.append((seed, error))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_exact_loop_runs_when_the_fast_loop_could_differ(cache_dir):
    """y * 1e30 overflows; LiteRT clamps it to FLT_MAX before * 1e-30 and gets a finite
    result, so the unclamped fast loop's inf must send the kernel to its exact loop. Likewise
    sin of an angle beyond 2**16 needs the full reduction."""
    b = ModelBuilder()
    x, y = b.input("x", (8,)), b.input("y", (8,))
    scaled = b.op("MUL", [b.op("MUL", [y, b.const("big", np.float32(1e30))], NONE),
                          b.const("small", np.float32(1e-30))], NONE, name="scaled")
    wave = b.op("SIN", [b.op("ADD", [x, b.const("half", np.float32(0.5))], NONE)], name="wave")
    b.output(scaled, wave)
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    assert "misses" in delegate.kernels[0].kernel.source
    normal = np.linspace(-3, 3, 8, dtype=np.float32)
    overflowing = np.array([1, -2, 1e10, 3, 1e9, -4e9, 5, 6], np.float32)
    far_angles = np.array([1, -2, 1e7, 3, 4e5, -3e6, 5, 6], np.float32)
    for inputs in ([normal, normal], [normal, overflowing], [far_angles, normal]):
        got, want = run(interpreter, inputs), run(builtin_interpreter(model), inputs)
        assert same_bits(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=3e-7, atol=0)


@pytest.mark.parametrize("shape, threads", [((700,), 1), ((3, 300), 1), ((1 << 17,), 2),
                                            ((4, 40000), 2)])
def test_transcendental_stages_run_tile_by_tile(cache_dir, rng, shape, threads):
    """Several transcendental ops: one loop per stage over tiles (codegen.schedule stages),
    with a partial last tile, per-row broadcasts and threads."""
    b = ModelBuilder()
    x = b.input("x", shape)
    row = b.input("row", shape[:-1] + (1,))
    col = b.const("col", np.linspace(0.5, 2, shape[-1]).astype(np.float32))
    y = b.op("EXP", [b.op("TANH", [b.op("MUL", [x, col], NONE)])])
    z = b.op("LOGISTIC", [b.op("ADD", [y, row], NONE)])
    b.output(b.op("MUL", [z, x], NONE, name="out"), y)
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
    inputs = [rng.standard_normal(shape).astype(np.float32) * 3,
              rng.standard_normal(shape[:-1] + (1,)).astype(np.float32)]
    got = run(builtin_interpreter(model, [delegate], num_threads=threads), inputs)
    source = delegate.kernels[0].kernel.source
    tiles = "for tile in" in source or "tile = first + offset" in source   # a part's tiles
    assert tiles and "mul_buf" not in source and "tanh_buf" in source
    assert ("_part(arguments, part)" in source) == (threads > 1)
    for fused, want in zip(got, run(builtin_interpreter(model), inputs)):
        np.testing.assert_allclose(fused, want, rtol=4e-6, atol=1e-37)


def test_a_generated_kernel_vectorises_its_loops(cache_dir):
    """GELU as MUL/ADD/TANH plus EXP and SIN: packed float32 instructions, and no libm call
    anywhere in the kernel."""
    b = ModelBuilder()
    x = b.input("x", (64, 256))
    cube = b.op("MUL", [b.op("MUL", [x, x], NONE), x], NONE)
    inner = b.op("ADD", [x, b.op("MUL", [cube, b.const("c", np.float32(0.044715))], NONE)],
                 NONE)
    gelu = b.op("MUL", [x, b.op("TANH", [inner])], NONE)
    b.output(b.op("ADD", [b.op("SIN", [gelu]), b.op("EXP", [x])], NONE))
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    builtin_interpreter(b.to_bytes(), [delegate])
    kernel = delegate.kernels[0].kernel
    packed = re.findall(r"\bv(?:add|sub|mul|div|max|min|cmp|fn?madd\w*)ps\s[^\n]*%[yz]mm",
                        kernel.inspect_asm())
    assert len(packed) > 100
    assert foreign_calls(kernel.inspect_llvm()) == set()


def test_large_partition_tensors_run_natively_after_a_first_invoke_that_advises_huge_pages(
        cache_dir, rng, monkeypatch):
    """[2, 1024, 1024] (8 MB a tensor): the first invoke after each prepare goes through Python
    (madvise of the arena's large tensors, x and out), later ones natively; the results are
    LiteRT's throughout."""
    advised = []
    monkeypatch.setattr(fusion_delegate.fusion, "advise_huge_pages",
                        lambda address, nbytes: advised.append(nbytes))
    b = ModelBuilder()
    x = b.input("x", (2, 1024, 1024))
    h = b.op("MUL", [x, b.const("scale", np.linspace(-2, 2, 1024, dtype=np.float32))], NONE)
    b.output(b.op("ADD", [h, b.const("bias", np.float32(0.25))], NONE, name="out"))
    model = b.to_bytes()
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    reference = builtin_interpreter(model)
    for rows in (1024, 1023, 1024):                     # three prepares
        x = rng.standard_normal((2, rows, 1024)).astype(np.float32)
        for _ in range(3):
            assert same_bits(run(interpreter, [x])[0], run(reference, [x])[0])
    assert advised == [8 << 20] * 2 + [2 * 1023 * 1024 * 4] * 2 + [8 << 20] * 2


@pytest.mark.parametrize("address, nbytes", [(0, 1 << 30), (4096, 4 << 20), (1, 0),
                                             (-(1 << 21), 1 << 22), (1 << 47, 1 << 40)])
def test_advising_huge_pages_never_fails(address, nbytes):
    """Unmapped, unaligned, empty, negative and absurd ranges: madvise's errors are ignored."""
    advise_huge_pages(address, nbytes)


def test_advising_huge_pages_on_live_and_read_only_memory_keeps_its_contents():
    data = np.arange(3 << 20, dtype=np.float32)
    constant = np.frombuffer(bytes(8 << 20), np.uint8)
    advise_huge_pages(data.ctypes.data, data.nbytes)
    advise_huge_pages(constant.ctypes.data, constant.nbytes)
    assert np.array_equal(data, np.arange(3 << 20, dtype=np.float32)) and not constant.any()
