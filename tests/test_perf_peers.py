"""The perf peers (perf/peers.py): the jnp computation derived from a workload's model gives
LiteRT builtin's result; OpenVINO runs a .tflite as LiteRT does, and the models table shows its
column only when it was tried. jax and openvino are optional extras (`pip install -e
".[peers]"`, `".[openvino]"`), not installed in CI: there the tests that need them are skipped,
with the reason, never passed. No timing is asserted."""
import sys

import numpy as np
import pytest

from conftest import run
from fusion_delegate.model import read_model
from perf import models, peers, stencil, suite, workloads
from perf.timing import Samples
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


# ---------------------------------------------------------------------------------- OpenVINO

def model_result(**fields) -> models.ModelResult:
    """A timed model: LiteRT default 2 ms, the delegate 1 ms."""
    times = {models.LITERT: Samples((2e-3,)), models.LITERT_TWIN: Samples((2e-3,)),
             models.DELEGATE: Samples((1e-3,))}
    return models.ModelResult("m", "float32", 1, times=times, **fields)


def test_models_table_has_openvino_columns_only_when_openvino_was_tried():
    plain = model_result()
    assert models.model_columns([plain]) == models.MODEL_COLUMNS
    assert all(len(row) == len(models.MODEL_COLUMNS) for row in models.model_rows([plain]))
    timed = model_result(openvino_rel_err=1e-6)
    timed.times[models.OPENVINO] = Samples((4e-3,))
    timed.times[models.LITERT_BESIDE_OPENVINO] = Samples((3e-3,))     # their own rounds
    skipped = model_result(openvino_skipped="RuntimeError: Unexpected type: RESOURCE")
    results = [timed, skipped]
    assert models.model_columns(results) == models.OPENVINO_COLUMNS
    rows = models.model_rows(results, with_openvino=True)
    assert all(len(row) == len(models.OPENVINO_COLUMNS) for row in rows)
    assert rows[0][-3:] == ("4.00", "0.750x", "1.0e-06")
    assert rows[1][-3:] == ("-", "skipped: RuntimeError: Unexpected type: RESOURCE", "")
    assert rows[2][0] == "geomean" and rows[2][-3:] == ("1 models", "0.750x", "")


def test_openvino_absent_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)       # `import openvino` fails
    with pytest.raises(peers.Unsupported, match="openvino"):
        peers.openvino_peer(b"", {}, 1)


def openvino_beside_litert(model: bytes, x: np.ndarray):
    pytest.importorskip("openvino", reason="openvino is the optional `openvino` extra")
    litert = models.interpreter(model, 1)
    litert.set_tensor(litert.get_input_details()[0]["index"], x)
    return models.openvino_peer(model, litert, 1)


@pytest.mark.parametrize("kernel, stride, chain", [(7, 1, True), (3, 2, False)])
def test_openvino_runs_a_depthwise_model_as_litert_does(kernel, stride, chain):
    model = stencil.conv_model((1, 16, 16, 48), kernel, stride, chain)
    x = np.random.default_rng(1).standard_normal((1, 16, 16, 48)).astype(np.float32)
    peer, error = openvino_beside_litert(model, x)
    assert error < 1e-5
    with pytest.raises(peers.Unsupported, match="no output named"):
        peer.outputs(["not_an_output"])


def test_openvino_that_cannot_read_a_model_says_why():
    pytest.importorskip("openvino", reason="openvino is the optional `openvino` extra")
    with pytest.raises(peers.Unsupported, match="RuntimeError"):
        peers.openvino_peer(b"not a flatbuffer", {}, 1)
