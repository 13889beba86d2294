"""The interpreter's thread pool: found and verified in the real runtime, refused otherwise,
and kernels with parts give the one-thread kernel's bits on it and without it."""
import ctypes
import logging
import os

import numpy as np
import pytest

from conftest import builtin_interpreter, run, same_bits
from fusion_delegate import FusionDelegate, fusion, threadpool
from fusion_delegate.model import ModelBuilder

NONE = {"fused_activation_function": 0}
SHAPE = (4, 1 << 15)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


def swish_add() -> bytes:
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    h = b.op("MUL", [x, b.op("LOGISTIC", [x])], NONE)
    b.output(b.op("ADD", [h, x], {"fused_activation_function": 1}))
    return b.to_bytes()


def delegated(threads: int, cache_dir) -> tuple[FusionDelegate, object]:
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
    return delegate, builtin_interpreter(swish_add(), [delegate], num_threads=threads)


def test_the_interpreters_pool_is_found_with_its_thread_count(cache_dir):
    one, _ = delegated(1, cache_dir)
    assert one.main_graph.pool is None
    two, _ = delegated(2, cache_dir)
    pool = two.main_graph.pool
    assert pool is not None and pool.threads == 2 and pool.pool and pool.parallelize
    assert "in 2 parts (one a thread)" in two.kernels[0].kernel.source


def _loaded_library() -> tuple[str, int]:
    """The runtime library whose pool the delegate uses, and its load address."""
    delegate, _ = delegated(2, "")
    address = ctypes.cast(delegate.main_graph.pool.parallelize, ctypes.c_void_p).value
    return threadpool._library_of(address)


def test_a_library_whose_code_is_not_its_symbols_is_refused():
    path, base = _loaded_library()
    with pytest.raises(threadpool.NoPool, match="not the code its symbol table names"):
        threadpool._library_functions((path, base + 64))


def test_a_library_without_the_functions_is_refused():
    umath = os.path.realpath(np._core._multiarray_umath.__file__)
    path, base = threadpool._library_of(
        next(m.start for m in threadpool._mappings() if m.path == umath))
    with pytest.raises(threadpool.NoPool, match="has no symbol"):
        threadpool._library_functions((path, base))


def test_without_a_verified_pool_kernels_run_on_one_thread_and_say_why(cache_dir, rng,
                                                                     monkeypatch, caplog):
    x = [rng.standard_normal(SHAPE).astype(np.float32) * 4]
    _, pooled = delegated(2, cache_dir)
    want = run(pooled, x)[0]

    def refuse(context_address):
        raise threadpool.NoPool("a runtime we cannot verify")
    monkeypatch.setattr(fusion, "interpreter_pool", refuse)
    with caplog.at_level(logging.INFO, logger="fusion_delegate"):
        delegate, interpreter = delegated(2, cache_dir)
    assert delegate.main_graph.pool is None
    assert " parts (one a thread)" not in delegate.kernels[0].kernel.source
    assert "cannot be used (a runtime we cannot verify)" in caplog.text
    assert same_bits(run(interpreter, x)[0], want)


def test_parts_on_the_pool_give_the_one_thread_bits_with_inf_and_nan(cache_dir, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32) * 40
    x[0, 5], x[3, 100], x[2, 7] = np.inf, np.nan, -np.inf
    outputs = {}
    for threads in (1, 2):
        _, interpreter = delegated(threads, cache_dir)
        outputs[threads] = run(interpreter, [x])[0]
    assert same_bits(outputs[1], outputs[2])
    want = run(builtin_interpreter(swish_add()), [x])[0]
    assert same_bits(np.isnan(outputs[2]), np.isnan(want))


def test_interpreters_of_other_thread_counts_share_a_delegate_and_outlive_each_other(
        cache_dir, rng):
    """One delegate on interpreters of 2, 3 and 1 threads, each with the pool of its own; the
    first destroyed while the others run on."""
    import gc
    delegate = FusionDelegate(cache_dir=cache_dir, min_speedup=0.0, num_threads=0)
    x = [rng.standard_normal(SHAPE).astype(np.float32)]
    want = run(builtin_interpreter(swish_add()), x)[0]
    interpreters = {}
    for threads in (2, 3, 1):
        interpreters[threads] = builtin_interpreter(swish_add(), [delegate],
                                                    num_threads=threads)
        pool = delegate.main_graph.pool
        assert (pool.threads if pool else 1) == threads
    del interpreters[2]
    gc.collect()
    results = [run(interpreter, x)[0] for interpreter in interpreters.values()]
    assert same_bits(results[0], results[1])
    np.testing.assert_allclose(results[0], want, rtol=1e-6, atol=1e-7)
