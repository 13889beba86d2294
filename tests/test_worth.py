"""The cost model: facts about the shipped fits (cost_model.<cpu>.json), and the fallbacks. No
timing."""
import json
import logging
import math
from dataclasses import replace

import numpy as np
import pytest

from codegen.quant_ops import ELEMENTWISE_OPS, QUANT_OPS, XNNPACK_INT8
from codegen.chains import approximate_chains
from codegen.ops import OPS, TRANSCENDENTAL
from codegen.pipeline import build
from conftest import builtin_interpreter, ir_of
from fusion_delegate import FusionDelegate, worth
from fusion_delegate.context import Partition
from fusion_delegate.features import (CostKey, Cut, NestTraffic, PartitionFeatures, PlanNode,
                                      broadcast_run, cost_keys, cut_around, nest_traffic)
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.model import ModelBuilder, Quantization, read_model
from fusion_delegate.policy import MIN_SAVING_US
from fusion_delegate.runtime import Interpreter
from fusion_delegate.demo import build_demo_model
from fusion_delegate.worth import (APPROXIMATED_OPS, CACHED_ELEMENTS, QUANTIZED_OPS, CostModel,
                                   CostModelError, Prediction, load_cost_model, predict)
from perf import calibrate
from perf.after_builtin import gate_model
from perf.calibrate import add_chain, conv_sandwich

ARITHMETIC_CHAIN = ["ADD", "MUL", "SUB", "MUL", "ADD", "DIV", "ADD", "MUL", "SUB", "ADD"]


def partition_of(ops, nests, cut: Cut = Cut.ELEMENTWISE,
                 builtin_input: bool = False) -> PartitionFeatures:
    """Features written short: (name, elements[, run[, whole inputs]]) per op (CostKey), and
    elements or (elements, extra streams) per nest."""
    return PartitionFeatures(tuple(CostKey(*op) for op in ops),
                             tuple(NestTraffic(*((n,) if isinstance(n, int) else n))
                                   for n in nests), cut, builtin_input)


@pytest.fixture
def data() -> dict:
    """The Zen 5 fit, which the facts below were measured in, whatever CPU runs the tests."""
    return json.loads(worth.shipped_path(worth.FALLBACK_CPU).read_text())


def test_one_add_on_a_tiny_tensor_does_not_pay():
    assert predict(partition_of([("ADD", 32)], [32])).speedup < 1


def test_ten_op_arithmetic_chain_on_1m_elements_pays():
    n = 1 << 20
    assert predict(partition_of([(op, n) for op in ARITHMETIC_CHAIN], [n])).speedup > 1


SHIPPED = sorted(worth.shipped_file(worth.FALLBACK_CPU).parent.glob("cost_model.*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_model_has_every_op_and_the_machine_header(path):
    model = load_cost_model(path)
    for costs in model.threads.values():
        assert set(costs.ops) == (set(OPS) | set(QUANTIZED_OPS) | set(APPROXIMATED_OPS)
                                  | set(calibrate.ROW_OPS))
    header = json.loads(path.read_text())["header"]
    for key in ("date", "machine", "versions", "command"):
        assert header[key]
    assert path == worth.shipped_file(header["machine"]["llvm_cpu"])
    assert {"numba", "llvmlite", "ai-edge-litert", "numpy"} <= set(header["versions"])
    assert 1 in model.threads


def test_a_cpu_takes_its_own_fit_and_others_the_fallback():
    assert len(SHIPPED) >= 2
    assert worth.shipped_path("znver4") == worth.shipped_file("znver4") != \
        worth.shipped_path("znver5") == worth.shipped_file("znver5")
    assert worth.shipped_path("not-a-cpu") == worth.shipped_file(worth.FALLBACK_CPU)
    assert worth.shipped_path().is_file()


def test_prediction_grows_with_ops_and_elements():
    small = predict(partition_of([("TANH", 1000)], [1000]))
    large = predict(partition_of([("TANH", 10**6)], [10**6]))
    assert 0 < small.litert_us < large.litert_us and 0 < small.fused_us < large.fused_us
    longer = predict(partition_of([("TANH", 10**6), ("ADD", 10**6)], [10**6]))
    assert longer.litert_us > large.litert_us


def test_kernels_narrower_than_the_fits_compute_that_much_slower():
    """A haswell cache where the fit ran AVX-512 kernels: their arithmetic takes twice as long,
    beside an XNNPACK that uses the CPU's whole width. Wider ones are priced as fitted."""
    n = 1 << 16
    chain = partition_of([("TANH", n), ("EXP", n), ("LOGISTIC", n)], [n])
    model = load_cost_model()
    native = model.predict(chain)
    narrow = model.predict(chain, 1, model.vector_bytes // 2)
    assert narrow.litert_us == native.litert_us
    assert narrow.fused_us > 1.5 * native.fused_us and narrow.speedup < native.speedup
    assert model.predict(chain, 1, model.vector_bytes) == native
    assert model.predict(chain, 1, model.vector_bytes * 2) == native


def test_a_fit_knows_the_vector_width_of_the_kernels_it_timed(data):
    """Written by perf/calibrate.py; the Zen fits, older, ran kernels at their CPU's width."""
    assert CostModel.from_json(data).vector_bytes == 64
    data["header"]["vector_bytes"] = 32     # LLVM's choice on Intel's AVX-512 servers
    assert CostModel.from_json(data).vector_bytes == 32


def test_thread_counts_use_the_largest_measured_one_below():
    model = load_cost_model()
    lowest = min(model.threads)
    assert model.costs(0) is model.costs(-1) is model.threads[lowest]
    assert model.costs(1000) is model.threads[max(model.threads)]


def without(data: dict, name: str) -> CostModel:
    for table in data["threads"].values():
        del table["ops"][name]
    return CostModel.from_json(data)


def test_partitions_are_priced_at_the_interpreters_thread_count_not_the_kernels():
    """XNNPACK runs on the interpreter's threads while our kernels stay on one: a 2-thread
    interpreter's partitions take the 2-thread costs. (No kernel is built: nothing pays 1e9x.)"""
    model = build_demo_model()
    predictions = {}
    for threads in (1, 2):
        delegate = FusionDelegate(min_speedup=1e9)
        builtin_interpreter(model, [delegate], num_threads=threads)
        predictions[threads] = delegate.predictions
    assert load_cost_model().costs(1) is not load_cost_model().costs(2)
    assert predictions[1].keys() == predictions[2].keys() and predictions[1]
    assert all(predictions[1][nodes] != predictions[2][nodes] for nodes in predictions[1])


@pytest.mark.parametrize("name", ["GELU", "ROUND"])
def test_missing_op_takes_the_slowest_fused_op_of_its_cost_class(data, name):
    model = without(data, name)
    costs = model.costs(1)
    same_class = [n for n in costs.ops if n.partition("/")[0] in OPS
                  and (n in TRANSCENDENTAL) == (name in TRANSCENDENTAL)]
    slowest = max(same_class, key=lambda n: costs.ops[n].fused_ns)
    assert model.op_cost(costs, name) is costs.ops[slowest]
    assert model.predict(partition_of([(name, 4096)], [4096])) == \
        model.predict(partition_of([(slowest, 4096)], [4096]))


def test_op_unknown_to_ops_counts_as_transcendental(data):
    model = CostModel.from_json(data)
    costs = model.costs(1)
    assert model.op_cost(costs, "NOT_AN_OP").fused_ns == max(
        costs.ops[n].fused_ns for n in TRANSCENDENTAL)


@pytest.mark.parametrize("text, message", [
    ("{not json", "cannot read"),
    ('{"format": 5, "header": {}, "breaks": [65536], "threads": {}}', "threads"),
    ('[1, 2]', "not a cost model"),
])
def test_corrupt_file_raises_a_clear_error(tmp_path, text, message):
    path = tmp_path / "cost_model.json"
    path.write_text(text)
    with pytest.raises(CostModelError, match=message) as error:
        load_cost_model(path)
    assert str(path) in str(error.value) and "perf/calibrate.py" in str(error.value)


def test_bad_number_is_named(data):
    data["threads"]["1"]["ops"]["ADD"]["litert"]["c1_ns"][0] = -1.0
    with pytest.raises(CostModelError, match=r"threads\.1\.ops\.ADD\.litert\.c1_ns\[0\]"):
        CostModel.from_json(data)


def test_predict_never_raises_on_a_corrupt_file_but_claims_and_warns_once(tmp_path, caplog):
    path = tmp_path / "cost_model.json"
    path.write_bytes(b"\x00garbage")
    with caplog.at_level(logging.WARNING, logger="fusion_delegate"):
        first = predict(partition_of([("ADD", 32)], [32]), path=path)
        second = predict(partition_of([("ADD", 32)], [32]), path=path)
    assert first == second == worth.UNKNOWN
    assert math.isnan(first.litert_us) and first.speedup == math.inf
    assert len([r for r in caplog.records if str(path) in r.getMessage()]) == 1


def test_missing_file_is_the_same_fallback(tmp_path):
    absent = tmp_path / "absent.json"
    assert predict(partition_of([("ADD", 32)], [32]), path=absent) == worth.UNKNOWN


def test_speedup_is_litert_over_fused():
    assert Prediction(3.0, 1.5).speedup == 2.0
    assert Prediction(1.0, 0.0).speedup == math.inf


@pytest.mark.parametrize("output, inputs, run", [
    ((4, 8), [(4, 8), (8,)], 8),                    # per channel: a call per row
    ((4, 8), [(4, 8), (4, 1)], 8),                  # per row: the same
    ((1, 5, 5, 8), [(1, 5, 5, 8), (1, 1, 1, 8)], 8),  # a squeeze-excite gate
    ((2, 3, 8), [(2, 3, 8), (2, 1, 8)], 8),
    ((4, 8), [(4, 8), ()], 32),                     # a scalar: one call over everything
    ((4, 8), [(4, 8), (4, 8)], 32),                 # no broadcast
])
def test_broadcast_run_is_what_one_xnnpack_call_covers(output, inputs, run):
    assert broadcast_run(output, inputs) == run


def test_short_broadcast_runs_cost_litert_more_and_nothing_else():
    """... on the fused side, nothing but the cut, priced at the memory-bound share: where
    LiteRT's calls cost more, less of the partition's gain is traffic."""
    model = load_cost_model()
    factors = model.costs(1).broadcast.factors
    assert factors[0] > 2 and all(f >= 1 for f in factors)
    n = 1 << 16
    chain = [("ADD", n), ("MUL", n)]
    base = model.predict(partition_of(chain, [n]))
    short = model.predict(partition_of([(name, n, 8) for name, n in chain], [n]))
    assert short.litert_us > 2 * base.litert_us and short.fused_us < base.fused_us
    uncut = model.predict(partition_of([(name, n, 8) for name, n in chain], [n], Cut.NONE))
    assert uncut.fused_us == model.predict(partition_of(chain, [n], Cut.NONE)).fused_us
    assert model.predict(partition_of([(name, n, n) for name, n in chain], [n])) == base
    assert model.predict(partition_of([("TANH", n, 8)], [n])) == \
        model.predict(partition_of([("TANH", n)], [n]))


def test_broadcast_factors_must_match_their_runs(data):
    data["threads"]["1"]["broadcast"]["factors"].pop()
    with pytest.raises(CostModelError, match=r"threads\.1\.broadcast"):
        CostModel.from_json(data)


def test_cuts_beside_convolutions_are_priced_as_split_heavy():
    """Two ADDs between two more (run by XNNPACK: excluded) and between depthwise convolutions:
    LiteRT's side is the same, the fused side pays `split` or `split_heavy`."""
    model, n = load_cost_model(), 1 << 16
    predictions = {}
    for name, sandwich in (("beside", add_chain(4, n)), ("heavy", conv_sandwich(n))):
        delegate = FusionDelegate(min_speedup=1e9, exclude_nodes="0,3")
        builtin_interpreter(sandwich, [delegate])
        predictions[name] = delegate.predictions[(1, 2)]
    beside, heavy = predictions["beside"], predictions["heavy"]
    costs = model.costs(1)
    assert beside.litert_us == heavy.litert_us
    assert math.isclose(beside.fused_us - beside.cut_us, heavy.fused_us - heavy.cut_us)
    share = beside.cut_us / costs.split.us(n, model.breaks)
    assert 0 < share <= 1
    assert math.isclose(heavy.cut_us, share * costs.split_heavy.us(n, model.breaks))


def test_a_cut_is_priced_at_the_memory_bound_share_of_the_partition():
    """The cut costs `split` times the fused kernel's traffic over LiteRT's time for the ops:
    less for a swish, whose LOGISTIC costs LiteRT more than a pass, than for two ADDs."""
    model, n = load_cost_model(), 1 << 16
    costs = model.costs(1)
    split, traffic = costs.split.us(n, model.breaks), costs.fused.us(n, model.breaks)
    adds = model.predict(partition_of([("ADD", n), ("ADD", n)], [n]))
    swish = model.predict(partition_of([("LOGISTIC/fast", n), ("MUL", n)], [n]))
    assert 0 < swish.cut_us < adds.cut_us < split
    assert math.isclose(adds.cut_us, split * (traffic - costs.fused.c0_us)
                        / (adds.litert_us - costs.litert_first.us(n, model.breaks)))


def test_at_more_threads_a_cut_between_xnnpacks_threaded_ops_is_priced_whole():
    """A compute-bound TANH pays a small share of its cut at one thread, all of it at two,
    where our kernel on one core reads what XNNPACK's threads wrote on two (perf/README.md,
    "Fused activations and the cut, priced at 2 threads")."""
    model, n = load_cost_model(), 1 << 15
    tanh = partition_of([("TANH/fast", n)], [n], Cut.HEAVY)
    one, two = model.predict(tanh, 1), model.predict(tanh, 2)
    assert 0 < one.cut_us < model.cut_us(Cut.HEAVY, model.costs(1), n)
    assert math.isclose(two.cut_us, model.cut_us(Cut.HEAVY, model.costs(2), n))


def test_a_float_ops_fused_clamp_costs_the_kernel_and_not_litert():
    """XNNPACK clamps inside its op; the fused kernel's NaN-keeping clamp is work of its own,
    priced as a RELU6. NONE clamps nothing in the fast loop."""
    values = {0: (8, 64), 1: (64,), 2: (8, 64)}
    plain = ir_of(values, [("ADD", (0, 1), 2)], (0, 1), (2,))      # activation NONE
    relu = replace(plain, ops=(replace(plain.ops[0], params=(("activation", 1),)),))
    assert [k.name for k in cost_keys(plain)] == ["ADD"]
    assert cost_keys(relu) == [CostKey("RELU6", 512, litert=False), cost_keys(plain)[0]]
    model, n = load_cost_model(), 1 << 16
    logistic = CostKey("LOGISTIC/fast", n)      # compute-bound: the clamp adds to its time
    alone = model.predict(PartitionFeatures((logistic,), (NestTraffic(n),), Cut.NONE))
    clamped = model.predict(PartitionFeatures((logistic, CostKey("RELU6", n, litert=False)),
                                              (NestTraffic(n),), Cut.NONE))
    assert clamped.litert_us == alone.litert_us
    assert math.isclose(clamped.fused_us - alone.fused_us,
                        model.op_cost(model.costs(1), "RELU6").fused_ns * n / 1e3)
    assert clamped.fused_us > alone.fused_us


@pytest.mark.parametrize("n", [1 << 14, 1 << 16, 1 << 18])
def test_committed_model_cuts_beside_convolutions_cost_less(n):
    """In the Zen 5 fit (the emeraldrapids one has them within its noise at 2 threads, 16K)."""
    model = load_cost_model(worth.shipped_file(worth.FALLBACK_CPU))
    for costs in model.threads.values():
        assert costs.split_heavy.us(n, model.breaks) < costs.split.us(n, model.breaks)


def test_a_partition_that_is_the_whole_model_cuts_nothing():
    """Two ADDs alone, and the same two between two more that XNNPACK runs: the same LiteRT
    price; the fused side pays `split` only where there is a partition of XNNPACK's to cut."""
    model, n = load_cost_model(), 1 << 16
    alone, between = FusionDelegate(min_speedup=1e9), FusionDelegate(min_speedup=1e9,
                                                                     exclude_nodes="0,3")
    builtin_interpreter(add_chain(2, n), [alone])
    builtin_interpreter(add_chain(4, n), [between])
    whole, cut = alone.predictions[(0, 1)], between.predictions[(1, 2)]
    assert whole.litert_us == cut.litert_us and whole.cut_us == 0
    assert 0 < cut.cut_us <= model.costs(1).split.us(n, model.breaks)
    assert math.isclose(cut.fused_us - whole.fused_us, cut.cut_us)


def test_an_elementwise_neighbour_apart_from_the_partition_prices_its_cut_by_size():
    """A partition of nodes 5, 6 (plan positions 5, 6) writing tensor 20: an elementwise op
    that reads it next prices the cut as `split`; one that reads it later (after a
    convolution, as a squeeze-excite's gate MUL) as `split` while the tensor stays in L2 and
    `split_heavy` beyond; convolutions alone as `split_heavy`."""
    partition = Partition((5, 6), (10,), (20,))

    def around(*neighbours: tuple[int, bool]) -> Cut:
        nodes = {5: PlanNode({10}, {11}, True, 5), 6: PlanNode({11}, {20}, True, 6)}
        nodes.update({i: PlanNode({20}, {30 + i}, elementwise, i)
                      for i, elementwise in neighbours})
        return cut_around(partition, nodes)

    assert around((7, True), (9, False)) is Cut.ELEMENTWISE
    assert around((7, False), (9, True)) is Cut.APART
    assert around((7, False)) is Cut.HEAVY
    assert cut_around(partition, {5: PlanNode({10}, {11}, True, 5)}) is Cut.NONE
    model = load_cost_model()
    costs = model.costs(1)
    for n, line in ((CACHED_ELEMENTS, costs.split), (4 * CACHED_ELEMENTS, costs.split_heavy)):
        assert model.cut_us(Cut.APART, costs, n) == line.us(n, model.breaks)


def quantized_op_model(name: str) -> bytes:
    """One int8 `name` on [16, 256]: QUANTIZE and DEQUANTIZE convert from and to float32."""
    if name not in ("QUANTIZE", "DEQUANTIZE"):
        return calibrate.chain(f"{name}/int8", 1, 4096)
    b = ModelBuilder()
    q = Quantization.per_tensor(0.05, 0)
    if name == "QUANTIZE":
        b.output(b.op(name, [b.input("x", (16, 256))], dtype=np.int8, quantization=q))
    else:
        b.output(b.op(name, [b.input("x", (16, 256), np.int8, q)], dtype=np.float32))
    return b.to_bytes()


@pytest.mark.parametrize("name", sorted(name for name in ELEMENTWISE_OPS
                                        if "int8" in QUANT_OPS[name].dtypes))
def test_the_quantized_ops_xnnpack_runs_are_those_litert_hands_it(name):
    """LiteRT's execution plan once XNNPACK is applied: a DELEGATE node where XNNPACK took the
    op, the op itself where the builtin kernel runs it."""
    interpreter = Interpreter(model_content=quantized_op_model(name))
    interpreter.allocate_tensors()
    taken = "DELEGATE" in [op["op_name"] for op in interpreter._get_ops_details()]
    assert taken == (name in XNNPACK_INT8)


def test_a_partition_after_a_builtin_kernel_prices_litert_at_one_thread_and_half_the_cut():
    """At 2 threads XNNPACK's ops reading what a builtin kernel made cost their 1-thread time
    (its second thread finds the data in another core's cache); our kernel, on the core that
    made it, pays only the output side of the cut. At 1 thread nothing changes."""
    model, n, gate = load_cost_model(), 1 << 16, [("MUL/int8", 1 << 16, 48)]
    costs = model.costs(2)
    memory_us = costs.fused.us(n, model.breaks) - costs.fused.c0_us
    for cut in (Cut.APART, Cut.HEAVY):
        after = model.predict(partition_of(gate, [n], cut, builtin_input=True), 2)
        usual = model.predict(partition_of(gate, [n], cut), 2)
        one_thread = model.predict(partition_of(gate, [n], cut), 1)
        assert after.litert_us == one_thread.litert_us != usual.litert_us
        ops_us = one_thread.litert_us - model.costs(1).litert_first.us(n, model.breaks)
        share = min(1.0, memory_us / ops_us)
        assert math.isclose(after.cut_us, model.cut_us(cut, costs, n) * share / 2)
        assert math.isclose(after.fused_us - after.cut_us, usual.fused_us - usual.cut_us)
        at_one = model.predict(partition_of(gate, [n], cut, builtin_input=True), 1)
        assert (at_one.litert_us, at_one.fused_us) == (one_thread.litert_us, one_thread.fused_us)


def test_a_gate_after_a_builtin_kernel_is_priced_with_litert_at_one_thread():
    """An int8 squeeze-excite gate MUL(x, s) reading a HARD_SWISH that LiteRT runs on its
    builtin kernel (excluded here) is priced at 2 threads with LiteRT's 1-thread costs; the
    same gate after an ADD, which XNNPACK runs, with its 2-thread costs."""
    for first, builtin in (("HARD_SWISH", True), ("ADD", False)):
        litert = {}
        for threads in (1, 2):
            delegate = FusionDelegate(min_speedup=1e9, exclude_nodes="0")
            builtin_interpreter(gate_model(first, with_gate=True), [delegate], num_threads=threads)
            litert[threads] = delegate.predictions[(1,)].litert_us
        assert (litert[2] == litert[1]) == builtin


def test_calibration_separates_the_int8_tables_xnnpack_folds_when_chained():
    """Five int8 LOGISTICs cost XNNPACK what one does: their LiteRT chain alternates with an
    int8 ADD, whose measured cost perf/calibrate.py takes off."""
    assert set(calibrate.SEPARATED) == {f"{name}/int8" for name in XNNPACK_INT8
                                        if name in OPS and OPS[name].arity == 1}
    def ops(model: bytes) -> list[str]:
        return [op.op for op in read_model(model).subgraphs[0].operators]

    assert ops(calibrate.chain("LOGISTIC/int8", 3, 4096, separated=True)) == ["LOGISTIC", "ADD"] * 3
    assert ops(calibrate.chain("LOGISTIC/int8", 3, 4096)) == ["LOGISTIC"] * 3


def test_calibration_separates_the_float_ops_llvm_folds_when_repeated():
    """relu(relu(h)) is relu(h) to LLVM: a fused chain of one such op cost what one does, and
    the op came out free. Their fused chains alternate with a float ADD of a per-channel
    constant, which is not folded, and whose cost perf/calibrate.py takes off."""
    model = read_model(calibrate.chain("RELU", 3, 4096, separated=True))
    graph = model.subgraphs[0]
    assert [op.op for op in graph.operators] == ["RELU", "ADD"] * 3
    assert all(t.dtype == np.float32 for t in graph.tensors)
    assert {"RELU", "RELU6", "MAXIMUM", "MINIMUM", "ABS", "FLOOR"} <= set(calibrate.FOLDED)
    assert calibrate.BASE not in calibrate.FOLDED     # its one-op partition is the memory line


def test_a_calibration_update_replaces_only_the_ops_it_measured(tmp_path):
    path = tmp_path / "cost_model.json"
    path.write_text(worth.shipped_path().read_text())
    before = json.loads(path.read_text())
    lines = len(before["breaks"]) + 1
    tables = {threads: {"ops": {"ADD": {"litert": {"c0_us": 1.0, "c1_ns": [2.0] * lines},
                                        "fused_ns": 3.0}},
                        "measured_us": {"chains": {"ADD": {"litert": {}, "fused": {}}}}}
              for threads in before["threads"]}
    data = calibrate.update(path, tables, ["ADD"], {"command": "update ADD"})
    model = CostModel.from_json(data)
    for threads, costs in model.threads.items():
        assert costs.ops["ADD"].fused_ns == 3.0
        table, old = data["threads"][str(threads)], before["threads"][str(threads)]
        assert table["ops"]["MUL"] == old["ops"]["MUL"] and table["split"] == old["split"]
    assert data["header"]["updates"][-1] == {"command": "update ADD", "ops": ["ADD"]}


def test_a_row_op_the_calibration_measured_is_priced_by_its_own_costs_not_its_proxies(data):
    """int8 SOFTMAX costs LiteRT's builtin kernel three times what its proxies (int8 MAXIMUM,
    SUB, EXP, ADD, MUL) predicted: the classifier's softmax saves 1 us fused, not 0.4."""
    n = 1000
    measured = CostModel.from_json(data)
    for table in data["threads"].values():
        del table["ops"]["SOFTMAX/int8"]
    proxied = CostModel.from_json(data)
    costs = measured.costs(1)
    ops = [("SOFTMAX/int8", n)]
    assert measured.predict(partition_of(ops, [n])).litert_us == pytest.approx(
        costs.litert_first.us(n, measured.breaks)
        + costs.ops["SOFTMAX/int8"].litert.us(n, measured.breaks))
    proxies = [(f"{name}/int8", n) for name in worth.PROXIES["SOFTMAX"]]
    assert proxied.predict(partition_of(ops, [n])) == proxied.predict(partition_of(proxies, [n]))
    assert measured.predict(partition_of(ops, [n])).saving_us > MIN_SAVING_US > \
        proxied.predict(partition_of(ops, [n])).saving_us


@pytest.mark.parametrize("name", calibrate.ROW_OPS)
def test_the_calibrations_row_op_chains_run_fused_and_on_litert(name, tmp_path):
    model = calibrate.chain(name, 2, 4096)
    assert [op.op for op in read_model(model).subgraphs[0].operators] == ["SOFTMAX"] * 2
    calibrate.interpreter(model, 1, None)()
    calibrate.interpreter(model, 1, str(tmp_path))()     # raises unless one fused partition


def test_every_further_whole_tensor_costs_half_a_one_op_partitions_memory_time():
    """The calibration's ops read one tensor (and a per-channel constant); a residual ADD reads
    two, on LiteRT's side and in the fused nest. LiteRT's int8 ADD of two tensors costs less
    than the calibration's, and is not charged."""
    model = load_cost_model()
    costs, n = model.costs(1), 1 << 16
    stream = model.stream_us(costs, n)
    assert stream == pytest.approx((costs.fused.us(n, model.breaks) - costs.fused.c0_us) / 2)
    one = model.predict(partition_of([("ADD", n)], [n], Cut.NONE))
    two = model.predict(partition_of([("ADD", n, n, 2)], [(n, 1)], Cut.NONE))
    assert two.litert_us == pytest.approx(one.litert_us + stream)
    assert two.fused_us == pytest.approx(one.fused_us + stream)
    assert model.predict(partition_of([("ADD", n, n, 1)], [(n, 0)])) == \
        model.predict(partition_of([("ADD", n)], [n]))
    int8 = [model.predict(partition_of([("ADD/int8", n, n, k)], [(n, k - 1)], Cut.NONE))
            for k in (1, 2)]
    assert int8[1].litert_us == int8[0].litert_us and int8[1].fused_us >= int8[0].fused_us


def test_cost_keys_count_the_whole_operands_litert_reads():
    """A residual ADD reads two whole tensors, a per-channel MUL one; swish's MUL reads x and
    LOGISTIC(x), also inside the SWISH op precision="fast" makes of the two."""
    residual = ir_of({0: (8, 64), 1: (8, 64), 2: (64,), 3: (8, 64), 4: (8, 64)},
                     [("ADD", (0, 1), 3), ("MUL", (3, 2), 4)], (0, 1, 2), (4,))
    assert [key.inputs for key in cost_keys(residual)] == [2, 1]
    # reads x and y of 512, writes one
    assert nest_traffic(build(residual, LAYOUT)) == [NestTraffic(512, 1)]
    swish = ir_of({0: (8, 64), 1: (8, 64), 2: (8, 64)},
                  [("LOGISTIC", (0,), 1), ("MUL", (0, 1), 2)], (0,), (2,))
    assert [key.inputs for key in cost_keys(swish)] == [1, 2]
    fast = approximate_chains(replace(swish, precision="fast"))
    assert [op.op for op in fast.ops] == ["SWISH"]
    assert [(key.name, key.inputs) for key in cost_keys(fast)] == [("LOGISTIC/fast", 1),
                                                                   ("MUL", 2)]
    assert nest_traffic(build(replace(swish, precision="fast"), LAYOUT)) == [NestTraffic(512)]
