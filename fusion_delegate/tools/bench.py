"""`bench MODEL`: benchmark_model's numbers for LiteRT alone and with the fusion delegate,
side by side, from runs that take turns so machine noise hits both."""
from __future__ import annotations

import argparse
import json

from ..options import FusionOptions
from .plan import describe, nothing_claimed_note
from .runner import (Progress, Runner, build_pair, interleaved_times, load_model, summarize,
                     time_invoke)
from .text import speedup, table, us

HELP = "time LiteRT with and without the delegate, like benchmark_model"
STATS = ("avg", "std", "min", "max", "p50", "p90", "p99")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("--num_runs", type=int, default=50, help="timed runs (default 50)")
    parser.add_argument("--warmup_runs", type=int, default=1, help="untimed runs (default 1)")
    parser.add_argument("--num_threads", type=int, default=1, help="interpreter threads (1)")
    parser.add_argument("--min_secs", type=float, default=0.0,
                        help="keep running until this many seconds passed (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="random input seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _measure(runners: list[Runner], args: argparse.Namespace, progress: Progress) -> list[dict]:
    first = [time_invoke(r.interpreter) * 1e6 for r in runners]
    interpreters = [r.interpreter for r in runners]
    warmup = interleaved_times(interpreters, args.warmup_runs, progress=progress,
                               what="warmup runs")
    progress.note(f"timing {args.num_runs} runs of each, interleaved")
    timed = interleaved_times(interpreters, args.num_runs, min_secs=args.min_secs,
                              progress=progress)
    results = []
    for runner, first_us, warm, times in zip(runners, first, warmup, timed):
        kernels = runner.delegate.kernels.values() if runner.delegate else ()
        results.append({
            "label": runner.label,
            "init_us": runner.init_seconds * 1e6,
            "compile_us": sum(k.kernel.compile_seconds for k in kernels) * 1e6,
            "first_inference_us": first_us,
            "warmup_avg_us": float(warm.mean() * 1e6) if warm.size else None,
            "inference_us": summarize(times)})
    return results


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.num_runs < 1 or args.warmup_runs < 0 or args.num_threads < 1:
        raise ValueError("--num_runs and --num_threads must be >= 1, --warmup_runs >= 0")
    loaded = load_model(args.model)
    progress = Progress("bench")
    progress.note(f"building interpreters for {loaded.name} (compiling kernels)")
    plain, fused, _ = build_pair(loaded.data, options, num_threads=args.num_threads,
                                 seed=args.seed)
    plan = describe(loaded.model, fused.delegate)
    results = _measure([plain, fused], args, progress)
    before, after = (r["inference_us"] for r in results)
    data = {"model": loaded.path, "num_threads": args.num_threads, "num_runs": args.num_runs,
            "warmup_runs": args.warmup_runs, "summary": plan.summary,
            "litert": results[0], "fusion_delegate": results[1],
            "speedup_avg": before["avg"] / after["avg"],
            "speedup_p50": before["p50"] / after["p50"],
            "note": None if plan.delegated else nothing_claimed_note(plan)}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(report_lines(data)))
    return 0


def report_lines(data: dict) -> list[str]:
    """The side-by-side table, then benchmark_model's own summary line for each."""
    a, b = data["litert"], data["fusion_delegate"]
    threads = data["num_threads"]

    def row(name: str, key: str) -> tuple[str, str, str]:
        return (name, *(us(r[key]) if r[key] is not None else "n/a" for r in (a, b)))

    rows = [row("Init", "init_us"), ("  compiling kernels", "-", us(b["compile_us"])),
            row("First inference", "first_inference_us"), row("Warmup (avg)", "warmup_avg_us")]
    rows += [(f"Inference ({s})", us(a["inference_us"][s]), us(b["inference_us"][s]))
             for s in STATS]
    rows.append(("count", a["inference_us"]["count"], b["inference_us"]["count"]))
    lines = [f"model: {data['model']}   threads: {threads}   runs: {data['num_runs']} "
             f"(+{data['warmup_runs']} warmup), interleaved",
             f"fusion_delegate: {data['summary']}", ""]
    lines += table(("microseconds", a["label"], b["label"]), rows, align="lrr")
    lines += ["", f"speedup: {speedup(a['inference_us']['avg'], b['inference_us']['avg'])} (avg), "
              f"{speedup(a['inference_us']['p50'], b['inference_us']['p50'])} (p50)"]
    if data["note"]:
        lines.append(data["note"])
    lines.append("")
    for r in (a, b):
        warm = f"{r['warmup_avg_us']:.0f}" if r["warmup_avg_us"] is not None else "n/a"
        lines.append(f"{r['label']}: Inference timings in us: Init: {r['init_us']:.0f}, "
                     f"First inference: {r['first_inference_us']:.0f}, Warmup (avg): {warm}, "
                     f"Inference (avg): {r['inference_us']['avg']:.0f}")
    return lines
