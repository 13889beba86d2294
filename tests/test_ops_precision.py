"""precision="fast": the option, what OpSpec renders under it, and each approximation against
LiteRT's builtin kernels (the oracle) within its approx_tolerance, which in turn is no larger
than XNNPACK's own error on the same inputs (perf/math_accuracy.md has the full sweep)."""
import importlib
import re

import numba
import numpy as np
import pytest

from codegen.mathf32_intrinsics import compile_unfused
from codegen.ops import (APPROX_CHAINS, CHAIN_OPS, HELPER_MODULES, KERNEL_OPS, OPS, PRECISIONS,
                         ByParam, Tolerance)
from conftest import BUILTIN
from fusion_delegate import DelegateOptionError, FusionDelegate, FusionOptions
from fusion_delegate.model import ModelBuilder
from fusion_delegate.runtime import Interpreter, OpResolverType

F = np.float32
FLT_MIN = 2.0**-126
NONE = {"fused_activation_function": 0}
NEAR = 2.0**16          # sin/cos: approx_fast_expr holds where far_angle(x) is 0
APPROXIMATED = sorted(name for name, spec in OPS.items() if spec.approximated)
# (op, params) for each approximated op and form
FORMS = [(name, {"approximate": a}) if name == "GELU" else (name, {})
         for name in APPROXIMATED for a in ((True, False) if name == "GELU" else (None,))]


# ------------------------------------------------------------------------------------ option

def test_precision_defaults_to_fast_and_takes_exact():
    assert FusionOptions().precision == "fast"
    assert FusionOptions(precision="exact").precision == "exact"
    assert FusionOptions(precision="fast").precision == "fast"
    assert FusionOptions.parse(["precision=fast"]).precision == "fast"
    assert set(PRECISIONS) == {"exact", "fast"}


@pytest.mark.parametrize("value", ["Fast", "approximate", "", 1])
def test_other_precisions_are_refused_naming_the_valid_ones(value):
    with pytest.raises(DelegateOptionError, match=r"precision .*'exact', 'fast'|precision must"):
        FusionDelegate(precision=value)


# ------------------------------------------------------------------------------------ render

def test_the_fast_precision_renders_the_approximations():
    assert APPROXIMATED == ["COS", "ELU", "EXP", "GELU", "LOG", "LOGISTIC", "SIN", "TANH"]
    for name, params in FORMS:
        spec = OPS[name]
        for fast_loop in (False, True):
            exact = spec.render(["x"], params, fast_loop)
            assert spec.render(["x"], params, fast_loop, "exact") == exact
            fast = spec.render(["x"], params, fast_loop, "fast")
            template = spec.approx_fast_expr if fast_loop and spec.approx_fast_expr else (
                spec.approx_expr or spec.expr)
            values = {k: repr(v) for k, v in params.items()}
            assert fast == template.format(a="x", **values)
    assert OPS["GELU"].render(["x"], {"approximate": True}, precision="fast") == \
        "gelu_fast_f32(x, True)"
    assert OPS["EXP"].render(["x"], {}, precision="fast") == "exp_fast_f32(x)"


def test_sin_and_cos_approximate_only_in_the_fast_loop():
    """Their fast functions hold where the guard (far_angle) is 0; the exact loop, which runs
    once any element is far, keeps sin_f32/cos_f32."""
    for name, fast_fn, exact_fn in (("SIN", "sin_fast_f32", "sin_f32"),
                                    ("COS", "cos_fast_f32", "cos_f32")):
        spec = OPS[name]
        assert spec.guard == "far_angle({a})"
        assert spec.render(["x"], {}, True, "fast") == f"{fast_fn}(x)"
        assert spec.render(["x"], {}, False, "fast") == f"{exact_fn}(x)"


def test_ops_without_an_approximation_render_the_same_under_both_precisions():
    for spec in OPS.values():
        if spec.approximated:
            continue
        args = ["x", "y"][:spec.arity]
        params = {"activation": 0, "alpha": 0.5, "approximate": True, "integer_exponent": 0}
        for fast_loop in (False, True):
            assert spec.render(args, params, fast_loop, "fast") == \
                spec.render(args, params, fast_loop, "exact")
        assert spec.tolerance_for(params, "fast") == spec.tolerance


def test_an_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="precision"):
        OPS["EXP"].render(["x"], {}, precision="fastest")
    with pytest.raises(ValueError, match="precision"):
        OPS["EXP"].tolerance_for({}, "fastest")


def test_approximations_call_known_helpers():
    for spec in OPS.values():
        for template in (spec.approx_expr, spec.approx_fast_expr):
            for name in re.findall(r"\b(\w+)\(", template or ""):
                assert name in HELPER_MODULES, (spec.name, name)
    for chain in APPROX_CHAINS.values():
        assert re.match(r"^\w+\(\{x\}\)$", chain.expr) and chain.expr.split("(")[0] in \
            HELPER_MODULES


def test_the_readme_table_has_the_fast_tolerances():
    from codegen.ops import markdown_table
    table = markdown_table()
    assert "| precision=fast |" in table.splitlines()[0]
    assert "| TANH | 28 | - | - | bit-exact | 8 ulp |" in table
    assert "| ADD | 0 | yes | - | bit-exact | as exact |" in table
    assert "approximate=False: 16 ulp + 1e-08" in table
    assert isinstance(OPS["GELU"].approx_tolerance, ByParam)


# ----------------------------------------------------------------------- against LiteRT

def inputs() -> np.ndarray:
    """Specials, every 4099th float32 bit pattern (every binade, subnormals), dense samples of
    the ranges where the functions are neither saturated nor trivial; a multiple of 16 long
    (LOGISTIC's builtin rounds its last n % 4 elements its own way)."""
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(F)
    rng = np.random.default_rng(2024)
    x = np.concatenate([
        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 2e-38, -2e-38, 1.0, -1.0,
                  88.7, 89.0, -87.3, -104.0, -104.5, 7.9, 9.0, -9.0, 3.4e38, -3.4e38], F),
        bits[np.isfinite(bits)], rng.uniform(-20.0, 20.0, 1_000_000).astype(F),
        rng.uniform(-8.0, 8.0, 2_000_000).astype(F), rng.uniform(0.0, 4.0, 500_000).astype(F)])
    return np.concatenate([x, np.zeros((-x.size) % 16, F)])


X = inputs()


def model(name: str, params: dict, n: int) -> bytes:
    b = ModelBuilder(name)
    x = b.input("x", (n,))
    if name == "swish":
        y = b.op("MUL", [x, b.op("LOGISTIC", [x])], NONE)
    elif name == "mish":
        one = b.const("one", np.ones((1,), F))
        softplus = b.op("LOG", [b.op("ADD", [b.op("EXP", [x]), one], NONE)])
        y = b.op("MUL", [x, b.op("TANH", [softplus])], NONE)
    else:
        y = b.op(name, [x], params or None)
    b.output(y)
    return b.to_bytes()


def litert(name: str, params: dict, x: np.ndarray, resolver) -> np.ndarray:
    interpreter = Interpreter(model_content=model(name, params, x.size), num_threads=1,
                              experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()


def template_loop(expr: str, fused: bool):
    """A numba loop applying the rendered expression over {a} to every element."""
    namespace = {"np": np}
    for name in set(re.findall(r"\b(\w+)\(", expr)) & set(HELPER_MODULES):
        namespace[name] = getattr(importlib.import_module(HELPER_MODULES[name]), name)
    exec(f"def elementwise(a):\n    return {expr}\n", namespace)
    fn = numba.njit(inline="always", error_model="numpy")(namespace["elementwise"])

    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    if not fused:
        compile_unfused(loop, 2)
    return loop


def needed_ulps(got: np.ndarray, want: np.ndarray, abs_floor: float) -> np.ndarray:
    """ulps of `want` beyond `abs_floor` (Tolerance's form), over finite pairs."""
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(np.abs(want)).astype(np.float64)
        need = np.maximum(np.abs(got.astype(np.float64) - want) - abs_floor, 0.0) / spacing
    return np.where(np.isfinite(got) & np.isfinite(want), need, 0.0)


def assert_within(got, want, tolerance: Tolerance, x, what):
    need = needed_ulps(got, want, tolerance.abs)
    worst = int(np.argmax(need))
    assert need[worst] <= tolerance.ulp, \
        f"{what}: {need[worst]:.2f} ulp beyond {tolerance.abs:g} at x={x[worst]!r}: " \
        f"{got[worst]!r} vs builtin {want[worst]!r}"
    with np.errstate(invalid="ignore"):
        bad = np.isnan(got) != np.isnan(want)
        bad |= (np.isinf(got) | np.isinf(want)) & ~(np.isnan(got) | np.isnan(want)) & \
            (got != want)
        bad |= (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
    assert not bad.any(), f"{what}: NaN/inf/-0.0 differ at x={x[bad][:5]}: " \
        f"{got[bad][:5]} vs builtin {want[bad][:5]}"


def xnnpack_ulps(name, params, x, want, abs_floor) -> float:
    xnnpack = litert(name, params, x, OpResolverType.AUTO)
    return float(needed_ulps(xnnpack, want, max(abs_floor, FLT_MIN)).max())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name, params", FORMS, ids=[f"{n}{p.get('approximate', '')}"
                                                     for n, p in FORMS])
def test_each_approximation_is_within_its_tolerance_of_litert(name, params, fused):
    spec = OPS[name]
    x = X[~(np.abs(X) >= NEAR)] if spec.approx_fast_expr else X
    want = litert(name, params, x, BUILTIN)
    expr = spec.render(["a"], params, fast=bool(spec.approx_fast_expr), precision="fast")
    got = np.empty_like(x)
    template_loop(expr, fused)(x, got)
    assert_within(got, want, spec.tolerance_for(params, "fast"), x, expr)


@pytest.mark.parametrize("name, params", FORMS, ids=[f"{n}{p.get('approximate', '')}"
                                                     for n, p in FORMS])
def test_no_budget_is_larger_than_xnnpacks_own_error(name, params):
    """At the budget's absolute allowance (FLT_MIN at least: XNNPACK flushes subnormal results,
    which is no licence for anything else), XNNPACK needs at least as many ulps."""
    spec = OPS[name]
    x = X[~(np.abs(X) >= NEAR)] if spec.approx_fast_expr else X
    want = litert(name, params, x, BUILTIN)
    tolerance = spec.tolerance_for(params, "fast")
    assert tolerance.ulp <= xnnpack_ulps(name, params, x, want, tolerance.abs)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("chain", sorted(APPROX_CHAINS))
def test_each_chain_is_within_its_tolerance_of_the_litert_chain(chain, fused):
    spec = APPROX_CHAINS[chain]
    want = litert(chain, {}, X, BUILTIN)
    expr = spec.expr.format(x="a")
    got = np.empty_like(X)
    template_loop(expr, fused)(X, got)
    assert_within(got, want, spec.tolerance, X, expr)       # +-inf saturate as MUL's NONE clamp
    if fused:
        assert spec.tolerance.ulp <= xnnpack_ulps(chain, {}, X, want, spec.tolerance.abs)


def test_chain_ops_saturate_instead_of_clamping():
    """The chain functions give +-FLT_MAX themselves: no overflow clamp is rendered for the
    NONE activation (nor left out and counted by a fast loop); other activations clamp."""
    for name in CHAIN_OPS:
        spec, expr = KERNEL_OPS[name], APPROX_CHAINS[name.lower()].expr.format(x="x")
        for fast_loop in (False, True):
            assert spec.render(["x"], {"activation": 0}, fast_loop, "fast") == expr
        assert not spec.clamps_overflow_only({"activation": 0})
        assert spec.render(["x"], {"activation": 3}, precision="fast") == \
            f"clamp({expr}, np.float32(0.0), np.float32(6.0))"


def test_chain_patterns_are_made_of_fusable_ops():
    for chain in APPROX_CHAINS.values():
        assert all(op in OPS for op in chain.ops)
        assert chain.ops[-1] == "MUL"


# ------------------------------------------------------------- chains through the delegate

def delegated(model_bytes: bytes, x: np.ndarray, precision: str):
    delegate = FusionDelegate(min_speedup=0.0, precision=precision)
    interpreter = Interpreter(model_content=model_bytes, experimental_delegates=[delegate],
                              experimental_op_resolver_type=BUILTIN)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]).copy()
               for d in interpreter.get_output_details()]
    (kernel,) = delegate.kernels.values()
    return outputs, [op.op for op in kernel.ir.ops], kernel.kernel.source


@pytest.mark.parametrize("chain", sorted(APPROX_CHAINS))
def test_the_fast_precision_fuses_each_chain_into_one_function(chain):
    spec = APPROX_CHAINS[chain]
    (got,), ops, source = delegated(model(chain, {}, X.size), X, "fast")
    assert ops == [chain.upper()]
    assert spec.expr.format(x="x[i0]") in source and "precision fast" in source
    assert_within(got, litert(chain, {}, X, BUILTIN), spec.tolerance, X, chain)
    (_,), ops, _ = delegated(model(chain, {}, 64), X[:64], "exact")
    assert ops == list(spec.ops)


def test_a_chain_whose_inner_value_is_read_elsewhere_is_not_replaced():
    b = ModelBuilder("swish_and_gate")
    x = b.input("x", (64,))
    gate = b.op("LOGISTIC", [x])
    b.output(b.op("MUL", [x, gate], NONE))
    b.output(gate)
    other = ModelBuilder("swish_of_two")
    x, y = other.input("x", (64,)), other.input("y", (64,))
    other.output(other.op("MUL", [x, other.op("LOGISTIC", [y])], NONE))
    for built in (b, other):
        delegate = FusionDelegate(min_speedup=0.0, precision="fast")
        interpreter = Interpreter(model_content=built.to_bytes(),
                                  experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        (kernel,) = delegate.kernels.values()
        assert [op.op for op in kernel.ir.ops] == ["LOGISTIC", "MUL"]
