"""Real models, one command: `python perf/models.py [--models GLOB] [--threads 1 2] [--rounds N]`.

Times every model of the corpus (tests/models/, built by `bash tests/models/build_corpus.sh`)
under LiteRT's default path (XNNPACK, `OpResolverType.AUTO`) and under the same plus
`FusionDelegate()` with its default options, in interleaved rounds (perf/timing.py), median per
invoke, at each thread count. Then, per partition: every partition the delegate claims with
`min_speedup=0`, the cost model's predicted speedup (what the default options decide on, from
`delegate.predictions`) against the measured gain of claiming it, timed in its neighbourhood: a
model of the partition's nodes, the nodes making their inputs and those reading their outputs
(`fusion_delegate.model.extract`), without the delegate / with only that partition claimed.
When openvino is installed, the same .tflite compiled by OpenVINO (perf/peers.py) is timed in
the same rounds, on the same thread count, its outputs set against LiteRT default's.

Writes a fixed-width table to stdout and perf/MODELS.md (`--out`), with the machine.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python perf/models.py` from anywhere

import numpy as np  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import Subgraph, boundary, extract, read_model, write_model  # noqa: E402
from fusion_delegate.options import FusionOptions  # noqa: E402
from fusion_delegate.policy import MIN_SAVING_US, THREADED_MIN_SPEEDUP, ClaimPolicy  # noqa: E402
from fusion_delegate.tools.runner import outputs, random_inputs, set_inputs  # noqa: E402
from perf import peers  # noqa: E402
from perf.suite import cpu_info, fixed_width, markdown, relative_error, versions  # noqa: E402
from perf.timing import MIN_ROUNDS, Samples, interleaved  # noqa: E402

CORPUS = Path(os.environ.get("FUSION_CORPUS_DIR") or ROOT / "tests" / "models" / "corpus")
MIN_SPEEDUP = FusionOptions().min_speedup      # what the default options claim from
LITERT, LITERT_TWIN, DELEGATE = "litert_default", "litert_twin", "delegate_defaults"
NONE, TWIN = "none", "none_twin"
OPENVINO = peers.OPENVINO
#: LiteRT default in OpenVINO's own rounds (the delegate is not timed beside OpenVINO's threads).
LITERT_BESIDE_OPENVINO = "litert_beside_openvino"
#: Either decision on a partition saving less than this is a tie (a squeeze-excite's swish of
#: a few elements): a model invoke costs more than its variation here.
TIE_US = 0.1


@dataclass(frozen=True)
class Config:
    rounds: int                 # at most; the budget stops a case after MIN_ROUNDS
    batch_seconds: float        # a model invoke is longer: one invoke per batch
    model_seconds: float        # timing budget per model and thread count
    partition_seconds: float    # timing budget per partition, in its neighbourhood
    openvino: bool = False      # time OpenVINO beside LiteRT (perf/peers.py)


# ------------------------------------------------------------------------------ interpreters

def interpreter(data: bytes, threads: int, delegate: FusionDelegate | None = None) -> Interpreter:
    """LiteRT as users get it (XNNPACK takes what the delegate leaves), allocated."""
    it = Interpreter(model_content=data, num_threads=threads,
                     experimental_delegates=[delegate] if delegate is not None else [],
                     experimental_op_resolver_type=OpResolverType.AUTO)
    it.allocate_tensors()
    return it


def model_inputs(it: Interpreter, model: dict) -> list[np.ndarray]:
    """The test's inputs: fixed seed, the model's own float range (manifest `input_range`)."""
    rng = np.random.default_rng(0)
    return random_inputs(it, rng, tuple(model.get("input_range", (-1.0, 1.0))))


def claimed_nodes(delegate: FusionDelegate) -> int:
    return sum(c.reason is None for c in delegate.claims.values())


def openvino_peer(data: bytes, it: Interpreter, threads: int) -> tuple[peers.OpenVinoPeer, float]:
    """OpenVINO's peer of the model with the inputs set in `it` (LiteRT), and how far its
    outputs are from `it`'s: the largest max |openvino - litert| / max |litert| over the
    outputs. Raises peers.Unsupported with the reason it cannot run the model."""
    inputs = {d["name"]: it.get_tensor(d["index"]) for d in it.get_input_details()}
    peer = peers.openvino_peer(data, inputs, threads)
    it.invoke()
    names = [d["name"] for d in it.get_output_details()]
    return peer, max(relative_error(got, ref)
                     for got, ref in zip(peer.outputs(names), outputs(it)))


# ------------------------------------------------------------------------------------ models

@dataclass
class ModelResult:
    model: str
    variant: str
    threads: int
    nodes: int = 0                  # in the graph the delegate saw (its last_plan)
    claimed: int = 0
    partitions: int = 0
    times: dict[str, Samples] = field(default_factory=dict)   # seconds per invoke
    error: str | None = None
    openvino_rel_err: float | None = None   # vs LiteRT default, when OpenVINO ran it
    openvino_skipped: str = ""              # why OpenVINO was not timed ("" if it was or is off)

    @property
    def litert(self) -> float:
        """LiteRT default: the mean of two identical interpreters' medians."""
        return (self.times[LITERT].median + self.times[LITERT_TWIN].median) / 2

    @property
    def speedup(self) -> float:
        return self.litert / self.times[DELEGATE].median

    @property
    def openvino_speedup(self) -> float | None:
        """LiteRT default / OpenVINO (above 1: OpenVINO is faster), from their own rounds;
        None: not timed."""
        if OPENVINO not in self.times:
            return None
        return self.times[LITERT_BESIDE_OPENVINO].median / self.times[OPENVINO].median

    @property
    def twins(self) -> float:
        """How far apart the two LiteRT interpreters came, over their mean: what a model's
        time moves by with where its memory landed, the floor under any speedup read here."""
        return abs(self.times[LITERT].median - self.times[LITERT_TWIN].median) / self.litert


def time_model(model: dict, data: bytes, threads: int, config: Config) -> ModelResult:
    result = ModelResult(model["id"], model["variant"], threads)
    plain, twin = interpreter(data, threads), interpreter(data, threads)
    inputs = model_inputs(plain, model)
    delegate = FusionDelegate()
    try:
        fused = interpreter(data, threads, delegate)
    except Exception as error:  # noqa: BLE001 - reported in the table, the run goes on
        result.error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        return result
    result.nodes, result.claimed = len(delegate.last_plan), claimed_nodes(delegate)
    result.partitions = len(delegate.last_partitions)
    for it in (plain, twin, fused):
        set_inputs(it, inputs)
    methods = {LITERT: plain.invoke, LITERT_TWIN: twin.invoke, DELEGATE: fused.invoke}
    result.times = interleaved(methods, config.rounds, config.batch_seconds, config.model_seconds)
    if config.openvino:
        # Rounds of their own: in the delegate's rounds OpenVINO's threads slowed the
        # interpreter timed next to it at 2 threads (perf/README.md, "Another CPU").
        try:
            peer, result.openvino_rel_err = openvino_peer(data, plain, threads)
        except peers.Unsupported as reason:
            result.openvino_skipped = str(reason)
        else:
            result.times.update(interleaved({LITERT_BESIDE_OPENVINO: plain.invoke, OPENVINO: peer},
                                            config.rounds, config.batch_seconds,
                                            config.model_seconds))
    return result


# -------------------------------------------------------------------------------- partitions

@dataclass
class PartitionResult:
    model: str
    threads: int
    nodes: tuple[int, ...]
    ops: tuple[str, ...]
    predicted: float | None         # litert_us / fused_us from the cost model; None: unknown
    predicted_saving_us: float | None
    claimed: bool | None            # by the default options (ClaimPolicy.pays); None: unknown
    times: dict[str, Samples] = field(default_factory=dict)  # NONE, TWIN, "only" this partition
    note: str = ""
    context: int = 0                # nodes of its neighbourhood, where it is timed

    @property
    def baseline(self) -> float:
        """The model without the delegate: the mean of two identical interpreters' medians."""
        return (self.times[NONE].median + self.times[TWIN].median) / 2

    @property
    def gain(self) -> float | None:
        """Time with no partition claimed / time with only this one (> 1: it pays)."""
        return self.baseline / self.times["only"].median if self.times else None

    @property
    def saving_us(self) -> float | None:
        return (self.baseline - self.times["only"].median) * 1e6 if self.times else None

    @property
    def noise_us(self) -> float | None:
        """What the measurement cannot tell apart: the largest of half the interquartile range
        of the no-delegate rounds, the difference between the two no-delegate interpreters
        (they differ only in where their memory landed) and TIE_US."""
        if not self.times:
            return None
        none, twin = self.times[NONE], self.times[TWIN]
        return max(none.spread * none.median / 2, abs(none.median - twin.median),
                   TIE_US * 1e-6) * 1e6

    @property
    def right(self) -> bool | None:
        """The default options' decision agrees with the measurement."""
        if self.predicted is None or self.gain is None:
            return None
        return self.claimed == (self.gain > 1.0)


def neighbourhood(graph: Subgraph, nodes: tuple[int, ...]) -> list[int]:
    """The partition's nodes, the nodes that make their inputs and those that read their
    outputs: the ops whose cost claiming the partition changes (the cut of XNNPACK's
    partition around it included)."""
    maker = {t: i for i, op in enumerate(graph.operators) for t in op.outputs}
    around = set(nodes)
    for i in nodes:
        op = graph.operators[i]
        around |= {maker[t] for t in op.inputs if t in maker}
        around |= {j for j, other in enumerate(graph.operators)
                   if set(other.inputs) & set(op.outputs)}
    return sorted(around)


def time_partitions(model: dict, data: bytes, threads: int,
                    config: Config) -> list[PartitionResult]:
    """Each partition the delegate claims at min_speedup=0, timed in its neighbourhood (a
    model of its nodes and their neighbours): LiteRT default alone (two twins) against the same
    with only the partition claimed. In the whole model a partition's saving is 0.1-1% of the
    time, below what where the interpreter's memory landed moves it by (1-3%)."""
    everything = FusionDelegate(min_speedup=0.0)
    try:
        interpreter(data, threads, everything)
        judge = FusionDelegate()               # the default options: predictions for all
        interpreter(data, threads, judge)
    except Exception as error:  # noqa: BLE001 - the models table reports it
        print(f"  {model['id']}: partitions skipped: {type(error).__name__}", file=sys.stderr)
        return []
    graph = read_model(data).subgraphs[0]       # the interpreter's primary subgraph
    if len(graph.operators) != len(everything.last_plan):
        print(f"  {model['id']}: partitions skipped: the delegate's nodes are not those of the "
              f"primary subgraph", file=sys.stderr)
        return []
    values = activations(data, model)
    results = []
    for partition in everything.last_partitions:
        prediction = judge.predictions.get(partition.nodes)
        known = prediction is not None and math.isfinite(prediction.speedup)
        result = PartitionResult(
            model["id"], threads, partition.nodes,
            tuple(everything.claims[n].op for n in partition.nodes),
            prediction.speedup if known else None,
            prediction.saving_us if known else None,
            ClaimPolicy(MIN_SPEEDUP).pays(prediction) if known else None)
        results.append(result)
        try:
            time_in_neighbourhood(result, graph, values, threads, config)
        except Exception as error:  # noqa: BLE001 - reported in the table, the run goes on
            result.times, result.note = {}, f"{type(error).__name__}: {error}".splitlines()[0]
    return results


def activations(data: bytes, model: dict) -> Interpreter:
    """The model run once on the test's inputs by the builtin kernels, every tensor kept: a
    neighbourhood's inputs are the values the model computes there (a swish of conv outputs,
    not of the model's 0-255 pixels)."""
    it = Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    set_inputs(it, model_inputs(it, model))
    it.invoke()
    return it


def time_in_neighbourhood(result: PartitionResult, graph: Subgraph, values: Interpreter,
                          threads: int, config: Config) -> None:
    around = neighbourhood(graph, result.nodes)
    data = write_model(extract(graph, around))
    mine = [around.index(n) for n in result.nodes]
    others = ",".join(str(k) for k in range(len(around)) if k not in mine)
    delegate = FusionDelegate(min_speedup=0.0, exclude_nodes=others)
    plain, twin = interpreter(data, threads), interpreter(data, threads)
    fused = interpreter(data, threads, delegate)
    result.context = len(around)
    if [p.nodes for p in delegate.last_partitions] != [tuple(mine)]:
        result.note = (f"in its neighbourhood it became "
                       f"{[p.nodes for p in delegate.last_partitions]}")
    inputs = [values.get_tensor(t) for t in boundary(graph, around)[0]]
    for it in (plain, twin, fused):
        set_inputs(it, inputs)
    times = interleaved({NONE: plain.invoke, TWIN: twin.invoke, "only": fused.invoke},
                        config.rounds, config.batch_seconds, config.partition_seconds)
    result.times = {NONE: times[NONE], TWIN: times[TWIN], "only": times["only"]}


# ----------------------------------------------------------------------------------- report

def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


MODEL_COLUMNS = ("model", "variant", "claimed/nodes", "partitions", "litert_ms", "delegate_ms",
                 "speedup", "twins%", "iqr%")
OPENVINO_COLUMNS = MODEL_COLUMNS + ("openvino_ms", "ov_speedup", "ov_rel_err")


def model_columns(results: list[ModelResult]) -> tuple[str, ...]:
    """The models table's columns: OpenVINO's when it was tried on any model."""
    tried = any(OPENVINO in r.times or r.openvino_skipped for r in results)
    return OPENVINO_COLUMNS if tried else MODEL_COLUMNS


def openvino_cells(r: ModelResult) -> tuple[str, str, str]:
    """openvino_ms, ov_speedup (LiteRT default / OpenVINO), ov_rel_err; or why it is absent."""
    if r.openvino_speedup is None:
        return "-", f"skipped: {r.openvino_skipped}" if r.openvino_skipped else "-", ""
    return (f"{r.times[OPENVINO].median * 1e3:.2f}", f"{r.openvino_speedup:.3f}x",
            f"{r.openvino_rel_err:.1e}")


def model_rows(results: list[ModelResult], with_openvino: bool = False) -> list[tuple]:
    """One row per model, then the geomeans (OpenVINO's over the models it ran)."""
    rows = []
    for r in results:
        if r.error:
            rows.append((r.model, r.variant, "-", "-", "-", "-", f"error: {r.error}", "", "")
                        + (openvino_cells(r) if with_openvino else ()))
            continue
        spread = max(r.times[LITERT].spread, r.times[DELEGATE].spread)
        rows.append((r.model, r.variant, f"{r.claimed}/{r.nodes}", r.partitions,
                     f"{r.litert * 1e3:.2f}", f"{r.times[DELEGATE].median * 1e3:.2f}",
                     f"{r.speedup:.3f}x", f"{100 * r.twins:.1f}", f"{100 * spread:.0f}")
                    + (openvino_cells(r) if with_openvino else ()))
    speedups = [r.speedup for r in results if not r.error]
    theirs = [r.openvino_speedup for r in results if r.openvino_speedup is not None]
    if speedups:
        rows.append(("geomean", f"{len(speedups)} models", "", "", "", "",
                     f"{geomean(speedups):.3f}x", "", "")
                    + ((f"{len(theirs)} models", f"{geomean(theirs):.3f}x" if theirs else "-",
                        "") if with_openvino else ()))
    return rows


PARTITION_COLUMNS = ("model", "nodes", "ops", "context", "predicted", "claimed_by_default",
                     "pred_save_us", "meas_save_us", "noise_us", "gain", "right", "note")


def partition_rows(results: list[PartitionResult]) -> list[tuple]:
    def number(value: float | None, form: str) -> str:
        return "n/a" if value is None else format(value, form)

    return [(r.model, ",".join(map(str, r.nodes)), " ".join(r.ops), r.context,
             number(r.predicted, ".2f"),
             {True: "yes", False: "no", None: "n/a"}[r.claimed],
             number(r.predicted_saving_us, ".1f"), number(r.saving_us, ".1f"),
             number(r.noise_us, ".1f"), number(r.gain, ".4f"),
             {True: "yes", False: "NO", None: "n/a"}[r.right], r.note)
            for r in results]


def decisions(results: list[PartitionResult]) -> str:
    """Right decisions where the measurement can tell (the saving exceeds the noise), then
    over every partition, where a tie within the noise counts on the side its median fell."""
    judged = [r for r in results if r.right is not None]
    if not judged:
        return "no partition could be judged"
    clear = [r for r in judged if abs(r.saving_us) > r.noise_us]

    def share(chosen: list[PartitionResult]) -> str:
        right = sum(r.right for r in chosen)
        return f"{right} of {len(chosen)} ({100 * right / len(chosen):.0f}%)" if chosen else "none"

    return (f"right decisions where the measured saving exceeds the noise: {share(clear)}; "
            f"{len(judged) - len(clear)} partitions within the noise (either decision costs "
            f"less than the measurement can see); over all partitions: {share(judged)}")


def header(meta: dict) -> list[str]:
    c, r = meta["machine"], meta["config"]
    return [
        f"- date: {meta['date']}",
        f"- CPU: {c['cpu']} (family/model {c['family/model']}, LLVM {c['llvm_cpu']}); "
        f"avx2 {c['avx2']}, avx512f {c['avx512f']}; {c['cores']} cores; "
        f"threads: {', '.join(map(str, meta['threads']))}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- corpus: {meta['corpus']} ({meta['models']} models matching `{meta['glob']}`; "
        f"per-partition section: `{meta['partition_glob']}`)",
        f"- repetitions: interleaved rounds, one invoke (or ~{r['batch_seconds'] * 1e3:g} ms) per "
        f"method per round, up to {r['rounds']} rounds (at least {min(MIN_ROUNDS, r['rounds'])}"
        f"; ~{r['model_seconds']:g} s budget per model, ~{r['partition_seconds']:g} s per "
        f"partition), median per invoke",
        f"- the machine is shared and noisy (1-minute load average {meta['load'][0]:.1f} at the "
        f"start, {meta['load'][1]:.1f} at the end, on {c['cores']} cores): compare ratios from "
        f"the same run, not absolute times; `iqr%` is the larger interquartile range / median "
        f"of the two",
        f"- run time: {meta['seconds']:.0f} s",
    ]


LEGEND = f"""\
`claimed/nodes` and `partitions` are the delegate's with its default options (`min_speedup`
{MIN_SPEEDUP:g}), in the model's main graph (the subgraph with the most nodes); `litert_ms` is
LiteRT default (XNNPACK) alone, the mean of two identical interpreters timed in the same rounds,
`delegate_ms` the same with `FusionDelegate()`; `speedup` = litert_ms / delegate_ms (above 1: the
delegate is faster); `twins%`: how far apart the two LiteRT interpreters came, over their mean.
Interpreters of one model differ only in where their memory landed, and that alone moves its
time by this much: a speedup closer to 1 than `twins%` (a model where nothing is claimed, above
all) is not a measured difference."""

OPENVINO_LEGEND = """\
`openvino_ms` is the same .tflite read and compiled by OpenVINO's CPU plugin (perf/peers.py:
`INFERENCE_PRECISION_HINT` f32, `INFERENCE_NUM_THREADS` the thread count of the table, its
other settings its defaults), inputs set once, `infer()` per call, timed in rounds of its own
beside the first LiteRT interpreter (OpenVINO's threads slowed whichever interpreter ran next to
them); `ov_speedup` = LiteRT's time in those rounds / openvino_ms (above 1: OpenVINO is faster
than LiteRT default; the delegate's own `speedup` sets it against the delegate); `ov_rel_err`:
the largest max |openvino - litert| / max |litert| over the model's outputs, on the same inputs.
`skipped`: what OpenVINO said when it could not read, compile or run the model."""

PARTITION_LEGEND = f"""\
Every partition the delegate claims with `min_speedup=0`, timed in its neighbourhood: a model
of its nodes, the nodes that make their inputs and those that read their outputs (`context`
nodes in all), run by LiteRT default alone and with the delegate claiming only the partition
(the other nodes passed in `exclude_nodes`). Timed in the whole model, a partition's saving
(0.1-1% of the model's time) is below what where the interpreter's memory landed moves it by
(1-3%). `predicted`: the cost
model's litert_us / fused_us for it (`delegate.predictions` of the default options; n/a where
the cost model is unavailable); `claimed_by_default`: predicted >= 1 + ({MIN_SPEEDUP:g} - 1) x
threads (at more than one thread, between ops XNNPACK's threads run, >= {THREADED_MIN_SPEEDUP:g})
and `pred_save_us` >= {MIN_SAVING_US:g} (`ClaimPolicy.pays`);
`pred_save_us`: litert_us - fused_us; `meas_save_us`: the neighbourhood's median time without
the delegate (the mean of two identical interpreters timed in the same rounds) minus with the
partition claimed; `noise_us`: the largest of half the interquartile range of the no-delegate
rounds, the difference between the two no-delegate interpreters (they differ only in where
their memory landed) and {TIE_US:g} us (below it either decision is a tie); `gain`: time
without / time with the partition; `right`: claimed_by_default == (gain > 1),
counted where the saving exceeds the noise."""


def write_report(path: Path, meta: dict, models: list[ModelResult],
                 partitions: list[PartitionResult]) -> None:
    parts = ["# fusion-delegate on real models", "\n".join(header(meta))]
    columns = model_columns(models)
    for threads in meta["threads"]:
        chosen = [m for m in models if m.threads == threads]
        parts += [f"## {threads} thread{'s' if threads > 1 else ''}",
                  markdown(columns, model_rows(chosen, columns == OPENVINO_COLUMNS))]
    parts.append(LEGEND + ("\n\n" + OPENVINO_LEGEND if columns == OPENVINO_COLUMNS else ""))
    if partitions:
        parts.append("## Per partition: predicted vs measured")
        for threads in meta["threads"]:
            chosen = [p for p in partitions if p.threads == threads]
            parts += [f"### {threads} thread{'s' if threads > 1 else ''}",
                      markdown(PARTITION_COLUMNS, partition_rows(chosen)), decisions(chosen)]
        parts.append(PARTITION_LEGEND)
    path.write_text("\n\n".join(parts) + "\n")


# ------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["*"], metavar="GLOB",
                        help="model ids to time (globs, default all)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=41, help="rounds at most (default 41)")
    parser.add_argument("--partitions", nargs="*", default=["*"], metavar="GLOB",
                        help="models (among --models) for the per-partition section, default "
                             "all; `--partitions` alone skips it")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--out", type=Path, default=ROOT / "perf" / "MODELS.md")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--no-openvino", action="store_true",
                        help="leave out OpenVINO even when it is installed")
    return parser.parse_args(argv)


def matches(model_id: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatch(model_id, g) for g in globs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    manifest = args.corpus / "manifest.json"
    if not manifest.is_file():
        raise SystemExit(f"no corpus at {args.corpus}: build it with "
                         f"`bash tests/models/build_corpus.sh` (or pass --corpus)")
    models = [m for m in json.loads(manifest.read_text())["models"]
              if matches(m["id"], args.models)]
    if not models:
        raise SystemExit(f"no model id matches {args.models!r}")
    config = Config(rounds=args.rounds, batch_seconds=0.002, model_seconds=6.0,
                    partition_seconds=0.6,
                    openvino=not args.no_openvino and peers.installed(OPENVINO) is not None)
    started, load = time.perf_counter(), os.getloadavg()[0]
    model_results: list[ModelResult] = []
    partition_results: list[PartitionResult] = []
    for model in models:
        data = (args.corpus / model["file"]).read_bytes()
        for threads in args.threads:
            result = time_model(model, data, threads, config)
            model_results.append(result)
            done = result.error or (f"{result.speedup:.3f}x" + (
                f", openvino {openvino_cells(result)[1]}" if config.openvino else ""))
            print(f"  {model['id']} t{threads}: {done} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
            if matches(model["id"], args.partitions):
                partition_results += time_partitions(model, data, threads, config)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": cpu_info(), "versions": versions(), "threads": args.threads,
            "corpus": str(args.corpus.relative_to(ROOT) if args.corpus.is_relative_to(ROOT)
                          else args.corpus),
            "models": len(models), "glob": " ".join(args.models),
            "partition_glob": " ".join(args.partitions) or "none",
            "config": asdict(config), "load": (load, os.getloadavg()[0]),
            "seconds": time.perf_counter() - started}
    print("\n".join(header(meta)))
    columns = model_columns(model_results)
    for threads in args.threads:
        print(f"\n{threads} thread(s):")
        print(fixed_width(columns, model_rows([m for m in model_results if m.threads == threads],
                                              columns == OPENVINO_COLUMNS)))
        chosen = [p for p in partition_results if p.threads == threads]
        if chosen:
            print(fixed_width(PARTITION_COLUMNS, partition_rows(chosen)))
            print(decisions(chosen))
    write_report(args.out, meta, model_results, partition_results)
    if args.json:
        def samples(times: dict[str, Samples]) -> dict:
            return {k: {"median": s.median, "spread": s.spread, "rounds": len(s.values)}
                    for k, s in times.items()}
        args.json.write_text(json.dumps({
            **meta,
            "model_results": [{**asdict(r), "times": samples(r.times)} for r in model_results],
            "partitions": [{**asdict(p), "times": samples(p.times), "gain": p.gain,
                            "right": p.right} for p in partition_results]}, indent=1) + "\n")
    print(f"\nwrote {args.out} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
