"""Byte-flipped models: every mutant LiteRT runs must run with the delegate, and nothing crashes.

    python perf/mutation_fuzz.py --models 'kws_*' 'mobilenet_v3_small_int8' --mutants 30

Each mutant of a corpus model (a few bytes flipped, half of them in the flatbuffer's tables at
the file's ends, where names, shapes and options live, half anywhere) is loaded, allocated and
invoked in a child process, first by LiteRT alone, then, where LiteRT ran it, with the delegate
(defaults, and min_speedup=0 so that every buildable partition is claimed). A child killed by a
signal is a crash; one still compiling after --timeout seconds (a loaded machine) is counted
apart, not judged. The table counts each outcome; any mutant LiteRT runs that fails or crashes
with the delegate is listed with its error and kept under --keep for replay.
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR", ROOT / "tests" / "models" / "corpus"))
END_BYTES = 64 << 10

CHILD = """
import sys
sys.path.insert(0, {root!r})
import numpy as np
from fusion_delegate.runtime import Interpreter
from fusion_delegate.tools.runner import random_inputs, set_inputs
model = open({path!r}, "rb").read()
delegates = []
if {options!r} is not None:
    from fusion_delegate import FusionDelegate
    delegates = [FusionDelegate(cache_dir={cache!r}, **{options!r})]
try:
    interpreter = Interpreter(model_content=model, experimental_delegates=delegates)
    interpreter.allocate_tensors()
    set_inputs(interpreter, random_inputs(interpreter, np.random.default_rng(0)))
    interpreter.invoke()
    print("ok")
except Exception as error:
    print("error:", type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "")
"""


def mutate(model: bytes, rng: np.random.Generator) -> bytes:
    data = bytearray(model)
    ends = np.concatenate([np.arange(min(END_BYTES, len(data))),
                           np.arange(max(0, len(data) - END_BYTES), len(data))])
    for k in range(int(rng.integers(1, 9))):
        where = int(rng.choice(ends)) if k % 2 == 0 else int(rng.integers(len(data)))
        data[where] ^= 1 << int(rng.integers(8))
    return bytes(data)


def outcome(path: Path, options: dict | None, cache: str, timeout: float = 600) -> str:
    script = CHILD.format(root=str(ROOT), path=str(path), options=options, cache=cache)
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode < 0:
        return f"crash: signal {-done.returncode}: {done.stderr.strip()[-300:]}"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}: {done.stderr.strip()[-300:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["*"], help="globs over corpus names")
    parser.add_argument("--mutants", type=int, default=20, help="per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "mutants")
    args = parser.parse_args(argv)
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    paths = [CORPUS / m["file"] for m in manifest
             if any(fnmatch.fnmatch(Path(m["file"]).stem, p) for p in args.models)]
    args.keep.mkdir(parents=True, exist_ok=True)
    counts: collections.Counter = collections.Counter()
    failures = []
    with tempfile.TemporaryDirectory() as cache:
        for path in paths:
            rng = np.random.default_rng([args.seed, len(path.stem)])
            for number in range(args.mutants):
                mutant = args.keep / f"{path.stem}_{args.seed}_{number}.tflite"
                mutant.write_bytes(mutate(path.read_bytes(), rng))
                alone = outcome(mutant, None, cache)
                if alone != "ok":
                    counts["litert fails" if not alone.startswith("crash") else
                           "litert crashes"] += 1
                    mutant.unlink()
                    continue
                for label, options in (("defaults", {}), ("all", {"min_speedup": 0.0})):
                    result = outcome(mutant, options, cache)
                    verdict = {"ok": "runs", "timeout": "timed out (not judged)"}.get(
                        result, "FAILS")
                    counts[f"litert runs, delegate ({label}) {verdict}"] += 1
                    if verdict == "FAILS":
                        failures.append((mutant.name, label, result))
                if not any(f[0] == mutant.name for f in failures):
                    mutant.unlink()
            print(f"{path.stem}: {dict(counts)}", flush=True)
    print("\n| outcome | mutants |\n|---|---|")
    for key, count in sorted(counts.items()):
        print(f"| {key} | {count} |")
    for name, label, result in failures:
        print(f"{name} ({label}): {result}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
