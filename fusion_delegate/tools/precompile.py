"""`compile MODEL...`: build and cache every kernel the models need, before they are deployed.

Run it in a Docker build or a deploy step with the options and thread counts the application
uses (the kernels depend on both): a process that later loads the same models with
`cache_dir` pointing at the same directory only reads compiled kernels from disk.
"""
from __future__ import annotations

import argparse
import json
import time

from ..options import FusionOptions
from .runner import build, load_model
from .text import table

HELP = "compile and cache the kernels of models ahead of deployment"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="MODEL", help=".tflite files")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="interpreter thread counts to compile for (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if any(threads < 1 for threads in args.threads):
        raise ValueError("--threads must be >= 1")
    rows, directory = [], None
    for path in args.models:
        loaded = load_model(path)
        for threads in args.threads:
            start = time.perf_counter()
            runner = build(loaded.data, fuse=options, num_threads=threads)
            hits = [k.kernel.cache_hit for k in runner.delegate.kernels.values()]
            directory = runner.delegate.cache.directory
            rows.append({"model": loaded.path, "threads": threads, "partitions": len(hits),
                         "compiled": hits.count(""), "loaded": len(hits) - hits.count(""),
                         "seconds": round(time.perf_counter() - start, 3)})
    if args.json:
        print(json.dumps({"cache_dir": str(directory), "models": rows}, indent=2))
        return 0
    print("\n".join(table(["model", "threads", "partitions", "compiled", "from cache",
                           "seconds"],
                          [[r["model"], r["threads"], r["partitions"], r["compiled"],
                            r["loaded"], f"{r['seconds']:.2f}"] for r in rows])))
    print(f"kernels cached in {directory}" if directory else
          "cache_dir is off (\"\"): nothing was kept")
    return 0
