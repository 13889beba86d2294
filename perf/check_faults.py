"""How often does `fusion-delegate check` find a wrong kernel? Runs `check` (a 60 s budget by
default) on every corpus model as is, where it must pass, and with each fault of
tests/faults.py that applies to the model's delegated ops injected, where it must fail; prints
one row per run and the detection rate. Not run in CI: each run is a child process with its
full budget.

    FUSION_CORPUS_DIR=tests/models/corpus python perf/check_faults.py [--seconds 60]
        [--models 'corpus_*int8*'] [--option k=v ...]
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from codegen.ops import OPS  # noqa: E402
from faults import ROUNDABLE, SIGNED_ZERO  # noqa: E402
from fusion_delegate.model import read_model  # noqa: E402
from fusion_delegate.options import FusionOptions  # noqa: E402
from fusion_delegate.tolerances import node_params  # noqa: E402
from fusion_delegate.tools.runner import build  # noqa: E402

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR", ROOT / "tests" / "models" / "corpus"))


def faults_for(model: bytes, options: FusionOptions) -> list[str]:
    """The faults that can show in this model: a float op of a float partition (all of its
    outputs float32) to round differently and to lose a zero's sign, and the int8 tail fault
    where a partition writes int8. A fault the tolerances allow (a rounding after an
    approximated op) or no output can show is no fault of the kernel and is not injected. A
    float op inside an int8 partition is computed into a table (codegen.lower) and its -0.0
    never reaches an output."""
    runner = build(model, fuse=options, resolver="builtin")
    interpreter, delegate = runner.interpreter, runner.delegate
    dtypes = {d["index"]: d["dtype"] for d in interpreter.get_tensor_details()}
    graph = read_model(model).subgraphs[0]
    written_ops, int8 = [], False         # (op, node): fed exactly and written
    for partition in delegate.last_partitions:
        written = {dtypes.get(t) for t in partition.outputs}
        int8 |= bool(written & {np.int8, np.uint8})
        if written != {np.float32}:
            continue
        exact = set(partition.inputs)         # what check feeds a partition is exact
        for n in sorted(partition.nodes):
            op, node = delegate.claims[n].op, graph.operators[n]
            if op not in OPS:
                continue
            if not all(t in exact for t in node.inputs if t >= 0):
                continue
            if OPS[op].tolerance_for(node_params(graph, node), options.precision).exact:
                exact |= set(node.outputs)
            if set(node.outputs) & set(partition.outputs):
                written_ops.append((op, node))
    # Either shows only where the op's bound is zero (its inputs exact) and the partition
    # writes the result: after it, a sum such as MEAN's has a bound of its own, and an added
    # bias takes a zero's sign away. A -0.0 also only from an op that can give one there.
    rounding = [op for op, _ in written_ops if op in ROUNDABLE]
    signing = [op for op, node in written_ops
               if op in SIGNED_ZERO and _signs_zero(op, node, graph)]
    faults = [f"{kind}:{ops[0]}" for kind, ops in (("round", rounding), ("negzero", signing))
              if ops]
    if int8:
        faults.append("tail_lsb")
    return faults


def _signs_zero(op: str, node, graph) -> bool:
    """Whether the node can give -0.0 at all: an ADD only from -0.0 + -0.0 and a SUB only from
    -0.0 - 0.0, never with a constant operand that holds no zero (a bias)."""
    if op not in ("ADD", "SUB"):
        return True
    constants = [c for t in node.inputs if (c := _constant(graph, t)) is not None]
    return all(np.any(c == 0) for c in constants)


def _constant(graph, tensor: int) -> np.ndarray | None:
    """The tensor's value if it is a constant of the model, or a DEQUANTIZE of one (float16
    weights)."""
    if graph.tensors[tensor].data is not None:
        return graph.tensors[tensor].data
    producers = [op for op in graph.operators if tensor in op.outputs]
    if producers and producers[0].op == "DEQUANTIZE":
        return graph.tensors[producers[0].inputs[0]].data
    return None


def check(path: Path, seconds: float, options: list[str], fault: str | None,
          cache: str) -> tuple[int, str]:
    """(exit status, the summary line: inputs searched and seconds)."""
    prefix = [str(ROOT / "tests" / "faults.py"), fault] if fault else ["-m", "fusion_delegate"]
    extra = [a for o in options for a in ("--option", o)]
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [sys.executable, *prefix, "check", str(path), "--seconds", str(seconds),
             "--save-failing", str(Path(scratch) / "failing.npz"), *extra,
             "--option", f"cache_dir={cache}"],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    searched = re.search(r"searched (\d+) inputs in ([\d.]+) s", result.stdout)
    detail = f"{searched.group(1)} inputs, {searched.group(2)} s" if searched else \
        (result.stderr.strip().splitlines() or ["?"])[-1][:100]
    return result.returncode, detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--models", nargs="+", default=["*"], help="globs over corpus ids")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    options = FusionOptions.parse(args.option)
    entries = json.loads((CORPUS / "manifest.json").read_text())["models"]
    cache = tempfile.mkdtemp(prefix="check_faults_")
    rows, injected, found, clean_fail = [], 0, 0, 0
    print(f"{'model':40s} {'fault':24s} {'verdict':10s} detail", flush=True)
    for entry in entries:
        if not any(fnmatch.fnmatch(entry["id"], p) for p in args.models):
            continue
        path = CORPUS / entry["file"]
        try:
            faults = faults_for(path.read_bytes(), options)
        except Exception as error:  # noqa: BLE001 - a model the delegate cannot load is a row
            print(f"{entry['id']:40s} {'-':24s} {'error':10s} {error}", flush=True)
            continue
        for fault in [None, *faults]:
            start = time.perf_counter()
            status, detail = check(path, args.seconds, args.option, fault, cache)
            if fault is None:
                verdict = {0: "pass", 1: "MISMATCH", 2: "refused"}.get(status, f"exit {status}")
                clean_fail += status == 1
            else:
                injected += 1
                found += status == 1
                verdict = "found" if status == 1 else "MISSED"
            rows.append((entry["id"], fault, verdict))
            print(f"{entry['id']:40s} {fault or '(none)':24s} {verdict:10s} {detail} "
                  f"[{time.perf_counter() - start:.0f} s wall]", flush=True)
    rate = f"{found}/{injected} ({100 * found / injected:.0f}%)" if injected else "none injected"
    print(f"detection rate: {rate}; mismatches without a fault: {clean_fail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
