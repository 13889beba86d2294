"""Tuned claims: stored by `fusion-delegate tune`, found by the delegate for the same graph, CPU
target and threads, and never claiming what the kernels cannot reproduce."""
import json
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fusion_delegate.demo import build_demo_model
from fusion_delegate.options import FusionOptions
from fusion_delegate.tools.runner import build, infer, random_inputs
from fusion_delegate.tuning import Decision, DecisionStore, TuningKey

ROOT = Path(__file__).resolve().parents[1]
DEMO = build_demo_model(tokens=32, width=64)


def decision(claimed) -> Decision:
    return Decision(frozenset(claimed), "2026-11-28T07:00:00+00:00", 100.0, 90.0, 80.0)


def claimed(runner) -> set[int]:
    return {i for i, c in runner.delegate.claims.items() if c.reason is None}


@pytest.fixture
def options(tmp_path) -> FusionOptions:
    """A cache with a `tuned` directory, as `tune` makes it: delegates compute keys there."""
    DecisionStore(tmp_path / "cache").create()
    return FusionOptions(cache_dir=str(tmp_path / "cache"))


def test_store_keeps_one_decision_per_key(tmp_path):
    store = DecisionStore(tmp_path)
    key = TuningKey("abc", "x86_64-znver4-avx2", 1, 1, "fast", "v1")
    other = replace(key, threads=2)
    assert store.find(key) is None
    store.save(key, decision({1, 2}))
    store.save(other, decision({3}))
    store.save(key, decision({4}))
    assert store.find(key).claimed == {4} and store.find(other).claimed == {3}
    assert store.find(replace(key, target="x86_64-haswell-avx2")) is None
    assert store.find(replace(key, software="v2")) is None
    assert len(json.loads((tmp_path / "tuned" / "abc.json").read_text())["entries"]) == 2


@pytest.mark.parametrize("text", ["{not json", '{"format": 1}', '["a list"]', "\xff\xfe",
                                  '{"format": 1, "entries": [{"graph": "abc"}]}',
                                  '{"format": 1, "entries": [1, null, "x"]}'])
def test_unreadable_decisions_are_ignored_with_a_warning(tmp_path, caplog, text):
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "abc.json").write_bytes(text.encode("latin-1"))   # \xff: not UTF-8
    key = TuningKey("abc", "t", 1, 1, "fast", "v1")
    with caplog.at_level(logging.WARNING, logger="fusion_delegate"):
        assert DecisionStore(tmp_path).find(key) is None
    if "entries" not in text:                                    # not a decisions file
        assert "ignored" in caplog.text


def test_a_bad_entry_for_the_key_is_ignored(tmp_path, caplog):
    key = TuningKey("abc", "t", 1, 1, "fast", "v1")
    entry = {**key.__dict__, "claimed": ["x"], "tuned_at": "", "litert_us": 1,
             "default_us": 1, "tuned_us": 1}
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "abc.json").write_text(json.dumps({"format": 1, "entries": [entry]}))
    with caplog.at_level(logging.WARNING, logger="fusion_delegate"):
        assert DecisionStore(tmp_path).find(key) is None
    assert "entry is ignored" in caplog.text


def test_the_key_names_the_graph_threads_and_precision(options):
    one, again = build(DEMO, fuse=options), build(DEMO, fuse=options)
    key = one.delegate.main_graph.tuning_key
    assert key == again.delegate.main_graph.tuning_key
    assert key.threads == key.kernel_threads == 1 and key.precision == "fast"
    wider = build(build_demo_model(tokens=32, width=128), fuse=options)
    assert wider.delegate.main_graph.tuning_key.graph != key.graph
    two = build(DEMO, fuse=options, num_threads=2).delegate.main_graph.tuning_key
    assert (two.graph, two.threads) == (key.graph, 2)
    exact = build(DEMO, fuse=replace(options, precision="exact"))
    assert exact.delegate.main_graph.tuning_key.precision == "exact"
    assert build(DEMO, fuse=replace(options, cache_dir="")).delegate.main_graph.tuning_key is None
    untuned = replace(options, cache_dir=str(Path(options.cache_dir).parent / "other"))
    assert build(DEMO, fuse=untuned).delegate.main_graph.tuning_key is None   # nothing to find


def test_stored_claims_replace_the_cost_models_and_match_litert(options):
    default = build(DEMO, fuse=options)
    everything = build(DEMO, fuse=replace(options, min_speedup=0))
    first = everything.delegate.last_partitions[-1].nodes        # the smallest
    assert set(first) < claimed(everything)
    key = default.delegate.main_graph.tuning_key
    default.delegate.decisions.save(key, decision(first))

    tuned = build(DEMO, fuse=options)
    assert claimed(tuned) == set(first)
    claims = tuned.delegate.claims
    assert all(claims[n].tuned for n in first)
    left = claimed(everything) - set(first)
    assert all("fusion-delegate tune" in claims[n].reason for n in left)
    assert "claims tuned by `fusion-delegate tune` on 2026-11-28 (measured 1.25x LiteRT)" in (
        tuned.delegate.summary())
    inputs = random_inputs(tuned.interpreter, np.random.default_rng(0))
    litert = build(DEMO, resolver="builtin")
    for got, want in zip(infer(tuned.interpreter, inputs), infer(litert.interpreter, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    assert claimed(build(DEMO, fuse=replace(options, use_tuned=0))) == claimed(default)
    assert claimed(build(DEMO, fuse=replace(options, min_speedup=0))) == claimed(everything)
    other_threads = build(DEMO, fuse=options, num_threads=2)
    assert other_threads.delegate.main_graph.tuned is None


def test_tuned_claims_never_claim_what_the_kernels_cannot_build(options):
    default = build(DEMO, fuse=options)
    every_node = set(range(len(default.delegate.last_plan)))
    default.delegate.decisions.save(default.delegate.main_graph.tuning_key,
                                    decision(every_node))
    tuned = build(DEMO, fuse=options)
    everything = build(DEMO, fuse=replace(options, min_speedup=0, use_tuned=0))
    assert claimed(tuned) == claimed(everything) < every_node
    assert all(c.reason for n, c in tuned.delegate.claims.items() if n not in claimed(tuned))


def test_tune_command_stores_claims_inspect_shows_them(tmp_path):
    model = tmp_path / "demo.tflite"
    model.write_bytes(DEMO)
    cache = ["--option", f"cache_dir={tmp_path / 'cache'}"]

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fusion_delegate", *args, *cache],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)

    result = cli("tune", str(model), "--seconds", "0.02", "--json")
    assert result.returncode == 0, result.stderr
    [tuned] = json.loads(result.stdout)
    assert tuned["threads"] == 1 and tuned["regions"] >= 1
    stored = json.loads(Path(tuned["stored"]).read_text())["entries"]
    assert [sorted(e["claimed"]) for e in stored] == [tuned["decision"]["claimed"]]
    shown = cli("inspect", str(model))
    assert shown.returncode == 0, shown.stderr
    assert "claims tuned by `fusion-delegate tune`" in shown.stdout
    if tuned["decision"]["claimed"]:
        assert "(tuned)" in shown.stdout
    refused = cli("tune", str(model), "--option", "min_speedup=0")
    assert refused.returncode == 1 and "nothing to tune" in refused.stderr
