"""One partition of two residual branches against one of one, between 1x1 convolutions:
`python perf/branch_cut.py [--threads 1 2] [--shape 1,8,8,128]`.

Each model: x -> conv a = r; per branch i: conv b_i(r), ADD(r, b_i), PRELU, conv c_i; the
branches' outputs added. The delegate claims each branch's ADD and PRELU (with two branches:
one partition of both, as in iris_landmark), `min_speedup=0`; LiteRT default the rest. Prints
what claiming costs or saves per invoke (delegated minus LiteRT, medians of interleaved rounds)
and what the cost model predicted (fused minus LiteRT us, the cut's share). perf/README.md,
"XNNPACK's thread pool ...", has what it showed.
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
from perf.fuzz import RandomGraph, interpreter  # noqa: E402
from perf.timing import interleaved  # noqa: E402


def model(shape: tuple[int, ...], branches: int) -> tuple[bytes, str]:
    """The model, and the nodes to leave to LiteRT (the final ADDs)."""
    graph = RandomGraph(np.random.default_rng(1), "float32", shape)
    b, none = graph.b, {"fused_activation_function": 0}
    r = graph.conv(b.input("x", shape, np.float32), "a")
    outs = []
    for i in range(branches):
        s = b.op("ADD", [r, graph.conv(r, f"b{i}")], none, shape=shape)
        alpha = b.const(f"alpha{i}", np.full((1, 1, shape[-1]), 0.25, np.float32))
        outs.append(graph.conv(b.op("PRELU", [s, alpha], None, shape=shape), f"c{i}"))
    out = outs[0]
    for o in outs[1:]:
        out = b.op("ADD", [out, o], none, shape=shape)
    b.output(out)
    adds = 4 * branches + 1
    return b.to_bytes(), ",".join(str(n) for n in range(adds, adds + branches - 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shape", default="1,8,8,128")
    args = parser.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    for threads in args.threads:
        methods, predicted = {}, {}
        for branches in (1, 2):
            data, final = model(shape, branches)
            methods[("litert", branches)] = interpreter(data, threads, None).invoke
            claiming = FusionDelegate(min_speedup=0, exclude_nodes=final)
            methods[("fused", branches)] = interpreter(data, threads, claiming).invoke
            predicting = FusionDelegate(exclude_nodes=final)
            interpreter(data, threads, predicting)
            (nodes,) = [p.nodes for p in claiming.last_partitions]
            predicted[branches] = predicting.predictions[nodes]
        times = interleaved(methods, 81, 0.002, 10)
        for branches in (1, 2):
            us = (times[("fused", branches)].median - times[("litert", branches)].median) * 1e6
            p = predicted[branches]
            print(f"{threads} thread(s), {branches} branch(es): claiming {us:+.2f} us measured, "
                  f"{p.fused_us - p.litert_us:+.2f} predicted (cut {p.cut_us:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
