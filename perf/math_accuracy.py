"""Accuracy and throughput of codegen.mathf32 against numba's libm-backed float32 math.

    python perf/math_accuracy.py [--exhaustive]

For every function: max ulp error (and the input where it occurs) and mean ulp error against
a float64 reference (glibc's double functions, through numba), the max ulp error again with
mathf32._mul_add compiled unfused (a mul and an add: what a CPU without FMA computes) and
with the calling loop compiled with fastmath={"contract"} (FMA wherever LLVM can), and
ns/element on 1M float32 elements (1 thread, median of repeated runs), _mul_add fused and
unfused, next to the same loop calling numba's np.<fn>, math.erf or np.power on float32
(libm). Inputs: a log-uniform sample over all float32 plus a uniform sample of the active
range; --exhaustive takes every float32 bit pattern instead (unary functions; pow stays
sampled). Writes perf/math_accuracy.md and prints the table.
"""
import argparse
import datetime
import math
import pathlib
import re
import sys
import time

import llvmlite
import llvmlite.binding as llvm_binding
import numba
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from codegen import mathf32 as M  # noqa: E402

F = np.float32
SAMPLE = 4_000_000                  # per sample kind (log-uniform, active range) and function
THROUGHPUT_N = 1_000_000
REPEATS = 15
CHUNK = 1 << 25                     # --exhaustive: bit patterns per chunk
OUT = pathlib.Path(__file__).with_suffix(".md")


def _exp64(x):
    return np.exp(x)


def _log64(x):
    return np.log(x)


def _tanh64(x):
    return np.tanh(x)


def _logistic64(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erf64(x):
    return math.erf(x)


def _sin64(x):
    return np.sin(x)


def _cos64(x):
    return np.cos(x)


def _sqrt64(x):
    return np.sqrt(x)


def _libm_logistic(x):
    return F(1.0) / (F(1.0) + np.exp(-x))


_TRIG = (-float(M.SIN_COS_ACCURATE_MAX), float(M.SIN_COS_ACCURATE_MAX))
# name: (float64 reference, numba's libm float32 version, active range sampled for accuracy,
# range timed: typical values whose results are not subnormal, since subnormal results cost
# x86 microcode assists in both implementations)
UNARY = {
    "exp_f32": (_exp64, _exp64, (-104.0, 89.0), (-10.0, 10.0)),
    "log_f32": (_log64, _log64, (0.0, 4.0), (0.0, 10.0)),
    "tanh_f32": (_tanh64, _tanh64, (-10.0, 10.0), (-10.0, 10.0)),
    "logistic_f32": (_logistic64, _libm_logistic, (-104.0, 20.0), (-10.0, 10.0)),
    "erf_f32": (_erf64, _erf64, (-4.5, 4.5), (-4.5, 4.5)),
    "sin_f32": (_sin64, _sin64, _TRIG, (-10.0, 10.0)),
    "cos_f32": (_cos64, _cos64, _TRIG, (-10.0, 10.0)),
    "sqrt_f32": (_sqrt64, _sqrt64, (0.0, 4.0), (0.0, 10.0)),
}


def _jitted(fn):
    if isinstance(fn, numba.core.registry.CPUDispatcher):
        return fn
    return numba.njit(inline="always", error_model="numpy")(fn)


def unary_loop(fn, fastmath=False, to_float64=False, fused=True):
    """njit loop out[i] = fn(x[i]) over float32 x (cast to float64 for references)."""
    kernel = _jitted(fn)
    if to_float64:
        @numba.njit(error_model="numpy")
        def loop(x, out):
            for i in range(x.size):
                out[i] = kernel(np.float64(x[i]))
    else:
        @numba.njit(error_model="numpy", fastmath=fastmath)
        def loop(x, out):
            for i in range(x.size):
                out[i] = kernel(x[i])
    return loop if fused else M.compile_unfused(loop, 2)


def binary_loop(fn, fastmath=False, to_float64=False, fused=True):
    kernel = _jitted(fn)
    if to_float64:
        @numba.njit(error_model="numpy")
        def loop(x, y, out):
            for i in range(x.size):
                out[i] = kernel(np.float64(x[i]), np.float64(y[i]))
    else:
        @numba.njit(error_model="numpy", fastmath=fastmath)
        def loop(x, y, out):
            for i in range(x.size):
                out[i] = kernel(x[i], y[i])
    return loop if fused else M.compile_unfused(loop, 3)


def _pow64(x, y):
    return x ** y


def _libm_pow(x, y):
    return x ** y


def run(loop, *args, dtype=F):
    out = np.empty(args[0].shape, dtype)
    loop(*args, out)
    return out


def log_uniform(rng, n):
    x = rng.integers(0, 2**32, size=2 * n, dtype=np.uint64).astype(np.uint32).view(F)
    return x[np.isfinite(x)][:n]


class Stats:
    """Running max / argmax / mean of ulp errors over chunks of inputs."""

    def __init__(self):
        self.max, self.at, self.total, self.count = -1.0, None, 0.0, 0

    def add(self, err, *args):
        if err.size == 0:
            return
        i = int(np.argmax(err))
        if err[i] > self.max:
            self.max, self.at = float(err[i]), tuple(a[i] for a in args)
        finite = err[np.isfinite(err)]
        self.total += float(finite.sum())
        self.count += finite.size


def unary_inputs(name, exhaustive):
    """Chunks of float32 inputs for one function."""
    if exhaustive:
        for start in range(0, 2**32, CHUNK):
            x = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(F)
            yield x[np.isfinite(x)]
        return
    rng = np.random.default_rng(sum(map(ord, name)))
    lo, hi = UNARY[name][2]
    yield log_uniform(rng, SAMPLE)
    yield rng.uniform(lo, hi, SAMPLE).astype(F)


def pow_inputs():
    """x log-uniform with y chosen so x**y spans [1e-48, 1e41]; x near 1 with |y| <= 300;
    negative x with integer y; fully random pairs."""
    rng = np.random.default_rng(7)
    x = np.abs(log_uniform(rng, SAMPLE))
    x = x[x != 0]
    with np.errstate(all="ignore"):
        y = (rng.uniform(-110.0, 95.0, x.size) / np.log(x.astype(np.float64))).astype(F)
    yield x, y
    yield rng.uniform(0.5, 2.0, SAMPLE).astype(F), rng.uniform(-300.0, 300.0, SAMPLE).astype(F)
    yield (-np.abs(log_uniform(rng, SAMPLE)),
           np.rint(rng.uniform(-40.0, 40.0, SAMPLE)).astype(F))
    yield log_uniform(rng, SAMPLE), log_uniform(rng, SAMPLE)


def accuracy(name, exhaustive):
    """Stats with default flags, with _mul_add unfused, and with the caller compiled with
    contract."""
    stats = {"plain": Stats(), "unfused": Stats(), "contract": Stats()}
    fn = getattr(M, name)
    if name == "pow_f32":
        loops = {"plain": binary_loop(fn), "unfused": binary_loop(fn, fused=False),
                 "contract": binary_loop(fn, fastmath={"contract"})}
        ref = binary_loop(_pow64, to_float64=True)
        for x, y in pow_inputs():
            want = run(ref, x, y, dtype=np.float64)
            for kind, loop in loops.items():
                stats[kind].add(M.ulp_error(run(loop, x, y), want), x, y)
        return stats
    loops = {"plain": unary_loop(fn), "unfused": unary_loop(fn, fused=False),
             "contract": unary_loop(fn, fastmath={"contract"})}
    ref = unary_loop(UNARY[name][0], to_float64=True)
    for x in unary_inputs(name, exhaustive):
        if name in ("sin_f32", "cos_f32"):
            x = x[~(np.abs(x) > M.SIN_COS_ACCURATE_MAX)]
        want = run(ref, x, dtype=np.float64)
        for kind, loop in loops.items():
            stats[kind].add(M.ulp_error(run(loop, x), want), x)
    return stats


def ns_per_element(loop, *args):
    out = np.empty_like(args[0])
    loop(*args, out)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        loop(*args, out)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / args[0].size * 1e9


def throughput(name):
    """(ns/element mathf32, the same with _mul_add unfused, ns/element numba libm) on
    THROUGHPUT_N typical inputs."""
    rng = np.random.default_rng(11)
    if name == "pow_f32":
        x = rng.uniform(0.1, 10.0, THROUGHPUT_N).astype(F)
        y = rng.uniform(-10.0, 10.0, THROUGHPUT_N).astype(F)
        return (ns_per_element(binary_loop(M.pow_f32), x, y),
                ns_per_element(binary_loop(M.pow_f32, fused=False), x, y),
                ns_per_element(binary_loop(_libm_pow), x, y))
    lo, hi = UNARY[name][3]
    x = rng.uniform(lo, hi, THROUGHPUT_N).astype(F)
    return (ns_per_element(unary_loop(getattr(M, name)), x),
            ns_per_element(unary_loop(getattr(M, name), fused=False), x),
            ns_per_element(unary_loop(UNARY[name][1]), x))


def beyond_accurate_range():
    """sin/cos past SIN_COS_ACCURATE_MAX: max |error| / (|x| * 2**-24) per decade band."""
    rng = np.random.default_rng(5)
    rows = []
    bands = [(1e5, 1e6), (1e6, 2.0**22), (2.0**22, 1e38)]
    for name, ref in (("sin_f32", _sin64), ("cos_f32", _cos64)):
        ours, want = unary_loop(getattr(M, name)), unary_loop(ref, to_float64=True)
        for lo, hi in bands:
            x = np.exp(rng.uniform(np.log(lo), np.log(hi), SAMPLE // 4)).astype(F)
            err = np.abs(run(ours, x).astype(np.float64) - run(want, x, dtype=np.float64))
            rows.append((name, lo, hi, float(err.max()),
                         float((err / (x.astype(np.float64) * 2.0**-24)).max())))
    return rows


def machine():
    """CPU model, family/model numbers, LLVM's name for it, and the SIMD flags that matter."""
    text = pathlib.Path("/proc/cpuinfo").read_text()

    def field(key):
        found = re.search(rf"^{key}\s*:\s*(.*)$", text, re.M)
        return found.group(1).strip() if found else "?"

    flags = set(field("flags").split())
    have = ", ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ("avx2", "avx512f", "fma"))
    return (f"{field('model name')} (family {field('cpu family')} model {field('model')}, "
            f"LLVM target {llvm_binding.get_host_cpu_name()}; {have})")


def fmt_at(at):
    return ", ".join(repr(float(v)) for v in at)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exhaustive", action="store_true",
                        help="every float32 for the unary functions (slow)")
    args = parser.parse_args()
    lines = [
        "# mathf32 accuracy and throughput",
        "",
        f"- machine: {machine()}",
        f"- numba {numba.__version__}, llvmlite {llvmlite.__version__}, numpy {np.__version__}",
        f"- date: {datetime.date.today().isoformat()}",
        "- inputs: " + ("every float32 (unary), pow sampled" if args.exhaustive else
                        f"{SAMPLE:,} log-uniform + {SAMPLE:,} active-range per function"),
        "- ulp: of the float32 binade of the float64 reference. max ulp, mean ulp, ns/elem: "
        "as compiled here, _mul_add (llvm.fmuladd) fused to FMA where this CPU has it; "
        "unfused: _mul_add as a mul and an add (what a CPU without FMA computes); contract: "
        "calling loop compiled with fastmath={'contract'}, so LLVM may fuse every a*b + c",
        f"- ns/elem: 1 thread, median of {REPEATS} runs over {THROUGHPUT_N:,} elements, "
        "uniform in " + ", ".join(f"{n[:-4]} {UNARY[n][3]}" for n in UNARY)
        + ", pow x (0.1, 10) y (-10, 10); libm: numba's np.<fn> / math.erf / ** on float32",
        "",
        "| function | budget | max ulp | at | mean ulp | max ulp (unfused) "
        "| max ulp (contract) | ns/elem | ns/elem (unfused) | ns/elem libm | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in M.ULP_BUDGET:
        stats = accuracy(name, args.exhaustive)
        plain = stats["plain"]
        ours, ours_unfused, libm = throughput(name)
        lines.append(
            f"| {name} | {M.ULP_BUDGET[name]} | {plain.max:.3f} | {fmt_at(plain.at)} "
            f"| {plain.total / plain.count:.3f} | {stats['unfused'].max:.3f} "
            f"| {stats['contract'].max:.3f} | {ours:.2f} | {ours_unfused:.2f} "
            f"| {libm:.2f} | {libm / ours:.1f}x |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines += [
        "",
        f"sin/cos beyond SIN_COS_ACCURATE_MAX = {float(M.SIN_COS_ACCURATE_MAX):g} "
        f"(log-uniform sample of {SAMPLE // 4:,} per band; exact integer reduction from "
        f"2**16 on):",
        "",
        "| function | band | max abs error | max abs error / (abs(x) * 2**-24) |",
        "|---|---|---|---|",
    ]
    for name, lo, hi, err, rel in beyond_accurate_range():
        lines.append(f"| {name} | [{lo:.3g}, {hi:.3g}) | {err:.3g} | {rel:.3f} |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
