"""Do two versions of the code compute the same bits? Record every partition's outputs, compare later.

A refactor of codegen or claiming must not change what a kernel computes. This runs the demo
models, the perf suite's workloads (at a size with a vector tail and one without) and the
real-model corpus with the delegate claiming everything it can build (min_speedup=0), on fixed
inputs twice (plain data, then with NaN, +-inf, -0.0, subnormals and huge values mixed in, which
sends kernels down their exact loops), and saves the outputs of every delegated partition and
of the model:

    python perf/identical.py record /tmp/before.npz     # on the old code
    python perf/identical.py compare /tmp/before.npz    # on the new code: exit 1 on a difference

A partition's tensors are keyed by model, configuration, input set and tensor name, so the
comparison does not depend on partition numbering; a tensor present on one side only is
reported (a claim that changed).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if "PYTHONPATH" not in os.environ and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # from anywhere; PYTHONPATH=<checkout> compares another one

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.demo import build_demo_model, build_quantized_demo_model  # noqa: E402
from fusion_delegate.runtime import Interpreter, OpResolverType  # noqa: E402

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR", ROOT / "tests" / "models" / "corpus"))
#: One configuration per precision: every kernel the delegate can build, as it builds it.
CONFIGS = {"fast": {"min_speedup": 0.0}, "exact": {"min_speedup": 0.0, "precision": "exact"}}
EDGES = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, -3e-39, 3e38, -1e30, 0.0, 1e-7],
                 np.float32)


def models(patterns: list[str]) -> Iterator[tuple[str, bytes]]:
    """(name, model bytes) of every model whose name matches one of `patterns`."""
    from perf.workloads import CHANNEL_WORKLOADS, NORM_WORKLOADS, WORKLOADS
    candidates = [("demo_float32", build_demo_model), ("demo_int8", build_quantized_demo_model)]
    for name, workload in {**WORKLOADS, **CHANNEL_WORKLOADS, **NORM_WORKLOADS}.items():
        for elements in (16384, 1000):
            candidates.append((f"suite_{name}_{elements}",
                               lambda w=workload, e=elements: w.case(e).model))
    manifest = CORPUS / "manifest.json"
    if manifest.is_file():
        for entry in json.loads(manifest.read_text())["models"]:
            path = CORPUS / entry["file"]
            candidates.append((f"corpus_{path.stem}", path.read_bytes))
    for name, make in candidates:
        if any(fnmatch.fnmatch(name, p) for p in patterns):
            yield name, make()


def input_sets(interpreter: Interpreter) -> dict[str, list[np.ndarray]]:
    """Plain inputs and the same with edge values mixed in (floats only)."""
    rng = np.random.default_rng(0)
    plain, edged = [], []
    for detail in interpreter.get_input_details():
        shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
        if dtype.kind == "f":
            data = (rng.standard_normal(shape) * 2).astype(dtype)
            edges = data.copy().reshape(-1)
            positions = rng.choice(edges.size, min(edges.size, 3 * EDGES.size), replace=False)
            edges[positions] = np.resize(EDGES, positions.size)
            plain.append(data)
            edged.append(edges.reshape(shape))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            data = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
            plain.append(data)
            edged.append(data)
        else:
            plain.append(rng.integers(0, 2, shape).astype(dtype))
            edged.append(plain[-1])
    return {"plain": plain, "edges": edged}


def outputs_of(name: str, model: bytes, config: str) -> dict[str, np.ndarray]:
    warnings.filterwarnings("ignore", "Warning: Enabling `experimental_preserve_all_tensors`")
    delegate = FusionDelegate(cache_dir="default", **CONFIGS[config])
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate],
                              experimental_preserve_all_tensors=True,
                              experimental_op_resolver_type=OpResolverType.AUTO)
    interpreter.allocate_tensors()
    tensors = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    recorded = {}
    for label, arrays in input_sets(interpreter).items():
        for detail, array in zip(interpreter.get_input_details(), arrays):
            interpreter.set_tensor(detail["index"], array)
        interpreter.invoke()
        wanted = {t for prepared in delegate.kernels.values() for t in prepared.ir.outputs}
        wanted |= {d["index"] for d in interpreter.get_output_details()}
        for t in sorted(wanted):
            recorded[f"{name}|{config}|{label}|{t}:{tensors.get(t, '?')}"] = \
                interpreter.get_tensor(t).copy()
    return recorded


def run(patterns: list[str]) -> dict[str, np.ndarray]:
    recorded = {}
    for name, model in models(patterns):
        start = time.perf_counter()
        for config in CONFIGS:
            try:
                recorded.update(outputs_of(name, model, config))
            except Exception as error:  # noqa: BLE001 - a model that fails is a result too
                recorded[f"{name}|{config}|error"] = np.array(f"{type(error).__name__}: {error}")
        print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    return recorded


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("file", type=Path, help=".npz of recorded outputs")
    parser.add_argument("--models", nargs="+", default=["*"],
                        help="glob patterns over demo_*, suite_<workload>_<size>, corpus_<stem>")
    args = parser.parse_args(argv)
    if args.action == "record":
        recorded = run(args.models)
        np.savez_compressed(args.file, **recorded)
        print(f"{len(recorded)} tensors -> {args.file}")
        return 0
    with np.load(args.file) as saved:
        before = {k: saved[k] for k in saved.files}
    after = run(args.models)
    prefixes = {key.split("|")[0] for key in after}
    before = {k: v for k, v in before.items() if k.split("|")[0] in prefixes}
    differing = sorted(k for k in before.keys() & after.keys() if not same(before[k], after[k]))
    missing, extra = sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys())
    for label, keys in (("differ", differing), ("only before", missing), ("only now", extra)):
        for key in keys:
            print(f"{label}: {key}")
    print(f"{len(before.keys() & after.keys()) - len(differing)} identical, "
          f"{len(differing)} differ, {len(missing)} only before, {len(extra)} only now")
    return 1 if differing or missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
