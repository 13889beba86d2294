"""`report MODEL -o DIR`: a self-contained HTML page (and the same data as JSON) that shows
what the delegate fused, each partition's time inside the delegate against the same ops on
LiteRT, the end-to-end latency, and the bandwidth each kernel achieves."""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from .. import runtime
from ..model import write_model
from ..options import FusionOptions
from .cut import cut_partition
from .html_report import render_html
from .plan import PartitionRow, describe, nothing_claimed_note
from .runner import (LoadedModel, Progress, Runner, build_pair, interleaved_medians_us,
                     load_model)
from .text import speedup, table, us

HELP = "write an HTML and JSON report: partitions, their timings, charts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory for report.html and report.json (created if needed)")
    parser.add_argument("--num_runs", type=int, default=50,
                        help="timed runs per measurement, interleaved (default 50)")
    parser.add_argument("--num_threads", type=int, default=1, help="interpreter threads (1)")
    parser.add_argument("--seed", type=int, default=0, help="random input seed (default 0)")


def _medians_us(data: bytes, options: FusionOptions, args: argparse.Namespace,
                progress: Progress, what: str) -> tuple[float, float, Runner, Runner]:
    """Median invoke time of LiteRT alone and with the delegate on one model, interleaved."""
    plain, fused, _ = build_pair(data, options, num_threads=args.num_threads, seed=args.seed)
    for runner in (plain, fused):
        runner.interpreter.invoke()  # first invoke: lazy allocations, not timed
    progress.note(f"{what}: timing {args.num_runs} runs of each")
    before, after = interleaved_medians_us([plain, fused], args.num_runs, progress)
    return before, after, plain, fused


def _partition_timing(loaded: LoadedModel, row: PartitionRow, count: int,
                      options: FusionOptions, args: argparse.Namespace,
                      progress: Progress) -> dict:
    model = cut_partition(loaded.model, row.nodes, row.inputs, row.outputs)
    what = f"partition {row.index + 1}/{count} ({row.kernel or len(row.nodes)})"
    litert_us, delegate_us, _, fused = _medians_us(write_model(model), options, args, progress,
                                                   what)
    moved = row.bytes_moved or 0
    return {"litert_us": litert_us, "delegate_us": delegate_us,
            "speedup": litert_us / delegate_us,
            "gbps": moved / (delegate_us * 1e-6) / 1e9,
            "litert_gbps": moved / (litert_us * 1e-6) / 1e9,
            "cut_summary": fused.delegate.summary()}


def _machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "python": platform.python_version(),
            "runtime": str(runtime.RUNTIME), "numba": version("numba")}


def collect(loaded: LoadedModel, options: FusionOptions, args: argparse.Namespace,
            progress: Progress) -> dict:
    """Everything the report shows, as JSON-ready data."""
    progress.note(f"building interpreters for {loaded.name} (compiling kernels)")
    litert_us, delegate_us, plain, fused = _medians_us(loaded.data, options, args, progress,
                                                       "end to end")
    plan = describe(loaded.model, fused.delegate)
    described = plan.to_json()
    partitions = [{**described["partitions"][row.index],
                   **_partition_timing(loaded, row, len(plan.partitions), options, args, progress)}
                  for row in plan.partitions]
    return {
        "model": loaded.path, "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": _machine(), "num_threads": args.num_threads, "num_runs": args.num_runs,
        "options": asdict(options),
        "summary": plan.summary, "nodes": len(plan.nodes), "delegated": plan.delegated,
        "note": None if plan.delegated else nothing_claimed_note(plan),
        "op_histogram": [{"op": op, "nodes": n, "delegated": d}
                         for op, n, d in plan.op_histogram],
        "left_alone": [{"op": op, "reason": reason, "nodes": n}
                       for op, reason, n in plan.left_alone],
        "end_to_end": {"litert_us": litert_us, "delegate_us": delegate_us,
                       "speedup": litert_us / delegate_us,
                       "litert_init_us": plain.init_seconds * 1e6,
                       "delegate_init_us": fused.init_seconds * 1e6},
        "partitions": partitions,
        "plan": described["nodes"],
    }


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.num_runs < 1 or args.num_threads < 1:
        raise ValueError("--num_runs and --num_threads must be >= 1")
    loaded = load_model(args.model)
    progress = Progress("report")
    data = collect(loaded, options, args, progress)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(data, indent=2))
    (out / "report.html").write_text(render_html(data), encoding="utf-8")
    e2e = data["end_to_end"]
    print(data["summary"])
    if data["note"]:
        print(data["note"])
    rows = [(p["index"], p["kernel"], us(p["litert_us"]), us(p["delegate_us"]),
             speedup(p["litert_us"], p["delegate_us"]), f"{p['gbps']:.1f}")
            for p in data["partitions"]]
    rows.append(("all", "end to end", us(e2e["litert_us"]), us(e2e["delegate_us"]),
                 speedup(e2e["litert_us"], e2e["delegate_us"]), ""))
    print("\n".join(table(("partition", "kernel", "LiteRT us", "delegate us", "speedup",
                           "GB/s"), rows, align="rlrrrr")))
    print(f"wrote {out / 'report.html'} and {out / 'report.json'}")
    return 0
