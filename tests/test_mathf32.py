"""codegen.mathf32 and mathf32_fast: ulp budgets, C edge semantics, and that loops over them
vectorise."""
import dataclasses
import functools
import math
import re

import llvmlite.binding as llvm_binding
import numba
import numpy as np
import pytest

from codegen import mathf32 as M
from codegen import mathf32_fast as MF
from codegen import mathf32_intrinsics as MI
from codegen.mathf32 import SIN_COS_ACCURATE_MAX, ULP_BUDGET, budget_error, ulp_error
from codegen.mathf32_fast import FAST_BUDGET
from conftest import foreign_calls, same_bits

F = np.float32
_erf64 = np.vectorize(math.erf, otypes=[np.float64])

# float64 references; ulp_error measures against them before any rounding to float32.
REFERENCE = {
    "exp_f32": np.exp,
    "log_f32": np.log,
    "tanh_f32": np.tanh,
    "logistic_f32": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf_f32": _erf64,
    "sin_f32": np.sin,
    "cos_f32": np.cos,
    "sqrt_f32": np.sqrt,
}
# Where each function is neither saturated nor equal to its argument: sampled uniformly on
# top of the log-uniform sample over all float32.
ACTIVE = {
    "exp_f32": (-104.0, 89.0),
    "log_f32": (0.0, 4.0),
    "tanh_f32": (-10.0, 10.0),
    "logistic_f32": (-104.0, 20.0),
    "erf_f32": (-4.5, 4.5),
    "sin_f32": (-float(SIN_COS_ACCURATE_MAX), float(SIN_COS_ACCURATE_MAX)),
    "cos_f32": (-float(SIN_COS_ACCURATE_MAX), float(SIN_COS_ACCURATE_MAX)),
    "sqrt_f32": (0.0, 4.0),
}
SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
     np.finfo(F).max, -np.finfo(F).max, np.finfo(F).tiny, -np.finfo(F).tiny,
     np.finfo(F).smallest_subnormal, -np.finfo(F).smallest_subnormal,
     np.finfo(F).tiny - np.finfo(F).smallest_subnormal, 1e-30, -1e-30, 1e30, -1e30,
     88.72, 88.73, -87.33, -103.9, -104.0, 9.0, -9.0, 3.9, 4.1, 0.625, 0.921875],
    dtype=F)
N_SAMPLE = 150_000


def math_function(name: str):
    """The function `name` of codegen.mathf32 or, for precision="fast", codegen.mathf32_fast."""
    return getattr(MF, name, None) or getattr(M, name)


def unary_loop(fn, fused=True):
    """One compiled loop per (fn, fused), however the arguments are passed: the LLVM tests
    inspect the loop an earlier `apply` compiled."""
    return _unary_loop(fn, fused)


def binary_loop(fn, fused=True):
    return _binary_loop(fn, fused)


@functools.cache
def _unary_loop(fn, fused):
    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    if not fused:
        MI.compile_unfused(loop, 2)
    return loop


@functools.cache
def _binary_loop(fn, fused):
    @numba.njit(error_model="numpy")
    def loop(x, y, out):
        for i in range(x.size):
            out[i] = fn(x[i], y[i])

    if not fused:
        MI.compile_unfused(loop, 3)
    return loop


def apply(fn, x, fused=True):
    out = np.empty_like(x)
    unary_loop(fn, fused)(x, out)
    return out


def log_uniform_floats(rng, n):
    """Finite float32 drawn uniformly over bit patterns: log-uniform over the whole range,
    both signs, subnormals included."""
    x = rng.integers(0, 2**32, size=2 * n, dtype=np.uint64).astype(np.uint32).view(F)
    return x[np.isfinite(x)][:n]


def unary_sample(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    lo, hi = ACTIVE[name]
    x = np.concatenate([log_uniform_floats(rng, N_SAMPLE),
                        rng.uniform(lo, hi, N_SAMPLE).astype(F), SPECIAL])
    if name in ("sin_f32", "cos_f32"):
        x = x[~(np.abs(x) > SIN_COS_ACCURATE_MAX)]
    return x


def max_ulp(fn, name, x, fused=True):
    """(max ulp error, argument) of fn against REFERENCE[name] over x."""
    with np.errstate(all="ignore"):
        err = ulp_error(apply(fn, x, fused), REFERENCE[name](x.astype(np.float64)))
    i = int(np.argmax(err))
    return err[i], x[i]


def pow_sample():
    """x log-uniform over positive float32 with y chosen so x**y spans [1e-48, 1e41],
    x in [0.5, 2] with |y| <= 300, negative x with integer y, plus fully random pairs."""
    rng = np.random.default_rng(7)
    x = np.abs(log_uniform_floats(rng, N_SAMPLE))
    x = x[x != 0]
    with np.errstate(all="ignore"):
        y = (rng.uniform(-110.0, 95.0, x.size) / np.log(x.astype(np.float64))).astype(F)
    xs = [x, rng.uniform(0.5, 2.0, N_SAMPLE).astype(F),
          -np.abs(log_uniform_floats(rng, N_SAMPLE)), log_uniform_floats(rng, N_SAMPLE)]
    ys = [y, rng.uniform(-300.0, 300.0, N_SAMPLE).astype(F),
          np.rint(rng.uniform(-40.0, 40.0, N_SAMPLE)).astype(F),
          log_uniform_floats(rng, N_SAMPLE)]
    return np.concatenate(xs), np.concatenate(ys)


def pow_apply(x, y, fused=True):
    out = np.empty_like(x)
    binary_loop(M.pow_f32, fused)(x, y, out)
    return out


# _mul_add fuses on CPUs with FMA only: the budget must hold both ways.
FUSED = pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])


@FUSED
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_unary_within_ulp_budget(name, fused):
    err, at = max_ulp(math_function(name), name, unary_sample(name), fused)
    assert err <= ULP_BUDGET[name], f"{name}: {err:.2f} ulp at x={at!r}"


@FUSED
def test_pow_within_ulp_budget(fused):
    x, y = pow_sample()
    with np.errstate(all="ignore"):
        err = ulp_error(pow_apply(x, y, fused),
                        np.power(x.astype(np.float64), y.astype(np.float64)))
    i = int(np.argmax(err))
    assert err[i] <= ULP_BUDGET["pow_f32"], f"{err[i]:.2f} ulp at x={x[i]!r}, y={y[i]!r}"


def test_budget_lists_every_public_function():
    def public(module) -> set[str]:
        return {n for n, f in vars(module).items() if n.endswith("_f32")
                and not n.startswith("_") and not n.endswith("_near_f32")
                and getattr(f, "py_func", f).__module__ == module.__name__}
    assert public(M) == set(ULP_BUDGET)
    # gelu_fast_f32(x, approximate) only picks one of the two GELU functions
    assert public(MF) == set(FAST_BUDGET) | {"gelu_fast_f32"}
    assert set(ULP_BUDGET) == set(REFERENCE) | {"pow_f32"}
    assert set(FAST_BUDGET) == set(FAST_REFERENCE)


@numba.njit(inline="always", error_model="numpy")
def _truncated_exp(x):
    """exp with its polynomial cut after r**3/6: ~6e-4 relative error at |r| = ln2/2."""
    n = np.rint(x * F(1.442695))
    r = x - n * F(0.6931472)
    p = F(1.0) + r * (F(1.0) + r * (F(0.5) + r * F(1.0 / 6.0)))
    return p * M.exp_f32(n * F(0.6931472))


def test_accuracy_check_catches_a_bad_exp():
    err, _ = max_ulp(_truncated_exp, "exp_f32", unary_sample("exp_f32"))
    assert err > 100 * ULP_BUDGET["exp_f32"]


def same_float(got, want):
    """Bitwise-equal up to the NaN payload (so +0 and -0 differ)."""
    same_sign = np.signbit(got) == np.signbit(want)
    return (np.isnan(got) & np.isnan(want)) | ((got == want) & same_sign)


def check_against(got, want, name, x):
    """Exact where C's result is NaN, an infinity, a zero or +-1; within budget elsewhere."""
    exact = np.isnan(want) | np.isinf(want) | (want == 0) | (np.abs(want) == 1)
    bad = exact & ~same_float(got, want)
    assert not bad.any(), f"{name}: x={x[bad]} gave {got[bad]}, C gives {want[bad]}"
    assert ulp_error(got[~exact], want[~exact]).max() <= ULP_BUDGET[name]


@pytest.mark.parametrize("name, c_fn", [
    ("exp_f32", np.exp), ("log_f32", np.log), ("tanh_f32", np.tanh),
    ("sin_f32", np.sin), ("cos_f32", np.cos), ("sqrt_f32", np.sqrt)])
def test_special_values_match_c(name, c_fn):
    x = SPECIAL
    if name in ("sin_f32", "cos_f32"):
        x = x[~(np.abs(x) > SIN_COS_ACCURATE_MAX) | np.isinf(x)]
    with np.errstate(all="ignore"):
        check_against(apply(math_function(name), x), c_fn(x), name, x)


def test_erf_and_logistic_special_values():
    x = SPECIAL
    check_against(apply(M.erf_f32, x), _erf64(x.astype(np.float64)).astype(F), "erf_f32", x)
    with np.errstate(all="ignore"):
        want = (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(F)
    check_against(apply(M.logistic_f32, x), want, "logistic_f32", x)


def test_documented_edge_cases():
    cases = [
        (M.exp_f32, np.inf, np.inf), (M.exp_f32, -np.inf, 0.0), (M.exp_f32, 89.0, np.inf),
        (M.exp_f32, -104.0, 0.0), (M.log_f32, 0.0, -np.inf), (M.log_f32, -0.0, -np.inf),
        (M.log_f32, -1e-45, np.nan), (M.log_f32, -np.inf, np.nan), (M.log_f32, np.inf, np.inf),
        (M.tanh_f32, np.inf, 1.0), (M.tanh_f32, -np.inf, -1.0), (M.tanh_f32, -0.0, -0.0),
        (M.logistic_f32, np.inf, 1.0), (M.logistic_f32, -np.inf, 0.0),
        (M.erf_f32, np.inf, 1.0), (M.erf_f32, -np.inf, -1.0), (M.erf_f32, -0.0, -0.0),
        (M.sin_f32, np.inf, np.nan), (M.sin_f32, -0.0, -0.0), (M.cos_f32, -np.inf, np.nan),
        (M.sqrt_f32, -0.0, -0.0), (M.sqrt_f32, -1.0, np.nan),
    ]
    for fn, x, want in cases:
        got = apply(fn, np.array([x], F))
        assert same_float(got, np.array([want], F))[0], f"{fn.__name__}({x}) = {got[0]}"
    for fn in (M.exp_f32, M.log_f32, M.tanh_f32, M.logistic_f32, M.erf_f32, M.sin_f32,
               M.cos_f32, M.sqrt_f32):
        assert np.isnan(apply(fn, np.array([np.nan], F)))[0]


def test_exp_rounds_subnormal_results():
    x = np.linspace(-103.9, -87.4, 20_001, dtype=F)
    got = apply(M.exp_f32, x)
    assert (got[x < -88.0] < np.finfo(F).tiny).all() and (got > 0).all()
    assert ulp_error(got, np.exp(x.astype(np.float64))).max() <= ULP_BUDGET["exp_f32"]


POW_SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5,
     -2.5, 1e-45, -1e-45, 2.0**24 + 2, -(2.0**24 + 2), 1e10, -1e10, np.finfo(F).max,
     -np.finfo(F).max], dtype=F)


def test_pow_special_values_match_c():
    x, y = (a.ravel() for a in np.meshgrid(POW_SPECIAL, POW_SPECIAL))
    with np.errstate(all="ignore"):
        want = np.power(x, y)                     # float32 numpy power is C powf
    got = pow_apply(x, y)
    exact = np.isnan(want) | np.isinf(want) | (want == 0) | (np.abs(want) == 1)
    bad = exact & ~same_float(got, want)
    assert not bad.any(), list(zip(x[bad], y[bad], got[bad], want[bad]))
    assert ulp_error(got[~exact], want[~exact]).max() <= ULP_BUDGET["pow_f32"]


def test_pow_documented_edge_cases():
    cases = [
        (np.nan, 0.0, 1.0), (np.nan, -0.0, 1.0), (1.0, np.nan, 1.0), (1.0, np.inf, 1.0),
        (-1.0, np.inf, 1.0), (-1.0, -np.inf, 1.0), (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0),
        (-2.0, -1.0, -0.5), (-8.0, 1.0 / 3.0, np.nan), (0.0, -1.0, np.inf),
        (-0.0, -1.0, -np.inf), (-0.0, -2.0, np.inf), (-0.0, 3.0, -0.0), (0.0, 0.5, 0.0),
        (2.0, np.inf, np.inf), (0.5, np.inf, 0.0), (2.0, -np.inf, 0.0), (0.5, -np.inf, np.inf),
        (-2.0, np.inf, np.inf), (np.inf, -1.0, 0.0), (np.inf, 0.5, np.inf),
        (-np.inf, 3.0, -np.inf), (-np.inf, -3.0, -0.0), (-np.inf, 0.5, np.inf),
        (2.0, np.nan, np.nan), (np.nan, 1.0, np.nan), (10.0, 39.0, np.inf), (10.0, -46.0, 0.0),
    ]
    x, y, want = (np.array(c, F) for c in zip(*cases))
    got = pow_apply(x, y)
    bad = ~same_float(got, want)
    assert not bad.any(), list(zip(x[bad], y[bad], got[bad], want[bad]))


def test_sin_cos_keep_their_budget_up_to_the_largest_float():
    """Large arguments use the exact integer reduction: no band where the error grows."""
    rng = np.random.default_rng(3)
    x = np.abs(log_uniform_floats(rng, 400_000))
    x = np.concatenate([x[x > SIN_COS_ACCURATE_MAX], rng.uniform(6e4, 2e5, 10_000).astype(F),
                        np.array([2.0**16, np.finfo(F).max], F)])
    x = np.concatenate([x, -x])
    for fn, ref, name in ((M.sin_f32, np.sin, "sin_f32"), (M.cos_f32, np.cos, "cos_f32")):
        got = apply(fn, x)
        assert M.ulp_error(got, ref(x.astype(np.float64))).max() <= M.ULP_BUDGET[name]


PACKED = re.compile(
    r"\bv(add|sub|mul|div|and|or|xor|max|min|rndscale|sqrt|cmp|fn?madd|fn?msub)\w*ps\s"
    r"[^\n]*%[yz]mm")
FMA = re.compile(r"\bvfn?m(add|sub)\w*(ps|ss)\s")


def calls_and_asm(loop):
    sig = loop.signatures[0]
    llvm = loop.inspect_llvm(sig)
    return set(re.findall(r"call [^@\n]*@([\w.$]+)\(", llvm)), llvm, loop.inspect_asm(sig)


def test_representative_loop_vectorises_without_libm():
    @numba.njit(error_model="numpy")
    def kernel(x, y, out):
        for i in range(x.size):
            out[i] = M.tanh_f32(x[i]) * M.exp_f32(y[i])

    x = np.linspace(-3, 3, 1000, dtype=F)
    out = np.empty_like(x)
    kernel(x, x[::-1].copy(), out)
    _, llvm, asm = calls_and_asm(kernel)
    assert re.search(r"\bvmulps\s[^\n]*%[yz]mm", asm)
    assert foreign_calls(llvm) == set()
    assert not re.search(r"\b(expf?|tanhf?)\b", asm)


#: sin/cos carry their large-angle (Payne-Hanek) reduction, which LLVM's cost model keeps scalar
#: on some CPUs (Intel, 256-bit preferred); kernels run it only in their exact loop, and their
#: fast loop's near forms must vectorise everywhere.
VECTORISED_FORM = {"sin_f32": "sin_near_f32", "cos_f32": "cos_near_f32"}


@pytest.mark.parametrize("name", sorted(ULP_BUDGET) + sorted(FAST_BUDGET))
def test_each_function_vectorises_in_float32(name):
    fn = math_function(VECTORISED_FORM.get(name, name))
    x = np.linspace(0.1, 3, 100, dtype=F)
    out = np.empty_like(x)
    if name == "pow_f32":
        loop = binary_loop(fn)
        loop(x, x, out)
    else:
        loop = unary_loop(fn)
        loop(x, out)
    _, llvm, asm = calls_and_asm(loop)
    assert foreign_calls(llvm) == set()
    assert not re.search(r"\bdouble\b", llvm)
    assert len(PACKED.findall(asm)) >= 3


def test_mul_add_fuses_where_the_cpu_has_fma_whatever_the_flags():
    """The loop has no fastmath flags, yet _mul_add becomes packed and scalar (remainder
    loop) FMA on an FMA CPU; compile_unfused compiles a separate mul and add instead."""
    x = np.linspace(-3, 3, 1001, dtype=F)
    fused, unfused = apply(M.exp_f32, x), apply(M.exp_f32, x, fused=False)
    assert ulp_error(unfused, fused).max() <= 2 * ULP_BUDGET["exp_f32"]
    calls, _, asm = calls_and_asm(unary_loop(M.exp_f32))
    assert "llvm.fmuladd.f32" in calls and not re.search(r"\bfmaf?\b", asm)
    _, unfused_llvm, unfused_asm = calls_and_asm(unary_loop(M.exp_f32, fused=False))
    assert "fmuladd" not in unfused_llvm and not FMA.search(unfused_asm)
    if "+fma" in llvm_binding.get_host_cpu_features().flatten().split(","):
        kinds = {m.group(2) for m in FMA.finditer(asm)}
        assert kinds == {"ps", "ss"}, kinds


@pytest.mark.parametrize("near, full", [(M.sin_near_f32, M.sin_f32), (M.cos_near_f32, M.cos_f32)])
def test_near_sin_cos_are_the_full_functions_where_far_angle_is_zero(near, full):
    """The kernels' fast loop relies on it: a zero far_angle means the same bits."""
    rng = np.random.default_rng(5)
    x = np.concatenate([SPECIAL, rng.uniform(-2.0**16, 2.0**16, 200_000).astype(F),
                        np.float32(2.0**16) * np.array([1, -1, 1.5, 1e3], F),
                        np.nextafter(F(2.0**16), F(0)) * np.array([1, -1], F)])
    far = np.array([M.far_angle(v) for v in x])
    expected_far = (np.abs(x) >= 2.0**16) & np.isfinite(x)
    np.testing.assert_array_equal(far, expected_far.astype(np.int32))
    near_values, full_values = np.empty_like(x), np.empty_like(x)
    unary_loop(near)(x, near_values)
    unary_loop(full)(x, full_values)
    keep = far == 0
    assert same_bits(near_values[keep], full_values[keep])


# ------------------------------------------------------------------- precision="fast"

def _logistic64(x):
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def _clamp_overflow(x):
    big = float(np.finfo(F).max)
    return np.clip(x, -big, big)


_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])
FAST_REFERENCE = {
    "exp_fast_f32": np.exp,
    "logistic_fast_f32": _logistic64,
    "tanh_fast_f32": np.tanh,
    "elu_fast_f32": lambda x: np.where(x < 0, np.expm1(np.minimum(x, 0.0)), x),
    "log_fast_f32": np.log,
    "sin_fast_f32": np.sin,
    "cos_fast_f32": np.cos,
    # the chains with their root MUL's NONE activation: +-inf -> +-FLT_MAX
    "swish_fast_f32": lambda x: _clamp_overflow(x * _logistic64(x)),
    "mish_fast_f32": lambda x: _clamp_overflow(x * np.tanh(np.logaddexp(0.0, x))),
    "gelu_tanh_fast_f32": lambda x: x * _logistic64(2 * 0.7978845608028654
                                                    * (x + 0.044715 * x**3)),
    "gelu_erf_fast_f32": lambda x: 0.5 * x * _erfc64(-x / np.sqrt(2.0)),
}
FAST_ACTIVE = {"exp_fast_f32": (-104.0, 89.0), "log_fast_f32": (0.0, 4.0),
               "logistic_fast_f32": (-104.0, 20.0), "elu_fast_f32": (-18.0, 1.0),
               "sin_fast_f32": (-2.0**16, 2.0**16), "cos_fast_f32": (-2.0**16, 2.0**16)}


def fast_sample(name):
    """Log-uniform over all float32, uniform over the active range and [-10, 10], the special
    values; sin/cos only where far_angle(x) is 0."""
    rng = np.random.default_rng(sum(map(ord, name)))
    lo, hi = FAST_ACTIVE.get(name, (-20.0, 20.0))
    x = np.concatenate([log_uniform_floats(rng, N_SAMPLE), rng.uniform(lo, hi, N_SAMPLE).astype(F),
                        rng.uniform(-10.0, 10.0, N_SAMPLE).astype(F), SPECIAL])
    if name in MF.FAST_NEAR_ONLY:
        x = x[~(np.abs(x) >= 2.0**16)]
    return x


@FUSED
@pytest.mark.parametrize("name", sorted(FAST_BUDGET))
def test_fast_within_budget(name, fused):
    ulp, abs_floor = FAST_BUDGET[name]
    x = fast_sample(name)
    with np.errstate(all="ignore"):
        err = budget_error(apply(math_function(name), x, fused),
                           FAST_REFERENCE[name](x.astype(np.float64)), abs_floor)
    i = int(np.argmax(err))
    assert err[i] <= ulp, f"{name}: {err[i]:.2f} ulp beyond {abs_floor:g} at x={x[i]!r}"


def test_budget_error_is_ulp_error_beyond_the_allowance():
    ref = np.array([1.0, 1.0, 0.0, np.nan, np.inf], np.float64)
    got = np.array([1.0 + 2**-21, 1.0 - 2**-20, 1e-30, np.nan, 3e38], F)
    np.testing.assert_allclose(budget_error(got, ref)[:2], [4.0, 8.0])
    assert budget_error(got, ref, 2.0**-22)[0] == pytest.approx(2.0)
    assert budget_error(got, ref, 1e-29)[2] == 0.0
    assert budget_error(got, ref)[3] == 0.0 and budget_error(got, ref)[4] == np.inf


@pytest.mark.parametrize("fn, x, want", [
    (MF.exp_fast_f32, np.inf, np.inf), (MF.exp_fast_f32, -np.inf, 0.0),
    (MF.exp_fast_f32, 89.0, np.inf), (MF.exp_fast_f32, -104.0, 0.0), (MF.exp_fast_f32, 0.0, 1.0),
    (MF.exp_fast_f32, -0.0, 1.0),
    (MF.logistic_fast_f32, np.inf, 1.0), (MF.logistic_fast_f32, -np.inf, 0.0),
    (MF.logistic_fast_f32, 0.0, 0.5), (MF.logistic_fast_f32, -0.0, 0.5),
    (MF.logistic_fast_f32, 3e38, 1.0), (MF.logistic_fast_f32, -3e38, 0.0),
    (MF.tanh_fast_f32, np.inf, 1.0), (MF.tanh_fast_f32, -np.inf, -1.0),
    (MF.tanh_fast_f32, -0.0, -0.0), (MF.tanh_fast_f32, 0.0, 0.0),
    (MF.tanh_fast_f32, 1e-45, 1e-45),
    (MF.tanh_fast_f32, -1e-45, -1e-45), (MF.tanh_fast_f32, 3e38, 1.0),
    (MF.elu_fast_f32, -np.inf, -1.0), (MF.elu_fast_f32, -0.0, -0.0),
    (MF.elu_fast_f32, np.inf, np.inf),
    (MF.elu_fast_f32, -1e-45, -1e-45), (MF.elu_fast_f32, -3e38, -1.0),
    (MF.log_fast_f32, 0.0, -np.inf), (MF.log_fast_f32, -0.0, -np.inf),
    (MF.log_fast_f32, -1.0, np.nan),
    (MF.log_fast_f32, -1e-45, np.nan), (MF.log_fast_f32, -np.inf, np.nan),
    (MF.log_fast_f32, np.inf, np.inf), (MF.log_fast_f32, 1.0, 0.0),
    (MF.sin_fast_f32, -0.0, -0.0), (MF.sin_fast_f32, 0.0, 0.0), (MF.sin_fast_f32, np.inf, np.nan),
    (MF.sin_fast_f32, -np.inf, np.nan), (MF.sin_fast_f32, -1e-45, -1e-45),
    (MF.cos_fast_f32, -0.0, 1.0), (MF.cos_fast_f32, np.inf, np.nan), (MF.cos_fast_f32, 1e-45, 1.0),
    (MF.swish_fast_f32, np.inf, np.finfo(F).max), (MF.swish_fast_f32, -np.inf, np.nan),
    (MF.swish_fast_f32, -0.0, -0.0), (MF.swish_fast_f32, -np.finfo(F).max, -0.0),
    (MF.mish_fast_f32, np.inf, np.finfo(F).max), (MF.mish_fast_f32, -np.inf, np.nan),
    (MF.mish_fast_f32, -0.0, -0.0), (MF.mish_fast_f32, 1e30, 1e30),
    (MF.gelu_tanh_fast_f32, np.inf, np.inf), (MF.gelu_tanh_fast_f32, -np.inf, np.nan),
    (MF.gelu_tanh_fast_f32, -0.0, -0.0), (MF.gelu_tanh_fast_f32, -20.0, -0.0),
    (MF.gelu_tanh_fast_f32, 1e30, 1e30),
    (MF.gelu_erf_fast_f32, np.inf, np.inf), (MF.gelu_erf_fast_f32, -np.inf, np.nan),
    (MF.gelu_erf_fast_f32, -0.0, -0.0), (MF.gelu_erf_fast_f32, -20.0, -0.0),
    (MF.gelu_erf_fast_f32, 1e30, 1e30),
])
def test_fast_edge_cases_are_litert_s(fn, x, want):
    """NaN, +-inf and -0.0 results (and their inputs) as LiteRT's builtin kernels give them
    (docs/kernel_semantics.md); the fused chains with their MUL's NONE activation."""
    got = apply(fn, np.array([x], F))
    assert same_float(got, np.array([want], F))[0], f"{fn.__name__}({x}) = {got[0]!r}"


@pytest.mark.parametrize("name", sorted(FAST_BUDGET))
def test_fast_nan_gives_nan(name):
    assert np.isnan(apply(math_function(name), np.array([np.nan, -np.nan], F))).all()


def test_elu_fast_passes_nan_bits_through():
    nan = np.array([0x7FC00123, 0xFFC00000], np.uint32).view(F)
    assert same_bits(apply(MF.elu_fast_f32, nan).view(np.uint32), nan.view(np.uint32))


@pytest.mark.parametrize("fn", [MF.sin_fast_f32, MF.cos_fast_f32, MF.tanh_fast_f32,
                                MF.logistic_fast_f32])
def test_fast_bounded_results_stay_in_range(fn):
    x = np.concatenate([np.linspace(-2.0**16, 2.0**16, 1_000_001, dtype=F),
                        np.linspace(-10, 10, 1_000_001, dtype=F)])
    got = apply(fn, x)
    low = 0.0 if fn is MF.logistic_fast_f32 else -1.0
    assert (got <= 1.0).all() and (got >= low).all()


def test_gelu_fast_picks_the_form():
    @numba.njit(error_model="numpy")
    def both(x, out_tanh, out_erf):
        for i in range(x.size):
            out_tanh[i] = MF.gelu_fast_f32(x[i], True)
            out_erf[i] = MF.gelu_fast_f32(x[i], False)

    x = np.linspace(-6, 6, 1001, dtype=F)
    out_tanh, out_erf = np.empty_like(x), np.empty_like(x)
    both(x, out_tanh, out_erf)
    assert same_bits(out_tanh, apply(MF.gelu_tanh_fast_f32, x))
    assert same_bits(out_erf, apply(MF.gelu_erf_fast_f32, x))


@pytest.mark.parametrize("name", ["exp_fast_f32", "logistic_fast_f32", "mish_fast_f32",
                                  "gelu_erf_fast_f32"])
def test_scaling_without_avx512_is_the_same_bits(name, monkeypatch):
    """_ldexp is one vscalefps on AVX-512 targets and two exact power-of-two products
    elsewhere; both round once, so the results are identical (subnormals included)."""
    x = np.concatenate([np.linspace(-110, 95, 200_001, dtype=F), SPECIAL])
    fn = math_function(name)
    with_avx512 = apply(fn, x)

    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    target = MI.numba_target()
    without_avx512 = dataclasses.replace(target, features=target.features - {"avx512f"})
    monkeypatch.setattr(MI, "numba_target", lambda: without_avx512)
    out = np.empty_like(x)
    loop(x, out)
    assert "llvm.ldexp" not in loop.inspect_llvm(loop.signatures[0])
    assert same_bits(out, with_avx512)


def test_exp_fast_scales_with_vscalef_on_avx512():
    if "+avx512f" not in llvm_binding.get_host_cpu_features().flatten().split(","):
        pytest.skip("no AVX-512 on this CPU")
    apply(MF.exp_fast_f32, np.linspace(-3, 3, 1000, dtype=F))
    _, _, asm = calls_and_asm(unary_loop(MF.exp_fast_f32))
    assert re.search(r"\bvscalefps\s[^\n]*%[yz]mm", asm)
