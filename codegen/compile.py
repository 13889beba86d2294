"""Compile generated kernel source with numba, through an in-process and an on-disk cache.

Like numba's CFunc: look the source up, or else compile and store. The key is a hash of the
source text (which encodes shapes, dtypes and literal constants), the numba and llvmlite
versions and numba's target CPU and features (codegen.target). On disk a kernel is
`<dir>/<name>_<key>.py` (written atomically, checked against its hash before use), numba's
own cache files beside it, and `<name>_<key>.native`, the machine code a warm start links
(codegen.machine_code); anything unreadable or corrupt is a miss and is rebuilt, never
trusted.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
import hashlib
import importlib.util
import io
import logging
import os
import pickle
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator

import llvmlite
import numba
import numpy as np
from llvmlite import binding
from numba.core import caching, ir, ir_utils
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_lock import global_compiler_lock

from . import machine_code
from .kept import helpers_digest
from .target import numba_target

if TYPE_CHECKING:
    from .kernel_data import KernelData

log = logging.getLogger("fusion_delegate.compile")
#: numba's locator of caches beside a module's file and its list of locators (private names
#: before numba 0.68).
_IN_TREE_LOCATOR = getattr(caching, "InTreeCacheLocator", None) or caching._InTreeCacheLocator
_CACHE_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl

DEFAULT_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fusion_delegate"
#: LLVM's loop vectorizer interleaves (runs several independent vectors an iteration) only
#: loops it costs below `-small-loop-cost`, 20 by default. A fused loop of a few ops is above
#: it, so each iteration was one long dependency chain and the core waited on latency: raised
#: while a kernel compiles, LLVM interleaves as its register and trip-count limits allow
#: (1 thread: swish 0.133 -> 0.12 ns an element, five chained HARD_SWISH at 94K 20.5 -> 16.1 us).
#: cl::opt values are process-wide: set and reset under numba's compiler lock, so other numba
#: code compiled in the process keeps LLVM's default. The option is in every LLVM the
#: supported numba releases build on (14-20); an unknown one would end the process.
SMALL_LOOP_COST = 200
LLVM_SMALL_LOOP_COST = 20


class NoAliasCompiler(CompilerBase):
    """numba's nopython pipeline with its `noalias` flag set, which `njit` does not take: every
    pointer argument of the compiled function is `noalias` in LLVM (C's restrict). Generated
    kernels name it in their decorator (`pipeline_class=NoAliasCompiler`), so it is part of
    the source, the cache key.

    True of a kernel's arrays: they are distinct tensors (the renderer passes a tensor both
    read and written once), which TFLite's arena keeps apart while the node runs, and shared
    constant buffers are only read. Without it LLVM checks the arrays for overlap before every
    vectorised inner loop and reloads per-channel constants every row; with it, a short row's
    constants stay in registers (docs/chain_performance.md, diagnosis 2)."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return [DefaultPassBuilder.define_nopython_pipeline(self.state)]


class CompileError(RuntimeError):
    """numba could not compile a generated kernel; `source_path` is the source it was given."""

    def __init__(self, message: str, source_path: str | None = None) -> None:
        super().__init__(message if source_path is None else f"{message} (source: {source_path})")
        self.source_path = source_path


@dataclass(frozen=True)
class Kernel:
    """A compiled kernel: its native entry point and where its source is."""
    name: str
    source: str
    path: Path
    address: int                    # TfLiteStatus (*)(TfLiteContext*, TfLiteNode*)
    cache_hit: str                  # "memory", "disk" or "" (compiled now)
    compile_seconds: float
    module: Callable[[], ModuleType] = field(repr=False, compare=False)
                                    # the kernel's module, imported through numba when
                                    # first asked for where its machine code was linked
    part_address: int = 0           # void (*)(void* arguments, size_t part): a kernel with
                                    # parts runs each as this task on a pool (run_nests)

    @property
    def loop(self):
        """The numba dispatcher of the loop nest (islands run it on their codes)."""
        return getattr(self.module(), self.name)

    def inspect_asm(self) -> str:
        """Assembly of the loop nest, to check what LLVM made of it."""
        return self._uncached().inspect_asm(self.loop.signatures[0])

    def inspect_llvm(self) -> str:
        """Optimised LLVM IR of the loop nest: calls appear by name here."""
        return self._uncached().inspect_llvm(self.loop.signatures[0])

    def _uncached(self):
        """The loop nest compiled again: numba keeps no assembly or IR for code loaded from
        its cache."""
        signature = self.loop.signatures[0]
        options = {**self.loop.targetoptions, "cache": False}
        options.pop("nopython", None)
        pipeline = self.loop._compiler.pipeline_class
        with global_compiler_lock, _interleaving(), _scopes_copied_shallow(), \
                _llvm_lock_events_off():
            return numba.njit(signature, pipeline_class=pipeline, **options)(self.loop.py_func)


def cpu_fingerprint() -> str:
    """numba's target (CPU name and features), not the host's: NUMBA_CPU_NAME changes it."""
    return numba_target().fingerprint


def cache_key(source: str) -> str:
    return _cache_key(source, cpu_fingerprint())


@functools.lru_cache(maxsize=4096)
def _cache_key(source: str, fingerprint: str) -> str:
    """Kept: every kernel's prepare asks, a second interpreter's too (a 10 KB hash)."""
    text = "\n".join([source, numba.__version__, llvmlite.__version__, fingerprint,
                      helpers_digest()])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class KernelCache:
    """In-process kernels by key, backed by a directory of generated modules (or none).

    The in-process level outlives kernel objects: the runtime re-creates kernels on resize.
    """

    def __init__(self, directory: str | os.PathLike | None = DEFAULT_DIR) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()
        self._scratch: tempfile.TemporaryDirectory | None = None
        self._refused: str | None = None       # why `directory` is not used, once found
        self._ahead: set[str] = set()          # keys handed to uncompiled's caller to compile

    def get(self, name: str, source: str) -> Kernel:
        key = cache_key(source)
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                return replace(kernel, cache_hit="memory")
            kernel = self._load(name, source, key)
            self._kernels[key] = kernel
            return kernel

    def run_kept(self, name: str, source: str, data: KernelData, codes: np.ndarray,
                 out: np.ndarray) -> None:
        """Fill `out` with the kernel's loop run on `codes` with `data` (an island's table,
        codegen.islands), kept on disk beside the kernel: a warm start reads the table and
        loads no kernel."""
        key = cache_key(source)
        digest = hashlib.sha256(codes.tobytes() + str(codes.dtype).encode()
                                + data.block).hexdigest()[:12]
        file_name = f"{name}_{key}.{digest}.npy"
        content = self.read_kept(file_name)
        if content is not None:
            try:
                kept = np.load(io.BytesIO(content), allow_pickle=False)
            except (OSError, ValueError):
                kept = None                       # damaged: run the kernel, write it again
            if kept is not None and kept.dtype == out.dtype and kept.shape == out.shape:
                out[...] = kept
                return
        self.get(name, source).loop(codes, out, *data.views())
        buffer = io.BytesIO()
        np.save(buffer, out, allow_pickle=False)
        self.write_kept(file_name, buffer.getvalue())

    def read_kept(self, file_name: str) -> bytes | None:
        """A file kept beside the kernels (an island's table, a build, machine code), from the
        cache directory or else a shipped one; None where there is none this process may
        trust."""
        path = self._kept_path(file_name)
        try:
            return path.read_bytes() if path is not None else None
        except OSError:
            return None

    def read_kept_object(self, file_name: str, kind: type) -> object | None:
        """An object kept beside the kernels as a pickle (kept_name), if it loads and is a
        `kind`. It is read only from a directory this user (or root) writes, as numba's own
        cache entries are (untrusted_reason); one that does not load is made again."""
        content = self.read_kept(file_name)
        if content is None:
            return None
        try:
            value = pickle.loads(content)
        except Exception:  # noqa: BLE001 - damaged or written by another version
            return None
        return value if isinstance(value, kind) else None

    def keep_object(self, file_name: str, value: object) -> None:
        """Keep an object beside the kernels, where it pickles."""
        try:
            content = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return
        self.write_kept(file_name, content)

    def _kept_path(self, file_name: str) -> Path | None:
        directory, shipped = self._directories()
        for folder in filter(None, (directory, shipped)):
            path = folder / file_name
            if path.is_file() and not _foreign(path):
                return path
        return None

    def write_kept(self, file_name: str, content: bytes) -> None:
        """Keep a file beside the kernels; a full or read-only directory keeps nothing (the
        next process computes it again)."""
        directory, _ = self._directories()
        try:
            write_atomic(directory / file_name, content)
        except OSError as error:
            log.debug("%s not kept: %s", file_name, error)

    def uncompiled(self, kernels: list[tuple[str, str]]) -> list[Path]:
        """The module files of those (name, source) kernels that are neither in memory nor on
        disk, written out so that another process can compile them into this cache."""
        missing = list({key: (name, source, key) for name, source in kernels
                        if (key := cache_key(source)) not in self._kernels}.values())
        if not missing:
            return []
        directory, shipped = self._directories()
        indexed = functools.cache(
            lambda: _indexed(directory) | (_indexed(shipped) if shipped else set()))
        paths = []
        for name, source, key in missing:
            path = directory / f"{name}_{key}.py"
            if self._kept_path(path.with_suffix(".native").name) or (
                    path.stem in indexed() and (
                        _holds(path, source) or shipped and _holds(shipped / path.name, source))):
                continue
            if not _holds(path, source):
                _remove_numba_cache(path)
                write_atomic(path, source)
            self._ahead.add(key)
            paths.append(path)
        return paths

    def _directories(self) -> tuple[Path, Path | None]:
        """Where kernels are compiled to, and a read-only directory they may be loaded from.

        The cache directory if it can be trusted, else a private temporary one (numba
        compiles from a real file): numba's cache entries are pickles, so a directory others
        can write into would run their code in this process. A trusted directory this process
        cannot write (a cache shipped with an application, owned by root) is only read."""
        if self.directory is not None and self._refused is None:
            self._refused = untrusted_reason(self.directory)
            if self._refused:
                log.warning("kernel cache %s not used (%s); compiling into a private "
                            "temporary directory", self.directory, self._refused)
        trusted = self.directory is not None and not self._refused
        if trusted and os.access(self.directory, os.W_OK | os.X_OK):
            return self.directory, None
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="fusion_delegate_")
        return Path(self._scratch.name), self.directory if trusted else None

    def _load(self, name: str, source: str, key: str) -> Kernel:
        start = time.perf_counter()
        hit = "" if key in self._ahead else "disk"
        kept = self._kept_path(f"{name}_{key}.native")
        try:
            with _llvm_lock_events_off():
                addresses = machine_code.link(kept.read_bytes()) if kept is not None else None
        except OSError:
            addresses = None
        if addresses is not None:
            return Kernel(name=name, source=source, path=kept.with_suffix(".py"),
                          address=addresses["invoke"], cache_hit=hit,
                          compile_seconds=time.perf_counter() - start,
                          module=functools.cache(lambda: self._module(name, source, key)[0]),
                          part_address=addresses.get("part", 0))
        if kept is not None:
            log.debug("kept machine code %s unusable; loading the kernel through numba",
                      kept.name)
        module, path = self._module(name, source, key)
        entry = getattr(module, f"{name}_invoke")
        part = getattr(module, f"{name}_part", None)
        return Kernel(name=name, source=source, path=path, address=entry.address,
                      cache_hit=hit if entry.cache_hits else "",
                      compile_seconds=time.perf_counter() - start, module=lambda: module,
                      part_address=part.address if part is not None else 0)

    def _module(self, name: str, source: str, key: str) -> tuple[ModuleType, Path]:
        """The kernel's module, loaded from numba's cache or compiled, and its file."""
        directory, shipped = self._directories()
        module = _load_shipped(shipped / f"{name}_{key}.py", source) if shipped else None
        path = directory / f"{name}_{key}.py"
        if module is not None:
            path = shipped / path.name
        elif not _holds(path, source):
            _remove_numba_cache(path)
            write_atomic(path, source)
        try:
            module = module or _import(path)
        except Exception as first:  # noqa: BLE001 - a corrupt cache entry is a miss
            log.debug("cache entry %s unusable (%s); compiling afresh", path.name, first)
            _remove_numba_cache(path)
            write_atomic(path, source)
            try:
                module = _import(path)
            except Exception as error:
                raise CompileError(f"numba could not compile {name}: {error}", str(path)) from error
        return module, path


def _indexed(directory: Path) -> set[str]:
    """The kernel modules in `directory` numba has cache entries for (by file stem)."""
    try:
        names = os.listdir(directory / "__pycache__")
    except OSError:
        return set()
    return {name.split(".", 1)[0] for name in names if name.endswith(".nbi")}


def _compiled(path: Path, source: str) -> bool:
    """The module file holds `source` and numba has cache entries for it."""
    return path.stem in _indexed(path.parent) and _holds(path, source)


def _load_shipped(path: Path, source: str):
    """The kernel module at `path` in a read-only cache, if numba's entries for it are there
    and load (None otherwise: the caller compiles it elsewhere)."""
    if not _compiled(path, source):
        return None
    _ReadOnlyLocator.directories.add(str(path.parent))
    try:
        return _import(path)
    except Exception as error:  # noqa: BLE001 - built for another CPU or numba: compile anew
        log.info("shipped kernel %s not loaded (%s); compiling it", path.name, error)
        return None


def untrusted_reason(directory: Path) -> str:
    """Why a cache directory must not be used ("" if it can): created private (0700) when
    missing; refused when it is not a directory, or it or its numba entries are owned by
    another user than this one or root, or writable by group or others."""
    if directory.exists() and not directory.is_dir():
        return "not a directory"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot create it: {error.strerror or error}"
    for place in (directory, directory / "__pycache__"):
        reason = _foreign(place)
        if reason:
            return f"{place.name}: {reason}" if place != directory else reason
    return ""


def _foreign(path: Path) -> str:
    """Why a file or directory may have been written by someone else ("" if not, or absent)."""
    try:
        status = path.stat()
    except OSError:
        return ""
    if status.st_uid not in (os.getuid(), 0):
        return f"owned by uid {status.st_uid}, not this user"
    if status.st_mode & 0o022:
        return f"writable by group or others (mode {status.st_mode & 0o777:o})"
    return ""


class _ReadOnlyLocator(_IN_TREE_LOCATOR):
    """numba's cache locator for kernel modules in a read-only cache: their `__pycache__`
    beside them, without numba's check that it can be written (which sends numba to a cache
    of its own, where nothing was shipped). A kernel that misses there compiles elsewhere."""
    directories: set[str] = set()

    def ensure_cache_path(self):
        if not os.path.isdir(self.get_cache_path()):
            raise OSError(f"no {self.get_cache_path()}")

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) not in cls.directories:
            return None
        return super().from_function(py_func, py_file)


if _ReadOnlyLocator not in _CACHE_IMPL._locator_classes:
    _CACHE_IMPL._locator_classes.insert(0, _ReadOnlyLocator)


def _holds(path: Path, source: str) -> bool:
    if _foreign(path):
        return False                          # rewritten as ours, its numba cache dropped
    try:
        return path.read_text() == source
    except (OSError, UnicodeDecodeError):
        return False


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write `content` to `path` whole or not at all: a reader in another process never sees a
    half-written file."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as handle:
            handle.write(content)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _remove_numba_cache(path: Path) -> None:
    pycache = path.parent / "__pycache__"
    if pycache.is_dir():
        for entry in pycache.glob(f"{path.stem}.*"):
            entry.unlink(missing_ok=True)


def _import(path: Path):
    """Import a generated module under a unique name (numba's cache needs a real file); its
    decorators compile the kernel, or load it from numba's cache. Machine code compiled now is
    kept beside the module (codegen.machine_code)."""
    name = f"fusion_delegate_kernels.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: numba records the module name in its cache
    try:
        with global_compiler_lock, _interleaving(), _scopes_copied_shallow(), \
                _llvm_lock_events_off():
            _restart_numba_block_labels()
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    code = machine_code.machine_code(module, path.stem.rsplit("_", 1)[0])
    if code is not None:
        try:
            write_atomic(path.with_suffix(".native"), code)
        except OSError as error:
            log.debug("%s not kept: %s", path.with_suffix(".native").name, error)
    return module


@contextlib.contextmanager
def _interleaving() -> Iterator[None]:
    """LLVM's small-loop cost raised to SMALL_LOOP_COST meanwhile (see there)."""
    binding.set_option("fusion_delegate", f"-small-loop-cost={SMALL_LOOP_COST}")
    try:
        yield
    finally:
        binding.set_option("fusion_delegate", f"-small-loop-cost={LLVM_SMALL_LOOP_COST}")


@contextlib.contextmanager
def _llvm_lock_events_off() -> Iterator[None]:
    """numba registers callbacks on llvmlite's lock that broadcast a start and an end event on
    every LLVM call, for its compile timers: loading a cached kernel makes ~400 such calls
    (its functions' names and declarations), and the events took 7-12% of a warm start
    (ViT int8 0.255 -> 0.225 s, ConvNeXt int8 0.307 -> 0.281 s). Meanwhile they are off:
    their list is swapped under the lock's own RLock, which every LLVM call holds from its
    callbacks on entry to those on exit, so no call sees one without the other. The only
    loss: numba's `llvm_lock` timer of these kernels."""
    lock = getattr(binding.ffi.lib, "_lock", None)
    if not (isinstance(getattr(lock, "_cblist", None), list) and hasattr(lock, "_lock")):
        yield                                 # another llvmlite's lock: leave it alone
        return
    with lock._lock:
        callbacks, lock._cblist = lock._cblist, []
    try:
        yield
    finally:
        with lock._lock:
            lock._cblist = callbacks + lock._cblist


@contextlib.contextmanager
def _scopes_copied_shallow() -> Iterator[None]:
    """numba's inlining (inline='always', which every kernel's helpers and nests use) deep-copies
    the callee's IR one block at a time, and each block's copy copies the function's whole
    scope, every variable of it: copying is quadratic in the callee's size and took most of a
    large kernel's compile time (numba issue #8989). Meanwhile a scope's copy shares its
    variables with the original (the inliner renames them into new ones, it changes none):
    a kernel with a 7x7 stencil compiles in 8 s instead of 16 s, to the same code."""
    probe = ir.Scope(None, ir.Loc("", 0))
    if not (hasattr(probe.localvars, "_con") and hasattr(probe, "redefined")
            and hasattr(probe, "var_redefinitions") and "__deepcopy__" not in vars(ir.Scope)):
        yield                                 # another numba's Scope: leave it alone
        return
    ir.Scope.__deepcopy__ = _shallow_scope_copy
    try:
        yield
    finally:
        del ir.Scope.__deepcopy__


def _shallow_scope_copy(self: ir.Scope, memo: dict) -> ir.Scope:
    copied = ir.Scope.__new__(ir.Scope)
    memo[id(self)] = copied
    copied.__dict__.update(self.__dict__)
    copied.localvars = copy.copy(self.localvars)
    copied.localvars._con = dict(self.localvars._con)
    copied.redefined = collections.defaultdict(int, self.redefined)
    copied.var_redefinitions = collections.defaultdict(
        set, {name: set(versions) for name, versions in self.var_redefinitions.items()})
    return copied


def _restart_numba_block_labels() -> None:
    """numba offsets the blocks of every inlined function by a process-wide label counter that
    only grows, and inlining a helper that inlines others doubles it: a few hundred kernels
    into a process, block names pass LLVM's 1024-character limit and compiles fail with "name
    is too long" (numba issues #3666, #3876). Labels need only be unique within the function
    being compiled, and inlining always offsets past the caller's own labels, so each kernel
    starts the counter afresh (under numba's compiler lock: nothing else is compiling)."""
    counter = getattr(ir_utils, "_the_max_label", None)
    if counter is not None and isinstance(getattr(counter, "_value", None), int):
        counter._value = 0
