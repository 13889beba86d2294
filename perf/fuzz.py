"""Performance fuzz: random elementwise graphs between two convolutions, delegate vs LiteRT.

    python perf/fuzz.py --cases 100 --threads 1 2 --out perf/FUZZ.md

Each case is a model a converter could emit: a 1x1 CONV_2D (XNNPACK's), a random graph of
1-12 elementwise ops (float32 or full-integer int8; operands drawn from the values so far and
from constants: one value, per channel [C], per pixel [1, H, W, 1]) of 1K-2M elements with
1-512 channels, and a second CONV_2D reading the graph's last value. The model runs under
LiteRT's default path twice (two identical interpreters: their gap is the noise) and with the
delegate at its defaults, in interleaved rounds (perf/timing.py), at each thread count. The
delegate must never be slower: the summary counts the cases at >= 0.97x and below 0.9x of
LiteRT (the mean of the twins).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import ModelBuilder, Quantization  # noqa: E402
from fusion_delegate.runtime import Interpreter  # noqa: E402
from fusion_delegate.tools.runner import random_inputs, set_inputs  # noqa: E402
from perf import models  # noqa: E402
from perf.suite import cpu_info, versions  # noqa: E402
from perf.timing import interleaved  # noqa: E402

ACTIVATIONS = (0, 1, 3)                          # NONE, RELU, RELU6
FLOAT_UNARY = ("TANH", "LOGISTIC", "RELU", "RELU6", "HARD_SWISH", "ABS", "NEG", "GELU", "EXP")
FLOAT_BINARY = ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "DIV")
INT8_UNARY = ("HARD_SWISH", "LOGISTIC", "TANH", "RELU", "RELU6", "LEAKY_RELU")
INT8_BINARY = ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM")
#: Output quantization LiteRT's int8 kernels require.
FIXED_OUTPUT = {"LOGISTIC": (1 / 256, -128), "TANH": (1 / 128, 0)}
ARITHMETIC = ("ADD", "SUB", "MUL", "DIV")


@dataclass
class Case:
    number: int
    dtype: str
    shape: tuple[int, ...]
    ops: tuple[str, ...]
    threads: int = 1
    claimed: int = 0
    litert_us: float = 0.0
    twin_gap: float = 0.0         # |A - B| / mean of the two LiteRT interpreters
    ratio: float = 0.0            # LiteRT / delegate
    error: str = ""


class RandomGraph:
    """Builds one case's model."""

    def __init__(self, rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> None:
        self.rng, self.dtype, self.shape = rng, dtype, shape
        self.channels = shape[-1]
        self.b = ModelBuilder("fuzz")
        self.quantized = dtype == "int8"
        self.values: list[int] = []
        self.ops: list[str] = []

    def q(self) -> Quantization | None:
        if not self.quantized:
            return None
        return Quantization.per_tensor(float(self.rng.uniform(0.02, 0.1)),
                                       int(self.rng.integers(-20, 21)))

    def conv(self, x: int, name: str) -> int:
        c = self.channels
        if not self.quantized:
            weights = self.rng.uniform(-1, 1, (c, 1, 1, c)).astype(np.float32) / math.sqrt(c)
            return self.b.op("CONV_2D", [x, self.b.const(f"{name}_w", weights),
                                         self.b.const(f"{name}_b", np.zeros(c, np.float32))],
                             {"padding": 0, "stride_w": 1, "stride_h": 1}, name=name,
                             shape=self.shape)
        scales = np.full(c, 0.01, np.float32)
        weights = self.rng.integers(-127, 128, (c, 1, 1, c)).astype(np.int8)
        in_scale = float(self.b.build().subgraphs[0].tensors[x].quantization.scale[0])
        bias = self.b.const(f"{name}_b", np.zeros(c, np.int32),
                            Quantization(scales * np.float32(in_scale), np.zeros(c, np.int64)))
        return self.b.op("CONV_2D", [x, self.b.const(
            f"{name}_w", weights, Quantization(scales, np.zeros(c, np.int64), 0)), bias],
                         {"padding": 0, "stride_w": 1, "stride_h": 1}, name=name,
                         shape=self.shape, quantization=self.q())

    def constant(self) -> int:
        kind = self.rng.integers(3)
        shape = ((), (self.channels,), (1, *self.shape[1:3], 1))[kind]
        data = self.rng.uniform(0.5, 1.5, shape)
        if not self.quantized:
            return self.b.const(f"c{len(self.ops)}", data.astype(np.float32))
        return self.b.const(f"c{len(self.ops)}", self.rng.integers(-50, 50, shape).astype(np.int8),
                            Quantization.per_tensor(0.02, 0))

    def op(self) -> None:
        unary, binary = ((INT8_UNARY, INT8_BINARY) if self.quantized
                         else (FLOAT_UNARY, FLOAT_BINARY))
        x = self.values[int(self.rng.integers(max(0, len(self.values) - 3), len(self.values)))]
        quantization = self.q()
        if self.rng.random() < 0.5:
            name = str(self.rng.choice(unary))
            operands = [x]
            options = {"alpha": 0.2} if name == "LEAKY_RELU" else (
                {"approximate": True} if name == "GELU" else None)
            if name in FIXED_OUTPUT and self.quantized:
                quantization = Quantization.per_tensor(*FIXED_OUTPUT[name])
        else:
            name = str(self.rng.choice(binary))
            other = (self.constant() if self.rng.random() < 0.6 or len(self.values) < 2
                     else self.values[int(self.rng.integers(len(self.values)))])
            operands = [x, other] if self.rng.random() < 0.8 else [other, x]
            if name == "DIV":
                operands = [x, self.constant()]
            options = ({"fused_activation_function": int(self.rng.choice(ACTIVATIONS))}
                       if name in ARITHMETIC else None)
        self.values.append(self.b.op(name, operands, options, shape=self.shape,
                                     quantization=quantization))
        self.ops.append(name)

    def model(self, count: int) -> bytes:
        x = self.b.input("x", self.shape, np.int8 if self.quantized else np.float32, self.q())
        self.values.append(self.conv(x, "conv_in"))
        for _ in range(count):
            self.op()
        self.b.output(self.conv(self.values[-1], "conv_out"))
        return self.b.to_bytes()


def random_case(rng: np.random.Generator, number: int) -> tuple[Case, bytes]:
    dtype = "int8" if rng.random() < 0.5 else "float32"
    channels = int(2 ** rng.uniform(0, 9))
    elements = int(2 ** rng.uniform(10, 21))
    pixels = max(1, elements // channels)
    width = int(2 ** round(math.log2(pixels) / 2))
    shape = (1, max(1, pixels // width), width, channels)
    graph = RandomGraph(rng, dtype, shape)
    model = graph.model(int(rng.integers(1, 13)))
    return Case(number, dtype, shape, tuple(graph.ops)), model


def random_cases(seed: int, count: int, only: list[int] | None = None):
    """The run's cases in order, or those numbered in `only`: every case is drawn from the
    seed's one generator, so case N is the same model whichever cases are timed."""
    rng = np.random.default_rng(seed)
    for number in range(count):
        case, model = random_case(rng, number)
        if not only or number in only:
            yield case, model


def interpreter(model: bytes, threads: int, delegate: FusionDelegate | None) -> Interpreter:
    """perf.models' interpreter, fed random inputs and run once."""
    it = models.interpreter(model, threads, delegate)
    set_inputs(it, random_inputs(it, np.random.default_rng(0)))
    it.invoke()
    return it


def measure(case: Case, model: bytes, threads: int, seconds: float) -> Case:
    case = Case(**{**asdict(case), "threads": threads})
    try:
        delegate = FusionDelegate()
        methods = {name: interpreter(model, threads, d).invoke for name, d in
                   (("litert", None), ("twin", None), ("delegate", delegate))}
    except Exception as error:  # noqa: BLE001 - a case LiteRT cannot run is reported, not fatal
        case.error = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
        return case
    case.claimed = sum(c.reason is None for c in delegate.claims.values())
    times = interleaved(methods, rounds=201, batch_seconds=0.002, budget_seconds=seconds)
    a, b = times["litert"].median, times["twin"].median
    case.litert_us = (a + b) / 2 * 1e6
    case.twin_gap = abs(a - b) / ((a + b) / 2)
    case.ratio = (a + b) / 2 / times["delegate"].median
    return case


def summary(cases: list[Case]) -> list[str]:
    lines = ["| threads | cases | claimed any | >= 0.97x | < 0.9x | lowest | geomean (claimed) |",
             "|---|---|---|---|---|---|---|"]
    for threads in sorted({c.threads for c in cases}):
        ran = [c for c in cases if c.threads == threads and not c.error]
        claimed = [c for c in ran if c.claimed]
        if not ran:
            continue
        good = sum(c.ratio >= 0.97 for c in ran)
        geomean = math.exp(sum(math.log(c.ratio) for c in claimed) / len(claimed)) if claimed else 1
        lowest = min(ran, key=lambda c: c.ratio)
        lines.append(f"| {threads} | {len(ran)} | {len(claimed)} | {good} ({good / len(ran):.0%}) "
                     f"| {sum(c.ratio < 0.9 for c in ran)} | {lowest.ratio:.3f}x "
                     f"(case {lowest.number}) | {geomean:.3f}x |")
    return lines


def table(cases: list[Case]) -> list[str]:
    lines = ["| case | threads | dtype | shape | ops | claimed | LiteRT us | twins' gap | speedup |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        result = c.error or f"{c.ratio:.3f}x"
        lines.append(f"| {c.number} | {c.threads} | {c.dtype} | {list(c.shape)} | "
                     f"{' '.join(c.ops)} | {c.claimed} | {c.litert_us:.1f} | "
                     f"{c.twin_gap:.1%} | {result} |")
    return lines


def described(fields: dict[str, str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in fields.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=1.5, help="timing budget per case")
    parser.add_argument("--out", type=Path, default=ROOT / "perf" / "FUZZ.md")
    parser.add_argument("--save", type=Path, help="write each case's model to DIR/case_N.tflite")
    parser.add_argument("--only", type=int, nargs="+", help="time only these cases (the same "
                        "models as in the whole run)")
    args = parser.parse_args(argv)
    cases = []
    for case, model in random_cases(args.seed, args.cases, args.only):
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"case_{case.number}.tflite").write_bytes(model)
        for threads in args.threads:
            cases.append(measure(case, model, threads, args.seconds))
            print(table([cases[-1]])[-1], flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = [f"# Performance fuzz ({stamp})", "",
            f"`python perf/fuzz.py --cases {args.cases} --threads "
            f"{' '.join(map(str, args.threads))} --seed {args.seed}` on {described(cpu_info())}; "
            f"{described(versions())}. Delegate at its defaults vs LiteRT's default path (the mean of two "
            "identical interpreters; their gap is the noise under each ratio).", "",
            *summary(cases), "", *table(cases), ""]
    args.out.write_text("\n".join(text))
    args.out.with_suffix(".json").write_text(json.dumps([asdict(c) for c in cases], indent=1))
    print("\n".join(summary(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
