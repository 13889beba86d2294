"""Claims made once per graph (fusion_delegate.recall): read back for a graph that reads the
same, in this process or from the cache directory, and made anew for any other."""
import shutil

import numpy as np
import pytest

from conftest import builtin_interpreter, run, same_bits
from fusion_delegate import FusionDelegate, recall
from fusion_delegate.fusion import FusionDelegate as Fusion
from fusion_delegate.model import ModelBuilder


def chain(scale: float = 2.0, activation: int = 0, shape=(3, 8)) -> bytes:
    """x * scale + bias -> tanh -> mul by x: the scalar, the bias and the ADD's activation are
    what two such models differ in, none of which the tensors' types and sizes show."""
    b = ModelBuilder()
    x = b.input("x", shape)
    scaled = b.op("MUL", [x, b.const("scale", np.float32(scale))],
                  {"fused_activation_function": 0})
    bias = b.const("bias", np.linspace(-1, 1, shape[-1]).astype(np.float32))
    biased = b.op("ADD", [scaled, bias], {"fused_activation_function": activation})
    b.output(b.op("MUL", [b.op("TANH", [biased]), x], {"fused_activation_function": 0},
                  name="y"))
    return b.to_bytes()


@pytest.fixture
def decisions(monkeypatch):
    """Count the nodes claiming asks about (none where decisions are read back)."""
    asked = []
    supported = Fusion.is_node_supported
    monkeypatch.setattr(Fusion, "is_node_supported",
                        lambda self, context, node: asked.append(node.index)
                        or supported(self, context, node))
    return asked


def claims_of(delegate: FusionDelegate) -> dict:
    return {i: (c.reason, c.partition) for i, c in delegate.claims.items()}


def test_a_second_interpreter_of_a_model_reads_its_claims_back(tmp_path, decisions, rng):
    model = chain()
    x = [rng.standard_normal((3, 8)).astype(np.float32)]
    first = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)
    want = run(builtin_interpreter(model, [first]), x)[0]
    assert decisions and first.delegated_nodes
    decisions.clear()
    again = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)
    got = run(builtin_interpreter(model, [again]), x)[0]
    assert decisions == []
    assert claims_of(again) == claims_of(first) and again.predictions == first.predictions
    assert same_bits(got, want)
    assert again.claims is not first.claims                 # its own, to change


@pytest.mark.parametrize("other", [dict(scale=3.0), dict(activation=3)],
                         ids=["constant", "builtin params"])
def test_a_graph_that_reads_otherwise_is_claimed_anew(tmp_path, decisions, rng, other):
    """The same tensors, another scalar constant or fused activation: the kernel's claims are
    made again, and its results are LiteRT's."""
    run(builtin_interpreter(chain(), [FusionDelegate(cache_dir=str(tmp_path),
                                                     min_speedup=0.0)]),
        [np.ones((3, 8), np.float32)])
    decisions.clear()
    model = chain(**other)
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)
    interpreter = builtin_interpreter(model, [delegate])
    assert decisions and delegate.delegated_nodes
    x = [rng.standard_normal((3, 8)).astype(np.float32) * 3]
    np.testing.assert_allclose(run(interpreter, x)[0], run(builtin_interpreter(model), x)[0],
                               rtol=1e-5, atol=1e-6)


def test_other_settings_are_claimed_anew(tmp_path, decisions):
    model = chain()
    builtin_interpreter(model, [FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)])
    decisions.clear()
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0, exclude_nodes="2")
    builtin_interpreter(model, [delegate])
    assert decisions and 2 not in delegate.delegated_nodes


def test_claims_kept_in_the_cache_directory_serve_a_new_process(tmp_path, decisions,
                                                                monkeypatch):
    """A process without them in memory reads them from the cache directory, wherever it is
    (a copy shipped elsewhere); a damaged file, or one others could have written, is not
    read: the graph is claimed anew."""
    monkeypatch.setattr(recall, "ON_DISK", True)
    model = chain()
    first = FusionDelegate(cache_dir=str(tmp_path / "cache"), min_speedup=0.0)
    builtin_interpreter(model, [first])
    shutil.copytree(tmp_path / "cache", tmp_path / "shipped")
    (kept,) = (tmp_path / "cache").glob("claims_*.pickle")
    for damage in (None, "shipped", "truncate", "others can write"):
        if damage == "truncate":
            kept.write_bytes(kept.read_bytes()[:100])
        elif damage == "others can write":
            kept.chmod(0o666)
        recall.forget()                                           # as in a new process
        decisions.clear()
        directory = tmp_path / ("shipped" if damage == "shipped" else "cache")
        delegate = FusionDelegate(cache_dir=str(directory), min_speedup=0.0)
        builtin_interpreter(model, [delegate])
        assert bool(decisions) == (damage not in (None, "shipped")), damage
        assert claims_of(delegate) == claims_of(first), damage
