"""Depthwise convolutions fused against LiteRT's default path: `python perf/stencil.py`.

One model per case, built with ModelBuilder: a float32 DEPTHWISE_CONV_2D (SAME, bias, no
activation) and, with `+chain`, an ADD of the conv's input (a residual) and a HARD_SWISH after
it; with `--int8`, the full-integer int8 convolution (per-channel weights, int32 bias) and
chain instead. Each is timed under LiteRT's default path (XNNPACK, perf.models.interpreter) and with
`FusionDelegate(min_speedup=0)`, which claims it whatever the policy says, in interleaved rounds
(perf/timing.py), one thread; the ratio is LiteRT's median over the delegate's (the claim
policy's rule, policy.py, comes from these). When openvino is installed, the model compiled by
OpenVINO (perf/peers.py, float32, one thread) is timed in the same rounds: `ov_ratio` is
LiteRT's median over OpenVINO's, `ov_rel_err` max |openvino - litert| / max |litert|.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python perf/stencil.py` from anywhere

import numpy as np  # noqa: E402

from codegen.window import conv_output_shape  # noqa: E402
from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.model import ModelBuilder, Quantization  # noqa: E402
from perf import peers  # noqa: E402
from perf.models import interpreter, openvino_peer  # noqa: E402
from perf.timing import interleaved  # noqa: E402

#: (input shape, kernel size, stride): the corpus's shapes (convnext_small's are its own).
CASES = [((1, 56, 56, 32), 7, 1), ((1, 28, 28, 64), 7, 1), ((1, 14, 14, 128), 7, 1),
         ((1, 32, 32, 24), 7, 1), ((1, 16, 16, 48), 7, 1), ((1, 8, 8, 96), 7, 1),
         ((1, 56, 56, 48), 3, 1), ((1, 56, 56, 48), 3, 2), ((1, 28, 28, 96), 3, 1),
         ((1, 56, 56, 48), 5, 1), ((1, 28, 28, 96), 5, 1), ((1, 28, 28, 96), 5, 2),
         ((1, 14, 14, 240), 5, 1), ((1, 112, 112, 32), 3, 1), ((1, 112, 112, 16), 3, 2),
         ((1, 28, 28, 72), 3, 1), ((1, 28, 28, 88), 3, 1), ((1, 14, 14, 120), 5, 1),
         ((1, 14, 14, 576), 5, 1), ((1, 7, 7, 1152), 5, 1)]


def conv_model(shape: tuple[int, ...], kernel: int, stride: int, chain: bool) -> bytes:
    """DEPTHWISE_CONV_2D over `shape`, maybe with a residual ADD and a HARD_SWISH after it."""
    rng = np.random.default_rng(0)
    channels = shape[3]
    b = ModelBuilder()
    x = b.input("x", shape)
    weights = b.const("weights", rng.standard_normal((1, kernel, kernel, channels))
                      .astype(np.float32) * 0.1)
    bias = b.const("bias", rng.standard_normal(channels).astype(np.float32))
    y = _conv(b, [x, weights, bias], shape, kernel, stride)
    if chain and stride == 1:
        y = b.op("HARD_SWISH", [b.op("ADD", [y, x], {"fused_activation_function": 0})])
    b.output(y)
    return b.to_bytes()


def _conv(b: ModelBuilder, inputs: list[int], shape: tuple[int, ...], kernel: int, stride: int,
          **kwargs) -> int:
    """A SAME-padded, undilated DEPTHWISE_CONV_2D of `inputs` (data, weights, bias)."""
    out = conv_output_shape(shape, (1, kernel, kernel, shape[3]),
                            {"padding": "same", "strides": (stride, stride),
                             "dilations": (1, 1)})
    return b.op("DEPTHWISE_CONV_2D", inputs,
                {"padding": 0, "stride_w": stride, "stride_h": stride, "depth_multiplier": 1,
                 "fused_activation_function": 0, "dilation_w_factor": 1,
                 "dilation_h_factor": 1}, shape=out, name="conv", **kwargs)


def int8_conv_model(shape: tuple[int, ...], kernel: int, stride: int, chain: bool) -> bytes:
    """The int8 DEPTHWISE_CONV_2D over `shape` (weights per output channel, as the converter
    quantizes them), maybe with a residual ADD and a HARD_SWISH after it."""
    rng = np.random.default_rng(0)
    channels = shape[3]
    q = Quantization.per_tensor
    scales = (0.01 * rng.uniform(0.5, 2.0, channels)).astype(np.float32)
    b = ModelBuilder()
    x = b.input("x", shape, np.int8, q(0.05, -3))
    weights = b.const("weights", rng.integers(-127, 128, (1, kernel, kernel, channels))
                      .astype(np.int8), Quantization(scales, np.zeros(channels, np.int64), 3))
    bias = b.const("bias", rng.integers(-2000, 2000, channels).astype(np.int32),
                   Quantization(scales * np.float32(0.05), np.zeros(channels, np.int64), 0))
    y = _conv(b, [x, weights, bias], shape, kernel, stride, quantization=q(0.1, 2))
    if chain and stride == 1:
        y = b.op("ADD", [y, x], {"fused_activation_function": 0}, quantization=q(0.12, 1))
        y = b.op("HARD_SWISH", [y], quantization=q(0.1, -20))
    b.output(y)
    return b.to_bytes()


def time_case(model: bytes, x: np.ndarray, rounds: int, with_openvino: bool) -> str:
    """The case's columns after its name: LiteRT, the delegate, their ratio, then OpenVINO's
    time, ratio and error (or why it was skipped) when `with_openvino`."""
    litert = interpreter(model, 1)
    delegate = FusionDelegate(min_speedup=0.0)
    fused = interpreter(model, 1, delegate)
    assert delegate.kernels, f"not claimed: {delegate.claims}"
    for it in (litert, fused):
        it.set_tensor(it.get_input_details()[0]["index"], x)
    methods, note = {"litert": litert.invoke, "fused": fused.invoke}, ""
    if with_openvino:
        try:
            methods["openvino"], error = openvino_peer(model, litert, 1)
        except peers.Unsupported as reason:
            note = f" openvino skipped: {reason}"
    times = interleaved(methods, rounds, 0.02)
    a, b = times["litert"].median * 1e6, times["fused"].median * 1e6
    line = f"{a:>10.1f} {b:>10.1f} {a / b:>6.2f}x"
    if "openvino" in times:
        c = times["openvino"].median * 1e6
        line += f" {c:>11.1f} {a / c:>7.2f}x {error:>10.1e}"
    return line + note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--chain", action="store_true", help="also the +chain models")
    parser.add_argument("--int8", action="store_true", help="int8 models instead of float32")
    parser.add_argument("--kernels", type=int, nargs="+", help="only these kernel sizes")
    parser.add_argument("--no-openvino", action="store_true",
                        help="leave out OpenVINO even when it is installed")
    args = parser.parse_args()
    with_openvino = not args.no_openvino and peers.installed(peers.OPENVINO) is not None
    print(f"{'case':<32} {'litert_us':>10} {'fused_us':>10} {'ratio':>7}"
          + f" {'openvino_us':>11} {'ov_ratio':>8} {'ov_rel_err':>10}" * with_openvino)
    for shape, kernel, stride in CASES:
        if args.kernels and kernel not in args.kernels:
            continue
        for chain in (False, True) if args.chain else (False,):
            if chain and stride != 1:
                continue
            model = (int8_conv_model if args.int8 else conv_model)(shape, kernel, stride, chain)
            x = (np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)
                 if args.int8 else np.random.default_rng(1).standard_normal(shape)
                 .astype(np.float32))
            name = f"{list(shape)} {kernel}x{kernel} s{stride}{' +chain' * chain}"
            print(f"{name:<32} {time_case(model, x, args.rounds, with_openvino)}", flush=True)


if __name__ == "__main__":
    main()
