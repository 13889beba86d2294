"""Pure results that take time to make, kept beside the kernels for the next process.

An int8 table (quant_reference.unary_lookup) or the vector width LLVM gives the target
(target.numba_target) is a function of its key, codegen's sources and the compiler versions the
key names: its file (`kept_name`) serves any delegate of any process whose cache directory it is
in. `keep_in` names that cache (a delegate does, when it is made and on every prepare); until
then, or with None, they are made every process.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Callable, Protocol, TypeVar

T = TypeVar("T")


class KeptFiles(Protocol):
    """Where results are kept: a kernel cache (codegen.compile.KernelCache)."""

    def read_kept_object(self, file_name: str, kind: type) -> object | None: ...

    def keep_object(self, file_name: str, value: object) -> None: ...


_CACHE: KeptFiles | None = None


@functools.cache
def helpers_digest() -> str:
    """A hash of the codegen package's sources. A kernel inlines helpers (fixedpoint,
    mathf32, ...) that its text only names, and numba's cache checks only the kernel's own
    file: without this, a kernel cached before a helper changed keeps the old helper."""
    package = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def kept_name(kind: str, key: bytes) -> str:
    """The file an object computed from `key` is kept in beside the kernels: named by its
    arguments and by the codegen sources that made it (helpers_digest), so that a changed
    codegen never reads what the old one made."""
    digest = hashlib.sha256(key + helpers_digest().encode()).hexdigest()[:24]
    return f"{kind}_{digest}.pickle"


def keep_in(cache: KeptFiles | None) -> None:
    """Keep results in `cache`'s directory, and read them from there."""
    global _CACHE
    _CACHE = cache


def kept(kind: str, key: tuple, result_type: type[T], make: Callable[[], T]) -> T:
    """What `make()` returns for `key`: read from the cache's directory where an earlier process
    kept it (and it loads as a `result_type`), else made and kept there."""
    cache = _CACHE
    if cache is None:
        return make()
    name = kept_name(kind, repr(key).encode())
    value = cache.read_kept_object(name, result_type)
    if value is None:
        value = make()
        cache.keep_object(name, value)
    return value
