"""Claims read back are the claims made: `python perf/recalled.py [--threads 1 2] [--models GLOB ...]`.

For each corpus model, at each thread count, with the default cache directory (its kernels
compiled once, by any run): the delegate's claims (each node's reason and partition),
predictions and partitions made anew (nothing read back or kept), then read back from the cache
directory (a new process: fusion_delegate.recall's memory emptied; kept there first if it was
not) and from the process's memory (a second interpreter). Prints the models where the three
differ; exit status 1 if any does.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fusion_delegate import FusionDelegate, recall  # noqa: E402
from fusion_delegate.runtime import Interpreter  # noqa: E402
from perf.kernels import CORPUS  # noqa: E402


def decisions(model: Path, threads: int) -> tuple:
    delegate = FusionDelegate()
    Interpreter(model_path=str(model), num_threads=threads, experimental_delegates=[delegate])
    return (delegate.claims, delegate.predictions, delegate.last_partitions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["*"], metavar="GLOB")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    models = [CORPUS / m["file"] for m in manifest
              if any(fnmatch.fnmatch(Path(m["file"]).stem, p) for p in args.models)]
    differ = []
    for threads in args.threads:
        for model in models:
            recall.forget()
            recall.ON_DISK = False
            made = decisions(model, threads)
            recall.ON_DISK = True
            decisions(model, threads)              # kept in the cache directory if it was not
            recall.forget()
            from_disk = decisions(model, threads)
            from_memory = decisions(model, threads)
            if not made == from_disk == from_memory:
                differ.append(f"{model.stem} at {threads} thread(s)")
    print(f"{len(models) * len(args.threads) - len(differ)} of "
          f"{len(models) * len(args.threads)} read back as made"
          + "".join(f"\n  differs: {name}" for name in differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
