"""Chains over rows read with a value per row: `python perf/row_chains.py [--threads 1]`.

A [1, H, W, 1] operand against [1, H, W, C] (a per-pixel constant of perf/fuzz.py) is one
value per row of C: the kernel's nest over [M, C] cannot be row-tiled, so with C short its
transcendental ops run in one loop a row (policy.ROW_CHAIN_MIN_COLS). Each chain is
MAXIMUM(x, c) and the ops named, about 32K elements, c one value per row or one value in all
(a flat nest), timed fused (min_speedup=0) against LiteRT's default path in interleaved rounds
(perf/timing.py), with the cost model's predicted speedup beside.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import ModelBuilder  # noqa: E402
from fusion_delegate.tools.runner import random_inputs, set_inputs  # noqa: E402
from perf.models import interpreter  # noqa: E402
from perf.timing import interleaved  # noqa: E402

CHAINS = {"cheap": ("ABS", "NEG", "RELU"), "one": ("ABS", "EXP"), "two": ("EXP", "LOGISTIC")}
COLUMNS = (2, 3, 5, 8, 11, 16, 24, 32, 40, 64, 95, 128)
ELEMENTS = 1 << 15


def chain_model(shape: tuple[int, ...], per_row: bool, chain: tuple[str, ...]) -> bytes:
    b = ModelBuilder("row_chain")
    x = b.input("x", shape, np.float32)
    c_shape = (1, *shape[1:3], 1) if per_row else ()
    c = b.const("c", np.random.default_rng(0).uniform(0.5, 1.5, c_shape).astype(np.float32))
    y = b.op("MAXIMUM", [x, c], None, shape=shape)
    for name in chain:
        y = b.op(name, [y], None, shape=shape)
    b.output(y)
    return b.to_bytes()


def speedups(data: bytes, threads: int) -> tuple[float, float]:
    """(measured, predicted) speedup of the fused partition over LiteRT."""
    judge = FusionDelegate()
    interpreter(data, threads, judge)
    (prediction,) = judge.predictions.values()
    its = [interpreter(data, threads), interpreter(data, threads, FusionDelegate(min_speedup=0))]
    for it in its:
        set_inputs(it, random_inputs(it, np.random.default_rng(0)))
        it.invoke()
    times = interleaved({"litert": its[0].invoke, "fused": its[1].invoke}, rounds=61,
                        batch_seconds=0.002, budget_seconds=0.8)
    return times["litert"].median / times["fused"].median, prediction.speedup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    print("| C | chain | per row: measured (predicted) | one value: measured (predicted) |\n"
          "|---|---|---|---|")
    for cols in COLUMNS:
        shape = (1, 32, ELEMENTS // 32 // cols + 1, cols)
        for name, chain in CHAINS.items():
            cells = [speedups(chain_model(shape, per_row, chain), args.threads)
                     for per_row in (True, False)]
            print(f"| {cols} | {name} | " + " | ".join(f"{m:.2f}x ({p:.2f}x)" for m, p in cells)
                  + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
