"""Accuracy and throughput of codegen.mathf32; XNNPACK's and the fast precision's error against
LiteRT's builtin kernels.

    python perf/math_accuracy.py [--exhaustive] [--stride K] [--sections exact,xnnpack,fast]

Three sections, written to perf/math_accuracy.md (a run of some sections keeps the others):

exact: the functions the exact precision uses, against float64 references and numba's libm.

For every function: max ulp error (and the input where it occurs) and mean ulp error against
a float64 reference (glibc's double functions, through numba), the max ulp error again with
mathf32_intrinsics.mul_add compiled unfused (a mul and an add: what a CPU without FMA computes)
and with the calling loop compiled with fastmath={"contract"} (FMA wherever LLVM can), and
ns/element on 1M float32 elements (1 thread, median of repeated runs), mul_add fused and
unfused, next to the same loop calling numba's np.<fn>, math.erf or np.power on float32
(libm). Inputs: a log-uniform sample over all float32 plus a uniform sample of the active
range; --exhaustive takes every float32 bit pattern instead (unary functions; pow stays
sampled).

xnnpack: LiteRT's default path (OpResolverType.AUTO, XNNPACK) against its builtin kernels
(BUILTIN_WITHOUT_DEFAULT_DELEGATES) on single-op models (and the swish and mish chains), over
every K-th float32 bit pattern (all finite ones, both signs, subnormals included), the special
values, and uniform samples of [-20, 20] and [-1, 1]: the error a user of LiteRT's default
path already accepts, per op, in the Tolerance(ulp, abs) form of codegen.ops (ulps of the
builtin result beyond an absolute allowance), and which of NaN, +-inf, -0.0 and subnormal
results agree; with XNNPACK's cost per element (1 thread, a single-op model invoked on 1M
elements and on 32K, in L2).

fast: codegen.mathf32's precision="fast" functions: their error against float64 (FAST_BUDGET)
and against the builtin kernels on the same inputs as XNNPACK (OpSpec.approx_tolerance), next
to XNNPACK's error at the same absolute allowance, whether NaN/+-inf/-0.0 results are the
builtin ones, and ns/element against the exact function and XNNPACK.
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
from codegen import mathf32_fast as MF  # noqa: E402
from codegen import mathf32_intrinsics as MI  # noqa: E402
from codegen import scalar as S  # noqa: E402
from codegen.ops import APPROX_CHAINS, OPS, Tolerance  # noqa: E402

F = np.float32
SAMPLE = 4_000_000                  # per sample kind (log-uniform, active range) and function
THROUGHPUT_N = 1_000_000
REPEATS = 15
CHUNK = 1 << 25                     # --exhaustive: bit patterns per chunk
OUT = pathlib.Path(__file__).with_suffix(".md")


def math_function(name: str):
    """The function `name` of codegen.mathf32 or, for precision="fast", codegen.mathf32_fast."""
    return getattr(MF, name, None) or getattr(M, name)


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
    return loop if fused else MI.compile_unfused(loop, 2)


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
    return loop if fused else MI.compile_unfused(loop, 3)


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
    """Stats with default flags, with mul_add unfused, and with the caller compiled with
    contract."""
    stats = {"plain": Stats(), "unfused": Stats(), "contract": Stats()}
    fn = math_function(name)
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
    """(ns/element mathf32, the same with mul_add unfused, ns/element numba libm) on
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
    return (ns_per_element(unary_loop(math_function(name)), x),
            ns_per_element(unary_loop(math_function(name), fused=False), x),
            ns_per_element(unary_loop(UNARY[name][1]), x))


def beyond_accurate_range():
    """sin/cos past SIN_COS_ACCURATE_MAX: max |error| / (|x| * 2**-24) per decade band."""
    rng = np.random.default_rng(5)
    rows = []
    bands = [(1e5, 1e6), (1e6, 2.0**22), (2.0**22, 1e38)]
    for name, ref in (("sin_f32", _sin64), ("cos_f32", _cos64)):
        ours, want = unary_loop(math_function(name)), unary_loop(ref, to_float64=True)
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


# ------------------------------------------------------------------------------------------
# LiteRT: XNNPACK (its default path) and precision="fast" against the builtin kernels.

SWEEP_STRIDE = 257                  # every 257th bit pattern: 16.7M floats, all binades
FLT_MIN = 2.0**-126
ABS_LEVELS = (FLT_MIN, 1e-8, 1e-7, 1e-6)
TIMING_SIZES = (1 << 20, 1 << 15)
NEAR = float(M.SIN_COS_LARGE)       # sin/cos: the fast loop's range (far_angle(x) == 0)
NONE = {"fused_activation_function": 0}
SPECIAL_INPUTS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0,
                           np.finfo(F).max, -np.finfo(F).max], F)


@numba.njit(inline="always", error_model="numpy")
def _gelu_tanh_exact(x):
    return S.gelu(x, True)


@numba.njit(inline="always", error_model="numpy")
def _gelu_erf_exact(x):
    return S.gelu(x, False)


@numba.njit(inline="always", error_model="numpy")
def _swish_exact(x):
    return x * S.logistic_eigen(x)


@numba.njit(inline="always", error_model="numpy")
def _mish_exact(x):
    return x * S.tanh_eigen(M.log_f32(S.clamp_overflow(M.exp_f32(x) + F(1.0))))


_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def _logistic64(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def _saturated64(x):
    """The NONE activation of a chain's root MUL, which the chain functions apply themselves:
    +-inf -> +-FLT_MAX."""
    big = float(np.finfo(F).max)
    return np.clip(x, -big, big)


def _gelu_tanh64(x):
    return x * _logistic64(2 * 0.7978845608028654 * (x + 0.044715 * x**3))


class LiteRTCase:
    """One row: a single-op model (or a chain), what precision="fast" computes for it and the
    exact precision's function (timed), the float64 meaning of the fast function."""

    def __init__(self, label, op, fast, exact, reference, options=None, chain=None,
                 timing_range=(-10.0, 10.0), near_only=False):
        self.label, self.op, self.fast, self.exact = label, op, fast, exact
        self.reference, self.options, self.chain = reference, options, chain
        self.timing_range, self.near_only = timing_range, near_only

    @property
    def params(self):
        return dict(self.options or {})

    def tolerance(self) -> Tolerance:
        if self.chain:
            return APPROX_CHAINS[self.chain].tolerance
        return OPS[self.op].tolerance_for(self.params, "fast")

    def model(self, n: int) -> bytes:
        from fusion_delegate.model import ModelBuilder
        b = ModelBuilder(self.label)
        x = b.input("x", (n,))
        if self.op == "POW":
            y = b.op("POW", [x, b.input("y", (n,))])
        elif self.chain == "swish":
            y = b.op("MUL", [x, b.op("LOGISTIC", [x])], NONE)
        elif self.chain == "mish":
            one = b.const("one", np.ones((1,), F))
            softplus = b.op("LOG", [b.op("ADD", [b.op("EXP", [x]), one], NONE)])
            y = b.op("MUL", [x, b.op("TANH", [softplus])], NONE)
        else:
            y = b.op(self.op, [x], self.options)
        b.output(y)
        return b.to_bytes()


CASES = (
    LiteRTCase("LOGISTIC", "LOGISTIC", "logistic_fast_f32", S.logistic_eigen, _logistic64),
    LiteRTCase("TANH", "TANH", "tanh_fast_f32", S.tanh_eigen, np.tanh),
    LiteRTCase("EXP", "EXP", "exp_fast_f32", M.exp_f32, np.exp),
    LiteRTCase("LOG", "LOG", "log_fast_f32", M.log_f32, np.log, timing_range=(0.0, 10.0)),
    LiteRTCase("ELU", "ELU", "elu_fast_f32", S.elu,
               lambda x: np.where(x < 0, np.expm1(np.minimum(x, 0)), x)),
    LiteRTCase("GELU (approximate=True)", "GELU", "gelu_tanh_fast_f32", _gelu_tanh_exact,
               _gelu_tanh64, options={"approximate": True}, timing_range=(-5.0, 5.0)),
    LiteRTCase("GELU (approximate=False)", "GELU", "gelu_erf_fast_f32", _gelu_erf_exact,
               lambda x: 0.5 * x * _erfc64(-x / np.sqrt(2.0)), options={"approximate": False},
               timing_range=(-5.0, 5.0)),
    LiteRTCase("SIN", "SIN", "sin_fast_f32", M.sin_near_f32, np.sin, near_only=True),
    LiteRTCase("COS", "COS", "cos_fast_f32", M.cos_near_f32, np.cos, near_only=True),
    LiteRTCase("HARD_SWISH", "HARD_SWISH", None, S.hard_swish, None, timing_range=(-5.0, 5.0)),
    LiteRTCase("POW", "POW", None, None, None),
    LiteRTCase("swish = MUL(x, LOGISTIC(x))", "MUL", "swish_fast_f32", _swish_exact,
               lambda x: _saturated64(x * _logistic64(x)), chain="swish"),
    LiteRTCase("mish = MUL(x, TANH(LOG(ADD(EXP(x), 1))))", "MUL", "mish_fast_f32", _mish_exact,
               lambda x: _saturated64(x * np.tanh(np.logaddexp(0.0, x))), chain="mish"),
)


def litert_version() -> str:
    from fusion_delegate import runtime
    return f"{runtime.NAME} {runtime.VERSION}"


def sweep_inputs(stride: int) -> np.ndarray:
    """Specials, every `stride`-th finite float32 bit pattern, and uniform samples of the
    active ranges; padded to a multiple of 16 (LOGISTIC's builtin kernel rounds its last
    n % 4 elements differently: none are left)."""
    bits = np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32).view(F)
    rng = np.random.default_rng(12)
    x = np.concatenate([SPECIAL_INPUTS, bits[np.isfinite(bits)],
                        rng.uniform(-20.0, 20.0, 1_000_000).astype(F),
                        rng.uniform(-1.0, 1.0, 1_000_000).astype(F),
                        rng.uniform(0.0, 4.0, 1_000_000).astype(F)])
    return np.concatenate([x, np.zeros((-x.size) % 16, F)])


def interpreter(model: bytes, resolver: str, n: int):
    from fusion_delegate.runtime import Interpreter, OpResolverType
    it = Interpreter(model_content=model, num_threads=1,
                     experimental_op_resolver_type=getattr(OpResolverType, resolver))
    it.allocate_tensors()
    return it


def invoke(it, *inputs) -> np.ndarray:
    for detail, value in zip(it.get_input_details(), inputs):
        it.set_tensor(detail["index"], value)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def delegated(it) -> bool:
    return any(op["op_name"] == "DELEGATE" for op in it._get_ops_details())


def ns_interleaved(methods: dict) -> dict:
    """ns per call of each method, timed in the same interleaved rounds (perf/timing.py)."""
    from perf.timing import interleaved
    samples = interleaved(methods, rounds=31, batch_seconds=0.01, budget_seconds=2.0)
    return {name: s.median * 1e9 for name, s in samples.items()}


class Run:
    """One case on LiteRT: inputs, builtin and XNNPACK outputs, and the timings."""

    def __init__(self, case: LiteRTCase, stride: int):
        self.case = case
        auto = interpreter(case.model(1024), "AUTO", 1024)
        self.delegated = delegated(auto)
        self.x = self.builtin = self.xnnpack = None
        self.ns = {}
        if not self.delegated:
            return
        self.x = sweep_inputs(stride)
        n = self.x.size
        self.builtin = invoke(interpreter(case.model(n), "BUILTIN_WITHOUT_DEFAULT_DELEGATES", n),
                              self.x)
        self.xnnpack = invoke(interpreter(case.model(n), "AUTO", n), self.x)
        self.ns = self.timings()

    def timings(self) -> dict:
        """{(method, size): ns/element} for xnnpack, builtin, fast and exact."""
        rng = np.random.default_rng(3)
        out = {}
        for n in TIMING_SIZES:
            x = rng.uniform(*self.case.timing_range, n).astype(F)
            y = np.empty_like(x)
            methods = {}
            for resolver, name in (("AUTO", "xnnpack"),
                                   ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", "builtin")):
                it = interpreter(self.case.model(n), resolver, n)
                it.set_tensor(it.get_input_details()[0]["index"], x)
                methods[name] = it.invoke
            for name, fn in (("fast", (math_function(self.case.fast) if self.case.fast else None)),
                             ("exact", self.case.exact)):
                if fn is not None:
                    loop = unary_loop(fn)
                    loop(x, y)
                    methods[name] = (lambda loop: lambda: loop(x, y))(loop)
            for name, ns in ns_interleaved(methods).items():
                out[name, n] = ns / n
        return out


def litert_runs(stride: int) -> list[Run]:
    runs = []
    for case in CASES:
        runs.append(Run(case, stride))
        print(f"litert: {case.label}", file=sys.stderr, flush=True)
    return runs


def tolerance_ulps(got, want, abs_floor: float) -> np.ndarray:
    """Per element, the ulps of `want` (the builtin result) that `got` needs beyond
    `abs_floor` to satisfy codegen.ops.Tolerance(ulp, abs_floor); 0 where either is not
    finite (those are checked as special values)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(np.abs(want)).astype(np.float64)
        need = np.maximum(np.abs(got64 - want64) - abs_floor, 0.0) / spacing
    return np.where(np.isfinite(got) & np.isfinite(want), need, 0.0)


def max_with_input(values, x) -> str:
    i = int(np.argmax(values))
    return f"{values[i]:.3g}" if values[i] == 0 else f"{values[i]:.3g} (x={float(x[i]):.7g})"


def special_report(x, got, want) -> dict[str, str]:
    """Where NaN, +-inf, the sign of zero and subnormal results disagree with the builtin."""
    with np.errstate(invalid="ignore"):
        nan = np.isnan(got) != np.isnan(want)
        inf = ((np.isinf(got) | np.isinf(want)) & (got != want)
               & ~(np.isnan(got) | np.isnan(want)))
        zero = (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
        flushed = (want != 0) & (np.abs(want) < FLT_MIN) & (got == 0)
    report = {}
    for name, bad in (("NaN", nan), ("+-inf", inf), ("-0.0", zero), ("subnormal", flushed)):
        if not bad.any():
            report[name] = "agree" if name != "subnormal" else "kept"
            continue
        i = int(np.flatnonzero(bad)[0])
        what = "flushed to 0" if name == "subnormal" else "differ"
        report[name] = (f"{int(bad.sum()):,} {what} (x={float(x[i]):.7g}: builtin "
                        f"{float(want[i]):.7g}, got {float(got[i]):.7g})")
    return report


def _band(run: Run, near: bool):
    keep = ~(np.abs(run.x) >= NEAR) if near else np.ones(run.x.size, bool)
    return run.x[keep], run.builtin[keep], run.xnnpack[keep]


def xnnpack_section(runs: list[Run], stride: int) -> list[str]:
    lines = [
        "## XNNPACK (LiteRT's default path) against LiteRT's builtin kernels",
        "",
        f"- inputs: every {stride}th float32 bit pattern (all finite ones: "
        f"{(2**32 // stride):,} values over every binade, both signs, subnormals), "
        f"{SPECIAL_INPUTS.size} special values, 1M uniform in each of [-20, 20], [-1, 1] and "
        "[0, 4]; the same inputs for both, single-op models (the chains: one model each), "
        "1 thread",
        "- error: for each absolute allowance `abs`, the ulps of the builtin result "
        "(np.spacing) XNNPACK needs beyond it, i.e. the smallest codegen.ops.Tolerance(ulp, "
        "abs) that covers XNNPACK; over finite results, non-finite ones are the NaN/inf "
        "columns. `abs` = FLT_MIN leaves out the subnormal results XNNPACK flushes to zero",
        "- special values: where NaN-ness, +-inf, the sign of a zero result differ, and "
        "subnormal builtin results XNNPACK returns as 0",
        "- ns/elem: XNNPACK (OpResolverType.AUTO) and the builtin kernels "
        "(BUILTIN_WITHOUT_DEFAULT_DELEGATES) invoking the model on 1M elements and on 32K "
        "(in L2), uniform in the op's usual range, median of interleaved rounds "
        "(perf/timing.py), per element",
        "",
        "| op | XNNPACK takes it | max abs error | ulp beyond FLT_MIN | beyond 1e-8 "
        "| beyond 1e-7 | beyond 1e-6 | NaN | +-inf | -0.0 | subnormal results "
        "| XNNPACK ns/elem 1M | 32K | builtin ns/elem 1M | 32K |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        case = run.case
        if not run.delegated:
            lines.append(f"| {case.label} | no: LiteRT runs its builtin kernel "
                         "| 0 | 0 | 0 | 0 | 0 | agree | agree | agree | kept | - | - | - | - |")
            continue
        bands = [("", False)]
        if case.near_only:
            bands = [(", |x| < 2**16", True), (", all x", False)]
        for suffix, near in bands:
            x, want, got = _band(run, near)
            with np.errstate(invalid="ignore", over="ignore"):
                finite = np.isfinite(got) & np.isfinite(want)
                max_abs = np.abs(got[finite].astype(np.float64) - want[finite]).max()
            cells = [max_with_input(tolerance_ulps(got, want, a), x) for a in ABS_LEVELS]
            special = special_report(x, got, want)
            ns = run.ns
            lines.append(
                f"| {case.label}{suffix} | yes | {max_abs:.3g} | " + " | ".join(cells)
                + f" | {special['NaN']} | {special['+-inf']} | {special['-0.0']} "
                f"| {special['subnormal']} | {ns['xnnpack', TIMING_SIZES[0]]:.3f} "
                f"| {ns['xnnpack', TIMING_SIZES[1]]:.3f} | {ns['builtin', TIMING_SIZES[0]]:.3f} "
                f"| {ns['builtin', TIMING_SIZES[1]]:.3f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def fast_section(runs: list[Run], stride: int) -> list[str]:
    lines = [
        "## precision=\"fast\" against float64, the builtin kernels and XNNPACK",
        "",
        "- inputs: those of the XNNPACK section (sin, cos: |x| < 2**16, where far_angle(x) is "
        "0; beyond, a kernel's exact loop runs sin_f32/cos_f32). Chains: the fast function, "
        "which applies the root MUL's NONE activation itself (+-inf -> +-FLT_MAX), against "
        "the builtin kernels running the chain",
        "- float64: mathf32.budget_error at FAST_BUDGET's abs, mul_add fused / unfused",
        "- builtin: the ulps needed beyond the abs of OpSpec.approx_tolerance (APPROX_CHAINS "
        "for chains), fused / unfused; XNNPACK: the same at max(abs, FLT_MIN), so its "
        "subnormal flushing is left out. A budget is no larger than XNNPACK's when its ulp "
        "is at most XNNPACK's at its abs",
        "- special: NaN, +-inf, -0.0 and subnormal results against the builtin ones (fused)",
        "",
        "| op | function | FAST_BUDGET vs float64 | measured (fused / unfused) "
        "| approx_tolerance vs builtin | measured (fused / unfused) | XNNPACK at that abs "
        "| max abs vs builtin: fast / XNNPACK | special values |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    speed = [
        "",
        "Cost per element (ns, 1 thread; fast and exact: a numba loop over the function, "
        "XNNPACK: a single-op model invoked under OpResolverType.AUTO; chains: the whole "
        "chain; exact sin/cos: sin_near_f32/cos_near_f32, what the fast loop of a kernel "
        "runs):",
        "",
        "| op | fast 1M | exact 1M | XNNPACK 1M | fast 32K | exact 32K | XNNPACK 32K "
        "| fast vs exact (32K) | fast vs XNNPACK (32K) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run_ in runs:
        case = run_.case
        if not case.fast or not run_.delegated:
            continue
        x, want, xnn = _band(run_, case.near_only)
        budget_ulp, budget_abs = MF.FAST_BUDGET[case.fast]
        tolerance = case.tolerance()
        with np.errstate(all="ignore"):
            ref = case.reference(x.astype(np.float64))
        measured64, measured = [], []
        for fused in (True, False):
            got = run(unary_loop(math_function(case.fast), fused=fused), x)
            measured64.append(M.budget_error(got, ref, budget_abs).max())
            measured.append(tolerance_ulps(got, want, tolerance.abs).max())
            if fused:
                fused_out = got
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.isfinite(fused_out) & np.isfinite(want)
            ours_abs = np.abs(fused_out[finite].astype(np.float64) - want[finite]).max()
            finite = np.isfinite(xnn) & np.isfinite(want)
            xnn_abs = np.abs(xnn[finite].astype(np.float64) - want[finite]).max()
        xnn_ulp = tolerance_ulps(xnn, want, max(tolerance.abs, FLT_MIN)).max()
        special = special_report(x, fused_out, want)
        bad = [f"{k}: {v}" for k, v in special.items() if v not in ("agree", "kept")]
        budget = f"{budget_ulp:g} ulp" + (f" + {budget_abs:g}" if budget_abs else "")
        lines.append(
            f"| {case.label} | {case.fast} | {budget} | {measured64[0]:.3g} / "
            f"{measured64[1]:.3g} | {tolerance} | {measured[0]:.3g} / {measured[1]:.3g} "
            f"| {xnn_ulp:.3g} | {ours_abs:.3g} / {xnn_abs:.3g} "
            f"| {'; '.join(bad) if bad else 'as builtin'} |")
        print(lines[-1], file=sys.stderr, flush=True)
        ns = run_.ns
        big, small = TIMING_SIZES
        speed.append(
            f"| {case.label} | {ns['fast', big]:.3f} | {ns['exact', big]:.3f} "
            f"| {ns['xnnpack', big]:.3f} | {ns['fast', small]:.3f} | {ns['exact', small]:.3f} "
            f"| {ns['xnnpack', small]:.3f} | {ns['exact', small] / ns['fast', small]:.2f}x "
            f"| {ns['xnnpack', small] / ns['fast', small]:.2f}x |")
    return lines + speed


def exact_section(exhaustive):
    lines = [
        "## Exact precision: mathf32 against float64 and libm",
        "",
        "- inputs: " + ("every float32 (unary), pow sampled" if exhaustive else
                        f"{SAMPLE:,} log-uniform + {SAMPLE:,} active-range per function"),
        "- ulp: of the float32 binade of the float64 reference. max ulp, mean ulp, ns/elem: "
        "as compiled here, mul_add (llvm.fmuladd) fused to FMA where this CPU has it; "
        "unfused: mul_add as a mul and an add (what a CPU without FMA computes); contract: "
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
        stats = accuracy(name, exhaustive)
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
    return lines


SECTIONS = ("exact", "xnnpack", "fast")


def merge(previous: str, fresh: dict[str, list[str]], header: list[str]) -> str:
    """The report with the `fresh` sections replaced and the others kept from `previous`."""
    kept = dict(re.findall(r"<!-- section:(\w+) -->\n(.*?)<!-- /section -->\n", previous,
                           re.S))
    body = header[:]
    for name in SECTIONS:
        text = "\n".join(fresh[name]) + "\n" if name in fresh else kept.get(name)
        if text is not None:
            body += ["", f"<!-- section:{name} -->", text.rstrip("\n"), "<!-- /section -->"]
    return "\n".join(body) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exhaustive", action="store_true",
                        help="every float32 for the unary functions (slow)")
    parser.add_argument("--stride", type=int, default=SWEEP_STRIDE,
                        help="xnnpack/fast sections: every K-th float32 bit pattern")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help="comma-separated subset of " + ", ".join(SECTIONS))
    args = parser.parse_args()
    wanted = [name for name in args.sections.split(",") if name]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    header = [
        "# mathf32 accuracy and throughput; XNNPACK and precision=\"fast\" against LiteRT",
        "",
        f"- machine: {machine()}",
        f"- numba {numba.__version__}, llvmlite {llvmlite.__version__}, numpy {np.__version__}, "
        f"{litert_version()}",
        f"- date: {datetime.date.today().isoformat()}",
        "- regenerate: `python perf/math_accuracy.py` (all sections, a few minutes)",
    ]
    fresh = {}
    if "exact" in wanted:
        fresh["exact"] = exact_section(args.exhaustive)
    if "xnnpack" in wanted or "fast" in wanted:
        runs = litert_runs(args.stride)
        if "xnnpack" in wanted:
            fresh["xnnpack"] = xnnpack_section(runs, args.stride)
        if "fast" in wanted:
            fresh["fast"] = fast_section(runs, args.stride)
    previous = OUT.read_text() if OUT.exists() else ""
    OUT.write_text(merge(previous, fresh, header))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
