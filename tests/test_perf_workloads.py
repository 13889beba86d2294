"""The perf suite's workload models: each builds, runs under LiteRT and under the delegate, is
claimed whole, and gives LiteRT builtin's results. No timing is asserted, ever."""
import json

import numpy as np
import pytest

from conftest import run
from fusion_delegate import FusionDelegate
from perf import suite
from perf.timing import MIN_ROUNDS, interleaved
from perf.workloads import CHANNEL_WORKLOADS, TINY, WORKLOADS, Case

SMALL = 4 * 256


def outputs(case: Case, method: str, delegate: FusionDelegate | None = None) -> np.ndarray:
    """The case's output under one of the suite's methods, built the way the suite builds it."""
    return run(suite.interpreter(case.model, method, 1, delegate), list(case.inputs.values()))[0]


def delegated(case: Case) -> tuple[np.ndarray, FusionDelegate]:
    delegate = FusionDelegate(**suite.delegate_options(cache_dir="", threads=1))
    return outputs(case, suite.DELEGATE, delegate), delegate


def assert_close(got: np.ndarray, ref: np.ndarray) -> None:
    """Relative 1e-4, with an absolute floor of 1e-5 of the output's scale for values that
    cancel to near zero (GELU's negative tail)."""
    scale = max(1.0, float(np.max(np.abs(ref))))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_is_claimed_whole_and_matches_builtin(name):
    case = WORKLOADS[name].case(SMALL)
    builtin = outputs(case, suite.BUILTIN)
    default = outputs(case, suite.DEFAULT)
    fused, delegate = delegated(case)
    assert len(delegate.claims) == case.ops
    assert {c.reason for c in delegate.claims.values()} == {None}, delegate.summary()
    assert list(delegate.kernels) == [0]
    assert delegate.kernels[0].ir.bytes_moved() >= case.io_bytes
    assert np.all(np.isfinite(builtin))
    if builtin.dtype == np.float32:
        assert_close(fused, builtin)
        assert_close(default, builtin)
    else:                     # int8: bit-exact; XNNPACK's own int8 kernels round differently
        np.testing.assert_array_equal(fused, builtin)
        assert np.abs(default.astype(int) - builtin).max() <= 8


def test_tiny_workload_is_one_partition_of_two_ops():
    case = TINY.case(suite.TINY_ELEMENTS)
    fused, delegate = delegated(case)
    assert case.ops == 2 and case.inputs["x"].shape == (1, suite.TINY_ELEMENTS)
    assert list(delegate.kernels) == [0]
    assert_close(fused, outputs(case, suite.BUILTIN))


def test_layernorm_tail_takes_row_statistics_as_inputs():
    case = WORKLOADS["layernorm_tail"].case(SMALL)
    assert {k: v.shape for k, v in case.inputs.items()} == {
        "x": (4, 256), "mean": (4, 1), "var": (4, 1)}


def test_a_size_that_is_not_whole_channels_is_whole_rows_below_it():
    case = WORKLOADS["swish"].case(1000)
    assert case.elements == 768 and case.inputs["x"].shape == (3, 256)


@pytest.mark.parametrize("name", sorted(CHANNEL_WORKLOADS))
def test_channel_workloads_are_claimed_whole_and_match_builtin(name):
    case = CHANNEL_WORKLOADS[name].case(SMALL)
    assert case.inputs["x"].shape[1] == CHANNEL_WORKLOADS[name].channels
    fused, delegate = delegated(case)
    assert {c.reason for c in delegate.claims.values()} == {None}, delegate.summary()
    assert_close(fused, outputs(case, suite.BUILTIN))


def test_sizes_parse_and_print_with_k_and_m():
    assert [suite.parse_size(t) for t in ("16K", "256k", "4M", "1000")] == [
        16384, 262144, 4194304, 1000]
    assert [suite.size_name(n) for n in (16384, 4194304, 1000)] == ["16K", "4M", "1000"]


def test_interleaved_gives_one_sample_per_round_per_method():
    calls = {"a": 0, "b": 0}

    def bump(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    samples = interleaved({"a": bump("a"), "b": bump("b")}, rounds=5, batch_seconds=1e-4)
    assert {name: len(s.values) for name, s in samples.items()} == {"a": 5, "b": 5}
    assert all(s.median > 0 for s in samples.values())


def test_interleaved_budget_stops_after_the_minimum_rounds():
    samples = interleaved({"a": lambda: None}, rounds=1000, batch_seconds=1e-5,
                          budget_seconds=0.0)
    assert len(samples["a"].values) == MIN_ROUNDS


def test_suite_writes_report_and_json(tmp_path):
    out = tmp_path / "RESULTS.md"
    suite.main(["--quick", "--sizes", "1K", "--workloads", "swish", "--out", str(out)])
    report = out.read_text()
    for needle in ("avx512f", "ai-edge-litert", "| swish | 1K | delegate |", "bound",
                   "Invoke overhead", "Init per partition"):
        assert needle in report
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["workload"] for c in data["cases"]] == ["swish"]
    assert data["cases"][0]["init"]["disk"]["kernels"][0][0] == 0
