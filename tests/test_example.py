"""TFLite's ADD/SUB seed example on our SimpleDelegate, against LiteRT's own kernels."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from add_sub_delegate import AddSubDelegate
from conftest import builtin_interpreter, run, same_bits
from fusion_delegate.model import ModelBuilder

NONE = {"fused_activation_function": 0}


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple),
       ops=st.lists(st.sampled_from(["ADD", "SUB"]), min_size=1, max_size=5),
       seed=st.integers(0, 2**32 - 1))
def test_example_delegate_matches_litert_on_random_inputs(shape, ops, seed):
    b = ModelBuilder()
    x, y = b.input("x", shape), b.input("y", shape)
    h = x
    for op in ops:
        h = b.op(op, [h, y], NONE)
    b.output(h)
    model = b.to_bytes()
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(shape).astype(np.float32) * 100 for _ in range(2)]
    delegate = AddSubDelegate()
    got = run(builtin_interpreter(model, [delegate]), values)
    assert sum(len(p.nodes) for p in delegate.last_partitions) == len(ops)
    assert same_bits(got[0], run(builtin_interpreter(model), values)[0])
