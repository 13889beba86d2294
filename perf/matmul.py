"""int8 BATCH_MATMUL alone: `python perf/matmul.py [--rounds N]`.

One single-op model per shape (the attention products of the corpus's int8 ViTs, and of ViT-S
and BERT-tiny heads), timed as LiteRT default (which runs LiteRT's reference kernel: XNNPACK
does not take an int8 product of two tensors) and with the delegate at its defaults, in the
same interleaved rounds; each output checked bit for bit against LiteRT's first. Medians per
invoke, and the rate of multiply-adds.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import ModelBuilder, Quantization  # noqa: E402
from fusion_delegate.runtime import Interpreter  # noqa: E402
from perf.timing import interleaved  # noqa: E402

#: (what, lhs, rhs, adj_y)
SHAPES = (
    ("ViT int8 (corpus): scores, q @ k", (1, 4, 64, 16), (1, 4, 16, 64), False),
    ("ViT int8 (corpus): values, p @ v", (1, 4, 64, 64), (1, 4, 64, 16), False),
    ("ViT-S head: scores, q @ k^T (adj_y)", (1, 6, 197, 64), (1, 6, 197, 64), True),
    ("ViT-S head: values, p @ v", (1, 6, 197, 197), (1, 6, 197, 64), False),
    ("BERT-tiny: scores, q @ k^T (adj_y)", (1, 2, 128, 64), (1, 2, 128, 64), True),
)


def model(lhs: tuple[int, ...], rhs: tuple[int, ...], adj_y: bool) -> bytes:
    out = (*lhs[:-1], rhs[-2] if adj_y else rhs[-1])
    depth = lhs[-1]
    b = ModelBuilder()
    x = b.input("lhs", lhs, np.int8, Quantization.per_tensor(0.05, 3))
    y = b.input("rhs", rhs, np.int8, Quantization.per_tensor(0.04, -2))
    b.output(b.op("BATCH_MATMUL", [x, y], {"adj_x": False, "adj_y": adj_y}, shape=out,
                  dtype=np.int8, name="out",
                  quantization=Quantization.per_tensor(0.2 * math.sqrt(depth), 1)))
    return b.to_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    cache = tempfile.mkdtemp(prefix="fusion_delegate_matmul_")
    print("| shape | lhs @ rhs | LiteRT us | delegate us | speedup | LiteRT ns/MAC | "
          "delegate ns/MAC |")
    print("|---|---|---|---|---|---|---|")
    for what, lhs, rhs, adj_y in SHAPES:
        content = model(lhs, rhs, adj_y)
        litert = Interpreter(model_content=content, num_threads=1)
        fused = Interpreter(model_content=content, num_threads=1,
                            experimental_delegates=[FusionDelegate(cache_dir=cache)])
        inputs = [rng.integers(-128, 128, shape, dtype=np.int8) for shape in (lhs, rhs)]
        outputs = []
        for interpreter in (litert, fused):
            interpreter.allocate_tensors()
            for detail, data in zip(interpreter.get_input_details(), inputs):
                interpreter.set_tensor(detail["index"], data)
            interpreter.invoke()
            outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        if not np.array_equal(*outputs):
            print(f"{what}: the delegate's codes differ from LiteRT's", file=sys.stderr)
            return 1
        times = interleaved({"litert": litert.invoke, "fused": fused.invoke}, args.rounds, 0.005)
        macs = math.prod(outputs[0].shape) * lhs[-1]
        us = {name: samples.median * 1e6 for name, samples in times.items()}
        print(f"| {what} | {list(lhs)} @ {list(rhs)} | {us['litert']:.1f} | {us['fused']:.1f} "
              f"| {us['litert'] / us['fused']:.2f}x | {us['litert'] * 1e3 / macs:.3f} | "
              f"{us['fused'] * 1e3 / macs:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
