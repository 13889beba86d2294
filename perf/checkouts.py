"""Two checkouts timed in turn: `python perf/checkouts.py BEFORE AFTER [--models GLOB ...]
[--workloads NAME ...] [--threads 1 2] [--repeat N]`.

Whether a change (a redesign, a new schedule) keeps the speed: each checkout's own
perf/models.py runs one corpus model at a time, and its perf/suite.py one workload at a time,
in a process that imports that checkout's package, the two checkouts alternating which goes
first. Each run times the delegate against LiteRT in its own process, so the ratio of the two
checkouts' speedups cancels the machine's drift; the LiteRT twins' deviation in the same runs is
the noise to compare it with. `--repeat` runs everything again, the order reversed.

Prints one line per model and thread count and per workload and size, then the geomeans;
writes each run's JSON under --out.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python perf/checkouts.py` from anywhere

from perf.models import geomean  # noqa: E402

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR") or ROOT / "tests" / "models" / "corpus")


def run(checkout: Path, script: str, args: list[str], out: Path) -> dict:
    """`checkout`'s perf/`script` with `args`, its package first on the path; its JSON."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    command = [sys.executable, f"perf/{script}", *args, "--out", str(out.with_suffix(".md")),
               "--json", str(out)]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} in {checkout} failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())


def speedups(result: dict, script: str) -> dict[tuple, tuple[float, float]]:
    """(model or workload, threads or elements) -> (delegate's speedup, LiteRT twin's)."""
    def ratio(times: dict, method: str) -> float:
        return times["litert_default"]["median"] / times[method]["median"]
    if script == "models.py":
        return {(r["model"], f"t{r['threads']}"): (ratio(r["times"], "delegate_defaults"),
                                                   ratio(r["times"], "litert_twin"))
                for r in result["model_results"] if not r["error"]}
    return {(c["workload"], c["elements"]): (ratio(c["times"], "delegate_defaults"),
                                             ratio(c["times"], "litert_twin"))
            for c in result["cases"]}


def jobs(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(name, script, arguments) of every run, one model or workload each."""
    models = [m["id"] for m in json.loads((args.corpus / "manifest.json").read_text())["models"]
              if any(fnmatch.fnmatch(m["id"], g) for g in args.models)] if args.models else []
    threads = [str(t) for t in args.threads]
    return ([(m, "models.py", ["--models", m, "--threads", *threads, "--partitions",
                               "--corpus", str(args.corpus)]) for m in models]
            + [(w, "suite.py", ["--workloads", w, "--no-jax"]) for w in args.workloads])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--models", nargs="*", default=[], metavar="GLOB")
    parser.add_argument("--workloads", nargs="*", default=[], metavar="NAME")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--out", type=Path, default=Path("checkouts"))
    args = parser.parse_args(argv)
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    out_dir = args.out.resolve()              # the scripts run in the checkouts' directories
    ratios: dict[tuple, list[float]] = {}
    twins: list[float] = []
    for repeat in range(args.repeat):
        for number, (name, script, script_args) in enumerate(jobs(args)):
            order = list(sides) if (number + repeat) % 2 == 0 else list(sides)[::-1]
            found = {}
            for side in order:
                out = out_dir / str(repeat) / f"{side}_{name}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                found[side] = speedups(run(sides[side], script, script_args, out), script)
            for key in sorted(found["before"].keys() & found["after"].keys(), key=str):
                (before, twin_before), (after, twin_after) = (found[side][key] for side in sides)
                ratios.setdefault((script, *key), []).append(after / before)
                twins += [twin_before, twin_after]
                print(f"{' '.join(map(str, key)):44s} before {before:6.3f}x  after {after:6.3f}x"
                      f"  after/before {after / before:.3f}", flush=True)
    for script in ("models.py", "suite.py"):
        chosen = [statistics.median(v) for k, v in ratios.items() if k[0] == script]
        if chosen:
            print(f"{script}: {len(chosen)} cases, after/before geomean {geomean(chosen):.3f}, "
                  f"median |deviation| {deviation(chosen):.1%}")
    if twins:
        print(f"LiteRT twins: median |deviation| {deviation(twins):.1%} (the noise)")
    return 0


def deviation(ratios: list[float]) -> float:
    """The median distance of ratios from 1, as a fraction."""
    return math.exp(statistics.median(abs(math.log(r)) for r in ratios)) - 1


if __name__ == "__main__":
    sys.exit(main())
