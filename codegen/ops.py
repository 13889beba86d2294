"""One entry per TFLite op we fuse: its semantics, code template and tolerance.

`OPS` is the only registry: claiming asks it what an op accepts, rendering asks it for the
expression, tests read tolerances from it and never restate them. Expressions are numba source
over named operands (`{a}`, `{b}`) and params; helpers come from `codegen.scalar` and
`codegen.mathf32`. The exact float32 semantics each entry reproduces, with source references,
are in docs/kernel_semantics.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Tolerance:
    """|fused - builtin| <= ulp * ulp_of(builtin) + abs, elementwise; NaN must match NaN."""
    ulp: int = 0
    abs: float = 0.0

    @property
    def exact(self) -> bool:
        return self.ulp == 0 and self.abs == 0.0


EXACT = Tolerance()

# TfLiteFusedActivation -> the clamp the float builtin kernels apply (CalculateActivationRange):
# NONE, TANH, SIGN_BIT and SIGMOID all clamp to [lowest, max], so +-inf become +-FLT_MAX.
ACTIVATIONS: dict[int, tuple[str, float, float]] = {
    0: ("NONE", -FLT_MAX, FLT_MAX), 1: ("RELU", 0.0, FLT_MAX), 2: ("RELU_N1_TO_1", -1.0, 1.0),
    3: ("RELU6", 0.0, 6.0), 4: ("TANH", -FLT_MAX, FLT_MAX), 5: ("SIGN_BIT", -FLT_MAX, FLT_MAX),
    6: ("SIGMOID", -FLT_MAX, FLT_MAX),
}


@dataclass(frozen=True)
class OpSpec:
    name: str
    code: int                         # tflite/builtin_ops.h
    arity: int
    expr: str | dict                  # numba expression over {a}, {b} and params, or one per
                                      # value of the `variant` param
    tolerance: Tolerance = EXACT      # against the builtin kernel, per element
    fused_activation: bool = False    # the builtin applies TfLiteFusedActivation afterwards
    params: tuple[str, ...] = ()      # builtin params the expression uses
    discontinuous: bool = False       # a tiny input change can change the output a lot
    cost: int = 1                     # per element, in units of one float add
    variant: str | None = None        # the param that selects an entry of a dict `expr`

    def render(self, args: list[str], params: dict) -> str:
        from .render import literal
        template = self.expr[params[self.variant]] if self.variant else self.expr
        values = {name: literal(params[name]) for name in self.params if name != self.variant}
        expr = template.format(**dict(zip("ab", args)), **values)
        if self.fused_activation:
            _, lo, hi = ACTIVATIONS[params.get("activation", 0)]
            expr = f"clamp({expr}, {literal(lo)}, {literal(hi)})"
        return expr


_ARITH = dict(arity=2, fused_activation=True, params=())
_T = Tolerance

OPS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("ADD", 0, expr="{a} + {b}", **_ARITH),
    OpSpec("SUB", 41, expr="{a} - {b}", **_ARITH),
    OpSpec("MUL", 18, expr="{a} * {b}", **_ARITH),
    OpSpec("DIV", 42, expr="{a} / {b}", **_ARITH),
    OpSpec("SQUARED_DIFFERENCE", 99, 2, "({a} - {b}) * ({a} - {b})"),
    OpSpec("MAXIMUM", 55, 2, "maximum({a}, {b})"),
    OpSpec("MINIMUM", 57, 2, "minimum({a}, {b})"),
    OpSpec("POW", 78, 2, "pow_f32({a}, {b})", _T(ulp=8), cost=30),
    OpSpec("NEG", 59, 1, "-{a}"),
    OpSpec("ABS", 101, 1, "np.abs({a})"),
    OpSpec("SQUARE", 92, 1, "{a} * {a}"),
    OpSpec("SQRT", 75, 1, "np.sqrt({a})", cost=4),
    OpSpec("RSQRT", 76, 1, "rsqrt({a})", cost=5),
    OpSpec("EXP", 47, 1, "exp_f32({a})", _T(ulp=2), cost=12),
    OpSpec("LOG", 73, 1, "log_f32({a})", _T(ulp=2), cost=12),
    OpSpec("SIN", 66, 1, "sin_f32({a})", _T(ulp=2), cost=15),
    OpSpec("COS", 108, 1, "cos_f32({a})", _T(ulp=2), cost=15),
    OpSpec("TANH", 28, 1, "tanh_f32({a})", _T(ulp=4), cost=15),
    OpSpec("LOGISTIC", 14, 1, "logistic_f32({a})", _T(ulp=4), cost=15),
    OpSpec("RELU", 19, 1, "relu({a})"),
    OpSpec("RELU6", 21, 1, "relu6({a})"),
    OpSpec("RELU_N1_TO_1", 20, 1, "relu_n1_to_1({a})"),
    OpSpec("RELU_0_TO_1", 152, 1, "relu_0_to_1({a})"),
    OpSpec("LEAKY_RELU", 98, 1, "leaky_relu({a}, {alpha})", params=("alpha",)),
    OpSpec("PRELU", 54, 2, "prelu({a}, {b})"),
    OpSpec("ELU", 111, 1, "elu({a})", _T(ulp=4), cost=12),
    OpSpec("HARD_SWISH", 117, 1, "hard_swish({a})", cost=4),
    OpSpec("GELU", 150, 1, {True: "gelu_tanh({a})", False: "gelu_erf({a})"},
           _T(ulp=8, abs=1e-7), params=("approximate",), variant="approximate", cost=20),
    OpSpec("FLOOR", 8, 1, "np.floor({a})", discontinuous=True),
    OpSpec("CEIL", 104, 1, "np.ceil({a})", discontinuous=True),
    OpSpec("ROUND", 116, 1, "round_half_even({a})", discontinuous=True, cost=4),
    OpSpec("SIGN", 158, 1, "sign({a})", discontinuous=True),
)}

OPS_BY_CODE: dict[int, OpSpec] = {spec.code: spec for spec in OPS.values()}

TRANSCENDENTAL = frozenset(name for name, spec in OPS.items() if spec.cost >= 10)

# Names the expressions may call, and the module each comes from (the renderer imports them).
HELPER_MODULES: dict[str, str] = {
    **{name: "codegen.scalar" for name in (
        "clamp", "maximum", "minimum", "relu", "relu6", "relu_n1_to_1", "relu_0_to_1",
        "leaky_relu", "prelu", "hard_swish", "elu", "sign", "round_half_even", "rsqrt",
        "gelu_tanh", "gelu_erf")},
    **{name: "codegen.mathf32" for name in (
        "exp_f32", "log_f32", "tanh_f32", "logistic_f32", "erf_f32", "sin_f32", "cos_f32",
        "pow_f32")},
}
