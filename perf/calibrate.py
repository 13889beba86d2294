"""Measure the cost model the delegate uses to decide what pays, one command:

    PYTHONPATH=. python perf/calibrate.py [--threads 1 2] [--out cost_model.CPU.json]

For every op in codegen.ops.OPS it times chains of K = 1 and K = 5 of the op (unary
`h = op(h)`, binary `h = op(h, y)`; h starts as an input [n / 256, 256] ([1, n] if smaller),
y is a per-channel constant, the usual second operand, which keeps the fused chains about
compute; values U(0.5, 1.5)) under LiteRT's default path (XNNPACK) at each of SIZES, and under
the fusion delegate, which runs a chain as one kernel, at FUSED_SIZE.
fusion_delegate/worth.py has the model they are fitted to:
- LiteRT: an op costs c(n) = (T(5) - T(1)) / 4 at each size, joined into c0 + c1 * n with c1
  constant between neighbouring sizes (past L2, and again past L3, an element costs several
  times more, so one line through small sizes would be wrong at large ones). What a one-NEG
  model costs beyond that is the first op's extra (`litert_first`). XNNPACK folds a chain of
  int8 LOGISTIC, TANH, ELU or LEAKY_RELU (tables) into one: five cost what one does, 2.6 us at
  64K elements. Their LiteRT chains alternate with an int8 ADD (SEPARATED), whose cost comes
  off; the fused chains do not (the delegate composes tables too).
- SOFTMAX, float and int8 (ROW_OPS), the same over rows of 256, but its fused compute is that of
  one SOFTMAX beyond the one-NEG partition: five fused in a row cost 6 (float) and 17 (int8)
  times one. Its proxies (worth.PROXIES) priced LiteRT's int8 SOFTMAX, a builtin kernel, at a
  third of its cost (1.8 ns an element), and XNNPACK's float one at twice its.
- Fused: an op's compute is c1_f = (T(5) - T(1)) / (4 n). Ops LLVM folds when repeated
  (abs(abs(h)), floor(floor(h)), relu(relu(h)), max(max(h, y), y): FOLDED) alternate with an
  ADD of y in their fused chains, whose own compute comes off: repeated, they came out free,
  yet a NaN-preserving clamp or max is a compare and a blend, 0.1 ns an element in a kernel
  that computes rather than waits for memory (perf/README.md, session 30). The one-NEG
  partition (one input, one output, no compute to speak of) timed at every size is the
  memory-bound side (`fused`).
- Python's invoke overhead, timed on a model without ops, is taken off both sides. XNNPACK's
  fixed cost per partition (a one-NEG model at SIZES[0], less its op) is taken off LiteRT's.
- `broadcast`: LiteRT's ADD at FUSED_SIZE with its per-channel operand [C] for C in
  BROADCAST_RUNS, over the same at CHANNELS: how much more XNNPACK's kernel costs called once
  per short row (features.broadcast_run).
- `split`, at each size: a chain of SANDWICH ADDs whose two middle ones are claimed, less the
  same chain all in XNNPACK, less what those two ADDs gain fused (timed alone both ways):
  what cutting an XNNPACK partition costs beyond the ops themselves. `split_heavy`: the same
  with the two ADDs between 3x3 depthwise convolutions, which XNNPACK cannot run in place.
The machine is shared: the interpreters of one op and size are timed in the same interleaved
rounds of short batches, each after one untimed call so that it finds its data in cache
(`timed_rounds`), in several passes, and the median is over all rounds. Then the fitted model
predicts the perf suite's workloads, which are timed too, and both are printed. Writes the
model, the machine, versions and date, and that check, as JSON.

`--update --ops OP ...` refits only those ops' costs in the model at `--out` and keeps the
rest (the header lists each update): after a kernel change to a few ops, without a whole new
fit's noise everywhere else.

One thread by default: on a shared 2-core machine a second thread is there or not from one
moment to the next, and 2-thread times did not repeat; worth.py uses the 1-thread costs for
more threads unless a run with `--threads 1 2` measured them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python perf/calibrate.py` from anywhere

import numpy as np  # noqa: E402
from ai_edge_litert.interpreter import Interpreter  # noqa: E402

from codegen.ops import OPS, clamps_finite  # noqa: E402
from codegen.quant_ops import XNNPACK_INT8  # noqa: E402
from codegen.target import numba_target  # noqa: E402
from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.features import (  # noqa: E402
    CLAMP, CostKey, NestTraffic, PartitionFeatures, broadcast_run)
from fusion_delegate.model import ModelBuilder, Quantization, read_model  # noqa: E402
from fusion_delegate.worth import (  # noqa: E402
    APPROXIMATED_OPS, FORMAT, QUANTIZED_OPS, CostModel, host_cpu_name, shipped_file)
from perf.suite import cpu_info, size_name, versions  # noqa: E402
from perf.timing import MIN_ROUNDS, batch_size, no_gc, per_call  # noqa: E402
from perf.workloads import CHANNEL_WORKLOADS, NORM_WORKLOADS, WORKLOADS  # noqa: E402

#: Elements; the inner ones are the breaks. Float32 tensors of 16 KB to 4 MB: from L1 through
#: L2 (1 MB here) into L3, where an element's cost changes, with a measured size on either side
#: of most of the corpus's tensors (ViT's attention has 16K elements).
SIZES = (32, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
FUSED_SIZE = 1 << 16
K = (1, 5)
PASSES = 3
ROUNDS = 60                 # per group and pass, at most (timing.MIN_ROUNDS at least)
BATCH_SECONDS = 2e-4        # short against the scheduler's slice: most batches run undisturbed
GROUP_SECONDS = 0.3         # timing budget per op, size and pass
CHECK_SIZES = (1 << 10, 1 << 16, 1 << 20)
CHECK_SECONDS = 2.0
#: The perf workloads, per-channel ones with short channels (the broadcast factor's cases) and
#: softmax over rows of 128 (priced by its proxies, worth.PROXIES).
CHECK_WORKLOADS = {**WORKLOADS, **{name: CHANNEL_WORKLOADS[name] for name in (
    "bias_relu6_scale_c8", "bias_relu6_scale_c16", "bias_relu6_scale_c32", "se_gate_c16")},
    "softmax_c128": NORM_WORKLOADS["softmax_c128"]}
CHANNELS = 256
BROADCAST_OP = "ADD"
BROADCAST_RUNS = (8, 16, 32, 64, 128)
BASE = "NEG"                # the one-op partition the base costs are measured on
EMPTY = ("empty",)
SANDWICH = 6                # ADDs in the split chain; the delegate claims the middle two

#: Row ops measured on their own rather than priced by worth.PROXIES: the classifier's and
#: attention's SOFTMAX.
ROW_OPS = ("SOFTMAX", "SOFTMAX/int8")
ALL_OPS = [*OPS, *QUANTIZED_OPS, *APPROXIMATED_OPS, *ROW_OPS]
#: int8 unary ops XNNPACK runs as tables: it folds a chain of them into one (five LOGISTICs
#: cost what one does), so their chains alternate with SEPARATOR's op, whose own cost comes off.
SEPARATOR = "ADD/int8"
SEPARATED = tuple(f"{name}/int8" for name in sorted(XNNPACK_INT8)
                  if name in OPS and OPS[name].arity == 1)
#: Float ops LLVM folds when repeated: their fused chains alternate with an ADD (BROADCAST_OP),
#: whose own fused compute comes off.
FOLDED = ("ABS", "CEIL", "FLOOR", "MAXIMUM", "MINIMUM", "RELU", "RELU6", "RELU_0_TO_1",
          "RELU_N1_TO_1", "SIGN")

Key = tuple  # ("litert" | "fused", op, k, n), or EMPTY
Invoke = Callable[[], None]


# ----------------------------------------------------------------------------------- models

def op_options(name: str) -> dict | None:
    """Options as a converter writes them; GELU's default is the exact (erf) form."""
    if name == "SOFTMAX":
        return {"beta": 1.0}
    if OPS[name].fused_activation:
        return {"fused_activation_function": 0}
    return {"LEAKY_RELU": {"alpha": 0.2}, "GELU": {"approximate": False}}.get(name)


INT8 = Quantization.per_tensor(0.05, 0)
UNSIGNED = Quantization.per_tensor(0.05, -128)      # every code >= the zero point
#: Quantization the builtin kernels require: LOGISTIC's output, SQRT's and RSQRT's inputs at
#: or above their zero point (else they fail); TANH's output as converters write it.
INT8_INPUTS = {"SQRT": UNSIGNED, "RSQRT": UNSIGNED}
INT8_OUTPUTS = {"LOGISTIC": Quantization.per_tensor(1 / 256, -128),
                "TANH": Quantization.per_tensor(1 / 128, 0),
                "SOFTMAX": Quantization.per_tensor(1 / 256, -128), **INT8_INPUTS}


def arity(op: str) -> int:
    """Operands of an elementwise op; a row op (ROW_OPS) takes one."""
    return OPS[op].arity if op in OPS else 1


def chain(name: str, k: int, n: int, channels: int = CHANNELS,
          separated: bool = False) -> bytes:
    """k times `h = op(h)`, or `h = op(h, y)` with y [channels] for a binary op; `OP/int8`:
    the same in int8, every tensor scale 0.05 and zero point 0 but where the op needs others;
    `separated`: each op followed by an ADD of y (`h = ADD(h, y)`, in int8 for `OP/int8`);
    `OP/fast`: the float chain (the delegate fuses it under precision="fast")."""
    op, _, variant = name.partition("/")
    dtype = variant if variant == "int8" else ""
    b = ModelBuilder(f"{op.lower()}_x{k}")
    channels = min(channels, n)
    q = INT8_INPUTS.get(op, INT8) if dtype else None
    h = b.input("x", (n // channels, channels), np.int8 if dtype else np.float32, q)
    y = None
    rng = np.random.default_rng(1)
    if (arity(op) == 2 or separated) and dtype:
        y = b.const("y", rng.integers(1, 40, channels).astype(np.int8), INT8)
    elif arity(op) == 2 or separated:
        y = b.const("y", rng.uniform(0.5, 1.5, channels).astype(np.float32))
    separator = SEPARATOR.partition("/")[0]
    for _ in range(k):
        h = b.op(op, [h] if arity(op) == 1 else [h, y], op_options(op),
                 quantization=INT8_OUTPUTS.get(op, INT8) if dtype else None)
        if separated:
            h = b.op(separator, [h, y], op_options(separator),
                     quantization=INT8 if dtype else None)
    b.output(h)
    return b.to_bytes()


def add_chain(k: int, n: int) -> bytes:
    """k ADDs of a scalar: the ops XNNPACK runs around a claimed partition in `split`."""
    b = ModelBuilder(f"add_x{k}")
    h = b.input("x", (max(1, n // CHANNELS), min(CHANNELS, n)))
    for i in range(k):
        h = b.op("ADD", [h, b.const(f"c{i}", np.float32(0.5))], op_options("ADD"))
    b.output(h)
    return b.to_bytes()


DEPTHWISE_3X3 = {"padding": 0, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1}  # SAME


def conv_sandwich(n: int) -> bytes:
    """Two ADDs of a scalar between 3x3 depthwise convolutions ([1, H, W, C], n elements): the
    ops around a claimed partition in `split_heavy` (nodes 0 and 3 are the convolutions)."""
    channels = min(32, n)
    width = min(16, n // channels)
    shape = (1, n // (width * channels), width, channels)
    b = ModelBuilder("conv_add_add_conv")
    rng = np.random.default_rng(1)

    def depthwise(h: int, i: int) -> int:
        weights = rng.uniform(-0.3, 0.3, (1, 3, 3, channels)).astype(np.float32)
        return b.op("DEPTHWISE_CONV_2D", [h, b.const(f"w{i}", weights),
                                          b.const(f"b{i}", np.zeros(channels, np.float32))],
                    DEPTHWISE_3X3, shape=shape)

    h = depthwise(b.input("x", shape), 0)
    for i in (1, 2):
        h = b.op("ADD", [h, b.const(f"c{i}", np.float32(0.5))], op_options("ADD"))
    b.output(depthwise(h, 3))
    return b.to_bytes()


def empty_model() -> bytes:
    """Input straight to output: what invoke() costs from Python when there is nothing to run."""
    b = ModelBuilder("empty")
    b.output(b.input("x", (1,)))
    return b.to_bytes()


# ------------------------------------------------------------------------------ interpreters

def interpreter(model: bytes, threads: int, cache_dir: str | None,
                inputs: dict[str, np.ndarray] | None = None, exclude: str = "",
                precision: str = "exact") -> Invoke:
    """The bound invoke() of an allocated interpreter with its inputs set, run once; fused when
    `cache_dir` is given (but for the `exclude` nodes), and then checked to be one partition
    holding every other node."""
    delegate = (FusionDelegate(cache_dir=cache_dir, min_nodes_per_partition=1, min_speedup=0.0,
                               exclude_nodes=exclude, precision=precision)
                if cache_dir is not None else None)
    it = Interpreter(model_content=model, num_threads=threads,
                     experimental_delegates=[delegate] if delegate else [])
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    for detail in it.get_input_details():
        if inputs:
            data = inputs[detail["name"]]
        elif detail["dtype"] == np.int8:    # codes at or above the zero point: SQRT's domain
            data = rng.integers(0, 100, detail["shape"])
        else:
            data = rng.uniform(0.5, 1.5, detail["shape"])
        it.set_tensor(detail["index"], data.astype(detail["dtype"]))
    it.invoke()
    excluded = {int(node) for node in exclude.split(",") if node}
    if delegate and (len(delegate.kernels) != 1 or any(
            c.reason for c in delegate.claims.values() if c.index not in excluded)):
        raise RuntimeError(f"the delegate did not fuse the whole model: {delegate.summary()}")
    out = it.get_tensor(it.get_output_details()[0]["index"])
    tiny = np.finfo(np.float32).tiny
    if out.dtype == np.float32 and np.any((out != 0) & (np.abs(out) < tiny)):
        print("warning: subnormal outputs, the timing may include microcode assists",
              file=sys.stderr)
    return it.invoke


def group(name: str, n: int, threads: int, cache_dir: str) -> dict[Key, Invoke]:
    """What is timed together for one op at one size: LiteRT's chains, the fused chains at
    FUSED_SIZE, and with BASE the empty model and the fused one-op partition."""
    methods = {("litert", name, k, n): interpreter(chain(name, k, n, separated=name in SEPARATED),
                                                   threads, None) for k in K}
    fused = (K[:1] if name in ROW_OPS else K) if n == FUSED_SIZE else (1,) if name == BASE else ()
    precision = "fast" if name.endswith("/fast") else "exact"
    methods.update({("fused", name, k, n): interpreter(chain(name, k, n,
                                                             separated=name in FOLDED),
                                                       threads, cache_dir, precision=precision)
                    for k in fused})
    if name == BROADCAST_OP and n == FUSED_SIZE:
        methods.update({("broadcast", name, k, run): interpreter(chain(name, k, n, run), threads,
                                                                 None)
                        for run in BROADCAST_RUNS for k in K})
    if name == BASE:
        methods[EMPTY] = interpreter(empty_model(), threads, None)
        middle = ",".join(str(i) for i in range(SANDWICH) if i not in (SANDWICH // 2 - 1,
                                                                       SANDWICH // 2))
        methods.update({
            ("split", "cut", n): interpreter(add_chain(SANDWICH, n), threads, cache_dir,
                                             exclude=middle),
            ("split", "whole", n): interpreter(add_chain(SANDWICH, n), threads, None),
            ("split", "fused", n): interpreter(add_chain(2, n), threads, cache_dir),
            ("split", "litert", n): interpreter(add_chain(2, n), threads, None),
            ("split_heavy", "cut", n): interpreter(conv_sandwich(n), threads, cache_dir,
                                                   exclude="0,3"),
            ("split_heavy", "whole", n): interpreter(conv_sandwich(n), threads, None)})
    return methods


# ---------------------------------------------------------------------------------- measure

def timed_rounds(methods: dict[Key, Invoke], rounds: int,
                 budget_seconds: float) -> dict[Key, list[float]]:
    """Seconds per call of each method, one batch per method in each of up to `rounds`
    rounds (order rotated; at least MIN_ROUNDS, then until the budget is spent), as
    perf/timing.py's `interleaved` does, but each batch is preceded by one untimed call: the
    methods share the caches, and that call brings back what the previous one evicted."""
    batches = {key: batch_size(fn, BATCH_SECONDS) for key, fn in methods.items()}
    keys = list(methods)
    times: dict[Key, list[float]] = defaultdict(list)
    deadline = time.perf_counter() + budget_seconds
    with no_gc():
        for r in range(rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                methods[key]()
                times[key].append(per_call(methods[key], batches[key]))
            if r + 1 >= MIN_ROUNDS and time.perf_counter() > deadline:
                break
    return times


def measure(threads: int, cache_dir: str, ops: list[str], passes: int) -> dict[Key, float]:
    """Median seconds per invoke of every chain, over the rounds of all passes."""
    samples: dict[Key, list[float]] = defaultdict(list)
    started = time.perf_counter()
    for number in range(passes):
        for n in SIZES:
            for name in ops:
                methods = group(name, n, threads, cache_dir)
                for key, values in timed_rounds(methods, ROUNDS, GROUP_SECONDS).items():
                    samples[key] += values
        print(f"  {threads} thread(s): pass {number + 1}/{passes} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return {key: statistics.median(values) for key, values in samples.items()}


# -------------------------------------------------------------------------------------- fit

def piecewise(points: list[tuple[int, float]]) -> dict:
    """c0 + c1 * n through (n, us) points, c1 constant between neighbours (the first line is
    extended to 0 and the last past the end); noise cannot make a cost negative."""
    slopes = [max(0.0, (c2 - c1) / (n2 - n1)) for (n1, c1), (n2, c2) in zip(points, points[1:])]
    n0, c0 = points[0]
    return {"c0_us": max(0.0, c0 - slopes[0] * n0), "c1_ns": [s * 1e3 for s in slopes]}


def fit(t: dict[Key, float], ops: list[str]) -> dict:
    """One thread count's costs (the JSON worth.py reads), and the medians they come from."""
    us = {key: seconds * 1e6 for key, seconds in t.items()}
    invoke = us[EMPTY]

    def per_op(method: str, name: str, n: int) -> float:
        if method == "fused" and name in ROW_OPS:
            return us[(method, name, K[0], n)] - us[(method, BASE, K[0], n)]
        step = (us[(method, name, K[1], n)] - us[(method, name, K[0], n)]) / (K[1] - K[0])
        if method == "litert" and name in SEPARATED:
            return step - per_op(method, SEPARATOR, n)
        if method == "fused" and name in FOLDED:
            return step - per_op(method, BROADCAST_OP, n)
        return step

    def split(n: int, sandwich: str = "split") -> float:
        cut = us[(sandwich, "cut", n)] - us[(sandwich, "whole", n)]
        return cut - (us[("split", "fused", n)] - us[("split", "litert", n)])

    partition = us[("litert", BASE, 1, SIZES[0])] - invoke - per_op("litert", BASE, SIZES[0])
    first = [(n, us[("litert", BASE, 1, n)] - invoke - partition - per_op("litert", BASE, n))
             for n in SIZES]

    def broadcast(run: int) -> float:
        per_run = (us[("broadcast", BROADCAST_OP, K[1], run)]
                   - us[("broadcast", BROADCAST_OP, K[0], run)]) / (K[1] - K[0])
        return max(1.0, per_run / per_op("litert", BROADCAST_OP, FUSED_SIZE))

    return {
        "litert_first": piecewise(first),
        "fused": piecewise([(n, us[("fused", BASE, 1, n)] - invoke) for n in SIZES]),
        "split": piecewise([(n, max(0.0, split(n))) for n in SIZES]),
        "split_heavy": piecewise([(n, max(0.0, split(n, "split_heavy"))) for n in SIZES]),
        "broadcast": {"runs": list(BROADCAST_RUNS),
                      "factors": [broadcast(run) for run in BROADCAST_RUNS]},
        "ops": {name: {
            "litert": piecewise([(n, per_op("litert", name, n)) for n in SIZES]),
            "fused_ns": max(0.0, per_op("fused", name, FUSED_SIZE) / FUSED_SIZE * 1e3),
        } for name in ops},
        "measured_us": {
            "invoke": invoke,
            "chains": {name: {
                "litert": {str(n): [us[("litert", name, k, n)] for k in K] for n in SIZES},
                "fused": {str(FUSED_SIZE): [us[("fused", name, k, FUSED_SIZE)] for k in K
                                            if ("fused", name, k, FUSED_SIZE) in us]},
            } for name in ops},
            "fused_one_op": {str(n): us[("fused", BASE, 1, n)] for n in SIZES},
            "split": {str(n): {part: us[("split", part, n)] for part in
                               ("cut", "whole", "fused", "litert")} for n in SIZES},
            "split_heavy": {str(n): {part: us[("split_heavy", part, n)] for part in
                                     ("cut", "whole")} for n in SIZES},
            "broadcast": {str(run): [us[("broadcast", BROADCAST_OP, k, run)] for k in K]
                          for run in BROADCAST_RUNS},
        },
    }


# ------------------------------------------------------------------------------------ check

def partition_ops(model: bytes) -> list[CostKey]:
    """Every node's cost key as the delegate would give it to predict(): `OP/int8` where a
    tensor of the node is int8 or uint8, `OP/fast` where the default precision approximates
    the op, and a float op's clamping activation (features.cost_keys)."""
    sg = read_model(model).subgraphs[0]
    ops = []
    for op in sg.operators:
        dtypes = [sg.tensors[t].dtype.name for t in (*op.inputs, *op.outputs) if t >= 0]
        quantized = [d for d in dtypes if d in ("int8", "uint8")]
        name = op.op
        if quantized:
            name = f"{op.op}/{quantized[0]}"
        elif op.op in OPS and OPS[op.op].approximated:
            name = f"{op.op}/fast"
        output = sg.tensors[op.outputs[0]].shape
        if not quantized and clamps_finite(op.options.get("fused_activation_function", 0)):
            ops.append(CostKey(CLAMP, math.prod(output), litert=False))
        inputs = [sg.tensors[t].shape for t in op.inputs if t >= 0]
        binary = len(inputs) == 2
        ops.append(CostKey(name, math.prod(output),
                           broadcast_run(output, inputs) if binary else math.prod(output),
                           sum(math.prod(i) == math.prod(output) for i in inputs)
                           if binary else 1))
    return ops


def partition_nest(model: bytes, n: int) -> NestTraffic:
    """The workload as one nest of n elements, its whole inputs and outputs beyond one each as
    features.nest_traffic counts them."""
    sg = read_model(model).subgraphs[0]

    def whole(tensors: list[int]) -> int:
        return sum(math.prod(sg.tensors[t].shape) == n for t in tensors)
    return NestTraffic(n, max(0, whole(sg.inputs) - 1) + max(0, whole(sg.outputs) - 1))


def check(model: CostModel, costs: dict, threads: int, cache_dir: str) -> list[dict]:
    """Predicted against measured speedups of the perf workloads, each one whole partition,
    set as predict() sets them, between ops XNNPACK runs: the invoke overhead comes off both
    times, and the fitted cost of cutting an XNNPACK partition is charged to the fused one."""
    rows = []
    invoke = costs["measured_us"]["invoke"]
    for n in CHECK_SIZES:
        split = model.costs(threads).split.us(n, model.breaks)
        for name, workload in CHECK_WORKLOADS.items():
            case = workload.case(n)
            methods = {"litert": interpreter(case.model, threads, None, case.inputs),
                       "fused": interpreter(case.model, threads, cache_dir, case.inputs)}
            t = {m: statistics.median(s) * 1e6
                 for m, s in timed_rounds(methods, 10 * ROUNDS, CHECK_SECONDS).items()}
            litert, fused = t["litert"] - invoke, t["fused"] - invoke + split
            predicted = model.predict(PartitionFeatures(
                tuple(partition_ops(case.model)), (partition_nest(case.model, n),)), threads)
            rows.append({
                "workload": name, "elements": n, "threads": threads, "ops": case.ops,
                "measured": {"litert_us": litert, "fused_us": fused, "speedup": litert / fused,
                             "invoke_speedup": t["litert"] / t["fused"]},
                "predicted": {"litert_us": predicted.litert_us, "fused_us": predicted.fused_us,
                              "speedup": predicted.speedup},
                "decision_right": (litert > fused) == (predicted.speedup > 1)})
    return rows


# ----------------------------------------------------------------------------------- report

def fixed_width(columns: tuple[str, ...], table: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in [columns, *table]) for i in range(len(columns))]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths))
                     for r in [columns, *table])


def costs_table(costs: dict, breaks: tuple[int, ...]) -> str:
    bands = [f"<={size_name(breaks[0])}",
             *(f"{size_name(a)}-{size_name(b)}" for a, b in zip(breaks, breaks[1:])),
             f">{size_name(breaks[-1])}"]
    columns = ("op", "c0_l us", *(f"c1_l ns {b}" for b in bands), "c1_f ns")
    table = [(name, f"{c['litert']['c0_us']:.3f}", *(f"{v:.3f}" for v in c["litert"]["c1_ns"]),
              f"{c['fused_ns']:.3f}") for name, c in costs["ops"].items()]
    for row in ("litert_first", "fused", "split", "split_heavy"):
        line = costs[row]
        table.append((f"({row})", f"{line['c0_us']:.3f}", *(f"{v:.3f}" for v in line["c1_ns"]),
                      ""))
    broadcast = ", ".join(f"{run}: {factor:.2f}x" for run, factor in
                          zip(costs["broadcast"]["runs"], costs["broadcast"]["factors"]))
    return (fixed_width(columns, table) + f"\ninvoke overhead "
            f"{costs['measured_us']['invoke']:.3f} us, on both sides; split: cutting an "
            f"XNNPACK partition in two between elementwise ops, split_heavy: between "
            f"convolutions; broadcast runs (LiteRT's {BROADCAST_OP} cost factor): "
            f"{broadcast}")


def check_table(rows: list[dict]) -> str:
    columns = ("workload", "elems", "threads", "litert_us", "fused_us", "speedup",
               "pred_litert", "pred_fused", "pred_speedup", "invoke_speedup", "decision")
    return fixed_width(columns, [
        (r["workload"], size_name(r["elements"]), r["threads"],
         f"{r['measured']['litert_us']:.2f}", f"{r['measured']['fused_us']:.2f}",
         f"{r['measured']['speedup']:.2f}", f"{r['predicted']['litert_us']:.2f}",
         f"{r['predicted']['fused_us']:.2f}", f"{r['predicted']['speedup']:.2f}",
         f"{r['measured']['invoke_speedup']:.2f}", "ok" if r["decision_right"] else "WRONG")
        for r in rows])


def rounded(value: object) -> object:
    """Four significant digits, far finer than the noise: a readable, diffable file."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


# ------------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="interpreter thread counts to measure (1)")
    parser.add_argument("--ops", nargs="+",
                        choices=sorted(ALL_OPS), default=ALL_OPS,
                        help="only these ops (a partial model, for trying things out)")
    parser.add_argument("--update", action="store_true",
                        help="refit only the --ops of the model at --out, keeping the rest")
    parser.add_argument("--passes", type=int, default=PASSES,
                        help=f"rounds over every op and size ({PASSES})")
    parser.add_argument("--out", type=Path, default=shipped_file(host_cpu_name()),
                        help="where to write the model (this CPU's shipped one, "
                             "fusion_delegate/cost_model.<LLVM's name for it>.json)")
    return parser.parse_args(argv)


def update(path: Path, tables: dict, ops: list[str], header: dict) -> dict:
    """The model at `path` with the costs of `ops` refit from `tables`, the rest as it was: a
    kernel change to a few ops refits them without a whole new fit's noise elsewhere. The
    header lists each update."""
    data = json.loads(path.read_text())
    CostModel.from_json(data, str(path))
    for threads, table in tables.items():
        if threads not in data["threads"]:
            raise SystemExit(f"{path} has no {threads}-thread costs to update")
        old = data["threads"][threads]
        for name in ops:
            old["ops"][name] = table["ops"][name]
            old["measured_us"]["chains"][name] = table["measured_us"]["chains"][name]
    data["header"].setdefault("updates", []).append({**header, "ops": ops})
    return data


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.update and args.ops == ALL_OPS:
        raise SystemExit("--update refits the ops named by --ops")
    ops = list(dict.fromkeys([BASE, BROADCAST_OP, SEPARATOR, *args.ops]))
    started, load = time.perf_counter(), os.getloadavg()[0]
    breaks = SIZES[1:-1]
    tables, checks = {}, []
    with tempfile.TemporaryDirectory(prefix="fusion_calibrate_") as cache_dir:
        for threads in args.threads:
            tables[str(threads)] = fit(measure(threads, cache_dir, ops, args.passes), ops)
        header = {
            "command": " ".join(["python perf/calibrate.py", *sys.argv[1:]]),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": cpu_info(), "versions": versions(),
            # The fused costs hold for kernels of this width (worth.CostModel.vector_bytes).
            "vector_bytes": numba_target().vector_bytes,
            "sizes": list(SIZES), "fused_size": FUSED_SIZE, "chains": list(K),
            "passes": args.passes, "batch_seconds": BATCH_SECONDS,
            "note": "LiteRT = Interpreter(num_threads=threads), XNNPACK applied; the fused "
                    "costs change as the kernels do: rerun perf/calibrate.py to refit",
        }
        for threads in args.threads:
            print(f"\nfitted costs, {threads} thread(s):\n"
                  f"{costs_table(tables[str(threads)], breaks)}")
        if args.update:
            data = update(args.out, tables, args.ops, {
                key: header[key] for key in ("command", "date", "versions", "passes")})
        else:
            data = {"format": FORMAT, "header": header, "breaks": list(breaks),
                    "threads": tables}
            model = CostModel.from_json(data, "fitted model")
            for threads in args.threads:
                checks += check(model, tables[str(threads)], threads, cache_dir)
            data["check"] = checks
    header.update(seconds=round(time.perf_counter() - started),
                  load_average=[load, os.getloadavg()[0]])
    if checks:
        print("\nmeasured vs predicted, each perf workload one partition between XNNPACK ops "
              "(us without the invoke overhead; invoke_speedup: whole models):\n"
              + check_table(checks))
    args.out.write_text(json.dumps(rounded(data), indent=1) + "\n")
    right = sum(r["decision_right"] for r in checks)
    print(f"\n{f'{right} of {len(checks)} decisions right; ' if checks else ''}wrote {args.out} "
          f"in {header['seconds']} s (load average {load:.1f} -> {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
