"""Per-op cost of the int8 fixed-point kernels: `python perf/int8_ops.py [--sizes 16K 256K]`.

One single-op int8 model per row (two int8 inputs of the same shape, or a float input for
QUANTIZE), timed as LiteRT default (XNNPACK), LiteRT's builtin kernels and the fused kernel
(min_speedup=0) in the same interleaved rounds; ns per output element and the ratio to
XNNPACK. The outputs are checked bit for bit against the builtin kernels first. Each cell
is the median over rounds and, after the slash, the fastest round: on a loaded machine the
fastest round is the one the neighbours disturbed least.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import ModelBuilder, Quantization  # noqa: E402
from perf.suite import (BUILTIN, DEFAULT, DELEGATE, delegate_options, interpreter,  # noqa: E402
                        output, parse_size, set_inputs, size_name)
from perf.timing import interleaved  # noqa: E402

CHANNELS = 256
Q1, Q2, QO = (Quantization.per_tensor(0.05, 3), Quantization.per_tensor(0.03, -7),
              Quantization.per_tensor(0.06, 2))


def binary_model(op: str, rows: int, per_channel: bool) -> tuple[bytes, dict]:
    """`op` of two int8 tensors [rows, C], or of one and a constant [C] (per-channel)."""
    rng = np.random.default_rng(0)
    b = ModelBuilder(op.lower())
    x = b.input("x", (rows, CHANNELS), np.int8, Q1)
    inputs = {"x": rng.integers(-128, 128, (rows, CHANNELS), np.int8)}
    if per_channel:
        y = b.const("y", rng.integers(-128, 128, CHANNELS).astype(np.int8), Q2)
    else:
        y = b.input("y", (rows, CHANNELS), np.int8, Q2)
        inputs["y"] = rng.integers(-128, 128, (rows, CHANNELS), np.int8)
    b.output(b.op(op, [x, y], {"fused_activation_function": 0}, quantization=QO))
    return b.to_bytes(), inputs


def quantize_model(rows: int) -> tuple[bytes, dict]:
    """QUANTIZE float32 -> int8."""
    b = ModelBuilder("quantize")
    x = b.input("x", (rows, CHANNELS))
    b.output(b.op("QUANTIZE", [x], dtype=np.int8, quantization=QO))
    data = np.random.default_rng(0).standard_normal((rows, CHANNELS)).astype(np.float32) * 4
    return b.to_bytes(), {"x": data}


CASES = {
    "add": lambda rows: binary_model("ADD", rows, False),
    "add_bias": lambda rows: binary_model("ADD", rows, True),
    "sub": lambda rows: binary_model("SUB", rows, False),
    "mul": lambda rows: binary_model("MUL", rows, False),
    "mul_scale": lambda rows: binary_model("MUL", rows, True),
    "quantize": quantize_model,
}


def run(case: str, elements: int, threads: int, cache_dir: str) -> dict[str, tuple]:
    """ns per element of each method: (median, fastest) of interleaved rounds."""
    model, inputs = CASES[case](max(1, elements // CHANNELS))
    delegate = FusionDelegate(**delegate_options(cache_dir, threads))
    its = {DEFAULT: interpreter(model, DEFAULT, threads),
           BUILTIN: interpreter(model, BUILTIN, threads),
           DELEGATE: interpreter(model, DELEGATE, threads, delegate)}
    assert delegate.kernels, f"{case}: {delegate.summary()}"
    for it in its.values():
        set_inputs(it, inputs)
        it.invoke()
    if not np.array_equal(output(its[DELEGATE]), output(its[BUILTIN])):
        raise AssertionError(f"{case}: the fused kernel differs from the builtin kernel")
    times = interleaved({m: it.invoke for m, it in its.items()}, 101, 0.002, 4.0)
    n = max(1, elements // CHANNELS) * CHANNELS
    return {m: (s.median * 1e9 / n, min(s.values) * 1e9 / n) for m, s in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256K"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}, threads {args.threads}, ns per element")
    print(f"{'case':10} {'size':>6} {'xnnpack':>13} {'builtin':>13} {'fused':>13} "
          f"{'vs_xnn':>11}")
    with tempfile.TemporaryDirectory() as cache_dir:
        for size in args.sizes:
            for case in args.cases:
                ns = run(case, parse_size(size), args.threads, cache_dir)
                cells = [f"{ns[m][0]:6.3f}/{ns[m][1]:.3f}" for m in (DEFAULT, BUILTIN, DELEGATE)]
                ratios = "/".join(f"{ns[DEFAULT][k] / ns[DELEGATE][k]:.2f}" for k in (0, 1)) + "x"
                print(f"{case:10} {size_name(parse_size(size)):>6} {' '.join(cells)} {ratios:>11}",
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
