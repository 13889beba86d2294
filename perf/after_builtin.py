"""What an XNNPACK op costs after a builtin kernel: `python perf/after_builtin.py [--threads 1 2]`.

The cost model prices LiteRT's ops at the interpreter's thread count, except where a builtin
kernel, which runs on the interpreter's thread alone, makes the partition's input: there
XNNPACK's ops are priced at their 1-thread cost (fusion_delegate/worth.py). This measures why:
an int8 squeeze-excite gate, MUL(h, s) with h [1, 40, 40, 72] and s [1, 1, 1, 72], after an
int8 HARD_SWISH (LiteRT's builtin kernel: XNNPACK does not run it) and after an int8 ADD
(XNNPACK). The MUL's cost is the model with it less the same model without it, both timed in
the same interleaved rounds (perf/timing.py), LiteRT's default path, no delegate.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate.model import ModelBuilder, Quantization  # noqa: E402
from fusion_delegate.tools.runner import set_inputs  # noqa: E402
from perf.models import interpreter  # noqa: E402
from perf.timing import interleaved  # noqa: E402

SHAPE, CHANNELS = (1, 40, 40, 72), 72
FIRST_OPS = ("HARD_SWISH", "ADD")


def gate_model(first: str, with_gate: bool) -> bytes:
    """x -> `first` (-> MUL by the per-channel s): the int8 tensors of a converter's model."""
    b = ModelBuilder(f"{first.lower()}_gate")
    x = b.input("x", SHAPE, np.int8, Quantization.per_tensor(0.05, 0))
    s = b.input("s", (1, 1, 1, CHANNELS), np.int8, Quantization.per_tensor(0.01, -128))
    add = first == "ADD"
    h = b.op(first, [x, x] if add else [x], {"fused_activation_function": 0} if add else None,
             quantization=Quantization.per_tensor(0.05, 0))
    if with_gate:
        h = b.op("MUL", [h, s], {"fused_activation_function": 0},
                 quantization=Quantization.per_tensor(0.02, 0))
    b.output(h)
    return b.to_bytes()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=61)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-100, 100, SHAPE, np.int8),
              rng.integers(-100, 100, (1, 1, 1, CHANNELS), np.int8)]
    for threads in args.threads:
        methods = {}
        for first in FIRST_OPS:
            for with_gate in (False, True):
                it = interpreter(gate_model(first, with_gate), threads)
                set_inputs(it, inputs)
                methods[(first, with_gate)] = it.invoke
        times = interleaved(methods, args.rounds, 0.002, 8.0)
        for first in FIRST_OPS:
            gate_us = (times[(first, True)].median - times[(first, False)].median) * 1e6
            print(f"{threads} thread(s): the gate MUL after an int8 {first:10s} costs "
                  f"{gate_us:6.1f} us")


if __name__ == "__main__":
    main()
