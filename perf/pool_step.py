"""What one more XNNPACK op costs around the size where XNNPACK hands ops to its thread pool:
`python perf/pool_step.py [--threads 1 2] [--op ABS]`.

For each size, LiteRT's default path (XNNPACK) on a chain of 1 and of 11 `--op`s (perf/calibrate's
chains: the model's input, the ops, its output), timed in the same interleaved rounds; the
difference over 10 is one op's cost. At 2 threads on Emerald Rapids an op costs 0.16 us at 4096
float32 elements and 1.55 us at 5200: above 16 KB XNNPACK splits it over its threads, and the
hand-over costs more than the op. The cost model's breaks (4096, 16384) interpolate over that
step (perf/README.md, "Session 32").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perf.calibrate import chain  # noqa: E402
from perf.fuzz import interpreter  # noqa: E402
from perf.timing import interleaved  # noqa: E402

SIZES = (2048, 4096, 4608, 5120, 6144, 8192, 12288, 16384, 32768)


def per_op_us(op: str, n: int, threads: int) -> float:
    """One more op's microseconds in a chain of `op` over `n` elements."""
    methods = {k: interpreter(chain(op, k, n), threads, None).invoke for k in (1, 11)}
    times = interleaved(methods, 41, 0.002, 4)
    return (times[11].median - times[1].median) * 1e6 / 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--op", default="ABS")
    args = parser.parse_args(argv)
    print(f"| elements | {' | '.join(f'{t} thread(s), us an op' for t in args.threads)} |")
    print(f"|---|{'---|' * len(args.threads)}")
    for n in SIZES:
        costs = [per_op_us(args.op, n, threads) for threads in args.threads]
        print(f"| {n} | {' | '.join(f'{c:.2f}' for c in costs)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
