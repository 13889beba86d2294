"""Random elementwise models, and the check of the fused result against LiteRT's kernels.

Tolerances come from OPS and are propagated through the DAG to first order: every op's inputs
are LiteRT's own float32 intermediates (the oracle runs with preserve_all_tensors), each with an
absolute error bound; the op's float64 reference is evaluated at the inputs moved by their
bounds in every sign combination, and the op's own budget (`OpSpec.tolerance`, in ulps of its
output) is added. Exact ops on exact inputs therefore get a bound of zero: they must match bit
for bit. Discontinuous ops (FLOOR, CEIL, ROUND, SIGN) are only ever given exact inputs, so a tiny
upstream difference can never flip them: that is a property of the generated models, not a
looser tolerance.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from fusion_delegate.runtime import Interpreter
from hypothesis import strategies as st

from codegen.ops import ACTIVATIONS, OPS, Tolerance
from conftest import BUILTIN
from fusion_delegate.claims import integer_exponent
from fusion_delegate.model import ModelBuilder

FLT_MAX = np.finfo(np.float32).max
#: How far LiteRT's Eigen-based kernels (which the fused ones reproduce bit for bit) are from
#: the true function, in ulps (perf/math_accuracy.md; mathf32_fast.FAST_BUDGET's tanh note).
EIGEN_RATIONAL_ULPS = {"TANH": 8, "LOGISTIC": 8, "GELU": 16}
DIMS = [1, 1, 2, 3, 5, 7]
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, 1e30, -1e-30, 1e-40,
                     -1e-45, 2.5, -0.5], np.float32)


@dataclass
class Graph:
    """A generated model and what the test needs to know about it; `structure`: what decides
    the paths its kernel takes (ops, wiring, which dims broadcast, size class, the kinds of
    its constants), not the sizes of its dims or the values of its constants."""
    model: bytes
    input_shapes: list[tuple[int, ...]]
    ops: list[tuple[str, tuple[int, ...], int, dict]] = field(default_factory=list)
    exact: dict[int, bool] = field(default_factory=dict)
    structure: tuple = ()


def dims_pattern(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Which dims of a shape are longer than 1: how it broadcasts against the others."""
    return tuple(d > 1 for d in shape)


def size_class(shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Whether a shape holds a vector of 16 float32 and a vectorised loop iteration of 64 (a
    tile's minimum, codegen.schedule.TILE_MIN): past each, the kernel takes other paths."""
    elements = math.prod(shape)
    return elements >= 16, elements >= 64


@st.composite
def shapes(draw, max_rank=6, max_elements=1500):
    """A full shape, and derived input shapes that broadcast to it (dims set to 1, or dropped)."""
    rank = draw(st.integers(0, max_rank))
    full = [draw(st.sampled_from(DIMS)) for _ in range(rank)]
    while np.prod(full, dtype=np.int64) > max_elements:
        full[full.index(max(full))] = 1
    return tuple(full)


def broadcast_variant(draw, full: tuple[int, ...]) -> tuple[int, ...]:
    shape = [1 if draw(st.booleans()) and draw(st.booleans()) else d for d in full]
    drop = draw(st.integers(0, len(shape)))
    return tuple(shape[drop:])


@st.composite
def graphs(draw, op_names=tuple(OPS), max_ops=8):
    """A random DAG of fusable ops: shared operands, constants of every broadcast kind, fused
    activations, several outputs (some also consumed inside the graph)."""
    full = draw(shapes())
    b = ModelBuilder("random")
    n_inputs = draw(st.integers(1, 3))
    input_shapes = [full] + [broadcast_variant(draw, full) for _ in range(n_inputs - 1)]
    tensors = [(b.input(f"in{i}", s), s) for i, s in enumerate(input_shapes)]
    graph = Graph(model=b"", input_shapes=input_shapes)
    graph.exact = {t: True for t, _ in tensors}
    consumed: set[int] = set()
    constants: dict[int, np.ndarray] = {}
    constant_kinds: list[tuple] = []

    def operand():
        kind = draw(st.sampled_from(["tensor", "tensor", "tensor", "const"]))
        if kind == "tensor":
            return draw(st.sampled_from(tensors))
        shape = draw(st.sampled_from([(), (1,), full[-1:], broadcast_variant(draw, full)]))
        values = draw(st.sampled_from(["normal", "positive", "special"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        data = np.asarray(rng.standard_normal(shape) * 3, np.float32)
        if values == "positive":
            data = np.abs(data) + np.float32(0.25)
        elif values == "special" and data.size:
            data.reshape(-1)[0] = rng.choice(SPECIALS)
        t = b.const(f"c{len(graph.exact)}", data)
        special = data.reshape(-1)[:1].tobytes() if values == "special" else b""
        constant_kinds.append((t, dims_pattern(data.shape), values, special))
        graph.exact[t] = True
        constants[t] = data
        return t, tuple(data.shape)

    for _ in range(draw(st.integers(1, max_ops))):
        name = draw(st.sampled_from(op_names))
        spec = OPS[name]
        args = [operand() for _ in range(spec.arity)]
        exact_in = all(graph.exact[t] for t, _ in args)
        if spec.discontinuous and not exact_in or not claimable(name, args, constants):
            continue
        params, options = op_params(draw, name)
        out = b.op(name, [t for t, _ in args], options or None)
        out_shape = tuple(np.broadcast_shapes(*(s for _, s in args)))
        graph.ops.append((name, tuple(t for t, _ in args), out, params))
        graph.exact[out] = exact_in and spec.tolerance.exact
        consumed.update(t for t, _ in args)
        tensors.append((out, out_shape))
    outputs = [t for _, _, t, _ in graph.ops if t not in consumed]
    extra = [t for _, _, t, _ in graph.ops if t in consumed]
    if extra and draw(st.booleans()):
        outputs.append(draw(st.sampled_from(extra)))  # an output also used inside
    if not graph.ops:
        outputs = [b.op("NEG", [tensors[0][0]])]
        graph.ops.append(("NEG", (tensors[0][0],), outputs[0], {}))
        graph.exact[outputs[0]] = True
    b.output(*sorted(set(outputs)))
    graph.model = b.to_bytes()
    graph.structure = (repr(graph.ops), tuple(map(dims_pattern, input_shapes)),
                       size_class(full), tuple(constant_kinds), tuple(sorted(set(outputs))))
    return graph


def claimable(name: str, args, constants) -> bool:
    """The few shape rules under which LiteRT itself behaves differently (and we don't claim)."""
    shapes = [s for _, s in args]
    if name == "PRELU":
        return tuple(np.broadcast_shapes(*shapes)) == shapes[0]
    if name == "POW":
        exponent, shape = args[1]
        return int(np.prod(shape)) != 1 or exponent in constants
    return True


def op_params(draw, name: str) -> tuple[dict, dict]:
    """(params as the kernel sees them, options as the model file stores them)."""
    spec = OPS[name]
    if spec.fused_activation:
        activation = draw(st.sampled_from(sorted(ACTIVATIONS)))
        return {"activation": activation}, {"fused_activation_function": activation}
    if name == "LEAKY_RELU":
        alpha = float(np.float32(draw(st.sampled_from([0.2, 0.01, -0.5, 1.5, 0.0]))))
        return {"alpha": alpha}, {"alpha": alpha}
    if name == "GELU":
        approximate = draw(st.booleans())
        return {"approximate": approximate}, {"approximate": approximate}
    return {}, {}


def random_inputs(rng: np.random.Generator, shapes, special_fraction=0.1) -> list[np.ndarray]:
    """Normal values at several scales, with NaN, +-Inf, -0.0, huge and tiny values mixed in."""
    arrays = []
    for shape in shapes:
        scale = rng.choice([1.0, 4.0, 30.0])
        a = np.asarray(rng.standard_normal(shape) * scale, np.float32)
        mask = np.asarray(rng.random(shape) < special_fraction)
        a[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
        arrays.append(a)
    return arrays


def oracle_tensors(model: bytes, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor's value as LiteRT's builtin kernels compute it."""
    interpreter = Interpreter(model_content=model, experimental_op_resolver_type=BUILTIN,
                              experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    for d, a in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], a)
    interpreter.invoke()
    return {d["index"]: interpreter.get_tensor(d["index"]).copy()
            for d in interpreter.get_tensor_details() if d["dtype"] == np.float32}


def ulp32(x: np.ndarray) -> np.ndarray:
    """The float32 ulp at |x| (the smallest subnormal at 0; inf at inf)."""
    a = np.abs(np.asarray(x, np.float32))
    with np.errstate(invalid="ignore"):
        return np.spacing(a).astype(np.float64)


def error_bounds(graph: Graph, values: dict[int, np.ndarray], precision: str = "exact",
                 chains: dict[int, Tolerance] | None = None,
                 reductions=None) -> dict[int, np.ndarray]:
    """Absolute error bound per element of every op output, propagated to first order, with
    each op's budget under `precision`; `chains`: the tolerance of each output a fused chain
    (codegen.chains) computes, which holds where the propagated bound is smaller;
    `reductions(name, x, x_bound, y, params)`: the bound of an op not in OPS (a reduction or
    row op: tests/test_reductions.py)."""
    bounds: dict[int, np.ndarray] = {}
    for name, inputs, out, params in graph.ops:
        if name not in OPS:
            x = values[inputs[0]]
            bounds[out] = reductions(name, x, bounds.get(inputs[0], np.zeros(x.shape)),
                                     values[out], params)
            continue
        spec = OPS[name]
        if name == "POW":
            base, exponent = (values[t] for t in inputs)
            literal = exponent.reshape(-1)[0] if exponent.size == 1 else None
            params = {"integer_exponent": integer_exponent(base.shape, exponent.shape, literal)}
        args = [values[t].astype(np.float64) for t in inputs]
        errs = [bounds.get(t, np.zeros(values[t].shape)) for t in inputs]
        y = values[out].astype(np.float64)
        with np.errstate(all="ignore"):
            deviation = np.zeros(y.shape)
            if any(np.any(e) for e in errs):
                center = apply(spec, args, params)
                for signs in itertools.product((-1.0, 1.0), repeat=len(args)):
                    moved = apply(spec, [a + s * e for a, s, e in zip(args, signs, errs)],
                                  params)
                    deviation = np.fmax(deviation, np.abs(moved - center))
                deviation = np.where(np.isnan(deviation), np.inf, deviation)
                if name in ("SIN", "COS"):
                    # Not monotonic: the ends of [x - e, x + e] can miss its extremes (an
                    # exp's few ulps at 1e23 are many periods). |sin'| <= 1 bounds it instead.
                    deviation = np.fmax(deviation, np.minimum(errs[0], 2.0))
                deviation += ulp32(y)  # the op's own rounding of a moved result
                # LiteRT's transcendental ops are a few ulp off the true function, differently
                # at nearby inputs: two evaluations within an input's error differ by the true
                # change plus twice that (Eigen's rational tanh: 5.4 ulp from tanh).
                noise = max(EIGEN_RATIONAL_ULPS.get(name, 0), spec.tolerance.ulp)
                deviation += 2 * noise * ulp32(y)
                if name == "SQUARED_DIFFERENCE":
                    # LiteRT rounds a - b to float32 before squaring: a moved input can move
                    # that rounding by one ulp of the difference.
                    d = np.abs(args[0] - args[1])
                    deviation += 2 * d * ulp32(d) + ulp32(d) ** 2
            tolerance = spec.tolerance_for(params, precision)
            bounds[out] = deviation + tolerance.ulp * ulp32(y) + tolerance.abs
            if name == "HARD_SWISH":
                # Above FLT_MAX / 6 LiteRT's scalar tail overflows to +inf and its blocks do not
                # (test_hard_swish_above_flt_max_over_6_follows_the_blocks_and_xnnpack).
                bounds[out] = np.where(args[0] > FLT_MAX / 6, np.inf, bounds[out])
            chain = (chains or {}).get(out)
            if chain is not None:
                bounds[out] = np.fmax(bounds[out], chain.ulp * ulp32(y) + chain.abs)
    return bounds


def apply(spec, args, params) -> np.ndarray:
    """The op in float64 with its fused activation, at float64 inputs."""
    a = args[0]
    b = args[1] if len(args) > 1 else None
    y = spec.reference(a, b, params)
    if spec.fused_activation:
        _, lo, hi = ACTIVATIONS[params["activation"]]
        y = np.where(y < lo, lo, y)
        y = np.where(y > hi, hi, y)
    return np.broadcast_to(y, np.broadcast_shapes(*(x.shape for x in args)))


def mismatches(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Indices where `got` is not within `bound` of `want` (NaN must meet NaN; where the bound
    is infinite the element is ill-conditioned and any value is accepted)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    bound = np.broadcast_to(bound, want.shape)
    with np.errstate(invalid="ignore"):
        exact = bound == 0
        same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
        close = np.abs(got64 - want64) <= 2 * bound
        nonfinite_ok = np.where(np.isfinite(want64), np.isfinite(got64) | ~np.isfinite(bound),
                                same | ~np.isfinite(bound))
        ok = np.where(exact, same, (close | same | ~np.isfinite(bound)) & nonfinite_ok)
        ok &= ~(np.isnan(want) ^ np.isnan(got)) | ~np.isfinite(bound)
    return np.argwhere(~ok)
