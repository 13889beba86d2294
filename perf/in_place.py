"""The cost model against the performance fuzz, op by op in place:
`python perf/in_place.py [--seed 0] [--threads 1 2] [--only N ...] [--out FILE.json]`.

For each case of perf/fuzz.py (the same models for the same seed) whose graph the delegate
claims with `min_speedup=0`, at each thread count: what its partitions cost in place, LiteRT's
ops and the fused kernels, each as the model less the same two convolutions alone, timed in
the same interleaved rounds (perf/timing.py); and what the cost model predicted for the same
partitions (the delegate at its defaults predicts every candidate, claimed or not). Where the
two disagree is where the cost model (fusion_delegate/worth.py) misses; perf/README.md, "Fused
activations and the cut, priced at 2 threads", has what it found.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from perf.fuzz import Case, RandomGraph, interpreter, random_cases  # noqa: E402
from perf.timing import interleaved  # noqa: E402


def in_place(case: Case, model: bytes, threads: int, seconds: float) -> dict | None:
    """Predicted and measured microseconds of the case's partitions; None if nothing is
    claimed or a partition claimed with min_speedup=0 was not among the predicted ones."""
    predicting = FusionDelegate()
    interpreter(model, threads, predicting)
    claiming = FusionDelegate(min_speedup=0)
    convs = RandomGraph(np.random.default_rng(1), case.dtype, case.shape).model(0)
    methods = {"litert": interpreter(model, threads, None).invoke,
               "fused": interpreter(model, threads, claiming).invoke,
               "convs": interpreter(convs, threads, None).invoke}
    partitions = [p.nodes for p in claiming.last_partitions]
    predictions = predicting.predictions
    if not partitions or any(p not in predictions for p in partitions):
        return None
    times = interleaved(methods, rounds=201, batch_seconds=0.002, budget_seconds=seconds)
    us = {name: t.median * 1e6 for name, t in times.items()}
    return {"case": case.number, "threads": threads, "dtype": case.dtype,
            "elements": int(np.prod(case.shape)), "ops": list(case.ops),
            "predicted": {"litert_us": sum(predictions[p].litert_us for p in partitions),
                          "fused_us": sum(predictions[p].fused_us for p in partitions),
                          "cut_us": sum(predictions[p].cut_us for p in partitions)},
            "measured": {"litert_us": us["litert"] - us["convs"],
                         "fused_us": us["fused"] - us["convs"]}}


def line(row: dict) -> str:
    p, m = row["predicted"], row["measured"]
    return (f"case {row['case']:3d} {row['threads']}t {row['dtype']:7s} n={row['elements']:8d} "
            f"ops={len(row['ops']):2d} | LiteRT predicted {p['litert_us']:8.1f} measured "
            f"{m['litert_us']:8.1f} | fused predicted {p['fused_us']:8.1f} (cut "
            f"{p['cut_us']:6.1f}) measured {m['fused_us']:8.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per case")
    parser.add_argument("--only", type=int, nargs="+", help="these cases of the run only")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    rows = []
    for case, model in random_cases(args.seed, args.cases, args.only):
        for threads in args.threads:
            row = in_place(case, model, threads, args.seconds)
            if row is not None:
                rows.append(row)
                print(line(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
