"""The claim policy: the margins a prediction must clear. No cost model, no timing."""
from fusion_delegate import worth
from fusion_delegate.policy import ClaimPolicy
from fusion_delegate.worth import Prediction


def test_a_partition_pays_if_faster_enough_and_by_enough_time():
    policy = ClaimPolicy(1.2)
    assert policy.pays(Prediction(3.0, 1.5)) and not policy.pays(Prediction(3.0, 2.9))
    tiny = Prediction(0.4, 0.1)                     # 4x faster, 0.3 us sooner
    assert tiny.speedup > 1.2 and not policy.pays(tiny)
    assert policy.pays(worth.UNKNOWN)               # no cost model: claimed


def test_the_margin_over_litert_grows_with_the_threads():
    one, two = Prediction(5.75, 5.0, threads=1), Prediction(5.75, 5.0, threads=2)  # 1.15x
    assert ClaimPolicy(1.1).pays(one) and not ClaimPolicy(1.1).pays(two)  # 2 threads: 1.2x
    assert ClaimPolicy(1.05).pays(two)


def test_more_threads_ask_a_cut_out_of_xnnpacks_threaded_work_for_more():
    """1.3x: enough at one thread, for the whole model, or after a builtin kernel; not for a
    partition between ops XNNPACK's threads run."""
    cut = dict(litert_us=6.5, fused_us=5.0, cut_us=1.0)
    assert ClaimPolicy(1.1).pays(Prediction(**cut, threads=1))
    assert not ClaimPolicy(1.1).pays(Prediction(**cut, threads=2))
    assert ClaimPolicy(1.1).pays(Prediction(**cut, threads=2, builtin_input=True))
    assert ClaimPolicy(1.1).pays(Prediction(6.5, 5.0, threads=2))
    assert ClaimPolicy(1.1).pays(Prediction(7.5, 5.0, 1.0, threads=2))    # 1.5x


def test_one_binary_op_of_two_whole_tensors_has_nothing_to_fuse():
    """XNNPACK runs a lone ADD/SUB/MUL of two whole tensors, or broadcasting in long runs, at
    memory speed, float32 or int8: left to it whatever the prediction; with short runs, or
    fused with more, it is the prediction's call."""
    from fusion_delegate.features import CostKey, PartitionFeatures
    fast = Prediction(10.0, 5.0)
    for name in ("ADD/int8", "MUL", "SUB/uint8"):
        alone = PartitionFeatures((CostKey(name, 50_000, 50_000, inputs=2),), ())
        assert "nothing to fuse" in ClaimPolicy(1.1).partition_reason(alone, fast)
        assert ClaimPolicy(0).partition_reason(alone, fast) is None
    per_channel = PartitionFeatures((CostKey("ADD/int8", 50_000, 16, inputs=1),), ())
    chain = PartitionFeatures((CostKey("ADD/int8", 50_000, 50_000, inputs=2),
                               CostKey("HARD_SWISH/int8", 50_000, 50_000)), ())
    assert ClaimPolicy(1.1).partition_reason(per_channel, fast) is None
    assert ClaimPolicy(1.1).partition_reason(chain, fast) is None
    for run in (228, 50_000):               # a long channel, a scalar: calls that cost nothing
        long_runs = PartitionFeatures((CostKey("ADD/int8", 50_000, run, inputs=1),), ())
        assert "nothing to fuse" in ClaimPolicy(1.1).partition_reason(long_runs, fast)


def test_transcendental_chains_in_rows_read_with_a_value_per_row_are_left_to_litert():
    """From rows of ROW_CHAIN_MIN_COLS on they ran slower than XNNPACK whatever the cost model
    predicts; shorter rows are the prediction's call, as is everything at min_speedup=0."""
    from fusion_delegate.features import CostKey, PartitionFeatures
    from fusion_delegate.policy import ROW_CHAIN_MIN_COLS
    fast = Prediction(10.0, 2.0)
    chain = (CostKey("EXP", 13_000), CostKey("LOGISTIC", 13_000))
    for cols in (0, ROW_CHAIN_MIN_COLS - 1, ROW_CHAIN_MIN_COLS, 95):
        features = PartitionFeatures(chain, (), row_chain=cols)
        reason = ClaimPolicy(1.1).partition_reason(features, fast)
        assert (reason is None) == (cols < ROW_CHAIN_MIN_COLS)
        assert ClaimPolicy(0).partition_reason(features, fast) is None


def test_float_reductions_compiled_for_a_quarter_of_the_width_are_left_to_litert():
    """A `generic` cache on an AVX-512 CPU: float LayerNorms lost to LiteRT whatever the cost
    model predicts; int8 ones, and float ones at half the width, are the prediction's call."""
    from fusion_delegate.features import CostKey, PartitionFeatures
    from fusion_delegate.policy import NARROW_REDUCTION_SHORTFALL
    fast = Prediction(10.0, 2.0)
    layer_norm = PartitionFeatures((CostKey("MEAN", 37_824), CostKey("SQUARED_DIFFERENCE", 37_824),
                                    CostKey("RSQRT", 197)), ())
    int8_norm = PartitionFeatures((CostKey("MEAN/int8", 37_824), CostKey("MUL/int8", 37_824)), ())
    generic = ClaimPolicy(1.1, vector_shortfall=NARROW_REDUCTION_SHORTFALL)
    assert generic.partition_reason(layer_norm, fast) == (
        "float MEAN with vectors 4x narrower than the CPU's: slower than LiteRT's (claimed with "
        "min_speedup=0)")
    assert generic.partition_reason(int8_norm, fast) is None
    assert ClaimPolicy(1.1, vector_shortfall=2).partition_reason(layer_norm, fast) is None
    assert ClaimPolicy(0, vector_shortfall=4).partition_reason(layer_norm, fast) is None
