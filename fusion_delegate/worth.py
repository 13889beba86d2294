"""Whether fusing a partition pays, predicted from costs measured on this machine.

perf/calibrate.py times chains of every op under LiteRT's default path (XNNPACK) and fused,
and fits the costs below, committed per CPU as cost_model.<cpu>.json with the machine,
versions and date (rerun it to refit; perf/README.md, "The cost model behind `min_speedup`",
has what was measured and why the model has each term). Every cost is linear in elements,
c0 + c1 * n, with c1 constant between the model's `breaks` (about where tensors leave L1, L2
and L3: an element costs several times more past them).

- LiteRT runs op after op: each op costs its own line in its output's elements, and the first
  op pays `litert_first` on top (reading the partition's input from memory; later ops find
  theirs in cache).
- The fused kernel is a schedule of loop nests (codegen.schedule), each over its own domain:
  its fixed cost plus the larger of its memory time (each nest costs what `fused`, a one-op
  partition, costs beyond its fixed cost: one input and one output) and every op's compute.
  Loads and stores overlap the compute, so whichever is slower sets the time.
- Every other whole tensor read or written costs half of `fused`'s memory time (`stream_us`):
  the calibration's binary ops read one tensor and a per-channel constant, a residual ADD
  reads two. Not for int8 ops on LiteRT's side, whose two-tensor ADD costs no more than the
  calibration's per-channel one.
- A binary op whose broadcast operand repeats every `run` elements (a per-channel constant:
  run = C) costs LiteRT more where runs are short, as XNNPACK calls its kernel once per run:
  `broadcast` has that factor, measured on ADD at a few run lengths.
- On top comes what cutting XNNPACK's partition in two costs (features.Cut): in a real model
  elementwise ops sit between ops XNNPACK runs. It grows with the tensors at the cut and with
  threads, so it is a line in elements like the others: `split` next to elementwise ops, which
  XNNPACK runs in place on data still in cache (a cut takes that away), `split_heavy` next to
  convolutions and matmuls, which read and write buffers of their own anyway. At one thread
  the line is scaled by the share of the partition that is memory traffic: a cut takes away
  what fusing saves in passes over memory, not what it saves in arithmetic. At more, it is
  priced whole: our kernel runs on one core between ops XNNPACK splits over its threads, so
  it reads what two cores wrote and writes what two will read, beside XNNPACK's worker
  spinning, whatever its arithmetic (a fused TANH over [1, 32, 64, 13] between convolutions
  took 11 us at 1 thread and 22 at 2; perf/README.md, "Fused activations and the cut, priced
  at 2 threads").
- With more than one thread, where a builtin kernel (one thread) makes the partition's input,
  XNNPACK's ops on it cost what they cost on one thread: its threads find the input in another
  core's cache (perf/after_builtin.py). Our kernel runs on the core that made the input, so of
  the cut only its output side remains: half of it.

The Python call into the interpreter, the same for both, is left out. An op the model lacks
takes the costs of the measured op of its cost class (codegen.ops.TRANSCENDENTAL or not) whose
fused compute is slowest. A missing or corrupt cost model is logged once and predicts nothing:
`speedup` is then inf, so the delegate claims as it does with min_speedup=0, and never fails
for a bad data file. policy.py decides from the prediction.
"""
from __future__ import annotations

import functools
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from codegen.ops import OPS, TRANSCENDENTAL
from codegen.quant_ops import CONVERSIONS, ELEMENTWISE_OPS, QUANT_OPS
from codegen.target import implied_vector_bytes

from .errors import FusionDelegateError
from .features import Cut, PartitionFeatures

log = logging.getLogger("fusion_delegate")

#: The shipped cost models are one per CPU perf/calibrate.py has run on, each named by LLVM's
#: name for that CPU (`cost_model.znver4.json`): a machine takes its own CPU's, else
#: FALLBACK_CPU's. One fit does not transfer: Zen 4 runs AVX-512 at half Zen 5's rate, and its
#: fused transcendental chains took twice what the Zen 5 fit predicted (perf/README.md, "A
#: cost model per CPU"); on Emerald Rapids LLVM makes 256-bit kernels ("Another CPU").
FALLBACK_CPU = "znver5"
#: int8 ops have costs of their own, `OP/int8` (features.cost_keys): LiteRT runs many of them on
#: its builtin kernels, and a fused chain of unary ones is one table lookup.
QUANTIZED_OPS = tuple(f"{name}/int8" for name, spec in QUANT_OPS.items()
                      if name in ELEMENTWISE_OPS - CONVERSIONS and "int8" in spec.dtypes)
#: precision="fast" ops have costs of their own, `OP/fast`: LiteRT's are the same, ours lower.
APPROXIMATED_OPS = tuple(f"{name}/fast" for name, spec in OPS.items() if spec.approximated)
FORMAT = 5
#: Reductions and row ops the cost model has not measured (perf/calibrate.py times elementwise
#: chains, and SOFTMAX): each costs, on both sides, the elementwise ops it amounts to per input
#: element (codegen.quant_ops: QuantOpSpec.proxies), in float and, as `OP/int8`, in int8.
PROXIES = {**{name: spec.proxies for name, spec in QUANT_OPS.items() if spec.proxies},
           **{f"{name}/int8": tuple(f"{op}/int8" for op in spec.proxies)
              for name, spec in QUANT_OPS.items() if spec.proxies}}


class CostModelError(FusionDelegateError, ValueError):
    """A cost model file is missing, unreadable or not what perf/calibrate.py writes."""


@dataclass(frozen=True)
class Prediction:
    litert_us: float      # the partition's ops run one by one by LiteRT's default path (XNNPACK)
    fused_us: float       # our one fused kernel
    cut_us: float = 0.0   # of fused_us, what cutting XNNPACK's partition around it costs
    threads: int = 1      # the interpreter's, which the costs were measured at
    builtin_input: bool = False  # a builtin kernel, on one thread, makes one of its inputs

    @property
    def speedup(self) -> float:
        """litert_us / fused_us; inf when unknown (no usable cost model), so it is claimed."""
        if math.isnan(self.litert_us) or math.isnan(self.fused_us) or self.fused_us <= 0:
            return math.inf
        return self.litert_us / self.fused_us

    @property
    def saving_us(self) -> float:
        return self.litert_us - self.fused_us


UNKNOWN = Prediction(math.nan, math.nan)


@dataclass(frozen=True)
class Linear:
    """c0 + c1 * n, with c1 constant on each interval between the cost model's breaks."""
    c0_us: float
    c1_ns: tuple[float, ...]

    def us(self, n: int, breaks: tuple[int, ...]) -> float:
        edges = (0, *breaks, math.inf)
        ns = sum(c1 * max(0, min(n, hi) - lo) for c1, lo, hi in zip(self.c1_ns, edges, edges[1:]))
        return self.c0_us + ns / 1e3


@dataclass(frozen=True)
class OpCost:
    litert: Linear        # one op run by LiteRT, by its output's elements
    fused_ns: float       # its compute inside the fused loop, per output element


@dataclass(frozen=True)
class Broadcast:
    """LiteRT's cost of a binary op broadcasting every `run` elements, over its cost at the
    calibration's run (perf/calibrate.py's CHANNELS): measured at `runs`, increasing."""
    runs: tuple[int, ...]
    factors: tuple[float, ...]

    def factor(self, run: int) -> float:
        """That of the longest measured run up to `run`; below them all, the shortest's grown
        as 1/run, a cost per call (ADD at 64K elements on Emerald Rapids: 9.4x at runs of 8,
        19.9x at 4, 27x at 3, 39.6x at 2); runs longer than all measured cost what the
        calibration's own (longer still) does."""
        if not self.runs or run > self.runs[-1]:
            return 1.0
        below = [f for r, f in zip(self.runs, self.factors) if r <= run]
        return below[-1] if below else self.factors[0] * self.runs[0] / max(run, 1)


@dataclass(frozen=True)
class Costs:
    """Everything measured at one thread count."""
    litert_first: Linear  # LiteRT's first op on top of its own cost, by iteration elements
    fused: Linear         # a one-op fused partition, by iteration elements
    split: Linear         # cutting an XNNPACK partition in two, by the cut's elements
    split_heavy: Linear   # ... where the ops on both sides are not elementwise
    broadcast: Broadcast  # a binary op's LiteRT cost by the length of its broadcast's runs
    ops: dict[str, OpCost]


#: Elements of a cut that stay in L2 (1 MiB of float32) until an op that runs later reads them.
CACHED_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class CostModel:
    header: dict
    breaks: tuple[int, ...]
    threads: dict[int, Costs]

    @classmethod
    def from_json(cls, data: object, source: str = "cost model") -> CostModel:
        """Checks every number predict() uses; anything else wrong raises CostModelError."""
        return _Parser(source).model(data)

    def costs(self, threads: int) -> Costs:
        """The largest measured thread count up to `threads` (< 1, as TFLite's -1: one)."""
        measured = sorted(self.threads)
        below = [t for t in measured if t <= max(threads, 1)]
        return self.threads[below[-1] if below else measured[0]]

    def op_cost(self, costs: Costs, name: str) -> OpCost:
        """The op's measured costs (a uint8 op: its int8 twin's; a fast one not measured: its
        exact costs, which are higher), or those of its cost class's slowest fused elementwise
        op."""
        for key in (name, name.replace("/uint8", "/int8"), name.removesuffix("/fast")):
            if key in costs.ops:
                return costs.ops[key]
        expensive = name in TRANSCENDENTAL or name not in OPS
        elementwise = [n for n in costs.ops if n.partition("/")[0] in OPS]
        same = [n for n in elementwise if (n in TRANSCENDENTAL) == expensive] or list(costs.ops)
        return costs.ops[max(same, key=lambda n: costs.ops[n].fused_ns)]

    @property
    def vector_bytes(self) -> int:
        """The vector width of the kernels whose costs were measured: the header's (written
        by perf/calibrate.py), else the fitting CPU's full width (the Zen fits ran kernels at
        it). LLVM prefers half the width on some AVX-512 CPUs (Intel's servers)."""
        width = self.header.get("vector_bytes")
        if isinstance(width, int) and width > 0:
            return width
        machine = self.header.get("machine", {})
        features = frozenset(name for name in ("avx512f", "avx2")
                             if isinstance(machine, dict) and machine.get(name) == "yes")
        return implied_vector_bytes(features | ({"avx"} if "avx2" in features else set()))

    def predict(self, partition: PartitionFeatures, threads: int = 1,
                vector_bytes: int | None = None) -> Prediction:
        """At one thread the cut is priced at the share of the partition that is traffic:
        the fused kernel's memory time over LiteRT's time for the ops. A cut beside XNNPACK's
        ops takes away what fusing saves in passes over memory (those ops find their data in
        cache), not what it saves in arithmetic: priced whole, partitions that gained in their
        neighbourhoods were predicted to lose (perf/README.md). At more threads it is priced
        whole, except where a builtin kernel makes an input (as at one thread, and halved).
        Kernels of `vector_bytes` (default: the fit's) narrower than the fit's compute that
        many times slower than where the model was fitted, beside an XNNPACK that does not."""
        shortfall = max(1.0, self.vector_bytes / vector_bytes) if vector_bytes else 1.0
        costs = self.costs(threads)
        one_thread_input = partition.builtin_input and threads > 1
        litert_costs = self.costs(1) if one_thread_input else costs
        sizes = [nest.elements for nest in partition.nests]
        per_op = [(proxy, key.elements, key.litert,
                   self.broadcast_factor(litert_costs, key.name, key.elements, key.run))
                  for key in partition.ops
                  for proxy in ((key.name,) if key.name in costs.ops
                                else PROXIES.get(key.name, (key.name,)))]
        ops_us = sum(self.op_cost(litert_costs, proxy).litert.us(elements, self.breaks) * factor
                     for proxy, elements, litert, factor in per_op if litert)
        ops_us += sum(self.stream_us(litert_costs, key.elements) * (key.inputs - 1)
                      for key in partition.ops if key.litert
                      and key.inputs > 1 and key.name.partition("/")[2] in ("", "fast"))
        litert = litert_costs.litert_first.us(max(sizes, default=0), self.breaks) + ops_us
        c0 = costs.fused.c0_us
        memory_us = sum(costs.fused.us(nest.elements, self.breaks) - c0
                        + self.stream_us(costs, nest.elements) * nest.extra_streams
                        for nest in partition.nests)
        compute_us = shortfall * sum(self.op_cost(costs, proxy).fused_ns * elements
                                     for proxy, elements, _, _ in per_op) / 1e3
        split = self.cut_us(partition.cut, costs, max(sizes, default=0))
        if threads <= 1 or one_thread_input:
            split *= min(1.0, memory_us / ops_us) if ops_us > 0 else 1.0
        if one_thread_input:
            split /= 2
        return Prediction(litert, c0 + max(memory_us, compute_us) + split, split, threads,
                          partition.builtin_input)

    def cut_us(self, cut: Cut, costs: Costs, elements: int) -> float:
        """The whole cut of a partition of `elements`. An elementwise op apart from the
        partition finds its data in cache only if the cut's tensors stay in L2 meanwhile:
        beyond, the cut costs what a heavy one does (a squeeze-excite's swish, its gate MUL
        after the excite's convolutions)."""
        if cut is Cut.NONE:
            return 0.0
        line = cut.value
        if cut is Cut.APART:
            line = "split" if elements <= CACHED_ELEMENTS else "split_heavy"
        return getattr(costs, line).us(elements, self.breaks)

    def stream_us(self, costs: Costs, elements: int) -> float:
        """Reading one more tensor of `elements`: half the one-op partition's memory time (it
        reads one and writes one)."""
        return (costs.fused.us(elements, self.breaks) - costs.fused.c0_us) / 2

    @staticmethod
    def broadcast_factor(costs: Costs, name: str, elements: int, run: int | None) -> float:
        """A float binary op's LiteRT cost factor for broadcasting every `run` elements (int8
        ops have their own costs, often the builtin kernels')."""
        if run is None or run >= elements or name not in OPS or OPS[name].arity != 2:
            return 1.0
        return costs.broadcast.factor(run)


@functools.cache
def host_cpu_name() -> str:
    """LLVM's name for this CPU (`znver4`), whatever target numba compiles kernels for."""
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def shipped_file(cpu: str) -> Path:
    """Where the fit for `cpu` is shipped, if it is."""
    return Path(__file__).with_name(f"cost_model.{cpu}.json")


def shipped_path(cpu: str | None = None) -> Path:
    """The shipped fit for `cpu` (default: this machine's CPU), else FALLBACK_CPU's."""
    path = shipped_file(cpu or host_cpu_name())
    return path if path.is_file() else shipped_file(FALLBACK_CPU)


@functools.lru_cache(maxsize=None)
def load_cost_model(path: str | Path | None = None) -> CostModel:
    """The cost model at `path` (default: the one shipped for this CPU), read once."""
    path = Path(path) if path is not None else shipped_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # ValueError: bad JSON or bytes that are no text
        raise CostModelError(f"{path}: cannot read cost model ({error}); "
                             "regenerate it with `python perf/calibrate.py`") from None
    return CostModel.from_json(data, str(path))


@functools.lru_cache(maxsize=None)
def _usable(path: str | Path | None) -> CostModel | None:
    try:
        return load_cost_model(path)
    except CostModelError as error:
        log.warning("%s; partitions are claimed without an estimate (as min_speedup=0)", error)
        return None


def predict(partition: PartitionFeatures, threads: int = 1, path: str | Path | None = None,
            vector_bytes: int | None = None) -> Prediction:
    """LiteRT's and the fused kernel's predicted time for a partition (features.py) at the
    interpreter's thread count, for kernels of `vector_bytes` vectors (default: the fit's).
    Never raises for a bad cost model: it predicts UNKNOWN (speedup inf) and logs why, once."""
    model = _usable(path)
    return UNKNOWN if model is None else model.predict(partition, threads, vector_bytes)


class _Parser:
    """Reads the JSON written by perf/calibrate.py, naming the first field that is wrong."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> CostModelError:
        return CostModelError(f"{self.source}: {message}; "
                              "regenerate it with `python perf/calibrate.py`")

    def field(self, data: object, key: str, kind: type, where: str) -> object:
        if not isinstance(data, dict) or not isinstance(data.get(key), kind):
            raise self.fail(f"{where}{key} missing or not a {kind.__name__}")
        return data[key]

    def number(self, value: object, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise self.fail(f"{where} is {value!r}, expected a number >= 0")
        return float(value)

    def model(self, data: object) -> CostModel:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise self.fail(f"not a cost model of format {FORMAT}")
        header = self.field(data, "header", dict, "")
        breaks = self.field(data, "breaks", list, "")
        if not all(isinstance(b, int) and b > 0 for b in breaks) or breaks != sorted(set(breaks)):
            raise self.fail(f"breaks {breaks!r} are not increasing positive integers")
        tables = self.field(data, "threads", dict, "")
        if not tables or not all(key.isdigit() and int(key) >= 1 for key in tables):
            raise self.fail(f"threads {sorted(tables)!r} are not thread counts >= 1")
        return CostModel(header, tuple(breaks), {
            int(key): self.costs(value, len(breaks), f"threads.{key}.")
            for key, value in tables.items()})

    def costs(self, data: object, n_breaks: int, where: str) -> Costs:
        ops = self.field(data, "ops", dict, where)
        if not ops or not all(isinstance(value, dict) for value in ops.values()):
            raise self.fail(f"{where}ops is empty or not a dict of ops")
        return Costs(self.linear(data.get("litert_first"), n_breaks, where + "litert_first"),
                     self.linear(data.get("fused"), n_breaks, where + "fused"),
                     self.linear(data.get("split"), n_breaks, where + "split"),
                     self.linear(data.get("split_heavy"), n_breaks, where + "split_heavy"),
                     self.broadcast(data.get("broadcast"), where + "broadcast"),
                     {name: self.op(value, n_breaks, f"{where}ops.{name}")
                      for name, value in ops.items()})

    def op(self, data: dict, n_breaks: int, where: str) -> OpCost:
        return OpCost(self.linear(data.get("litert"), n_breaks, where + ".litert"),
                      self.number(data.get("fused_ns"), where + ".fused_ns"))

    def broadcast(self, data: object, where: str) -> Broadcast:
        runs = self.field(data, "runs", list, where + ".")
        factors = self.field(data, "factors", list, where + ".")
        if not all(isinstance(r, int) and r > 0 for r in runs) or runs != sorted(set(runs)) \
                or len(factors) != len(runs):
            raise self.fail(f"{where}: runs {runs!r} are not increasing positive integers "
                            f"with one factor each")
        return Broadcast(tuple(runs), tuple(self.number(f, f"{where}.factors[{i}]")
                                            for i, f in enumerate(factors)))

    def linear(self, data: object, n_breaks: int, where: str) -> Linear:
        if not isinstance(data, dict):
            raise self.fail(f"{where} missing or not a dict")
        c1 = self.field(data, "c1_ns", list, where + ".")
        if len(c1) != n_breaks + 1:
            raise self.fail(f"{where}.c1_ns has {len(c1)} values, expected {n_breaks + 1}")
        return Linear(self.number(data.get("c0_us"), where + ".c0_us"),
                      tuple(self.number(v, f"{where}.c1_ns[{i}]") for i, v in enumerate(c1)))
