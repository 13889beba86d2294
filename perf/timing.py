"""Timing on a shared, noisy machine: interleaved rounds, medians, and copy bandwidth.

Methods compared with each other are timed in the same rounds (each round runs every method
once, for a batch of calls, in a rotating order), so drift in clock speed or in the neighbours'
load reaches all of them alike; the per-call time of a method is the median over rounds.
"""
from __future__ import annotations

import gc
import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

MIN_ROUNDS = 15


@dataclass(frozen=True)
class Samples:
    """Per-call seconds (or any per-sample value), one per round."""
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """Interquartile range over the median: how noisy the rounds were."""
        if len(self.values) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.values, n=4)
        return (q3 - q1) / self.median


@contextmanager
def no_gc() -> Iterator[None]:
    """Keep the garbage collector from landing inside a timed batch."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def batch_size(fn: Callable[[], object], target_seconds: float) -> int:
    """How many calls make a batch of about `target_seconds` (at least one)."""
    calls = 1
    while True:
        seconds = per_call(fn, calls) * calls
        if seconds >= target_seconds / 4 or calls >= 1 << 20:
            return max(1, round(calls * target_seconds / max(seconds, 1e-9)))
        calls *= 4


def interleaved(methods: dict[str, Callable[[], object]], rounds: int, batch_seconds: float,
                budget_seconds: float = math.inf) -> dict[str, Samples]:
    """Per-call seconds of each method over up to `rounds` interleaved rounds, stopping early
    once `budget_seconds` have passed and MIN_ROUNDS rounds are in.

    Batches short against the scheduler's time slice keep most of them clear of preemption by
    the neighbours, so the median stays clean where a long batch would average the noise in.
    """
    for fn in methods.values():
        fn()  # first-call effects (page faults, lazy setup) stay out of the samples
    batches = {name: batch_size(fn, batch_seconds) for name, fn in methods.items()}
    names = list(methods)
    times: dict[str, list[float]] = {name: [] for name in names}
    deadline = time.perf_counter() + budget_seconds
    with no_gc():
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].append(per_call(methods[name], batches[name]))
            if r + 1 >= MIN_ROUNDS and time.perf_counter() > deadline:
                break
    return {name: Samples(tuple(values)) for name, values in times.items()}


def copy_bandwidth(megabytes: int = 64, repeats: int = 15) -> Samples:
    """Bytes per second of `np.copyto` on buffers larger than the last-level cache, counting
    the source read once and the destination written once (2 x size)."""
    src = np.ones(megabytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing
    with no_gc():
        seconds = [per_call(lambda: np.copyto(dst, src), 1) for _ in range(repeats)]
    return Samples(tuple(2 * src.nbytes / s for s in seconds))


def last_level_cache_bytes() -> int:
    """The largest cache cpu0 reports (0 if the kernel does not say)."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=0)
