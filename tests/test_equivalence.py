"""Property-based equivalence: random elementwise models, LiteRT's builtin kernels as the oracle.

fusion_delegate.tolerances says how tolerances are derived from OPS and propagated.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from codegen.ops import APPROX_CHAINS, KERNEL_OPS, OPS
from conftest import builtin_interpreter, run
from equivalence import graphs, oracle_tensors, random_inputs
from fusion_delegate import FusionDelegate
from fusion_delegate.model import ModelBuilder
from fusion_delegate.runtime import Interpreter
from fusion_delegate.tolerances import FLT_MAX, error_bounds, mismatches

# Shrinking recompiles a kernel per step and can take minutes; the failure report below names
# the ops, the mismatching element and the generated source instead. Each example compiles a
# kernel (0.2 s to several seconds): the time of these tests is their examples' compiles. With
# repeats rejected (check_new), 50 examples hold about as many distinct graphs as 80 did (58
# of 80 in CI's exact-op run); at 40 the exact-op test missed a planted SQUARED_DIFFERENCE
# bug that 50 and the all-op test at 40 catch.
SETTINGS = settings(max_examples=50, deadline=None, phases=[Phase.explicit, Phase.reuse,
                                                            Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])

#: The graph structures (equivalence.Graph.structure) each test has checked.
CHECKED: dict[str, set] = {}


def check_new(test: str, graph, seed, cache_dir, precision="exact"):
    """check() on a graph whose structure the test has not checked yet. Hypothesis makes many
    examples by mutating earlier ones: in CI's runs of the tests here 20 to 28% of the
    examples repeated the structure of an earlier one (its ops, wiring and broadcasts) with
    other sizes or constant values, at a compile each. A repeat is rejected instead, so every
    example compiled is a graph of its own."""
    checked = CHECKED.setdefault(test, set())
    assume(graph.structure not in checked)
    check(graph, seed, cache_dir, precision)
    checked.add(graph.structure)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def check(graph, seed, cache_dir, precision="exact"):
    """Inputs with NaN, +-inf and huge values mixed in mostly send kernels down their exact
    loop (codegen.fastpath); plain normal inputs mostly keep them on the fast loop."""
    rng = np.random.default_rng(seed)
    delegate = FusionDelegate(cache_dir=cache_dir, min_nodes_per_partition=1, min_speedup=0.0,
                              precision=precision)
    interpreter = builtin_interpreter(graph.model, [delegate])
    claimed = {i: c.reason for i, c in delegate.claims.items()}
    refused = {i: reason for i, reason in claimed.items() if reason is not None}
    assert not refused, f"not claimed: {refused}"
    assert len(claimed) == len(graph.ops)
    for special_fraction in (0.1, 0.0):
        inputs = random_inputs(rng, graph.input_shapes, special_fraction)
        compare(graph, interpreter, delegate, inputs, precision)


def compare(graph, interpreter, delegate, inputs, precision="exact"):
    fused = run(interpreter, inputs)
    values = oracle_tensors(graph.model, inputs)
    chains = {op.output: op.spec.tolerance for k in delegate.kernels.values()
              for op in k.ir.ops if op.op in KERNEL_OPS and op.spec.fused_activation}
    bounds = error_bounds(graph.ops, values, precision, chains)
    for detail, got in zip(interpreter.get_output_details(), fused):
        t = detail["index"]
        bad = mismatches(got, values[t], bounds[t])
        if len(bad):
            at = tuple(bad[0])
            inputs_at = [a[tuple(i if n > 1 else 0 for i, n in zip(at[-a.ndim:], a.shape))]
                         if a.ndim else a for a in inputs]
            raise AssertionError(
                f"output {detail['name']} (t{t}): {len(bad)} mismatches, first at {at}: "
                f"fused {got[at]!r} vs LiteRT {values[t][at]!r} (bound {bounds[t][at]!r}), "
                f"inputs there {inputs_at}\nops: {graph.ops}\n"
                + "\n".join(k.kernel.source for k in delegate.kernels.values()))


@SETTINGS
@given(graph=graphs(), seed=st.integers(0, 2**32 - 1))
def test_random_elementwise_models_match_builtin_kernels(graph, seed, cache_dir):
    check_new("all ops", graph, seed, cache_dir)


EXACT_OPS = tuple(name for name, spec in OPS.items() if spec.tolerance.exact)
#: The approximated ops and the ops of the chains precision="fast" fuses.
FAST_OPS = tuple(name for name, spec in OPS.items() if spec.approximated
                 or any(name in chain.ops for chain in APPROX_CHAINS.values()))


@SETTINGS
@given(graph=graphs(op_names=EXACT_OPS), seed=st.integers(0, 2**32 - 1))
def test_exact_op_models_match_builtin_kernels_bit_for_bit(graph, seed, cache_dir):
    check_new("exact ops", graph, seed, cache_dir)


@settings(SETTINGS, max_examples=12)
@given(graph=graphs(op_names=FAST_OPS), seed=st.integers(0, 2**32 - 1))
def test_fast_precision_models_match_builtin_kernels_within_budget(graph, seed, cache_dir):
    check_new("fast ops", graph, seed, cache_dir, precision="fast")


def test_hard_swish_above_flt_max_over_6_follows_the_blocks_and_xnnpack(cache_dir):
    """LiteRT's builtin HARD_SWISH is finite there in its 4-element blocks and +inf in its
    scalar tail; XNNPACK, LiteRT's default, is finite everywhere. The fused kernel must be
    finite everywhere and equal to the builtin blocks bit for bit."""
    b = ModelBuilder()
    b.output(b.op("HARD_SWISH", [b.input("x", (7,))]))
    model = b.to_bytes()
    x = np.array([3e38, 6e37, 1e38, FLT_MAX, 3e38, 6e37, FLT_MAX], np.float32)
    builtin, = run(builtin_interpreter(model), [x])
    xnnpack = Interpreter(model_content=model)
    xnnpack.allocate_tensors()
    default, = run(xnnpack, [x])
    delegate = FusionDelegate(cache_dir=cache_dir, min_nodes_per_partition=1, min_speedup=0.0)
    fused, = run(builtin_interpreter(model, [delegate]), [x])
    assert delegate.claims[0].reason is None
    assert np.all(np.isinf(builtin[4:])) and np.all(np.isfinite(builtin[:4]))
    assert np.all(np.isfinite(default)) and np.all(np.isfinite(fused))
    assert fused[:4].view(np.int32).tolist() == builtin[:4].view(np.int32).tolist()
    np.testing.assert_allclose(fused, default, rtol=2**-22)
