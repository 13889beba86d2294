"""One entry per TFLite op we fuse: its semantics, code template and tolerance.

`OPS` is the only registry: claiming asks it what an op accepts, rendering asks it for the
expression, tests read tolerances from it and never restate them. Expressions are numba source
over named operands (`{a}`, `{b}`) and params; helpers come from `codegen.scalar` and
`codegen.mathf32`. The exact float32 semantics each entry reproduces, with source references,
are in docs/kernel_semantics.md.

Two precisions (fusion_delegate.options, `precision`): "exact" renders `expr` and keeps
`tolerance` against LiteRT's builtin kernels; "fast" renders `approx_expr` where an op has one
(cheaper math from codegen.mathf32) and keeps `approx_tolerance`, which is never larger than
the error LiteRT's default path (XNNPACK) itself shows against the builtin kernels on the same
inputs (perf/math_accuracy.md). NaN, +-inf and -0.0 results are the builtin ones in both.
`APPROX_CHAINS` lists the chains the fast precision may compute as one function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .literals import literal

FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Tolerance:
    """|fused - builtin| <= ulp * ulp_of(builtin) + abs, elementwise; NaN must match NaN."""
    ulp: int = 0
    abs: float = 0.0

    @property
    def exact(self) -> bool:
        return self.ulp == 0 and self.abs == 0.0

    def __str__(self) -> str:
        if self.exact:
            return "bit-exact"
        return f"{self.ulp} ulp" + (f" + {self.abs:g}" if self.abs else "")


EXACT = Tolerance()


@dataclass(frozen=True)
class ByParam:
    """A tolerance that depends on the value of one builtin param (GELU's two forms)."""
    param: str
    values: tuple[tuple[object, Tolerance], ...]

    def __call__(self, params: dict) -> Tolerance:
        return dict(self.values)[params[self.param]]

    def __str__(self) -> str:
        return "; ".join(f"{self.param}={value}: {tolerance}" for value, tolerance in self.values)


PRECISIONS = ("exact", "fast")

# TfLiteFusedActivation -> the clamp the float builtin kernels apply (CalculateActivationRange):
# NONE, TANH, SIGN_BIT and SIGMOID all clamp to [lowest, max], so +-inf become +-FLT_MAX.
ACTIVATIONS: dict[int, tuple[str, float, float]] = {
    0: ("NONE", -FLT_MAX, FLT_MAX), 1: ("RELU", 0.0, FLT_MAX), 2: ("RELU_N1_TO_1", -1.0, 1.0),
    3: ("RELU6", 0.0, 6.0), 4: ("TANH", -FLT_MAX, FLT_MAX), 5: ("SIGN_BIT", -FLT_MAX, FLT_MAX),
    6: ("SIGMOID", -FLT_MAX, FLT_MAX),
}


def clamps_finite(activation: int) -> bool:
    """Whether a float op's fused activation clamps finite values (RELU, RELU_N1_TO_1, RELU6);
    the others only turn +-inf into +-FLT_MAX."""
    return ACTIVATIONS[activation][1] != -FLT_MAX


@dataclass(frozen=True)
class OpSpec:
    name: str
    code: int                         # tflite/builtin_ops.h
    arity: int
    expr: str                         # numba expression over {a}, {b} and params
    reference: Callable               # float64 numpy meaning: tests propagate errors through it
    tolerance: Tolerance = EXACT      # against the builtin kernel, per element
    fused_activation: bool = False    # the builtin applies TfLiteFusedActivation afterwards
    params: tuple[str, ...] = ()      # builtin params the expression uses
    discontinuous: bool = False       # a tiny input change can change the output a lot
    cost: int = 1                     # per element, in units of one float add
    dtypes: tuple[str, ...] = ("float32",)
    # An inf or NaN operand always gives an inf or NaN result (before any fused activation).
    propagates_nonfinite: bool = False
    # The expression gives +-FLT_MAX where it would overflow to +-inf, the clamp of the NONE
    # activation (and of those the float kernels treat alike), so no clamp is rendered for them.
    saturates: bool = False
    # A cheaper expression, the same as `expr` while `guard` (over {a}) is 0; see codegen.fastpath.
    fast_expr: str | None = None
    guard: str | None = None
    # precision="fast": the template for both loops, and the fast loop's template while `guard`
    # is 0 (SIN, COS: their exact loop keeps `expr`); None: the exact templates.
    approx_expr: str | None = None
    approx_fast_expr: str | None = None
    # Against the builtin kernel under precision="fast" (None: `tolerance`); never larger than
    # XNNPACK's measured error at the same absolute allowance.
    approx_tolerance: Tolerance | ByParam | None = None

    @property
    def approximated(self) -> bool:
        """precision="fast" renders something else than precision="exact"."""
        return bool(self.approx_expr or self.approx_fast_expr)

    def tolerance_for(self, params: dict, precision: str = "exact") -> Tolerance:
        """The per-element budget against the builtin kernel under `precision`."""
        check_precision(precision)
        if precision == "exact" or self.approx_tolerance is None:
            return self.tolerance
        if isinstance(self.approx_tolerance, ByParam):
            return self.approx_tolerance(params)
        return self.approx_tolerance

    def template(self, fast: bool = False, precision: str = "exact") -> str:
        """The expression template: `fast` picks the fast loop's form, `precision` the math."""
        check_precision(precision)
        if precision == "fast":
            if fast and self.approx_fast_expr:
                return self.approx_fast_expr
            if self.approx_expr:
                return self.approx_expr
        return self.fast_expr if fast and self.fast_expr else self.expr

    def clamps_overflow_only(self, params: dict) -> bool:
        """The fused activation only turns +-inf into +-FLT_MAX (NONE and the other activations
        the float kernels treat as no clamp), so a finite result passes it unchanged."""
        return self.fused_activation and not self.saturates and \
            not clamps_finite(params.get("activation", 0))

    def propagates(self, params: dict, fast: bool) -> bool:
        """An inf or NaN operand gives an inf or NaN result, fused activation included: with
        the overflow clamp left out (`fast`) or no activation at all."""
        return self.propagates_nonfinite and (
            not self.fused_activation or (fast and self.clamps_overflow_only(params)))

    def render(self, args: list[str], params: dict, fast: bool = False,
               precision: str = "exact") -> str:
        """The op over its operands' expressions; `fast`: the fast loop's form (fast_expr, and
        no clamp to +-FLT_MAX); `precision`: "exact" or "fast" (approx_expr, approx_fast_expr).
        The fused activation applies the same way under both precisions."""
        values = {name: literal(value) if isinstance(value, float) else repr(value)
                  for name, value in params.items() if name in self.params}
        expr = self.template(fast, precision).format(**dict(zip("ab", args)), **values)
        if self.fused_activation and not (fast and self.clamps_overflow_only(params)):
            _, lo, hi = ACTIVATIONS[params.get("activation", 0)]
            if lo == -FLT_MAX:
                return expr if self.saturates else f"clamp_overflow({expr})"
            expr = f"clamp({expr}, {literal(lo)}, {literal(hi)})"
        return expr


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def _where(condition, a, b):
    return np.where(condition, a, b)


_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_SQRT_2_OVER_PI = 0.7978845608028654
_T = Tolerance

# reference: the op in float64 numpy, (a, b, params) -> array, before any fused activation.
OPS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("ADD", 0, 2, "{a} + {b}", lambda a, b, p: a + b, fused_activation=True,
           propagates_nonfinite=True),
    OpSpec("SUB", 41, 2, "{a} - {b}", lambda a, b, p: a - b, fused_activation=True,
           propagates_nonfinite=True),
    OpSpec("MUL", 18, 2, "{a} * {b}", lambda a, b, p: a * b, fused_activation=True,
           propagates_nonfinite=True),
    OpSpec("DIV", 42, 2, "{a} / {b}", lambda a, b, p: a / b, fused_activation=True),
    OpSpec("SQUARED_DIFFERENCE", 99, 2, "({a} - {b}) * ({a} - {b})",
           lambda a, b, p: (a - b) ** 2, propagates_nonfinite=True),
    OpSpec("MAXIMUM", 55, 2, "maximum({a}, {b})", lambda a, b, p: _where(a > b, a, b)),
    OpSpec("MINIMUM", 57, 2, "minimum({a}, {b})", lambda a, b, p: _where(a < b, a, b)),
    OpSpec("POW", 78, 2, "pow_tflite({a}, {b}, {integer_exponent})",
           lambda a, b, p: np.power(a, float(p["integer_exponent"]) or b), _T(ulp=8),
           params=("integer_exponent",), cost=30),
    OpSpec("NEG", 59, 1, "-{a}", lambda a, b, p: -a, propagates_nonfinite=True),
    OpSpec("ABS", 101, 1, "np.abs({a})", lambda a, b, p: np.abs(a), propagates_nonfinite=True),
    OpSpec("SQUARE", 92, 1, "{a} * {a}", lambda a, b, p: a * a, propagates_nonfinite=True),
    OpSpec("SQRT", 75, 1, "sqrt_f32({a})", lambda a, b, p: np.sqrt(a), cost=4),
    OpSpec("RSQRT", 76, 1, "rsqrt({a})", lambda a, b, p: 1.0 / np.sqrt(a), cost=5),
    OpSpec("EXP", 47, 1, "exp_f32({a})", lambda a, b, p: np.exp(a), _T(ulp=2), cost=12,
           approx_expr="exp_fast_f32({a})", approx_tolerance=_T(ulp=3)),
    OpSpec("LOG", 73, 1, "log_f32({a})", lambda a, b, p: np.log(a), _T(ulp=2), cost=12,
           approx_expr="log_fast_f32({a})", approx_tolerance=_T(ulp=6)),
    OpSpec("SIN", 66, 1, "sin_f32({a})", lambda a, b, p: np.sin(a), _T(ulp=2), cost=15,
           fast_expr="sin_near_f32({a})", guard="far_angle({a})",
           approx_fast_expr="sin_fast_f32({a})", approx_tolerance=_T(ulp=3)),
    OpSpec("COS", 108, 1, "cos_f32({a})", lambda a, b, p: np.cos(a), _T(ulp=2), cost=15,
           fast_expr="cos_near_f32({a})", guard="far_angle({a})",
           approx_fast_expr="cos_fast_f32({a})", approx_tolerance=_T(ulp=3)),
    OpSpec("TANH", 28, 1, "tanh_eigen({a})", lambda a, b, p: np.tanh(a), cost=15,
           approx_expr="tanh_fast_f32({a})", approx_tolerance=_T(ulp=8)),
    OpSpec("LOGISTIC", 14, 1, "logistic_eigen({a})", lambda a, b, p: 1.0 / (1.0 + np.exp(-a)),
           _T(ulp=8), cost=15, approx_expr="logistic_fast_f32({a})",
           approx_tolerance=_T(ulp=7)),
    OpSpec("RELU", 19, 1, "relu({a})", lambda a, b, p: _where(a < 0, 0.0, a)),
    OpSpec("RELU6", 21, 1, "relu6({a})", lambda a, b, p: np.clip(a, 0.0, 6.0)),
    OpSpec("RELU_N1_TO_1", 20, 1, "relu_n1_to_1({a})", lambda a, b, p: np.clip(a, -1.0, 1.0)),
    OpSpec("RELU_0_TO_1", 152, 1, "relu_0_to_1({a})", lambda a, b, p: np.clip(a, 0.0, 1.0)),
    OpSpec("LEAKY_RELU", 98, 1, "leaky_relu({a}, {alpha})",
           lambda a, b, p: _where(a > 0, a, a * p["alpha"]), params=("alpha",)),
    OpSpec("PRELU", 54, 2, "prelu({a}, {b})", lambda a, b, p: _where(a >= 0, a, a * b)),
    OpSpec("ELU", 111, 1, "elu({a})", lambda a, b, p: _where(a >= 0, a, np.expm1(a)),
           _T(ulp=4), cost=12, approx_expr="elu_fast_f32({a})", approx_tolerance=_T(ulp=1)),
    OpSpec("HARD_SWISH", 117, 1, "hard_swish({a})",
           lambda a, b, p: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0, _T(ulp=1), cost=4),
    OpSpec("GELU", 150, 1, "gelu({a}, {approximate})",
           lambda a, b, p: 0.5 * a * (1.0 + np.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a ** 3)))
           if p["approximate"] else 0.5 * a * _erfc(-a * 0.7071067811865476),
           _T(ulp=16, abs=1e-8), params=("approximate",), cost=20,
           approx_expr="gelu_fast_f32({a}, {approximate})",
           approx_tolerance=ByParam("approximate", ((True, _T(ulp=1, abs=1e-6)),
                                                    (False, _T(ulp=16, abs=1e-8))))),
    OpSpec("FLOOR", 8, 1, "np.floor({a})", lambda a, b, p: np.floor(a), discontinuous=True),
    OpSpec("CEIL", 104, 1, "np.ceil({a})", lambda a, b, p: np.ceil(a), discontinuous=True),
    OpSpec("ROUND", 116, 1, "round_half_even({a})", lambda a, b, p: np.rint(a),
           discontinuous=True, cost=4),
    OpSpec("SIGN", 158, 1, "sign({a})", lambda a, b, p: np.sign(a), discontinuous=True),
)}

OPS_BY_CODE: dict[int, OpSpec] = {spec.code: spec for spec in OPS.values()}


@dataclass(frozen=True)
class ChainSpec:
    """A chain of ops that precision="fast" may compute as one function of its input `x`.

    `pattern` is the chain's expression tree: (op, operand, ...) tuples whose leaves are "x"
    (one and the same tensor) or float constants (one-element constant tensors); MUL and ADD
    may have their operands either way round. Every op in it but the root must have no fused
    activation (NONE). `expr` saturates at +-FLT_MAX, the clamp of the root's NONE activation
    (its kernel op `saturates`); any other activation of the root is applied on top of it.
    `tolerance` is against LiteRT's builtin kernels running the chain, before the root's
    activation, and no larger than XNNPACK's error on the same chain."""
    name: str
    pattern: tuple
    expr: str                         # numba expression over {x}
    tolerance: Tolerance

    @property
    def ops(self) -> tuple[str, ...]:
        """The chain's ops, innermost first."""
        return tuple(_pattern_ops(self.pattern))

    @property
    def cost(self) -> int:
        return sum(OPS[name].cost for name in self.ops)

    def reference(self, a, b, params):
        """The float64 meaning: the ops' references composed, before the root's activation."""
        def value(node):
            if node == "x":
                return a
            if isinstance(node, float):
                return node
            name, *operands = node
            args = [value(operand) for operand in operands]
            return OPS[name].reference(*args, *[None] * (2 - len(args)), {})
        return value(self.pattern)


def _pattern_ops(node):
    if isinstance(node, tuple):
        for operand in node[1:]:
            yield from _pattern_ops(operand)
        yield node[0]


APPROX_CHAINS: dict[str, ChainSpec] = {chain.name: chain for chain in (
    ChainSpec("swish", ("MUL", "x", ("LOGISTIC", "x")), "swish_fast_f32({x})",
              _T(ulp=8, abs=1e-42)),
    ChainSpec("mish", ("MUL", "x", ("TANH", ("LOG", ("ADD", ("EXP", "x"), 1.0)))),
              "mish_fast_f32({x})", _T(ulp=4, abs=1e-6)),
)}

# Ops the kernel computes that are not TFLite ops (code -1). codegen.lower makes of quantized
# nodes LUT, a 256-entry table indexed by an int8/uint8 operand (every unary op and chain of
# them), ROW_LUT, one indexed by an operand's offset from its row's value (int8 SOFTMAX's
# exps), and QCALL, a codegen.fixedpoint helper over its operands (binary int8 ops, QUANTIZE
# from float, the per-row steps of int8 row ops), any arity; codegen.chains makes SWISH, MISH
# of APPROX_CHAINS under precision="fast", with the root op's fused activation.
KERNEL_OPS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("LUT", -1, 1, "", lambda a, b, p: None, dtypes=("int8", "uint8")),
    # A 256-entry table indexed by a code minus its row's code (a, b): int8 SOFTMAX's exps.
    OpSpec("ROW_LUT", -1, 2, "", lambda a, b, p: None, dtypes=("int8", "uint8")),
    OpSpec("QCALL", -1, 0, "", lambda a, b, p: None, dtypes=("float32", "int8", "uint8")),
    *(OpSpec(chain.name.upper(), -1, 1, chain.expr.replace("{x}", "{a}"),
             chain.reference, chain.tolerance, fused_activation=True, cost=chain.cost,
             saturates=True) for chain in APPROX_CHAINS.values()),
)}

#: The kernel ops that stand for an APPROX_CHAINS chain.
CHAIN_OPS = frozenset(chain.name.upper() for chain in APPROX_CHAINS.values())

#: What a transcendental op costs at least, per element.
TRANSCENDENTAL_COST = 10
TRANSCENDENTAL = frozenset(name for name, spec in OPS.items() if spec.cost >= TRANSCENDENTAL_COST)


@dataclass(frozen=True)
class ReductionSpec(OpSpec):
    """A reduction over `axes` (params: axes, normalised and sorted; keep_dims): an accumulator
    that starts at `init`, takes each element with `combine` (over {acc} and {a}) in the input's
    order, and ends as `finish` (over {acc} and {n}, the elements reduced).

    `init` is the identity of `combine` for every float32, NaN and -0.0 included, so it
    reproduces the builtin's reducer_first. `row_combine`: the form a row loop accumulates with,
    reassociating the adds or maxima so that LLVM vectorises them (codegen.reduce); None: the
    ordered `combine`, bit-exact with the builtin's sequential loop. The tolerance of each is
    stated and checked in tests/test_reductions.py (reduction_bound) and listed in
    docs/what_it_fuses.md."""
    init: str = ""
    combine: str = ""
    finish: str = "{acc}"
    row_combine: str | None = None


# The reductions TFLite runs as MEAN, SUM, REDUCE_MAX, REDUCE_MIN (tflite/kernels/reduce.cc,
# optimized_ops::Reduce: `res = first; res = reducer(res, in)` in input order; MEAN divides the
# float32 sum by the count), and the row reductions SOFTMAX and LOG_SOFTMAX are made of
# (codegen.composites.expand): Eigen's maxCoeff and sum, whose NaN handling is unspecified: a row
# with a NaN is NaN throughout whatever its max.
REDUCTIONS: dict[str, ReductionSpec] = {spec.name: spec for spec in (
    ReductionSpec("SUM", 74, 1, "", lambda a, b, p: None, init="np.float32(-0.0)",
                  combine="{acc} + {a}"),
    ReductionSpec("MEAN", 40, 1, "", lambda a, b, p: None, init="np.float32(-0.0)",
                  combine="{acc} + {a}", finish="{acc} / np.float32({n})",
                  row_combine="add_reassoc({acc}, {a})"),
    ReductionSpec("REDUCE_MAX", 82, 1, "", lambda a, b, p: None, init="-INF",
                  combine="maximum({acc}, {a})"),
    ReductionSpec("REDUCE_MIN", 89, 1, "", lambda a, b, p: None, init="INF",
                  combine="minimum({acc}, {a})"),
    ReductionSpec("ROW_SUM", -1, 1, "", lambda a, b, p: None, init="np.float32(-0.0)",
                  combine="{acc} + {a}", row_combine="add_reassoc({acc}, {a})"),
    ReductionSpec("ROW_MAX", -1, 1, "", lambda a, b, p: None, init="-INF",
                  combine="maximum({acc}, {a})", row_combine="max_reassoc({acc}, {a})"),
    # int8/uint8 reductions (codegen.lower): the exact sum or extreme of the codes, in any
    # order; QMAX and QMIN start at the code range's end (their op's `init` param).
    ReductionSpec("QSUM", -1, 1, "", lambda a, b, p: None, init="0", combine="{acc} + {a}",
                  dtypes=("int8", "uint8")),
    ReductionSpec("QMAX", -1, 1, "", lambda a, b, p: None, combine="max({acc}, {a})",
                  dtypes=("int8", "uint8")),
    ReductionSpec("QMIN", -1, 1, "", lambda a, b, p: None, combine="min({acc}, {a})",
                  dtypes=("int8", "uint8")),
)}

#: Ops over a window of their input (codegen.window): the depthwise convolution, float32. Its
#: expression is its fused activation over `{a}`, the sum of its taps (codegen.emit_stencil: bias
#: first, then each tap's product in LiteRT's order); inputs: data, weights, bias.
STENCILS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("DEPTHWISE_CONV_2D", 4, 3, "{a}", lambda a, b, p: None, fused_activation=True),
)}

#: Ops that contract their operands along a dimension (codegen.quant_matmul): int8
#: BATCH_MATMUL, each output the requantized int32 sum over K of centred code products, as
#: LiteRT's reference kernel computes it; inputs: lhs, rhs. Its nest is codegen.nests.MatmulNest.
MATMULS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("BATCH_MATMUL", 126, 2, "{a}", lambda a, b, p: None, dtypes=("int8",)),
)}

# Elementwise kernel ops the composite ops are lowered to (codegen.composites.expand): without the
# fused activation's clamp, as Eigen computes them inside SOFTMAX, LOG_SOFTMAX and
# L2_NORMALIZATION.
KERNEL_OPS.update({spec.name: spec for spec in (
    OpSpec("SUB_RAW", -1, 2, "{a} - {b}", lambda a, b, p: a - b, propagates_nonfinite=True),
    OpSpec("MUL_RAW", -1, 2, "{a} * {b}", lambda a, b, p: a * b, propagates_nonfinite=True),
    OpSpec("DIV_RAW", -1, 2, "{a} / {b}", lambda a, b, p: a / b),
    OpSpec("RECIPROCAL", -1, 1, "np.float32(1.0) / {a}", lambda a, b, p: 1.0 / a),
    OpSpec("SCALED_EXP", -1, 2, "scaled_exp({a} - {b}, {beta})",
           lambda a, b, p: np.exp((a - b) * p["beta"]), _T(ulp=4), params=("beta",), cost=12),
    OpSpec("L2_NORM", -1, 1, "max_eps(sqrt_f32({a}), {epsilon})",
           lambda a, b, p: np.maximum(np.sqrt(a), p["epsilon"]), params=("epsilon",), cost=4),
)})


# Names the expressions may call, and the module each comes from (the renderer imports them).
HELPER_MODULES: dict[str, str] = {
    **{name: "codegen.scalar" for name in (
        "clamp", "clamp_overflow", "maximum", "minimum", "relu", "relu6", "relu_n1_to_1",
        "relu_0_to_1",
        "leaky_relu", "prelu", "hard_swish", "elu", "sign", "round_half_even", "rsqrt",
        "pow_tflite", "tanh_eigen", "logistic_eigen", "gelu", "magnitude", "miss_if")},
    **{name: "codegen.mathf32" for name in (
        "exp_f32", "log_f32", "sin_f32", "cos_f32", "sin_near_f32", "cos_near_f32", "far_angle",
        "sqrt_f32")},
    **{name: "codegen.mathf32_fast" for name in (
        "exp_fast_f32", "log_fast_f32", "sin_fast_f32", "cos_fast_f32", "tanh_fast_f32",
        "logistic_fast_f32", "elu_fast_f32", "gelu_fast_f32", "swish_fast_f32", "mish_fast_f32")},
    **{name: "codegen.reduce" for name in ("add_reassoc", "max_reassoc", "max_eps",
                                            "scaled_exp")},
}


def markdown_table() -> str:
    """docs/what_it_fuses.md's op table, generated from OPS so the two cannot drift apart."""
    rows = ["| op | code | fused activation | params | tolerance vs LiteRT builtin "
            "| precision=fast |",
            "|---|---|---|---|---|---|"]
    for spec in OPS.values():
        fast = str(spec.approx_tolerance) if spec.approximated else "as exact"
        params = ", ".join(p for p in spec.params if p != "integer_exponent") or "-"
        rows.append(f"| {spec.name} | {spec.code} | {'yes' if spec.fused_activation else '-'} "
                    f"| {params} | {spec.tolerance} | {fast} |")
    return "\n".join(rows)
