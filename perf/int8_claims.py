"""How much of a random int8/uint8 elementwise graph is claimed bit for bit (issue 31):
`python perf/int8_claims.py [--models 300] [--seed 0] [--dtypes int8 uint8]`.

Draws models from tests/test_quantized_fusion.py's `quantized_graphs` (unary and binary ops on
earlier values, per-channel and one-value constants, random scales and zero points, some
entering and leaving through QUANTIZE / DEQUANTIZE), runs each with the delegate claiming all
it can build (`min_speedup=0`, one node per partition allowed) and with LiteRT's builtin
kernels, and prints the share of nodes claimed, the outputs that differ from LiteRT's in any
bit, and why the unclaimed nodes were refused. Models LiteRT itself rejects are skipped.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import builtin_interpreter, run  # noqa: E402
from fusion_delegate import FusionDelegate  # noqa: E402
from test_quantized_fusion import graph_input, quantized_graphs  # noqa: E402

DTYPES = {"int8": np.int8, "uint8": np.uint8}


def reason_kind(reason: str) -> str:
    """A refusal without its numbers, so that like reasons count together."""
    return re.sub(r"-?\d[\d.e+-]*", "N", reason)[:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["int8", "uint8"])
    args = parser.parse_args(argv)
    cache_dir = tempfile.mkdtemp(prefix="int8-claims-")
    nodes = collections.Counter()
    claimed = collections.Counter()
    models = collections.Counter()
    differ: list[str] = []
    reasons: collections.Counter = collections.Counter()

    @seed(args.seed)
    @settings(max_examples=args.models, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(graph=quantized_graphs(tuple(DTYPES[d] for d in args.dtypes)),
           data_seed=st.integers(0, 2**32 - 1))
    def one(graph, data_seed):
        model, shape, _, dtype = graph
        x = graph_input(graph, np.random.default_rng(data_seed))
        try:
            want = run(builtin_interpreter(model), [x])
        except RuntimeError:
            return  # LiteRT's own kernels reject the model
        delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0,
                                  min_nodes_per_partition=1)
        got = run(builtin_interpreter(model, [delegate]), [x])
        name = np.dtype(dtype).name
        models[name] += 1
        nodes[name] += len(delegate.claims)
        claimed[name] += len(delegate.delegated_nodes)
        reasons.update(reason_kind(c.reason) for c in delegate.claims.values()
                       if c.reason is not None)
        if any(g.tobytes() != w.tobytes() for g, w in zip(got, want)):
            differ.append(f"{name} {shape} {[c.op for c in delegate.claims.values()]}")

    one()
    print(f"{args.models} drawn (seed {args.seed}); models LiteRT runs, nodes claimed:")
    for name in sorted(models):
        print(f"  {name}: {models[name]} models, {claimed[name]}/{nodes[name]} nodes claimed "
              f"({100 * claimed[name] / max(nodes[name], 1):.1f}%)")
    total_claimed, total = sum(claimed.values()), sum(nodes.values())
    print(f"  all: {total_claimed}/{total} ({100 * total_claimed / max(total, 1):.1f}%)")
    print(f"outputs that differ from LiteRT's in any bit: {len(differ)}")
    for line in differ:
        print(f"  {line}")
    print("refusals:")
    for reason, count in reasons.most_common():
        print(f"  {count:4d}  {reason}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
