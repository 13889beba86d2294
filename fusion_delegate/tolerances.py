"""How far a fused result may be from LiteRT's, per element: the one statement tests, `check`
and `fusion_delegate.testing` share.

Per op and precision the budget is codegen.ops (`OpSpec.tolerance_for`, in ulps of the op's
output, documented in docs/kernel_semantics.md and the README's op table); the reductions' and
row ops' bounds are stated in `reduction_bound`; int8 and uint8 kernels are bit-exact
(docs/quantized_semantics.md), 0 LSB. A chain of ops is bounded to first order: every op's
inputs are LiteRT's own intermediates (a reference run with preserve_all_tensors), each with an
absolute error bound; the op's float64 meaning is evaluated at the inputs moved by their bounds
in every sign combination and the op's own budget is added. Exact ops on exact inputs get a
bound of zero: they must match bit for bit, -0.0 and NaN included. DEPTHWISE_CONV_2D is one:
its sums are LiteRT's, in its order (`stencil_bound`).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import numpy as np

from codegen.ops import ACTIVATIONS, KERNEL_OPS, OPS, STENCILS, Tolerance
from codegen.window import PADDINGS, conv_output_shape, window

from .claims import integer_exponent
from .model import Operator, Subgraph

FLT_MAX = float(np.finfo(np.float32).max)
U = 2.0 ** -24                         # float32 unit roundoff
#: SCALED_EXP (exp_fast_f32) against Eigen's exp inside LiteRT's softmax, relative.
EXP_RELATIVE = KERNEL_OPS["SCALED_EXP"].tolerance.ulp * 2.0 ** -23
#: Gradual underflow: exps below the smallest normal may differ by this much.
SUBNORMAL = 2.0 ** -126
#: How far LiteRT's Eigen-based kernels (which the fused ones reproduce bit for bit) are from
#: the true function, in ulps (perf/math_accuracy.md; mathf32_fast.FAST_BUDGET's tanh note).
EIGEN_RATIONAL_ULPS = {"TANH": 8, "LOGISTIC": 8, "GELU": 16}
REDUCE = ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN")
ROWS = ("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")

#: (op name, input tensor ids, output tensor id, params): one op of a chain to bound.
OpUse = tuple[str, tuple[int, ...], int, dict]


def ulp32(x: np.ndarray) -> np.ndarray:
    """The float32 ulp at |x| (the smallest subnormal at 0; 2^104 at FLT_MAX, the gap below it;
    inf at inf)."""
    a = np.abs(np.asarray(x, np.float32))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(a == np.float32(FLT_MAX), 2.0 ** 104, np.spacing(a).astype(np.float64))


def ordered(values: np.ndarray) -> np.ndarray:
    """Float bits as integers that count ulps: consecutive floats differ by 1, -0 == +0."""
    bits = values.view(np.dtype(f"i{values.dtype.itemsize}"))
    return np.where(bits < 0, np.iinfo(bits.dtype).min - bits, bits).astype(np.float64)


def distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element, how far `got` is from `want` in the units the tolerances count: ulps of a
    float (-0.0 against 0.0 is 1, a NaN on one side only or opposite infinities are inf, NaN
    against NaN is 0), LSBs of an integer."""
    if want.dtype.kind != "f":
        return np.abs(got.astype(np.float64) - want.astype(np.float64))
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    with np.errstate(invalid="ignore"):
        ulps = np.abs(ordered(got) - ordered(want))
        signed_zero = (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
        ulps = np.where(signed_zero, 1.0, ulps)
        opposite_inf = np.isinf(got) & np.isinf(want) & (got != want)
        ulps = np.where(opposite_inf | (nan_got ^ nan_want), np.inf, ulps)
    return np.where(nan_got & nan_want, 0.0, ulps)


def op_bound(name: str, args: list[np.ndarray], errs: list[np.ndarray], y: np.ndarray,
             params: dict, precision: str = "exact",
             chain: Tolerance | None = None) -> np.ndarray:
    """The bound of an op in OPS whose inputs are LiteRT's `args` with bounds `errs`, per
    element of LiteRT's result `y`; `chain`: the tolerance of a fused chain ending here
    (codegen.chains), which holds where the propagated bound is smaller."""
    spec = OPS[name]
    if name == "POW":
        base, exponent = args
        literal = exponent.reshape(-1)[0] if exponent.size == 1 else None
        params = {"integer_exponent": integer_exponent(base.shape, exponent.shape, literal)}
    args = [a.astype(np.float64) for a in args]
    y64 = y.astype(np.float64)
    with np.errstate(all="ignore"):
        deviation = np.zeros(y.shape)
        if any(np.any(e) for e in errs):
            center = apply(spec, args, params)
            for signs in itertools.product((-1.0, 1.0), repeat=len(args)):
                # An infinite or NaN input is LiteRT's exactly (a kernel keeps it): not moved.
                moved = apply(spec, [np.where(np.isfinite(a), a + s * e, a)
                                     for a, s, e in zip(args, signs, errs)], params)
                # NaN on one side only: the error can be anything (inf - inf is no change).
                same = (moved == center) | (np.isnan(moved) & np.isnan(center))
                change = np.where(same, 0.0, np.abs(moved - center))
                deviation = np.maximum(deviation, np.where(np.isnan(change), np.inf, change))
            if name in ("SIN", "COS"):
                # Not monotonic: the ends of [x - e, x + e] can miss its extremes (an exp's few
                # ulps at 1e23 are many periods). |sin'| <= 1 bounds it instead.
                deviation = np.fmax(deviation, np.minimum(errs[0], 2.0))
            deviation += ulp32(y64)  # the op's own rounding of a moved result
            # LiteRT's transcendental ops are a few ulp off the true function, differently at
            # nearby inputs: two evaluations within an input's error differ by the true change
            # plus twice that (Eigen's rational tanh: 5.4 ulp from tanh).
            noise = max(EIGEN_RATIONAL_ULPS.get(name, 0), spec.tolerance.ulp)
            if noise:
                deviation += 2 * noise * ulp32(y64)
            if name == "SQUARED_DIFFERENCE":
                # LiteRT rounds a - b to float32 before squaring: a moved input can move that
                # rounding by one ulp of the difference.
                d = np.abs(args[0] - args[1])
                deviation += 2 * d * ulp32(d) + ulp32(d) ** 2
        bound = deviation + budget(spec.tolerance_for(params, precision), y64)
        # An input not compared (a bound that is not finite: a sum that may overflow in one
        # order only) leaves the result not compared, though a clamp keeps moved values finite.
        for e in errs:
            bound = np.where(np.isfinite(e), bound, np.inf)
        if name == "HARD_SWISH":
            # Above FLT_MAX / 6 LiteRT's scalar tail overflows to +inf and its blocks do not
            # (test_hard_swish_above_flt_max_over_6_follows_the_blocks_and_xnnpack).
            bound = np.where(args[0] > FLT_MAX / 6, np.inf, bound)
        if chain is not None:
            bound = np.fmax(bound, budget(chain, y64))
    return bound


def budget(tolerance: Tolerance, y: np.ndarray) -> np.ndarray:
    """A tolerance as an absolute bound at each of LiteRT's results `y` (0 where it is exact,
    infinities included)."""
    ulps = tolerance.ulp * ulp32(y) if tolerance.ulp else np.zeros(np.shape(y))
    return ulps + tolerance.abs


def error_bounds(ops: Iterable[OpUse], values: dict[int, np.ndarray], precision: str = "exact",
                 chains: dict[int, Tolerance] | None = None,
                 reductions: Callable | None = None) -> dict[int, np.ndarray]:
    """Absolute error bound per element of every op output, propagated to first order, with
    each op's budget under `precision`; `chains`: the tolerance of each output a fused chain
    computes; `reductions(name, x, x_bound, y, params)`: the bound of an op not in OPS
    (`reduction_bound` by default)."""
    reductions = reductions or reduction_bound
    bounds: dict[int, np.ndarray] = {}
    for name, inputs, out, params in ops:
        if name not in OPS:
            x = values[inputs[0]]
            bounds[out] = reductions(name, x, bounds.get(inputs[0], np.zeros(x.shape)),
                                     values[out], params)
            continue
        bounds[out] = op_bound(name, [values[t] for t in inputs],
                               [bounds.get(t, np.zeros(values[t].shape)) for t in inputs],
                               values[out], params, precision, (chains or {}).get(out))
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


def beyond(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """A mask of the elements where `got` is not within `bound` of `want`. Integers: the
    bound counts LSBs. Floats: NaN must meet NaN; a zero bound asks for the same bits (-0.0 is
    not 0.0); where the bound is infinite the element is ill-conditioned and any value is
    accepted."""
    bound = np.broadcast_to(bound, want.shape)
    if want.dtype.kind != "f":
        return distance(got, want) > bound
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    bits = np.dtype(f"i{want.dtype.itemsize}")
    with np.errstate(invalid="ignore"):
        exact = bound == 0
        same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
        close = np.abs(got64 - want64) <= 2 * bound
        nonfinite_ok = np.where(np.isfinite(want64), np.isfinite(got64) | ~np.isfinite(bound),
                                same | ~np.isfinite(bound))
        ok = np.where(exact, same, (close | same | ~np.isfinite(bound)) & nonfinite_ok)
        ok &= ~(np.isnan(want) ^ np.isnan(got)) | ~np.isfinite(bound)
    return ~ok


def mismatches(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Indices where `got` is not within `bound` of `want` (see `beyond`)."""
    return np.argwhere(beyond(got, want, bound))


def reduction_bound(name: str, x: np.ndarray, e: np.ndarray, y: np.ndarray,
                    params: dict) -> np.ndarray:
    """|fused - builtin| allowed for a reduction or row op whose input is LiteRT's `x` with
    bound `e`, per element of LiteRT's result `y`. The tolerance statement:

    - SUM, REDUCE_MAX, REDUCE_MIN: bit-exact (the builtin's order); with inexact inputs,
      sum(e) resp. max(e) plus, for SUM, (n - 1) u sum(|x| + e).
    - MEAN: 2 (n - 1) u sum(|x|) / n + 1 ulp: the fused row sum and Eigen's each lie within
      (n - 1) u sum|x| of the exact sum, whatever their order (u = 2^-24); the quotient rounds
      once more. A row with inf or NaN gives exactly LiteRT's inf or NaN.
    - SOFTMAX: y ((2n + 4) u + 2 d) + 2^-126, d the exp's relative tolerance (SCALED_EXP):
      the exps' sum is within (n - 1) u of its own magnitude in either order, each exp within
      d, the reciprocal and the product round once each; exps below 2^-126 round gradually.
    - LOG_SOFTMAX: (2n + 4) u + 2 d + 8 ulp(|y| + |x - max|): the same error of the sum as an
      absolute error of its log, the two subtractions' roundings and the log's (6 ulp under
      precision="fast", log_fast_f32).
    - L2_NORMALIZATION: bit-exact (sequential sum of squares, sqrt, max, divide).
    A sum whose magnitude reaches FLT_MAX may overflow in one order only: not compared."""
    x64, e = x.astype(np.float64), np.where(np.isnan(e), np.inf, e)
    axes = params.get("axes", (x.ndim - 1,))
    n = math.prod(x.shape[a] for a in axes)
    keep = dict(axis=axes, keepdims=True)
    with np.errstate(all="ignore"):
        finite = np.all(np.isfinite(x64), **keep)
        magnitude = np.sum(np.abs(np.where(np.isfinite(x64), x64, 0)) + e, **keep)
        spread = np.sum(e, **keep)
        if name in ("REDUCE_MAX", "REDUCE_MIN"):
            bound = np.max(e, **keep)
        elif name == "SUM":
            bound = spread + np.where(spread > 0, (n - 1) * U * magnitude, 0)
        elif name == "MEAN":
            bound = (spread + 2 * (n - 1) * U * magnitude) / n
        elif name == "L2_NORMALIZATION":
            norm = np.maximum(np.sqrt(np.sum(x64 * x64, **keep)), 1e-6)
            bound = np.where(np.max(e, **keep) > 0,
                             (e + np.abs(x64) * np.sqrt(n) * np.max(e, **keep) / norm) / norm
                             * 2, 0)
        else:
            beta = abs(params.get("beta", 1.0))
            relative = (2 * n + 4) * U + 2 * EXP_RELATIVE + 2 * beta * np.max(e, **keep)
            # A row with NaN or +inf, or all -inf, is NaN throughout; -inf elements are 0 (or
            # -inf) in any order.
            finite = ~(np.any(np.isnan(x64) | (x64 == np.inf), **keep)
                       | np.all(x64 == -np.inf, **keep)) | ~np.isfinite(np.max(e, **keep))
            if name == "SOFTMAX":
                bound = y * relative + SUBNORMAL
            else:
                shifted = np.abs(x64 - np.max(np.where(np.isnan(x64), -np.inf, x64), **keep))
                bound = relative + 8 * ulp32(np.abs(y) + np.where(np.isfinite(x64), shifted, 0))
        if name == "MEAN":
            bound = bound + ulp32(np.abs(np.sum(x64, **keep)) / n)
        bound = np.where(magnitude > FLT_MAX / 2, np.inf, np.where(finite, bound, 0))
        bound = np.where(np.any(np.isinf(e), **keep), np.inf, bound)   # an input not compared
        bound = np.where(np.isnan(bound), np.inf, bound)
    if name in REDUCE:                 # over x with the reduced axes as 1s: y's elements
        return bound.reshape(y.shape)
    return np.broadcast_to(bound, y.shape)


def stencil_bound(x: np.ndarray, e: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                  params: dict) -> np.ndarray:
    """|fused - builtin| allowed for a depthwise convolution whose data is LiteRT's `x` with
    bound `e` (weights and bias are constants). The fused kernel sums as LiteRT's float kernel
    does (the bias, then each tap's product in its order, every product and sum rounded): on
    exact data it is bit-exact, NaN, +-inf and -0.0 included. On inexact data, the error
    carried through the sum, sum |w| e, plus the two sums' rounding, each within n u of
    sum |products| + |bias| for n - 1 taps (u = 2^-24): 2 n u (sum |w x| + |b|), the
    activation's clamp taking nothing; where that sum is not finite, any value."""
    if not np.any(e):
        return np.zeros(conv_output_shape(x.shape, weights.shape, params))
    w = np.abs(weights.astype(np.float64))
    with np.errstate(all="ignore"):
        carried = _depthwise(np.where(np.isnan(e), np.inf, e), w, params)
        magnitude = _depthwise(np.abs(x.astype(np.float64)), w, params) + np.abs(bias)
        taps = _depthwise(np.ones(x.shape), np.ones_like(w), params) + 1
        bound = carried + 2 * taps * U * magnitude
    return np.where(np.isfinite(bound), bound, np.inf)


def _depthwise(x: np.ndarray, w: np.ndarray, params: dict) -> np.ndarray:
    """A depthwise convolution in float64 without bias: each output the sum over its taps
    inside the input of data x weight (tflite reference_ops::DepthwiseConv)."""
    _, kh, kw, channels = w.shape
    geometry = window(x.shape, (kh, kw), params)
    out = np.zeros(conv_output_shape(x.shape, w.shape, params))
    rows, columns = np.arange(out.shape[1]), np.arange(out.shape[2])
    data = np.repeat(x, channels // x.shape[3], axis=3)
    for ky in range(kh):
        iy = geometry.first_tap(0, rows) + ky * geometry.dilations[0]
        for kx in range(kw):
            ix = geometry.first_tap(1, columns) + kx * geometry.dilations[1]
            inside = (iy[:, None] >= 0) & (iy[:, None] < x.shape[1]) \
                & (ix[None, :] >= 0) & (ix[None, :] < x.shape[2])
            taken = data[:, np.clip(iy, 0, x.shape[1] - 1)][:, :,
                                                               np.clip(ix, 0, x.shape[2] - 1)]
            out += np.where(inside[None, :, :, None], taken * w[0, ky, kx], 0.0)
    return out


def window_params(options: dict) -> dict:
    """A DEPTHWISE_CONV_2D's window params (codegen.window) from its model options."""
    return {"padding": PADDINGS[int(options.get("padding", 0))],
            "strides": (int(options.get("stride_h", 1)), int(options.get("stride_w", 1))),
            "dilations": (int(options.get("dilation_h_factor", 1)),
                          int(options.get("dilation_w_factor", 1)))}


#: LiteRT ops that only move or reshape their first input's elements, in order: its bound
#: carries over element for element.
RESHAPES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})


def node_params(graph: Subgraph, op: Operator) -> dict:
    """The params `op_bound` and `reduction_bound` read, from a node's options."""
    options = op.options
    params: dict = {}
    if op.op in OPS and OPS[op.op].fused_activation:
        params["activation"] = int(options.get("fused_activation_function", 0))
    for key in ("alpha", "approximate", "beta"):
        if key in options:
            params[key] = options[key]
    if op.op in REDUCE:
        data, rank = graph.tensors[op.inputs[1]].data, len(graph.tensors[op.inputs[0]].shape)
        if data is not None:
            params["axes"] = tuple(sorted({int(a) % rank for a in np.ravel(data)}))
        params["keep_dims"] = bool(options.get("keep_dims", False))
    return params


def graph_bounds(graph: Subgraph, values: dict[int, np.ndarray], delegated: Iterable[int],
                 precision: str = "exact", chains: dict[int, Tolerance] | None = None,
                 nodes: Iterable[int] | None = None) -> dict[int, np.ndarray]:
    """The bound of every tensor `nodes` (default: all) write, when the `delegated` ones run
    fused and the others on LiteRT's kernels as in the reference; `values`: the reference's
    tensors. Inputs of `nodes` are exact. A LiteRT node on exact inputs is exact; on inexact
    ones its bound is unknown (inf: the error passes through a kernel the op table does not
    describe) unless it only reshapes. An int8/uint8 node is bit-exact on exact inputs."""
    delegated = set(delegated)
    order = sorted(nodes) if nodes is not None else range(len(graph.operators))
    bounds: dict[int, np.ndarray] = {}

    def bound_of(t: int) -> np.ndarray:
        return bounds.get(t, np.zeros(np.shape(values.get(t, 0.0))))

    for index in order:
        op = graph.operators[index]
        inputs = [t for t in op.inputs if t >= 0]
        exact_in = not any(np.any(bound_of(t)) for t in inputs)
        for out in op.outputs:
            if exact_in and (index not in delegated or values[out].dtype.kind != "f"):
                continue
            shape = values[out].shape
            if index not in delegated or values[out].dtype.kind != "f":
                moved = op.op in RESHAPES and bound_of(inputs[0]).size == math.prod(shape)
                bounds[out] = bound_of(inputs[0]).reshape(shape) if moved \
                    else np.full(shape, np.inf)
            elif op.op in OPS:
                bounds[out] = op_bound(op.op, [values[t] for t in inputs],
                                       [np.broadcast_to(bound_of(t), values[t].shape)
                                        for t in inputs], values[out],
                                       node_params(graph, op), precision,
                                       (chains or {}).get(out))
            elif op.op in STENCILS:
                x, weights, bias = (values[t] for t in inputs)
                bounds[out] = stencil_bound(x, np.broadcast_to(bound_of(inputs[0]), x.shape),
                                            weights, bias, window_params(op.options))
            elif op.op in REDUCE + ROWS:
                x = values[inputs[0]]
                bounds[out] = reduction_bound(op.op, x, np.broadcast_to(bound_of(inputs[0]),
                                                                        x.shape),
                                              values[out], node_params(graph, op))
            else:
                bounds[out] = np.zeros(shape) if exact_in else np.full(shape, np.inf)
    return bounds
