"""`demo`: the README's first command. Builds the bundled transformer block, shows what the
delegate fuses, how fast it runs against LiteRT's default, and that the results agree."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..demo import build_demo_model
from ..model import read_model
from ..options import FusionOptions
from .plan import describe, partition_lines
from .runner import Progress, build, build_pair, infer, interleaved_medians_us
from .text import shape, speedup, table, us

HELP = "fuse the bundled demo model and compare it with LiteRT"
TOLERANCE = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each (default 30)")
    parser.add_argument("--save", metavar="PATH", help="also write the demo model to PATH")


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.runs < 1:
        raise ValueError("--runs must be >= 1")
    progress = Progress("demo")
    data = build_demo_model()
    if args.save:
        Path(args.save).write_bytes(data)
    model = read_model(data)
    graph = model.subgraphs[0]
    x = graph.tensors[graph.inputs[0]]
    progress.note("building interpreters (compiling kernels)")
    plain, fused, inputs = build_pair(data, options)
    reference = build(data, resolver="builtin")
    plan = describe(model, fused.delegate)
    plain.interpreter.invoke()  # each interpreter's first invoke stays out of the timings
    got = infer(fused.interpreter, inputs)
    expected = infer(reference.interpreter, inputs)
    worst = max(float(np.abs(e.astype(np.float64) - g).max()) for e, g in zip(expected, got))
    progress.note(f"timing {args.runs} runs of each, interleaved")
    before, after = interleaved_medians_us([plain, fused], args.runs, progress)
    saved = f", saved to {args.save}" if args.save else ""
    lines = ["demo model: a transformer block (LayerNorm tail, MLP with a tanh GELU, swish gate,"
             " residual)",
             f"  input {x.name} {np.dtype(x.dtype).name}{shape(x.shape)}, "
             f"{len(graph.operators)} nodes{saved}", "", plan.summary]
    lines += partition_lines(plan, indent=2)
    if plan.left_alone:
        lines += ["", "left to LiteRT:"]
        lines += table(None, [(f"{op} x{count}", reason)
                              for op, reason, count in plan.left_alone], indent=2)
    lines += ["", f"median latency, {args.runs} interleaved runs, 1 thread:"]
    lines += table(None, [(plain.label, f"{us(before)} us"), (fused.label, f"{us(after)} us"),
                          ("speedup", speedup(before, after))], align="lr", indent=2)
    ok = worst <= TOLERANCE
    lines += ["", f"max |difference| vs LiteRT builtin kernels: {worst:.3g} "
              f"(tolerance {TOLERANCE:.0e}): {'ok' if ok else 'FAIL'}"]
    print("\n".join(lines))
    return 0 if ok else 1
