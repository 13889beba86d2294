"""`diff MODEL`: inference_diff between a LiteRT reference and the same model with the fusion
delegate, on fresh random inputs every run (or the inputs of an .npz, such as the failing
input `check` saves), with max-abs, relative and ulp errors added."""
from __future__ import annotations

import argparse
import json

import numpy as np

from ..options import FusionOptions
from ..tolerances import distance
from .inputs_file import load_inputs
from .plan import describe, nothing_claimed_note
from .runner import (RESOLVER_LABELS, Progress, build, load_model, outputs, random_inputs,
                     set_inputs, summarize, time_invoke)
from .text import shape

HELP = "compare outputs with and without the delegate, like inference_diff"


def parse_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI, got '{text}'") from None
    if not low < high:
        raise argparse.ArgumentTypeError(f"LO must be below HI, got '{text}'")
    return low, high


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=".tflite file")
    parser.add_argument("--num_runs", type=int, default=50, help="runs, new inputs each (50)")
    parser.add_argument("--reference", choices=tuple(RESOLVER_LABELS), default="builtin",
                        help="kernels of the reference, also used for the nodes the delegate "
                             "leaves alone (default builtin: no XNNPACK)")
    parser.add_argument("--input_range", type=parse_range, default=(-1.0, 1.0), metavar="LO,HI",
                        help="range of float inputs (default -1,1; write --input_range=-2,2)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest acceptable absolute error (default 1e-4)")
    parser.add_argument("--seed", type=int, default=0, help="random input seed (default 0)")
    parser.add_argument("--inputs", metavar="NPZ",
                        help="run these inputs instead of random ones, once each: arrays named "
                             "after the model's inputs (what `check --save-failing` writes)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


class OutputErrors:
    """Accumulates one output's errors over runs (inference_diff's per-run mean error)."""

    def __init__(self, detail: dict) -> None:
        self.name, self.shape = detail["name"], tuple(int(d) for d in detail["shape"])
        self.dtype = np.dtype(detail["dtype"])
        self.run_means: list[float] = []
        self.max_abs = self.max_rel = self.max_ulp = 0.0
        self.top1_agree = self.top1_total = 0

    @property
    def looks_like_scores(self) -> bool:
        return 1 <= len(self.shape) <= 2 and self.shape[-1] > 1

    def add(self, reference: np.ndarray, test: np.ndarray) -> None:
        ref, out = reference.astype(np.float64), test.astype(np.float64)
        same = (ref == out) | (np.isnan(ref) & np.isnan(out))  # equal infinities, NaN == NaN
        with np.errstate(invalid="ignore"):
            error = np.where(same, 0.0, np.abs(out - ref))
        error[np.isnan(error)] = np.inf  # NaN on one side only, or opposite infinities
        self.run_means.append(float(error.mean()) if error.size else 0.0)
        if not error.size:
            return
        self.max_abs = max(self.max_abs, float(error.max()))
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(error == 0, 0.0, error / np.abs(ref))
        self.max_rel = max(self.max_rel, float(np.nan_to_num(relative, nan=np.inf).max()))
        # -0.0 against 0.0 is 1 ulp here (a kernel that loses a zero's sign shows), 0 absolute.
        self.max_ulp = max(self.max_ulp, float(distance(test, reference).max()))
        if self.looks_like_scores:
            rows = (-1, self.shape[-1])
            agree = reference.reshape(rows).argmax(-1) == test.reshape(rows).argmax(-1)
            self.top1_agree += int(agree.sum())
            self.top1_total += int(agree.size)

    def to_json(self, index: int) -> dict:
        means = np.array(self.run_means)
        data = {"index": index, "name": self.name, "shape": list(self.shape),
                "dtype": self.dtype.name, "avg_error": float(means.mean()),
                "std_dev": float(means.std()) if np.isfinite(means).all() else np.inf,
                "max_abs_error": self.max_abs, "max_rel_error": self.max_rel,
                "max_ulp": self.max_ulp}
        if self.looks_like_scores:
            data["top1_agreement"] = [self.top1_agree, self.top1_total]
        return data


def run(args: argparse.Namespace, options: FusionOptions) -> int:
    if args.num_runs < 1 and not args.inputs:
        raise ValueError("--num_runs must be >= 1")
    loaded = load_model(args.model)
    progress = Progress("diff")
    progress.note(f"building interpreters for {loaded.name} (compiling kernels)")
    reference = build(loaded.data, resolver=args.reference)
    test = build(loaded.data, fuse=options, resolver=args.reference)
    plan = describe(loaded.model, test.delegate)
    errors = [OutputErrors(d) for d in reference.interpreter.get_output_details()]
    rng = np.random.default_rng(args.seed)
    given = load_inputs(args.inputs, reference.interpreter) if args.inputs else None
    if given is not None:
        args.num_runs = len(given)
    latency: dict[str, list[float]] = {"reference": [], "test": []}
    for done in range(1, args.num_runs + 1):
        inputs = given[done - 1] if given is not None else \
            random_inputs(reference.interpreter, rng, args.input_range)
        results = {}
        for key, runner in (("reference", reference), ("test", test)):
            set_inputs(runner.interpreter, inputs)
            latency[key].append(time_invoke(runner.interpreter))
            results[key] = outputs(runner.interpreter)
        for output, ref, out in zip(errors, results["reference"], results["test"]):
            output.add(ref, out)
        progress.tick(f"{done}/{args.num_runs} runs")
    worst = max((e.max_abs for e in errors), default=0.0)
    data = {"model": loaded.path, "num_runs": args.num_runs, "reference": args.reference,
            "input_range": list(args.input_range), "inputs": args.inputs,
            "summary": plan.summary,
            "precision": options.precision,
            "note": None if plan.delegated else nothing_claimed_note(plan),
            "latency_us": {k: summarize(v) for k, v in latency.items()},
            "outputs": [e.to_json(i) for i, e in enumerate(errors)],
            "max_abs_error": worst, "tolerance": args.tolerance,
            "passed": bool(worst <= args.tolerance)}
    print(json.dumps(data, indent=2) if args.json else "\n".join(report_lines(data)))
    return 0 if data["passed"] else 1


def report_lines(data: dict) -> list[str]:
    low, high = data["input_range"]
    source = f"inputs from {data['inputs']}" if data["inputs"] else \
        f"float inputs in [{low:g}, {high:g})"
    lines = [f"model: {data['model']}   runs: {data['num_runs']}   {source}",
             f"reference: {RESOLVER_LABELS[data['reference']]}, 1 thread",
             f"test:      fusion_delegate (precision={data['precision']}), the same kernels "
             f"for the other nodes: {data['summary']}"]
    if data["note"]:
        lines.append(data["note"])
    for key, label in (("reference", "Reference"), ("test", "Test")):
        stats = data["latency_us"][key]
        lines.append(f"{label} run latency: avg={stats['avg']:.0f}(us), "
                     f"std_dev={stats['std']:.0f}(us)")
    for out in data["outputs"]:
        lines.append(f"OutputDiff[{out['index']}]: avg_error={out['avg_error']:.6g}, "
                     f"std_dev={out['std_dev']:.6g}, max_abs_error={out['max_abs_error']:.6g}, "
                     f"max_rel_error={out['max_rel_error']:.6g}, max_ulp={out['max_ulp']:.6g}"
                     f"  ({out['name']} {out['dtype']}{shape(out['shape'])})")
        if "top1_agreement" in out:
            agree, total = out["top1_agreement"]
            lines.append(f"  top-1 agreement: {agree}/{total} ({100 * agree / total:.1f}%)")
    verdict = "pass" if data["passed"] else "FAIL"
    relation = "<=" if data["passed"] else ">"
    lines.append(f"max abs error {data['max_abs_error']:.6g} {relation} tolerance "
                 f"{data['tolerance']:g}: {verdict}")
    return lines
