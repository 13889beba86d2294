"""From a partition's IR to kernel source, in one place: the pass order and the one error.

    ir --expand--> composites as their steps (softmax, ...)
       --lower--> quantized ops as tables and fixed-point calls
       --approximate_chains--> (precision="fast") a chain as one function
       --islands.tabulate--> float math between 8-bit values as one table
       --plan--> Schedule (loop nests)
       --render--> source text

`build` is what the delegate calls; everything it raises for a partition the kernel cannot
compute is NotBuildable, whose message says why.
"""
from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass

import numpy as np

from . import islands
from .chains import approximate_chains
from .compile import CompileError, KernelCache
from .composites import expand
from .ir import IRError, KernelIR
from .lower import lower
from .render import TensorTableLayout, render_kernel
from .schedule import Schedule, plan
from .target import Target, numba_target


class NotBuildable(ValueError):
    """The partition cannot be computed by a kernel: its message says why."""


@dataclass(frozen=True)
class Built:
    """A partition's kernel before compilation: the IR it computes, its loop nests, its source."""
    ir: KernelIR
    schedule: Schedule
    source: str

    @property
    def name(self) -> str:
        return self.ir.name


def lowered(ir: KernelIR) -> KernelIR:
    """The IR the kernel computes: composites expanded, quantized ops lowered, and under
    precision="fast" the approximated chains made one op each."""
    try:
        ir = lower(expand(ir))
        return approximate_chains(ir) if ir.precision == "fast" else ir
    except IRError as error:
        raise NotBuildable(str(error)) from error


def build(ir: KernelIR, layout: TensorTableLayout, target: Target | None = None,
          cache: KernelCache | None = None) -> Built:
    """The kernel of a partition's IR (as the delegate makes it, before lowering). `cache`
    compiles what the build itself must run (the tables of islands); by default in memory.
    A build is a pure function of the IR, layout and target, kept for the process: a second
    interpreter of a model builds nothing."""
    target = target or numba_target()
    key = _key(ir, layout, target)
    if key is None:
        return _build(ir, layout, target, cache or _scratch_cache())
    if key not in _BUILT:
        while len(_BUILT) >= BUILT_KEPT:
            del _BUILT[next(iter(_BUILT))]
        _BUILT[key] = _build(ir, layout, target, cache or _scratch_cache())
    return _BUILT[key]


def _key(ir: KernelIR, layout: TensorTableLayout, target: Target) -> bytes | None:
    """What a build is kept under: every bit of its arguments. The dataclasses' own equality is
    not enough, since 0.0 == -0.0 while x + 0.0 and x + -0.0 differ at x = -0.0."""
    try:
        return pickle.dumps((ir, layout, target), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def _build(ir: KernelIR, layout: TensorTableLayout, target: Target, cache: KernelCache) -> Built:
    def evaluate(island: KernelIR, codes: np.ndarray) -> np.ndarray:
        out = np.empty(codes.shape, island.value(island.outputs[0]).quant.numpy_dtype)
        cache.run_kept(island.name, render_kernel(island, plan(island, target), layout), codes,
                       out)
        return out

    ir = lowered(ir)
    try:
        ir = islands.tabulate(ir, evaluate)
        schedule = plan(ir, target)
        return Built(ir, schedule, render_kernel(ir, schedule, layout))
    except (IRError, CompileError) as error:
        raise NotBuildable(str(error)) from error


#: Builds kept for the process, oldest dropped first.
BUILT_KEPT = 1024
_BUILT: dict[bytes, Built] = {}


@functools.cache
def _scratch_cache() -> KernelCache:
    """Where a build compiles the kernels it runs itself when the caller gives no cache."""
    return KernelCache(None)
