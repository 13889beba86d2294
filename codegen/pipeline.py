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
from .kept import kept_name
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
    A build is a pure function of the IR, layout and target, kept for the process (a second
    interpreter of a model builds nothing) and in `cache`'s directory (a new process reads
    it there: no lowering, tables or rendering at a warm start)."""
    target = target or numba_target()
    cache = cache or _scratch_cache()
    key = _key(ir, layout, target)
    if key is None:
        return _build(lowered(ir), layout, target, cache)
    if key not in _BUILT:
        # island_kernels lowered it only when the cache had no build of it: no second look.
        built = None if key in _LOWERED else _read_kept(key, cache)
        if built is None:
            built = _build(_LOWERED.pop(key, None) or lowered(ir), layout, target, cache)
            _keep(key, built, cache)
        _remember(key, built)
    return _BUILT[key]


def _key(ir: KernelIR, layout: TensorTableLayout, target: Target) -> bytes | None:
    """What a build is kept under: every bit of its arguments, the same in every process (the
    target by its fingerprint: a frozenset of strings pickles in the process's hash order).
    The dataclasses' own equality is not enough, since 0.0 == -0.0 while x + 0.0 and x + -0.0
    differ at x = -0.0."""
    try:
        return pickle.dumps((ir, layout, target.fingerprint, target.vector_bytes),
                            protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def island_kernels(ir: KernelIR, layout: TensorTableLayout, target: Target | None = None,
                   cache: KernelCache | None = None) -> list[tuple[str, str]]:
    """The (name, source) of the kernels `build` runs to tabulate the islands of `ir`
    (codegen.islands), for a caller to compile ahead, side by side, before the builds run
    them one at a time; none where the build is kept already."""
    target = target or numba_target()
    key = _key(ir, layout, target)
    if key in _BUILT:
        return []
    kept = _read_kept(key, cache or _scratch_cache()) if key is not None else None
    if kept is not None:
        _remember(key, kept)
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


def _read_kept(key: bytes, cache: KernelCache) -> Built | None:
    """The build of `key` kept in `cache`'s directory, if any (one that does not load is
    rebuilt)."""
    return cache.read_kept_object(kept_name("build", key), Built) if KEEP_BUILDS else None


def _keep(key: bytes, built: Built, cache: KernelCache) -> None:
    """Keep the build of `key` in `cache`'s directory."""
    if KEEP_BUILDS:
        cache.keep_object(kept_name("build", key), built)


def _remember(key: bytes, built: Built) -> None:
    while len(_BUILT) >= BUILT_KEPT:
        del _BUILT[next(iter(_BUILT))]
    _BUILT[key] = built


def _build(ir: KernelIR, layout: TensorTableLayout, target: Target, cache: KernelCache) -> Built:
    """The kernel of the lowered `ir`."""
    def evaluate(island: KernelIR, codes: np.ndarray) -> np.ndarray:
        out = np.empty(codes.shape, island.value(island.outputs[0]).quant.numpy_dtype)
        schedule = plan(island, target)
        data = kernel_data(island, schedule)
        cache.run_kept(island.name, render_kernel(island, schedule, layout, data), data, codes,
                       out)
        return out

    try:
        ir = islands.tabulate(ir, evaluate)
        schedule = plan(ir, target)
        shared = shared_kernel(ir, schedule, layout)
        if shared is not None:
            return Built(ir, schedule, shared.name, shared.source, shared.legend, shared.data)
        data = kernel_data(ir, schedule)
        return Built(ir, schedule, ir.name, render_kernel(ir, schedule, layout, data),
                     "\n".join([legend(ir), *data.legend()]), data.block)
    except (IRError, CompileError) as error:
        raise NotBuildable(str(error)) from error


#: Whether builds are kept on disk, read and written (tests that change how ops render turn it
#: off: their builds must not reach a cache).
KEEP_BUILDS = True
#: Builds kept for the process, oldest dropped first.
BUILT_KEPT = 1024
_BUILT: dict[bytes, Built] = {}
#: IRs island_kernels lowered, by build key, until their build.
_LOWERED: dict[bytes, KernelIR] = {}


@functools.cache
def _scratch_cache() -> KernelCache:
    """Where a build compiles the kernels it runs itself when the caller gives no cache."""
    return KernelCache(None)
