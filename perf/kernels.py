"""How many kernels the corpus needs compiled: per model, its partitions and its distinct
kernels; over the corpus, the distinct kernels of all of them. A kernel is its source's cache
key (codegen.compile.cache_key), so two partitions whose sources are one text count once.
Nothing is compiled: the delegate chooses its partitions when the interpreter is constructed,
and this script records the sources it would compile then (claims are made anew, not read back
from the cache: fusion_delegate.recall).

    python perf/kernels.py [--models GLOB ...] [--threads 1] [--option key=value ...]
                           [--sources FILE]

`--sources` writes every distinct kernel source to FILE (JSON, sorted): two checkouts that
generate the same kernels write the same file, whatever their codegen sources' hash.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codegen.compile import cache_key  # noqa: E402
from fusion_delegate import FusionDelegate, fusion, recall  # noqa: E402
from fusion_delegate.options import FusionOptions  # noqa: E402
from fusion_delegate.runtime import Interpreter  # noqa: E402

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR", ROOT / "tests" / "models" / "corpus"))


def chosen_kernels(model: Path, threads: int, options: FusionOptions) -> list[str]:
    """The sources of the kernels the delegate chooses for `model`, one per partition."""
    sources: list[str] = []

    def record(cache, kernels, workers=None):
        # The last call is the chosen partitions' (the first, the tables' kernels that the
        # cache lacks: none where it is warm).
        sources[:] = [source for _, source in kernels]
        return 0

    compile_ahead, fusion.compile_ahead = fusion.compile_ahead, record
    recall.forget()                       # decided anew, as in a process with an empty cache
    try:
        Interpreter(model_path=str(model), num_threads=threads,
                    experimental_delegates=[FusionDelegate(options)])
    finally:
        fusion.compile_ahead = compile_ahead
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["*"], metavar="GLOB")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a FusionDelegate option, as the CLI takes it")
    parser.add_argument("--sources", type=Path, help="write every distinct source here (JSON)")
    args = parser.parse_args(argv)
    options = FusionOptions.parse(args.option)
    recall.ON_DISK = False
    manifest = json.loads((CORPUS / "manifest.json").read_text())["models"]
    models = [CORPUS / m["file"] for m in manifest
              if any(fnmatch.fnmatch(Path(m["file"]).stem, p) for p in args.models)]
    print("| model | partitions | distinct kernels |\n|---|---|---|")
    every: list[str] = []
    within, sources = 0, set()
    for model in models:
        chosen = chosen_kernels(model, args.threads, options)
        sources.update(chosen)
        keys = [cache_key(source) for source in chosen]
        every += keys
        within += len(set(keys))
        print(f"| {model.stem} | {len(keys)} | {len(set(keys))} |", flush=True)
    print(f"\n{len(models)} models, {args.threads} thread(s): {len(every)} partitions, "
          f"{within} distinct kernels within models, {len(set(every))} over the corpus.")
    if args.sources:
        args.sources.write_text(json.dumps(sorted(sources), indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
