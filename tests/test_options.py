"""Delegate options: one table, refused clearly when unknown or ill-typed."""
import pytest

from fusion_delegate import DelegateOptionError, FusionDelegate, FusionOptions


def test_unknown_keyword_is_refused_with_the_valid_keys_and_a_suggestion():
    message = r"unknown option 'num_thread'; valid: .*\(did you mean 'num_threads'\?\)"
    with pytest.raises(DelegateOptionError, match=message):
        FusionDelegate(num_thread=2)


@pytest.mark.parametrize("kwargs", [{"num_threads": "2"}, {"min_speedup": -1.0},
                                    {"max_delegated_partitions": True}, {"cache_dir": 3}])
def test_ill_typed_or_out_of_range_values_are_refused(kwargs):
    with pytest.raises(DelegateOptionError, match=next(iter(kwargs))):
        FusionDelegate(**kwargs)


def test_key_value_strings_convert_to_the_option_types():
    options = FusionOptions.parse(["num_threads=2", "min_speedup=0", "cache_dir="])
    assert (options.num_threads, options.min_speedup, options.cache_dir) == (2, 0.0, "")


@pytest.mark.parametrize("pair", ["num_threads", "num_threads=two", "=3"])
def test_malformed_key_value_strings_are_refused(pair):
    with pytest.raises(DelegateOptionError):
        FusionOptions.parse([pair])
