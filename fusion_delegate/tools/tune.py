"""`tune MODEL`: measure which partitions pay on this machine, whole model in the loop, and store
the claims where the delegate finds them.

The cost model was fitted on one CPU. `tune` starts from its claims and takes each region the
kernels can build (a partition of the model with everything buildable claimed) in turn: it
tries claiming all of the region and none of it, and keeps a change only where the whole
model ran faster in two interleaved timings. Last, LiteRT alone is tried against the result, so
stored claims never measured slower than LiteRT's own path. The claims are stored per graph,
CPU target and thread count in `cache_dir` (fusion_delegate.tuning); `inspect` marks them.
"""
from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..fusion import kernel_cache
from ..options import FusionOptions
from ..tuning import Decision, DecisionStore
from .runner import (LoadedModel, Progress, Runner, build, interleaved_times, load_model,
                     random_inputs, set_inputs)
from .text import node_ranges, table

HELP = "measure which partitions pay on this machine and store the claims the delegate uses"
#: Interleaved runs of each interpreter in one timing, at least (more within --seconds).
MIN_RUNS = 7
WARMUP_RUNS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="interpreter thread counts to tune for (default 1)")
    parser.add_argument("--seconds", type=float, default=0.4,
                        help="time budget of one comparison (default 0.4)")
    parser.add_argument("--margin", type=float, default=0.01,
                        help="a change is kept if the model ran this much faster, twice "
                             "(default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="random input seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


@dataclass
class Change:
    """One region whose claims tune changed, and the whole model's speedup from it."""
    nodes: tuple[int, ...]
    claimed: bool            # True: now claimed whole; False: left to LiteRT whole
    speedup: float


@dataclass
class Tuned:
    model: str
    threads: int
    regions: int
    changes: list[Change]
    decision: Decision
    stored: str


class Tuner:
    """The comparisons of one model at one thread count, all fed the same inputs."""

    def __init__(self, loaded: LoadedModel, options: FusionOptions, threads: int,
                 args: argparse.Namespace, progress: Progress) -> None:
        self.loaded, self.options, self.threads = loaded, options, threads
        self.seconds, self.margin, self.progress = args.seconds, args.margin, progress
        self.litert = build(loaded.data, num_threads=threads)
        self.inputs = random_inputs(self.litert.interpreter, np.random.default_rng(args.seed))
        self._ready(self.litert)

    def _ready(self, runner: Runner) -> Runner:
        set_inputs(runner.interpreter, self.inputs)
        for _ in range(WARMUP_RUNS):
            runner.interpreter.invoke()
        return runner

    def delegated(self, options: FusionOptions) -> Runner:
        return self._ready(build(self.loaded.data, fuse=replace(options, use_tuned=0),
                                 num_threads=self.threads))

    def claiming(self, nodes: frozenset[int], buildable: frozenset[int]) -> Runner:
        """The delegate claiming exactly `nodes` of the buildable ones (the user's
        exclude_nodes stay excluded)."""
        excluded = self.options.excluded_nodes | (buildable - nodes)
        return self.delegated(replace(self.options, min_speedup=0,
                                      exclude_nodes=",".join(map(str, sorted(excluded)))))

    def medians_us(self, runners: list[Runner], seconds: float) -> list[float]:
        times = interleaved_times([r.interpreter for r in runners], MIN_RUNS, min_secs=seconds)
        return [float(np.median(t)) * 1e6 for t in times]

    def speedup(self, challenger: Runner, incumbent: Runner) -> float | None:
        """How much faster the challenger ran the model, if it did by the margin twice."""
        ratios = []
        for _ in range(2):
            incumbent_us, challenger_us = self.medians_us([incumbent, challenger], self.seconds)
            ratios.append(incumbent_us / challenger_us)
            if ratios[-1] < 1 + self.margin:
                return None
        return min(ratios)

    def tune(self) -> Tuned:
        default = self.delegated(self.options)
        key = default.delegate.main_graph.tuning_key
        everything = self.delegated(replace(self.options, min_speedup=0))
        buildable = everything.delegate.delegated_nodes
        regions = sorted((frozenset(p.nodes) for p in everything.delegate.last_partitions),
                         key=len, reverse=True)
        incumbent, nodes, changes = default, default.delegate.delegated_nodes, []
        for number, region in enumerate(regions, 1):
            self.progress.note(f"{self.threads} thread(s): region {number}/{len(regions)} "
                               f"(nodes {node_ranges(sorted(region))})")
            for whole in (False, True):
                trial = (nodes | region) if whole else (nodes - region)
                if trial == nodes:
                    continue
                challenger = self.claiming(trial, buildable)
                gain = self.speedup(challenger, incumbent)
                if gain is not None:
                    incumbent, nodes = challenger, challenger.delegate.delegated_nodes
                    changes.append(Change(tuple(sorted(region)), whole, gain))
        if changes and self.speedup(incumbent, default) is None:
            self.progress.note(f"{self.threads} thread(s): the changes together were not "
                               f"faster than the cost model's claims; keeping those")
            incumbent, nodes, changes = default, default.delegate.delegated_nodes, []
        gain = self.speedup(self.litert, incumbent) if nodes else None
        if gain is not None:
            changes.append(Change(tuple(sorted(nodes)), False, gain))
            incumbent, nodes = self.litert, frozenset()
        self.progress.note(f"{self.threads} thread(s): timing LiteRT, the cost model's claims "
                           f"and the tuned ones")
        runners = list({id(r): r for r in (self.litert, default, incumbent)}.values())
        medians = dict(zip(map(id, runners), self.medians_us(runners, 3 * self.seconds)))
        litert_us, default_us, tuned_us = (medians[id(r)]
                                           for r in (self.litert, default, incumbent))
        decision = Decision(nodes, datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), litert_us, default_us, tuned_us)
        stored = default.delegate.decisions.save(key, decision)
        return Tuned(self.loaded.path, self.threads, len(regions), changes, decision,
                     str(stored))


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if any(t < 1 for t in args.threads) or args.seconds <= 0 or args.margin < 0:
        raise ValueError("--threads must be >= 1, --seconds > 0 and --margin >= 0")
    if options.min_speedup <= 0:
        raise ValueError("min_speedup=0 claims everything buildable: there is nothing to tune")
    if options.cache_dir == "":
        raise ValueError("tune stores its claims in cache_dir, which is off (\"\")")
    DecisionStore(kernel_cache(options.cache_dir).directory).create()
    loaded = load_model(args.model)
    progress = Progress("tune")
    results = []
    for threads in args.threads:
        progress.note(f"{loaded.name}, {threads} thread(s): building interpreters "
                      f"(compiling every kernel the model could use)")
        results.append(Tuner(loaded, options, threads, args, progress).tune())
    if args.json:
        print(json.dumps([{**asdict(r), "decision": {**asdict(r.decision),
                                                     "claimed": sorted(r.decision.claimed)}}
                          for r in results], indent=2))
        return 0
    print("\n".join(table(
        ["model", "threads", "regions", "changes", "default", "tuned", "claimed nodes"],
        [[r.model, r.threads, r.regions, len(r.changes),
          f"{r.decision.litert_us / r.decision.default_us:.3f}x",
          f"{r.decision.speedup:.3f}x", len(r.decision.claimed)] for r in results])))
    for r in results:
        for change in r.changes:
            verb = "claimed" if change.claimed else "left to LiteRT"
            print(f"{r.threads} thread(s): nodes {node_ranges(change.nodes)} {verb} "
                  f"({change.speedup:.3f}x faster)")
        print(f"stored in {r.stored}")
    print("speedups are whole-model, against LiteRT's default path in the same run")
    return 0
