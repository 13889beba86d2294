"""How long a delegated interpreter takes to start, next to LiteRT's own.

    python perf/startup.py --models 'mobilenet_v3_small_int8' 'efficientnet_b0_*' --out perf/STARTUP.md

For each corpus model, each measurement in a new process (defaults, 1 thread): constructing the
interpreter and `allocate_tensors()` for LiteRT alone; with the delegate and an empty cache
directory (every kernel compiled); again in a new process with that cache (warm: kernels loaded
from disk); a second interpreter for the same model in the same process (the median of five,
beside the median of LiteRT's own five); and a new process reading the cache from a read-only
copy, as a shipped cache is (where a mount namespace can make one). Times are wall seconds of
that step alone (making the delegate included), imports excluded.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR", ROOT / "tests" / "models" / "corpus"))

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from fusion_delegate.runtime import Interpreter
from fusion_delegate import FusionDelegate

def start(delegate):
    begin = time.perf_counter()
    delegates = [delegate()] if delegate else []
    it = Interpreter(model_path={model!r}, num_threads=1, experimental_delegates=delegates)
    it.allocate_tensors()
    return time.perf_counter() - begin, delegates

if {cache!r} is None:
    print(json.dumps({{"seconds": start(None)[0]}}))
else:
    seconds, (first,) = start(lambda: FusionDelegate(cache_dir={cache!r}))
    again, litert_again = [], []
    for _ in range(5):
        again.append(start(lambda: FusionDelegate(cache_dir={cache!r}))[0])
        litert_again.append(start(None)[0])
    again, litert_again = sorted(again)[2], sorted(litert_again)[2]
    hits = [k.kernel.cache_hit for k in first.kernels.values()]
    print(json.dumps({{"seconds": seconds, "second_interpreter": again,
                      "litert_second_interpreter": litert_again, "kernels": len(hits),
                      "compiled": hits.count("")}}))
"""


def child(model: Path, cache: str | None, read_only_from: Path | None = None) -> dict:
    script = CHILD.format(root=str(ROOT), model=str(model), cache=cache)
    command = [sys.executable, "-c", script]
    if read_only_from is not None:
        mount = (f"mount --bind {read_only_from} {cache} && "
                 f"mount -o remount,bind,ro {cache} && exec \"$0\" \"$@\"")
        command = ["unshare", "-m", "sh", "-c", mount, *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model: Path) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "cache"
        row = {"model": model.stem, "litert": child(model, None)["seconds"]}
        cold = child(model, str(cache))
        warm = child(model, str(cache))
        readonly = Path(scratch) / "readonly"
        readonly.mkdir()
        cache.mkdir(exist_ok=True)              # a model with nothing claimed made none
        shipped = child(model, str(readonly), read_only_from=cache)
        row.update(kernels=cold.get("kernels"), compiled=cold.get("compiled"),
                   cold=cold.get("seconds"), warm=warm.get("seconds"),
                   second=warm.get("second_interpreter"),
                   litert_second=warm.get("litert_second_interpreter"),
                   shipped=shipped.get("seconds"),
                   shipped_compiled=shipped.get("compiled"))
        shutil.rmtree(cache, ignore_errors=True)
    return row


def row_line(r: dict) -> str:
    def cell(key, base="litert", digits=3):
        value = r.get(key)
        return "-" if value is None else f"{value:.{digits}f} (+{value - r[base]:.{digits}f})"
    return (f"| {r['model']} | {r.get('kernels')} | {r['litert']:.3f} | {cell('cold')} "
            f"| {cell('warm')} | {cell('second', 'litert_second', 4)} | {cell('shipped')} |")


def markdown(rows: list[dict]) -> list[str]:
    lines = ["| model | kernels | LiteRT s | empty cache s (+LiteRT) | warm, new process s "
             "(+LiteRT) | 2nd interpreter s (+LiteRT's 2nd) | read-only shipped cache s |",
             "|---|---|---|---|---|---|---|", *map(row_line, rows), ""]
    for key, base, name, target in (("cold", "litert", "Empty cache", 1.5),
                                    ("warm", "litert", "Warm cache, new process", 0.05),
                                    ("second", "litert_second", "Second interpreter", 0.005),
                                    ("shipped", "litert", "Read-only shipped cache", 0.05)):
        extra = sorted(r[key] - r[base] for r in rows if r.get(key) is not None)
        if not extra:
            continue
        geomean = math.exp(sum(math.log(max(e, 1e-4)) for e in extra) / len(extra))
        within = sum(e <= target for e in extra)
        lines.append(f"- {name}, beyond LiteRT's own: {within} of {len(extra)} models within "
                     f"{target * 1000:g} ms; median {extra[len(extra) // 2] * 1000:.1f} ms, "
                     f"geomean {geomean * 1000:.1f} ms, largest {extra[-1] * 1000:.1f} ms.")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["*"], help="globs over corpus names")
    parser.add_argument("--out", type=Path, default=ROOT / "perf" / "STARTUP.md")
    args = parser.parse_args(argv)
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    models = [CORPUS / m["file"] for m in manifest
              if any(fnmatch.fnmatch(Path(m["file"]).stem, p) for p in args.models)]
    rows = []
    for model in models:
        rows.append(measure(model))
        print(row_line(rows[-1]), flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    args.out.write_text("\n".join([f"# Start-up times ({stamp})", "",
                                   f"`python perf/startup.py --models {' '.join(args.models)}`, "
                                   f"{os.cpu_count()} cores.", "", *markdown(rows), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
