"""Every fused op against the builtin kernel of the runtime hosting the delegate, op by op.

The fused kernels reproduce LiteRT's builtin kernels as ai-edge-litert >= 2.1.6 has them. Older
runtimes' kernels differ in known ways, listed in DEVIATIONS with the versions that show them
(measured on each version, see the README's "Supported runtimes"): a difference not listed
there, or a listed one that no longer occurs, fails. One model holds every op (one kernel to
compile), on a sweep of values with NaN, +-inf, +-0, huge and subnormal ones, and on a 4-D
broadcast. (Several runtimes abort in their own DIV, SQUARED_DIFFERENCE, MAXIMUM, MINIMUM and
POW on 6-D broadcasts, which the delegate computes: nothing to compare there.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from codegen.ops import OPS
from conftest import builtin_interpreter, run
from fusion_delegate import FusionDelegate, runtime
from fusion_delegate.model import ModelBuilder

N = 4096
BROADCAST = ((2, 3, 1, 5), (1, 3, 4, 1))
OPTIONS = {"LEAKY_RELU": {"alpha": 0.2}}
FLOAT_OPS = [name for name, spec in OPS.items() if spec.code >= 0 and "float32" in spec.dtypes]


def sweep(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.linspace(-20, 20, n // 2, dtype=np.float32),
                        (rng.standard_normal(n - n // 2) * 3).astype(np.float32)])
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, 1e30, -1e-30, 1e-40,
                         -1e-45, 2.5, -0.5, -2.5, 0.5, -3.0, 3.0, 1e5, -1e5], np.float32)
    x[:len(specials)] = specials
    return rng.permutation(x)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in representable float32 values (inf where either is NaN)."""
    def ordered(v):
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    with np.errstate(invalid="ignore"):
        d = np.abs(ordered(a) - ordered(b)).astype(np.float64)
    return np.where(np.isnan(a) | np.isnan(b), np.inf, d)


@dataclass(frozen=True)
class Deviation:
    """Where the host's kernel differs from the fused one, and why."""
    what: str
    allowed: Callable  # (inputs, fused, host) -> bool mask of the elements allowed to differ


def _positive_zero_for(x_mask):
    return lambda x, fused, host: x_mask(x) & (host == 0) & ~np.signbit(host)


NAN_SIGN = Deviation("SIGN(NaN) is 0, not NaN",
                     lambda x, fused, host: np.isnan(x[0]) & (host == 0))
RELU6_ZEROS = Deviation("RELU6 gives +0 for NaN and for -0",
                        _positive_zero_for(lambda x: np.isnan(x[0]) | (x[0] == 0)))
SIGNED_ZERO = Deviation("+0 where the result is -0",
                        lambda x, fused, host: (fused == 0) & np.signbit(fused) & (host == 0)
                        & ~np.signbit(host))
OLD_EIGEN = Deviation("an older Eigen approximation, within 8 ulp",
                      lambda x, fused, host: ulps(fused, host) <= 8)
OLD_HARD_SWISH = Deviation("x * relu6(x + 3) / 6 rounded differently (2 ulp), inf above ~1e38",
                           lambda x, fused, host: (ulps(fused, host) <= 2)
                           | ((np.abs(x[0]) > 1e38) & np.isinf(host)))
OLD_GELU = Deviation("older Eigen tanh / erfc: within 1e-6 absolute",
                     lambda x, fused, host: np.abs(fused.astype(np.float64) - host) <= 1e-6)

#: (runtime, first version, first version without) -> the ops whose host kernel deviates.
#: Measured on ai-edge-litert 1.2.0 and 1.3.0 (SIGN, RELU6), 1.4.0, 2.0.2, 2.1.0, 2.1.3, 2.1.4
#: and 2.1.5 (SIGN), 2.1.6, 2.2.0 and 2.3.0 (none); tensorflow 2.18.1 and 2.19.1 (SIGN, RELU6,
#: TANH, GELU), 2.20.0 and 2.21.0 (SIGN); tflite-runtime 2.14.0 (all of its list).
DEVIATIONS: dict[tuple[str, tuple[int, ...], tuple[int, ...]], dict[str, Deviation]] = {
    ("ai-edge-litert", (1, 2), (1, 4)): {"SIGN": NAN_SIGN, "RELU6": RELU6_ZEROS},
    ("ai-edge-litert", (1, 4), (2, 1, 6)): {"SIGN": NAN_SIGN},
    ("tensorflow", (2, 18), (2, 20)): {"SIGN": NAN_SIGN, "RELU6": RELU6_ZEROS,
                                       "TANH": OLD_EIGEN, "GELU": OLD_GELU},
    ("tensorflow", (2, 20), (2, 22)): {"SIGN": NAN_SIGN},
    ("tflite-runtime", (2, 14), (2, 15)): {
        "SIGN": NAN_SIGN, "RELU6": RELU6_ZEROS, "FLOOR": SIGNED_ZERO, "CEIL": SIGNED_ZERO,
        "TANH": OLD_EIGEN, "HARD_SWISH": OLD_HARD_SWISH, "GELU": OLD_GELU},
}


def deviations(name: str, version: str) -> dict[str, Deviation]:
    parsed = runtime.parse_version(version)
    for (runtime_name, first, below), ops in DEVIATIONS.items():
        if runtime_name == name and first <= parsed < below:
            return ops
    return {}


def all_ops_model() -> tuple[bytes, list[tuple[str, int]]]:
    """Every op on (x, y) of shape [N], and every binary op but PRELU on a 4-D broadcast."""
    b = ModelBuilder()
    x, y = b.input("x", (N,)), b.input("y", (N,))
    bx, by = b.input("bx", BROADCAST[0]), b.input("by", BROADCAST[1])
    outputs = []
    for name in FLOAT_OPS:
        spec = OPS[name]
        options = dict(OPTIONS.get(name, {}))
        if spec.fused_activation:
            options["fused_activation_function"] = 0
        variants = [dict(options, approximate=a) for a in (False, True)] if name == "GELU" \
            else [options]
        for opts in variants:
            # PRELU's output has its input's shape: it broadcasts alpha only.
            operands = ([[x, y], [bx, by]] if spec.arity == 2 and name != "PRELU"
                        else [[x, y]] if spec.arity == 2 else [[x]])
            for inputs in operands:
                out = b.op(name, inputs, opts, name=f"{name.lower()}_{len(outputs)}")
                b.output(out)
                outputs.append((name, inputs[0] == bx))
    return b.to_bytes(), outputs


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    model, outputs = all_ops_model()
    x, y = sweep(N, 1), sweep(N, 2)
    rng = np.random.default_rng(3)
    bx, by = (rng.choice(sweep(256, 4), s).astype(np.float32) for s in BROADCAST)
    inputs = [x, y, bx, by]
    host = run(builtin_interpreter(model), inputs)
    delegate = FusionDelegate(cache_dir=str(tmp_path_factory.mktemp("kernels")),
                              min_speedup=0.0, min_nodes_per_partition=1, precision="exact")
    fused = run(builtin_interpreter(model, [delegate]), inputs)
    unclaimed = {c.index: c.reason for c in delegate.claims.values() if c.reason is not None}
    assert not unclaimed, f"nodes left to the runtime: {unclaimed}"
    return outputs, inputs, host, fused


def test_every_op_matches_the_host_kernel_or_deviates_as_listed(results):
    outputs, (x, y, bx, by), host, fused = results
    listed = deviations(runtime.NAME, runtime.VERSION)
    seen, problems = set(), []
    for (name, broadcast), h, f in zip(outputs, host, fused):
        spec = OPS[name]
        operands = np.broadcast_arrays(bx, by) if broadcast else (x, y)
        both_nan = np.isnan(h) & np.isnan(f)
        same = both_nan | (h.view(np.int32) == f.view(np.int32))
        tol = spec.tolerance
        with np.errstate(invalid="ignore", over="ignore"):
            within = (np.isfinite(h) & np.isfinite(f) & ~((h == 0) & (f == 0))
                      & (np.abs(f.astype(np.float64) - h) <= tol.ulp * np.spacing(np.abs(h))
                         + tol.abs))
        differ = ~(same | within)
        if name in listed:
            allowed = listed[name].allowed(operands, f, h)
            if (differ & allowed).any():
                seen.add(name)
            differ &= ~allowed
        if differ.any():
            i = np.flatnonzero(differ)[:4]
            problems.append(f"{name}{' (broadcast)' if broadcast else ''}: {differ.sum()} "
                            f"differ, e.g. at x={operands[0].reshape(-1)[i]}: fused "
                            f"{f.reshape(-1)[i]}, {runtime.NAME} {h.reshape(-1)[i]}")
    assert not problems, f"{runtime.NAME} {runtime.VERSION}:\n" + "\n".join(problems)
    stale = set(listed) - seen
    assert not stale, f"listed deviations that no longer occur: {sorted(stale)}"
