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
from .kernel_data import kernel_data
from .lower import lower
from .render import TensorTableLayout, legend, render_kernel
from .schedule import Schedule, plan
from .shared import shared_kernel
from .target import Target, numba_target


class NotBuildable(ValueError):
    """The partition cannot be computed by a kernel: its message says why."""


@dataclass(frozen=True)
class Built:
    """A partition's kernel before compilation: the IR it computes, its loop nests, its source
    (its function `name`, the partition's where the source is shared by a kind of partition,
    codegen.shared), and the data its entry point reads from the kernel's slot (its tables,
    codegen.kernel_data)."""
    ir: KernelIR
    schedule: Schedule
    name: str
    source: str
    legend: str                     # how to read the source for this partition
    data: bytes = b""


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
        return _build(lowered(ir), layout, target, cache or _scratch_cache())
    if key not in _BUILT:
        while len(_BUILT) >= BUILT_KEPT:
            del _BUILT[next(iter(_BUILT))]
        low = _LOWERED.pop(key, None) or lowered(ir)
        _BUILT[key] = _build(low, layout, target, cache or _scratch_cache())
    return _BUILT[key]


def _key(ir: KernelIR, layout: TensorTableLayout, target: Target) -> bytes | None:
    """What a build is kept under: every bit of its arguments. The dataclasses' own equality is
    not enough, since 0.0 == -0.0 while x + 0.0 and x + -0.0 differ at x = -0.0."""
    try:
        return pickle.dumps((ir, layout, target), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def island_kernels(ir: KernelIR, layout: TensorTableLayout,
                   target: Target | None = None) -> list[tuple[str, str]]:
    """The (name, source) of the kernels `build` runs to tabulate the islands of `ir`
    (codegen.islands), for a caller to compile ahead, side by side, before the builds run
    them one at a time."""
    target = target or numba_target()
    key = _key(ir, layout, target)
    if key in _BUILT:
        return []
    try:
        ir = lowered(ir)
        if key is not None:             # for the build that follows
            while len(_LOWERED) >= BUILT_KEPT:
                del _LOWERED[next(iter(_LOWERED))]
            _LOWERED[key] = ir
        return [(island.name, render_kernel(island, plan(island, target), layout))
                for island in (islands.island_ir(ir, found) for found in islands.islands(ir))]
    except (NotBuildable, IRError):
        return []                       # the build says why


def _build(ir: KernelIR, layout: TensorTableLayout, target: Target, cache: KernelCache) -> Built:
    """The kernel of the lowered `ir`."""
    def evaluate(island: KernelIR, codes: np.ndarray) -> np.ndarray:
        out = np.empty(codes.shape, island.value(island.outputs[0]).quant.numpy_dtype)
        schedule = plan(island, target)
        cache.run_kept(island.name, render_kernel(island, schedule, layout),
                       kernel_data(island, schedule), codes, out)
        return out

    try:
        ir = islands.tabulate(ir, evaluate)
        schedule = plan(ir, target)
        shared = shared_kernel(ir, schedule, layout)
        if shared is not None:
            return Built(ir, schedule, shared.name, shared.source, shared.legend, shared.data)
        data = kernel_data(ir, schedule)
        return Built(ir, schedule, ir.name, render_kernel(ir, schedule, layout),
                     "\n".join([legend(ir), *data.legend()]), data.block)
    except (IRError, CompileError) as error:
        raise NotBuildable(str(error)) from error


#: Builds kept for the process, oldest dropped first.
BUILT_KEPT = 1024
_BUILT: dict[bytes, Built] = {}
#: IRs island_kernels lowered, by build key, until their build.
_LOWERED: dict[bytes, KernelIR] = {}


@functools.cache
def _scratch_cache() -> KernelCache:
    """Where a build compiles the kernels it runs itself when the caller gives no cache."""
    return KernelCache(None)
