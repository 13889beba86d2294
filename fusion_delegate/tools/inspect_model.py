"""`inspect MODEL`: which nodes the delegate claims, why it leaves the others, what it fuses."""
from __future__ import annotations

import argparse
import json

from ..options import FusionOptions
from .plan import describe, node_lines, nothing_claimed_note, partition_lines
from .runner import build, load_model

HELP = "list every node, claimed or not and why, and the fused partitions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("--source", action="store_true",
                        help="also print each partition's generated kernel source")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    loaded = load_model(args.model)
    runner = build(loaded.data, fuse=options, resolver="builtin")  # claims do not depend on it
    plan = describe(loaded.model, runner.delegate)
    if args.json:
        data = {"model": loaded.path, **plan.to_json(source=args.source)}
        print(json.dumps(data, indent=2))
        return 0
    graph = loaded.graph
    print(f"{loaded.name}: {len(graph.operators)} nodes, {len(graph.tensors)} tensors, "
          f"inputs: {len(graph.inputs)}, outputs: {len(graph.outputs)}")
    print()
    print("\n".join(node_lines(plan)))
    print()
    if plan.partitions:
        print("\n".join(partition_lines(plan)))
        print()
    print(plan.summary)
    if not plan.delegated:
        print(nothing_claimed_note(plan))
    if args.source:
        for partition in plan.partitions:
            print()
            print(f"# ---- partition {partition.index}: {partition.source_path}")
            print((partition.source or "").rstrip())
    return 0
