"""`check MODEL`: search for inputs on which the delegate and LiteRT differ beyond the
documented tolerances, with hypothesis (fusion_delegate.testing's strategies, `target()` on the
error in ulps or LSBs, shrinking), within a budget. Inputs you give (`--inputs data.npz`) are
tried first and seed the search; then fixed probes (edge values filling the inputs, and at the
same elements of every partition's operands). Prints a verdict per output and per delegated
partition (fed LiteRT's values at its inputs); on a mismatch, names the partition responsible
and saves the failing input, which `fusion-delegate diff MODEL --inputs PATH` replays.

Exit status: 0 equivalent within the budget, 1 a mismatch, 2 a model or inputs that cannot be
checked (the reference cannot run it, dynamic shapes, string or bool inputs, an .npz whose
arrays do not fit the model's inputs).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ..comparison import Checker, Comparison, NotCheckable, TensorVerdict
from ..errors import FusionDelegateError
from ..options import FusionOptions
from .inputs_file import load_inputs, save_inputs
from .plan import describe
from .runner import RESOLVER_LABELS, Progress, load_model

HELP = "search for inputs where the delegate and LiteRT differ beyond tolerance"
EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT = 0, 1, 2
#: target() needs a finite number; a NaN against a number is this many ulps.
MAX_TARGET = 1e12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("--reference", choices=("builtin", "xnnpack"), default="builtin",
                        help="LiteRT kernels to compare with (default builtin: no XNNPACK)")
    parser.add_argument("--max-examples", type=int, default=500,
                        help="inputs hypothesis generates at most (default 500)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="time budget of the search, shrinking included; the example under "
                             "way when it runs out still finishes (default 60)")
    parser.add_argument("--inputs", metavar="NPZ",
                        help="real inputs to try first and seed the search with: arrays named "
                             "after the model's inputs (or arr_0, arr_1, ...), optionally with "
                             "a leading batch of examples")
    parser.add_argument("--save-failing", metavar="PATH", default="check_failing.npz",
                        help="where to save a failing input (default check_failing.npz)")


class Search:
    """What the search found: the worst verdict per tensor, the last (smallest) failure."""

    def __init__(self, seconds: float, progress: Progress) -> None:
        self.deadline = time.perf_counter() + seconds
        self.progress = progress
        self.examples = 0
        self.worst: dict[str, TensorVerdict] = {}
        self.failing: Comparison | None = None

    @property
    def over(self) -> bool:
        return time.perf_counter() > self.deadline

    def record(self, comparison: Comparison) -> None:
        self.examples += 1
        for verdict in comparison.verdicts:
            old = self.worst.get(verdict.where)
            if old is None or (not verdict.ok, verdict.units) > (not old.ok, old.units):
                self.worst[verdict.where] = verdict
        if not comparison.ok:
            self.failing = comparison
        self.progress.tick(f"{self.examples} examples, worst "
                           f"{max(v.units for v in self.worst.values()) if self.worst else 0:g}"
                           f" ulp/LSB{', MISMATCH' if self.failing else ''}")


class Found(Exception):
    """Raised inside the search on a mismatch, so that hypothesis shrinks it."""


class OutOfBudget(BaseException):
    """Raised inside the search once the time is spent. Not an Exception: hypothesis lets it
    through at once (as it does KeyboardInterrupt) instead of shrinking it as a failure."""


def search(checker: Checker, model: bytes, seeds: list[list[np.ndarray]], state: Search,
           max_examples: int) -> None:
    """Given inputs first, then the edge probes, then hypothesis until a mismatch is shrunk or
    the budget is spent."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
    from hypothesis.errors import HypothesisException

    from ..testing import edge_probes, input_specs, partition_edits, plain, tensor_inputs
    base = seeds[0] if seeds else [plain(spec, np.random.default_rng(0)).reshape(spec.shape)
                                   for spec in input_specs(checker.model)]
    for inputs in seeds:                       # every given input, whatever the budget
        state.record(checker.compare(inputs))
        if state.failing:
            return
    for inputs, edits in edge_probes(checker, base):
        if state.over:
            return
        state.record(checker.compare(inputs, edits))
        if state.failing:
            return

    @settings(max_examples=max_examples, deadline=None, database=None,
              phases=[Phase.generate, Phase.target, Phase.shrink], verbosity=Verbosity.quiet,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(inputs=tensor_inputs(model, seeds), edits=partition_edits(checker))
    def example(inputs, edits):
        if state.over:
            raise OutOfBudget
        comparison = checker.compare(inputs, edits)
        state.record(comparison)
        target(float(min(comparison.worst_units, MAX_TARGET)), label="error in ulps or LSBs")
        if not comparison.ok:
            raise Found

    try:
        example()
    except OutOfBudget:          # the last failure recorded is the smallest found
        pass
    except (Found, HypothesisException):   # the smallest failure replayed, or flaky
        pass


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.max_examples < 1 or args.seconds <= 0:
        raise NotCheckable("--max-examples and --seconds must be positive")
    try:
        from ..testing import input_specs, report
    except ImportError as error:
        raise FusionDelegateError(f"check needs hypothesis ({error}): pip install "
                                  f"'fusion-delegate[check]'") from error
    loaded = load_model(args.model)
    input_specs(loaded.model)
    progress = Progress("check")
    progress.note(f"building interpreters for {loaded.name} (compiling kernels)")
    checker = Checker(loaded.data, args.reference, options)
    seeds = load_inputs(args.inputs, checker.test.interpreter) if args.inputs else []
    plan = describe(loaded.model, checker.test.delegate)
    if not checker.delegated:
        print(f"model: {loaded.path}\ndelegated: {plan.summary}\n"
              "check: pass (nothing delegated: the outputs are LiteRT's own)")
        return EXIT_OK
    state = Search(args.seconds, progress)
    start = time.perf_counter()
    search(checker, loaded.data, seeds, state, args.max_examples)
    seconds = time.perf_counter() - start
    lines = [f"model: {loaded.path}   reference: {RESOLVER_LABELS[args.reference]}   "
             f"precision={options.precision}",
             f"delegated: {plan.summary}",
             f"searched {state.examples} inputs in {seconds:.1f} s"
             + (f" ({len(seeds)} given first)" if seeds else "")]
    for verdict in state.worst.values():
        lines += verdict.lines()
    if state.failing is None:
        lines.append("check: pass (no input found beyond tolerance)")
        print("\n".join(lines))
        return EXIT_OK
    failing = state.failing
    failing.blame = checker.blame(failing)
    lines += ["", *report(checker, failing)]
    if failing.blame is None:
        lines.append("no single partition is responsible: excluding any one alone does not "
                     "make the outputs match")
    save_inputs(args.save_failing, checker.test.interpreter, failing.inputs)
    lines.append(f"failing input saved to {args.save_failing}; replay it with: fusion-delegate "
                 f"diff {args.model} --inputs {args.save_failing}")
    if failing.blame is not None and failing.edits.get(failing.blame):
        p = checker.partition(failing.blame)
        stem = str(Path(args.save_failing).with_suffix(""))
        cut, fed = f"{stem}.partition{p.number}.tflite", f"{stem}.partition{p.number}.npz"
        Path(cut).write_bytes(p.model)
        save_inputs(fed, p.runner.interpreter, checker.partition_inputs(failing, p.number))
        lines.append(f"the partition alone and what it was fed: fusion-delegate diff {cut} "
                     f"--inputs {fed} --option min_speedup=0")
    lines.append("check: MISMATCH")
    print("\n".join(lines))
    return EXIT_MISMATCH
