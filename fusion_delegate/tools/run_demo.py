"""`demo`: the README's first command. Builds the bundled float32 transformer block and int8
MobileNetV3-style block, shows what the delegate fuses in each, how fast it runs against
LiteRT's default, and that the results agree."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..demo import build_demo_model, build_quantized_demo_model
from ..model import read_model
from ..options import FusionOptions
from .plan import describe, partition_lines
from .runner import Progress, build, build_pair, infer, interleaved_medians_us
from .text import shape, speedup, table, us

HELP = "fuse the bundled demo models (float32 and int8) and compare them with LiteRT"


@dataclass(frozen=True)
class DemoCase:
    title: str
    build: Callable[[], bytes]
    tolerance: float               # max |difference| from LiteRT's builtin kernels
    unit: str


CASES = (
    DemoCase("a float32 transformer block (LayerNorm tail, MLP with a tanh GELU, swish gate, "
             "residual)", build_demo_model, 1e-4, ""),
    DemoCase("a full-integer int8 MobileNetV3-style block (depthwise convolution, HARD_SWISH, "
             "residual ADD)", build_quantized_demo_model, 0, " LSB"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each (default 30)")
    parser.add_argument("--save", metavar="PATH", help="also write the float demo model to PATH "
                        "(and the int8 one beside it, named *_int8.tflite)")


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.runs < 1:
        raise ValueError("--runs must be >= 1")
    progress = Progress("demo")
    ok = True
    for number, case in enumerate(CASES):
        data = case.build()
        path = None
        if args.save:
            path = Path(args.save)
            path = path if number == 0 else path.with_name(f"{path.stem}_int8{path.suffix}")
            path.write_bytes(data)
        lines, case_ok = run_case(case, data, path, args.runs, options, progress)
        print("\n".join(lines + [""]) if number < len(CASES) - 1 else "\n".join(lines))
        ok = ok and case_ok
    return 0 if ok else 1


def run_case(case: DemoCase, data: bytes, path: Path | None, runs: int, options: FusionOptions,
             progress: Progress) -> tuple[list[str], bool]:
    """One demo model: what is fused, both latencies, and the largest difference."""
    model = read_model(data)
    graph = model.subgraphs[0]
    x = graph.tensors[graph.inputs[0]]
    progress.note(f"{graph.name}: building interpreters (compiling kernels)")
    plain, fused, inputs = build_pair(data, options)
    plan = describe(model, fused.delegate)
    plain.interpreter.invoke()  # each interpreter's first invoke stays out of the timings
    # The fused kernels against LiteRT's builtin kernels, with the builtin kernels around them
    # in both (XNNPACK's own kernels round differently, int8 ones by a few LSB).
    got = infer(build(data, fuse=options, resolver="builtin").interpreter, inputs)
    expected = infer(build(data, resolver="builtin").interpreter, inputs)
    worst = max(float(np.abs(e.astype(np.float64) - g).max()) for e, g in zip(expected, got))
    progress.note(f"{graph.name}: timing {runs} runs of each, interleaved")
    before, after = interleaved_medians_us([plain, fused], runs, progress)
    saved = f", saved to {path}" if path else ""
    lines = [f"demo model: {case.title}",
             f"  input {x.name} {np.dtype(x.dtype).name}{shape(x.shape)}, "
             f"{len(graph.operators)} nodes{saved}", "", plan.summary]
    lines += partition_lines(plan, indent=2)
    if plan.left_alone:
        lines += ["", "left to LiteRT:"]
        lines += table(None, [(f"{op} x{count}", reason)
                              for op, reason, count in plan.left_alone], indent=2)
    lines += ["", f"median latency, {runs} interleaved runs, 1 thread:"]
    lines += table(None, [(plain.label, f"{us(before)} us"), (fused.label, f"{us(after)} us"),
                          ("speedup", speedup(before, after))], align="lr", indent=2)
    ok = worst <= case.tolerance
    lines += ["", f"max |difference| vs LiteRT builtin kernels: {worst:.3g}{case.unit} "
              f"(tolerance {f'{case.tolerance:.0e}' if case.tolerance else 0}{case.unit}): "
              f"{'ok' if ok else 'FAIL'}"]
    return lines, ok
