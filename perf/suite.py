"""The performance suite, one command: `python perf/suite.py [--quick] [--sizes 16K 4M] [--out]`.

For each workload and size it times LiteRT's default (XNNPACK), LiteRT's builtin kernels
without XNNPACK and the fusion delegate in the same interleaved rounds, sets those times against
the memory-bandwidth lower bound (bytes the fused kernel must move / copy bandwidth measured in
this run), and records each partition's cold and warm init. It also times a tiny model for the
per-invoke overhead. Results go to a fixed-width table on stdout, a markdown report and JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python perf/suite.py` from anywhere

import numpy as np  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

import fusion_delegate  # noqa: E402
from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.worth import host_cpu_name  # noqa: E402
from perf import peers  # noqa: E402
from perf.timing import (MIN_ROUNDS, Samples, copy_bandwidth, interleaved,  # noqa: E402
                         last_level_cache_bytes)
from perf.workloads import (CHANNEL_COUNTS, CHANNEL_WORKLOADS, NORM_WORKLOADS, TINY,  # noqa: E402
                            WORKLOADS, Case, Workload)

DEFAULT, BUILTIN, DELEGATE, BOUND = "litert_default", "litert_builtin", "delegate", "bound"
# A second LiteRT default interpreter of the same model: two identical interpreters differ by
# where their memory landed (up to ~10% at 4M here), the floor under any ratio read here.
TWIN = "litert_twin"
# The delegate as a user gets it: its cost model leaves partitions it predicts to lose to LiteRT.
DELEGATE_DEFAULTS = "delegate_defaults"
METHODS = (DEFAULT, TWIN, BUILTIN, DELEGATE, DELEGATE_DEFAULTS)
# The peer: the same model as one jax.jit function (perf/peers.py), when jax is installed.
JAX = peers.JAX
TINY_ELEMENTS = 32
ALL_WORKLOADS = {**WORKLOADS, **CHANNEL_WORKLOADS, **NORM_WORKLOADS}


@dataclass(frozen=True)
class Config:
    """How long to measure: `--quick` trades precision for a run of well under a minute."""
    sizes: tuple[int, ...]
    rounds: int                     # at most; at least timing.MIN_ROUNDS
    batch_seconds: float
    case_seconds: float             # timing budget per case (stops before `rounds` if over)
    tiny_rounds: int
    tiny_batch_seconds: float
    copy_repeats: int
    threads: int
    jax: bool = False               # time jax.jit beside LiteRT (perf/peers.py)
    pinned_core: int | None = None  # the process runs on this core only (peers.configure)


FULL = dict(sizes=(16 << 10, 256 << 10, 4 << 20), rounds=301, batch_seconds=0.002,
            case_seconds=8.0, tiny_rounds=301, tiny_batch_seconds=0.002, copy_repeats=31)
QUICK = dict(sizes=(16 << 10, 256 << 10), rounds=15, batch_seconds=0.001, case_seconds=0.5,
             tiny_rounds=15, tiny_batch_seconds=0.001, copy_repeats=7)


# ------------------------------------------------------------------------------ interpreters

def delegate_options(cache_dir: str, threads: int) -> dict:
    """min_speedup=0: the suite measures the fused kernels even where the delegate's own
    estimate would leave a partition to LiteRT (DELEGATE_DEFAULTS shows that estimate's
    choice)."""
    return dict(cache_dir=cache_dir, num_threads=threads, min_speedup=0.0)


RESOLVERS = {DEFAULT: OpResolverType.AUTO,
             TWIN: OpResolverType.AUTO,
             BUILTIN: OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
             DELEGATE: OpResolverType.AUTO,   # XNNPACK takes whatever the delegate leaves
             DELEGATE_DEFAULTS: OpResolverType.AUTO}


def interpreter(model: bytes, method: str, threads: int,
                delegate: FusionDelegate | None = None) -> Interpreter:
    """An allocated interpreter for one method (`delegate` is used by the delegate methods)."""
    it = Interpreter(model_content=model, num_threads=threads,
                     experimental_delegates=[delegate] if delegate is not None else [],
                     experimental_op_resolver_type=RESOLVERS[method])
    it.allocate_tensors()
    return it


def set_inputs(it: Interpreter, inputs: dict[str, np.ndarray]) -> None:
    for detail in it.get_input_details():
        it.set_tensor(detail["index"], inputs[detail["name"]])


def output(it: Interpreter) -> np.ndarray:
    return it.get_tensor(it.get_output_details()[0]["index"])


# -------------------------------------------------------------------------------------- init

@dataclass(frozen=True)
class Init:
    """One interpreter's construction + allocate_tensors, and what each partition's kernel cost."""
    seconds: float
    kernels: tuple[tuple[int, str, str, float], ...]   # partition, kernel, cache_hit, seconds


def timed_delegate_init(model: bytes, cache_dir: str,
                        threads: int) -> tuple[Init, Interpreter, FusionDelegate]:
    delegate = FusionDelegate(**delegate_options(cache_dir, threads))
    start = time.perf_counter()
    it = interpreter(model, DELEGATE, threads, delegate)
    seconds = time.perf_counter() - start
    kernels = tuple((p, k.kernel.name, k.kernel.cache_hit, k.kernel.compile_seconds)
                    for p, k in sorted(delegate.kernels.items()))
    return Init(seconds, kernels), it, delegate


def disk_init(model: bytes, cache_dir: str, threads: int) -> Init:
    """Init in a fresh process that finds the kernels only in the on-disk cache."""
    with tempfile.NamedTemporaryFile(suffix=".tflite") as handle:
        handle.write(model)
        handle.flush()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        run = subprocess.run([sys.executable, __file__, "--probe-init", handle.name, cache_dir,
                              "--threads", str(threads)],
                             capture_output=True, text=True, env=env, check=True)
    data = json.loads(run.stdout.strip().splitlines()[-1])
    return Init(data["seconds"], tuple(tuple(k) for k in data["kernels"]))


def probe_init(model_path: str, cache_dir: str, threads: int) -> None:
    """The subprocess side of `disk_init`: print one JSON line."""
    init, _, _ = timed_delegate_init(Path(model_path).read_bytes(), cache_dir, threads)
    print(json.dumps(asdict(init)))


# ------------------------------------------------------------------------------------ cases

@dataclass(frozen=True)
class CaseResult:
    workload: str
    elements: int
    ops: int
    claimed: str                        # the delegate's summary()
    claimed_by_default: str             # the same with default options
    bytes_moved: int                    # from the partitions' IR
    max_rel_error: dict[str, float]     # vs litert_builtin, over max |builtin|
    jax_skipped: str                    # why jax was not timed ("" when it was, or is absent)
    times: dict[str, Samples]           # seconds per invoke, one sample per round
    init: dict[str, Init]               # litert_default, cold, memory, disk


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref.astype(np.float64)))) or 1.0   # int8: |-128| is 128
    return float(np.max(np.abs(got.astype(np.float64) - ref))) / scale


def run_case(case: Case, config: Config, cache_root: str) -> CaseResult:
    """Init (cold, memory-warm, disk-warm), check against builtin, then interleaved timing."""
    cache_dir = tempfile.mkdtemp(prefix=f"{case.workload}_{case.elements}_", dir=cache_root)
    start = time.perf_counter()
    its = {DEFAULT: interpreter(case.model, DEFAULT, config.threads)}
    default_init = Init(time.perf_counter() - start, ())
    its[TWIN] = interpreter(case.model, TWIN, config.threads)
    its[BUILTIN] = interpreter(case.model, BUILTIN, config.threads)
    cold = timed_delegate_init(case.model, cache_dir, config.threads)[0]
    memory, its[DELEGATE], delegate = timed_delegate_init(case.model, cache_dir, config.threads)
    disk = disk_init(case.model, cache_dir, config.threads)
    chooser = FusionDelegate(cache_dir=cache_dir, num_threads=config.threads)
    its[DELEGATE_DEFAULTS] = interpreter(case.model, DELEGATE_DEFAULTS, config.threads, chooser)
    if len(delegate.claims) != case.ops or any(c.reason for c in delegate.claims.values()):
        print(f"warning: {case.workload}: {delegate.summary()}", file=sys.stderr)
    for it in its.values():
        set_inputs(it, case.inputs)
        it.invoke()
    reference = output(its[BUILTIN]).astype(np.float64)
    errors = {m: relative_error(output(its[m]), reference) for m in METHODS if m != BUILTIN}
    methods = {m: its[m].invoke for m in METHODS}
    jax_skipped = ""
    if config.jax:
        try:
            peer = peers.jax_peer(case.model, case.inputs)
        except peers.Unsupported as reason:
            jax_skipped = str(reason)
        else:
            errors[JAX] = relative_error(peer.output(), reference)
            methods[JAX] = peer
    times = interleaved(methods, config.rounds, config.batch_seconds, config.case_seconds)
    return CaseResult(
        workload=case.workload, elements=case.elements, ops=case.ops, claimed=delegate.summary(),
        claimed_by_default=chooser.summary(),
        bytes_moved=sum(k.ir.bytes_moved() for k in delegate.kernels.values()),
        max_rel_error=errors, jax_skipped=jax_skipped, times=times,
        init={DEFAULT: default_init, "cold": cold, "memory": memory, "disk": disk})


def run_tiny(config: Config, cache_root: str) -> dict[str, Samples]:
    """Per-invoke time of a 2-op model on 32 elements: what invoking costs, not computing."""
    case = TINY.case(TINY_ELEMENTS)
    cache_dir = tempfile.mkdtemp(prefix="tiny_", dir=cache_root)
    delegate = FusionDelegate(**delegate_options(cache_dir, config.threads))
    its = {m: interpreter(case.model, m, config.threads, delegate if m == DELEGATE else None)
           for m in (DEFAULT, BUILTIN, DELEGATE)}
    for it in its.values():
        set_inputs(it, case.inputs)
    return interleaved({m: it.invoke for m, it in its.items()}, config.tiny_rounds,
                       config.tiny_batch_seconds)


# ---------------------------------------------------------------------------------- machine

def cpu_info() -> dict[str, str]:
    text = Path("/proc/cpuinfo").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name", platform.processor()),
            "family/model": f"{fields.get('cpu family', '?')}/{fields.get('model', '?')}",
            "llvm_cpu": host_cpu_name(),  # names this CPU's cost model fit
            "avx2": "yes" if "avx2" in flags else "no",
            "avx512f": "yes" if "avx512f" in flags else "no",
            "cores": str(os.cpu_count())}


def versions() -> dict[str, str]:
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return {"python": platform.python_version(), "numpy": np.__version__,
            "numba": version("numba"), "llvmlite": version("llvmlite"),
            "ai-edge-litert": version("ai-edge-litert"),
            "fusion_delegate": f"{fusion_delegate.__version__} ({commit or 'no git'})",
            **{peer: v for peer in (peers.JAX, peers.OPENVINO) if (v := peers.installed(peer))}}


# ----------------------------------------------------------------------------------- report

COLUMNS = ("case", "elems", "method", "us", "speedup", "GB/s", "%copy_bw", "iqr%")
JAX_COLUMNS = COLUMNS + ("vs_jax",)


def columns(results: list[CaseResult]) -> tuple[str, ...]:
    """The main table's columns: `vs_jax` when jax was timed in any case."""
    return JAX_COLUMNS if any(JAX in r.times for r in results) else COLUMNS


def litert_seconds(times: dict[str, Samples]) -> float:
    """LiteRT default: the mean of its two interpreters' medians (one, in older results)."""
    medians = [times[m].median for m in (DEFAULT, TWIN) if m in times]
    return sum(medians) / len(medians)


def rows(result: CaseResult, bandwidth: float, jax_column: bool = False) -> list[tuple]:
    """One row per method plus the bandwidth bound, ratios against LiteRT default (and, with
    `jax_column`, jax.jit's time / this method's: above 1x is faster than XLA)."""
    bound = result.bytes_moved / bandwidth
    seconds = {**{m: s.median for m, s in result.times.items()}, BOUND: bound}
    litert = litert_seconds(result.times)
    out = []
    for method, s in seconds.items():
        spread = f"{100 * result.times[method].spread:.0f}" if method in result.times else ""
        row = (result.workload, size_name(result.elements), method, f"{s * 1e6:.1f}",
               f"{litert / s:.2f}x", f"{result.bytes_moved / s / 1e9:.1f}",
               f"{100 * bound / s:.0f}", spread)
        if jax_column:
            row += (f"{seconds[JAX] / s:.2f}x" if JAX in seconds else "",)
        out.append(row)
    return out


def kernel_cell(kernel: tuple[int, str, str, float]) -> str:
    """A memory hit is the kernel object compiled earlier, compile_seconds and all, so only
    the hit is shown (the interpreter column has its time)."""
    _, _, hit, seconds = kernel
    return "hit (memory)" if hit == "memory" else f"{seconds * 1e3:.1f} ({hit or 'compiled'})"


def init_rows(result: CaseResult) -> list[tuple]:
    """One row per partition: kernel cold / memory / disk, then whole-interpreter init."""
    kernels = [result.init[kind].kernels for kind in ("cold", "memory", "disk")]
    totals = [f"{result.init[k].seconds * 1e3:.1f}" for k in ("cold", "memory", "disk", DEFAULT)]
    return [(result.workload, size_name(result.elements), str(cold[0]), cold[1],
             *map(kernel_cell, (cold, memory, disk)), *totals)
            for cold, memory, disk in zip(*kernels)]


INIT_COLUMNS = ("case", "elems", "part", "kernel", "cold_ms", "memory_ms", "disk_ms",
                "interp_cold_ms", "interp_memory_ms", "interp_disk_ms", "litert_default_ms")


def tiny_rows(tiny: dict[str, Samples]) -> list[tuple]:
    def minus(method: str, s: Samples) -> str:
        return f"{(s.median - tiny[method].median) * 1e6:+.2f}"
    return [(m, f"{s.median * 1e6:.2f}", minus(DEFAULT, s), minus(BUILTIN, s),
             f"{100 * s.spread:.0f}") for m, s in tiny.items()]


TINY_COLUMNS = ("method", "us_per_invoke", "minus_default_us", "minus_builtin_us", "iqr%")


def samples_json(times: dict[str, Samples]) -> dict[str, dict]:
    """Per method: the median, the IQR / median, and enough of the distribution to see a
    bimodal (partly disturbed) one."""
    return {m: {"median": s.median, "spread": s.spread, "rounds": len(s.values),
                "percentiles": dict(zip(("p0", "p10", "p25", "p75", "p90"), np.percentile(
                    s.values, (0, 10, 25, 75, 90)).tolist()))}
            for m, s in times.items()}


def fixed_width(columns: tuple[str, ...], table: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in [columns, *table]) for i in range(len(columns))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [columns, *table])


def markdown(columns: tuple[str, ...], table: list[tuple]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in table])


def size_name(elements: int) -> str:
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if elements % scale == 0:
            return f"{elements // scale}{unit}"
    return str(elements)


def parse_size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(text.rstrip("kKmM")) * scale


def header(meta: dict) -> list[str]:
    c, v, r = meta["machine"], meta["versions"], meta["config"]
    bw = meta["copy_bandwidth"]
    return [
        f"- date: {meta['date']}",
        f"- CPU: {c['cpu']} (family/model {c['family/model']}, LLVM {c['llvm_cpu']}); "
        f"avx2 {c['avx2']}, avx512f {c['avx512f']}; {c['cores']} cores; "
        f"threads used: {r['threads']}"
        + (f", process pinned to core {r['pinned_core']} (for XLA: perf/peers.py)"
           if r.get("pinned_core") is not None else ""),
        "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- repetitions: interleaved rounds of ~{r['batch_seconds'] * 1e3:g} ms batches per "
        f"method, {MIN_ROUNDS} to {r['rounds']} rounds per case (~{r['case_seconds']:g} s "
        f"budget; `rounds` column below), median per invoke; tiny model {r['tiny_rounds']} "
        f"rounds of ~{r['tiny_batch_seconds'] * 1e3:g} ms; copy bandwidth {bw['samples']} "
        f"copies of {bw['megabytes']} MB (LLC {bw['llc_mb']:.0f} MB)",
        f"- copy bandwidth (np.copyto, read + write counted): median {bw['gbs']:.1f} GB/s "
        f"(IQR {100 * bw['spread']:.0f}%), measured before, between and after the sizes",
        f"- the machine is shared and noisy (1-minute load average {meta['load_average'][0]:.1f} "
        f"at the start, {meta['load_average'][1]:.1f} at the end, on {c['cores']} cores): quote "
        "ratios from the same run, not absolute times",
    ]


LEGEND = """\
Columns: `us` median microseconds per invoke; `speedup` LiteRT default time / this method's
time (higher is faster), LiteRT default's time being the mean of two identical interpreters,
`litert_default` and `litert_twin`, whose own speedups show how far a ratio moves with where
an interpreter's memory landed; `GB/s` bytes the fused kernel must move (its inputs read once
and its outputs written once, from the partition IR) / time; `%copy_bw` that rate as a
percentage of the copy bandwidth above; `iqr%` interquartile range of the rounds / median.
The `bound` row is the memory-bandwidth lower bound (bytes / copy bandwidth). `delegate`
claims every partition (min_speedup=0), to measure the fused kernels; `delegate_defaults` is
the delegate with its default options, whose cost model leaves to LiteRT the partitions it
predicts to be slower. `max_rel_err` is max |method - builtin| / max |builtin|."""

JAX_LEGEND = """\
`jax` is the same model as one `jax.jit` function (perf/peers.py derives it from the model's
ops; constants closed over, inputs on the device, `block_until_ready()` per call), timed in
the same rounds; with 1 thread XLA runs with `XLA_FLAGS={flags}`
and synchronous dispatch, and the process is pinned to one core (header), as XLA's own pool
would otherwise use the other. `vs_jax`: jax's time / this method's time (above 1x is faster
than XLA).""".format(
    flags=peers.ONE_THREAD_FLAGS)


def write_report(path: Path, meta: dict, results: list[CaseResult], bandwidth: float,
                 tiny: dict[str, Samples]) -> None:
    main_columns = columns(results)
    with_jax = main_columns == JAX_COLUMNS
    table = [row for r in results for row in rows(r, bandwidth, with_jax)]
    checks = [(r.workload, size_name(r.elements), r.ops, r.claimed, r.claimed_by_default,
               r.bytes_moved, len(r.times[DELEGATE].values),
               f"{r.max_rel_error[DEFAULT]:.1e}", f"{r.max_rel_error[DELEGATE]:.1e}")
              + ((f"{r.max_rel_error[JAX]:.1e}" if JAX in r.max_rel_error
                  else f"not timed: {r.jax_skipped}",) if with_jax else ())
              for r in results]
    text = "\n\n".join([
        "# fusion-delegate performance results", "\n".join(header(meta)),
        "## Elementwise workloads", markdown(main_columns, table),
        LEGEND + ("\n\n" + JAX_LEGEND if with_jax else ""),
        "## What was run",
        markdown(("case", "elems", "ops", "delegate claimed", "delegate_defaults claimed",
                  "bytes_moved", "rounds", "max_rel_err default", "max_rel_err delegate")
                 + (("max_rel_err jax",) if with_jax else ()), checks),
        "\n".join(f"- `{w.name}`: {w.description}" for w in WORKLOADS.values()),
        "- `*_cN`: `bias_relu6_scale` and `se_gate` (x * LOGISTIC(s), s one value per channel) "
        f"with N channels, N in {', '.join(map(str, CHANNEL_COUNTS))}",
        f"## Invoke overhead ({TINY.name}, {TINY_ELEMENTS} elements)", TINY.description,
        markdown(TINY_COLUMNS, tiny_rows(tiny)),
        "Per-invoke time of `interpreter.invoke()` from Python (its own call overhead included), "
        "and that time minus LiteRT's: one delegate partition against XNNPACK's one subgraph "
        "or two builtin nodes.",
        "## Init per partition",
        markdown(INIT_COLUMNS, [row for r in results for row in init_rows(r)]),
        "Kernel times are the cache lookup plus, when cold, the numba compile; `memory` is a "
        "second interpreter in the same process, `disk` a new process with the cache directory "
        "left by the cold run. `interp_*` is Interpreter() + allocate_tensors().",
    ])
    path.write_text(text + "\n")


# ------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--sizes", nargs="+", type=parse_size, help="elements, e.g. 16K 256K 4M")
    parser.add_argument("--workloads", nargs="+", choices=sorted(ALL_WORKLOADS),
                        help="default: all, the short-channel ones included")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-jax", action="store_true",
                        help="leave out the jax.jit peer even when jax is installed")
    parser.add_argument("--out", type=Path, default=ROOT / "perf" / "RESULTS.md")
    parser.add_argument("--json", type=Path, help="default: results.json beside --out")
    parser.add_argument("--probe-init", nargs=2, metavar=("MODEL", "CACHE_DIR"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Run:
    """Everything one run measured."""
    results: list[CaseResult]
    tiny: dict[str, Samples]
    bandwidth: Samples              # bytes per second, all copy samples of the run
    megabytes: int
    seconds: float
    load: tuple[float, float]       # 1-minute load average at start and end: the neighbours


def measure(config: Config, workloads: list[Workload]) -> Run:
    """The tiny model, then every workload at every size; copy bandwidth before and after
    each size, so that drift over the run shows in its spread."""
    megabytes = max(64, 2 * last_level_cache_bytes() >> 20)
    started, load = time.perf_counter(), os.getloadavg()[0]
    bandwidth = list(copy_bandwidth(megabytes, config.copy_repeats).values)
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="fusion_perf_") as cache_root:
        tiny = run_tiny(config, cache_root)
        for elements in config.sizes:
            for workload in workloads:
                results.append(run_case(workload.case(elements), config, cache_root))
                print(f"  {workload.name} {size_name(elements)} done "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
            bandwidth += copy_bandwidth(megabytes, config.copy_repeats).values
    return Run(results, tiny, Samples(tuple(bandwidth)), megabytes,
               time.perf_counter() - started, (load, os.getloadavg()[0]))


def metadata(config: Config, workloads: list[Workload], run: Run) -> dict:
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": cpu_info(), "versions": versions(),
            "config": {**asdict(config), "workloads": [w.name for w in workloads]},
            "copy_bandwidth": {"gbs": run.bandwidth.median / 1e9, "spread": run.bandwidth.spread,
                               "samples": len(run.bandwidth.values), "megabytes": run.megabytes,
                               "llc_mb": last_level_cache_bytes() / 2**20},
            "seconds_total": run.seconds, "load_average": run.load}


def print_tables(meta: dict, run: Run) -> None:
    print("\n".join(header(meta)))
    main_columns = columns(run.results)
    print(fixed_width(main_columns, [row for r in run.results for row in rows(
        r, run.bandwidth.median, main_columns == JAX_COLUMNS)]))
    print(f"\ninvoke overhead, {TINY_ELEMENTS} elements:")
    print(fixed_width(TINY_COLUMNS, tiny_rows(run.tiny)))
    print("\ninit per partition:")
    print(fixed_width(INIT_COLUMNS, [row for r in run.results for row in init_rows(r)]))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.probe_init:
        probe_init(*args.probe_init, args.threads)
        return
    preset = QUICK if args.quick else FULL
    jax = not args.no_jax and peers.installed(peers.JAX) is not None
    pinned = peers.configure(args.threads) if jax else None   # before jax is imported
    config = Config(**{**preset, "sizes": tuple(args.sizes or preset["sizes"])},
                    threads=args.threads, jax=jax, pinned_core=pinned)
    workloads = [ALL_WORKLOADS[name] for name in (args.workloads or ALL_WORKLOADS)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run = measure(config, workloads)
    meta = metadata(config, workloads, run)
    print_tables(meta, run)
    write_report(args.out, meta, run.results, run.bandwidth.median, run.tiny)
    json_path = args.json or args.out.with_name("results.json")
    json_path.write_text(json.dumps({
        **meta, "cases": [{**asdict(r), "times": samples_json(r.times)} for r in run.results],
        "tiny": samples_json(run.tiny)}, indent=1) + "\n")
    print(f"\nwrote {args.out} and {json_path} in {run.seconds:.0f} s")


if __name__ == "__main__":
    main()
