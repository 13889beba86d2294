"""Fused kernels on the interpreter's thread pool: `python perf/threads.py [--models GLOB ...]`.

One elementwise op (TANH) between two convolutions XNNPACK runs, at 64K to 1M elements. The
op's cost is the model with it less the same model without it (the two convolutions back to
back), timed in the same interleaved rounds (perf/timing.py): LiteRT's default path and the
delegate (claiming the op), each at 1 and 2 interpreter threads. With the pool, a 2-thread
kernel splits its elements in two parts, one on the interpreter's thread and one on the pool's
worker.

`--models GLOB ...`: corpus models at 2 threads instead, interleaved: LiteRT twice (the twins'
spread is the noise) and the delegate with kernels on one thread (`num_threads=1`, the
default) and in parts on the pool (`num_threads=0`), each at the default `min_speedup` and at
0 (claiming all it can build).
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
from fusion_delegate.model import ModelBuilder  # noqa: E402
from fusion_delegate.tools.runner import set_inputs  # noqa: E402
from perf.models import CORPUS, interpreter, matches, model_inputs  # noqa: E402
from perf.timing import interleaved  # noqa: E402

CHANNELS = 16
SIDES = (64, 128, 256)                      # 64K, 256K, 1M elements


def sandwich(side: int, with_op: bool) -> bytes:
    """CONV_2D 1x1 -> (TANH) -> CONV_2D 1x1, [1, side, side, 16]."""
    b = ModelBuilder(f"tanh_{side}")
    shape = (1, side, side, CHANNELS)
    x = b.input("x", shape)
    weights = (np.eye(CHANNELS, dtype=np.float32) * 0.5).reshape(CHANNELS, 1, 1, CHANNELS)
    conv = {"padding": 1, "stride_w": 1, "stride_h": 1, "fused_activation_function": 0}
    h = b.op("CONV_2D", [x, b.const("w1", weights), b.const("b1", np.zeros(CHANNELS, np.float32))],
             conv, shape=shape)
    if with_op:
        h = b.op("TANH", [h])
    b.output(b.op("CONV_2D", [h, b.const("w2", weights),
                              b.const("b2", np.zeros(CHANNELS, np.float32))], conv, shape=shape))
    return b.to_bytes()


def corpus_models(globs: list[str], rounds: int) -> None:
    """Each model at 2 threads: LiteRT's twins and the delegate's four configurations."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    configs = {"fused nt1": {"num_threads": 1}, "fused nt0": {"num_threads": 0},
               "all nt1": {"num_threads": 1, "min_speedup": 0.0},
               "all nt0": {"num_threads": 0, "min_speedup": 0.0}}
    print("| model | LiteRT twin | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    for model in (m for m in manifest if matches(m["id"], globs)):
        data = (CORPUS / model["file"]).read_bytes()
        methods = {}
        for name in ("litert", "twin"):
            it = interpreter(data, 2)
            set_inputs(it, model_inputs(it, model))
            methods[name] = it.invoke
        for name, options in configs.items():
            it = interpreter(data, 2, FusionDelegate(**options))
            set_inputs(it, model_inputs(it, model))
            methods[name] = it.invoke
        times = interleaved(methods, rounds, 0.002, 20.0)
        base = times["litert"].median
        cells = [f"{base / times[name].median:.3f}x" for name in ("twin", *configs)]
        print(f"| {model['id']} | " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--models", nargs="+", metavar="GLOB",
                        help="corpus models at 2 threads instead of the one-op sandwich")
    args = parser.parse_args(argv)
    if args.models:
        corpus_models(args.models, args.rounds)
        return
    rng = np.random.default_rng(0)
    print("| elements | LiteRT 1t us | LiteRT 2t us | fused 1t us | fused 2t us | "
          "fused 2t vs 1t | fused 2t vs LiteRT 2t |")
    print("|---|---|---|---|---|---|---|")
    for side in SIDES:
        x = rng.standard_normal((1, side, side, CHANNELS)).astype(np.float32)
        methods = {}
        for threads in (1, 2):
            for with_op in (False, True):
                for fused in (False, True):
                    delegate = FusionDelegate(min_speedup=0, num_threads=0) if fused else None
                    it = interpreter(sandwich(side, with_op), threads, delegate)
                    set_inputs(it, [x])
                    methods[(threads, with_op, fused)] = it.invoke
        times = interleaved(methods, args.rounds, 0.002, 8.0)
        cost = {(threads, fused): (times[(threads, True, fused)].median
                                   - times[(threads, False, fused)].median) * 1e6
                for threads in (1, 2) for fused in (False, True)}
        print(f"| {side * side * CHANNELS} | {cost[1, False]:.1f} | {cost[2, False]:.1f} | "
              f"{cost[1, True]:.1f} | {cost[2, True]:.1f} | "
              f"{cost[1, True] / cost[2, True]:.2f}x | {cost[2, False] / cost[2, True]:.2f}x |")


if __name__ == "__main__":
    main()
