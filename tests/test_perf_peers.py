"""The perf suite's jax.jit peer (perf/peers.py): the jnp computation derived from a workload's
model gives LiteRT builtin's result. jax is an optional extra (`pip install -e ".[peers]"`),
not installed in CI: there the tests that need it are skipped, with the reason, never passed.
No timing is asserted."""
import numpy as np
import pytest

from conftest import run
from fusion_delegate.model import read_model
from perf import peers, suite, workloads
from perf.workloads import WORKLOADS

SMALL = 4 * 256
#: Every workload of the suite's lists (the normalizations too, where perf/workloads.py has them).
ALL = {**WORKLOADS, **workloads.CHANNEL_WORKLOADS, **getattr(workloads, "NORM_WORKLOADS", {})}
FLOAT_WORKLOADS = sorted(name for name in ALL if "int8" not in name)


def builtin_output(case) -> np.ndarray:
    return run(suite.interpreter(case.model, suite.BUILTIN, 1), list(case.inputs.values()))[0]


@pytest.mark.parametrize("name", FLOAT_WORKLOADS)
def test_jnp_translation_of_workload_matches_builtin(name):
    pytest.importorskip("jax", reason="jax is the optional `peers` extra, not installed")
    case = ALL[name].case(max(SMALL, 4 * ALL[name].channels))
    got = peers.jax_peer(case.model, case.inputs).output()
    ref = builtin_output(case)
    assert got.shape == ref.shape
    scale = max(1.0, float(np.max(np.abs(ref))))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("name", ["hard_swish_int8", "int8_block"])
def test_quantized_workload_has_no_jnp_translation(name):
    graph = read_model(WORKLOADS[name].case(SMALL).model).subgraphs[0]
    with pytest.raises(peers.Unsupported, match="float32 only"):
        peers.check_translatable(graph)


def test_every_workload_op_is_translated_or_refused_by_name():
    """A workload added with an op the table lacks is named, not silently dropped."""
    for name in FLOAT_WORKLOADS:
        graph = read_model(ALL[name].case(SMALL).model)
        peers.check_translatable(graph.subgraphs[0])


def test_suite_report_has_no_jax_column_without_jax_times():
    result = suite.CaseResult(
        workload="w", elements=1024, ops=1, claimed="", claimed_by_default="", bytes_moved=8,
        max_rel_error={}, jax_skipped="", init={},
        times={m: suite.Samples((1e-6, 2e-6)) for m in (suite.DEFAULT, suite.DELEGATE)})
    assert suite.columns([result]) == suite.COLUMNS
    with_jax = suite.CaseResult(**{**result.__dict__, "times": {
        **result.times, suite.JAX: suite.Samples((3e-6, 3e-6))}})
    assert suite.columns([with_jax]) == suite.JAX_COLUMNS
    rows = suite.rows(with_jax, bandwidth=1e9, jax_column=True)
    assert {r[2]: r[-1] for r in rows}[suite.DELEGATE] == "2.00x"
