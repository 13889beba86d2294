"""Claims made once per graph: a second interpreter of a model, or a new process with the cache
warm, reads them back instead of deciding again.

Claiming a graph (which nodes the kernels reproduce, which partitions build and pay) is a
function of what it reads through the Context (nodes, tensors, builtin params, constants) and of
the delegate's settings; it costs 10-40 ms on a corpus model. The reads are recorded with the
decisions (`Context.record`), and the decisions are used again only where every recorded read
gives the same value (`Context.reads_same`) under the same settings. They are kept for the
process, and beside the kernels in the cache directory, named by the settings, the graph
(`graph_name`) and the software that decided (`decided_by`).
"""
from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codegen.compile import KernelCache
from codegen.kept import kept_name

from .context import Context, Partition
from .tuning import software_fingerprint

#: Whether decisions are kept in the cache directory too (tests that change how claims are
#: made turn it off: a file names the sources that decided, not a patched function).
ON_DISK = True


class Recorded:
    """Values made from what a Context read, each kept with those reads under a key: found again
    only where the context reads the same. The last used are kept, up to `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[object, tuple[dict, object]] = OrderedDict()

    def find(self, key: object, context: Context, kept: tuple | None = None) -> object | None:
        """The value kept for `key` (or `kept`, read elsewhere), if `context` reads as it did."""
        kept = kept or self._kept.get(key)
        if not isinstance(kept, tuple) or len(kept) != 2 or not context.reads_same(kept[0]):
            return None
        self.keep(key, *kept)
        return kept[1]

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def keep(self, key: object, reads: dict, value: object) -> None:
        self._kept[key] = reads, value
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def clear(self) -> None:
        self._kept.clear()


#: Decisions per graph and settings, and partitions' prepared kernels (fusion.py).
CHOICES, PREPARED = Recorded(64), Recorded(1024)


def forget() -> None:
    """Forget what this process keeps (the cache directory's files stay)."""
    CHOICES.clear()
    PREPARED.clear()


@dataclass
class Choice:
    """What claiming decided for one graph: the partitions chosen, and what tools show (each
    node's claim, each candidate's prediction)."""
    partitions: list[Partition]
    claims: dict
    predictions: dict

    def copy(self) -> Choice:
        """A copy another graph can own (its dicts and list; what they hold does not change)."""
        return Choice(list(self.partitions), dict(self.claims), dict(self.predictions))


@functools.cache
def decided_by() -> str:
    """A hash of what decides: this package's sources and cost models, and what
    tuning.software_fingerprint names (codegen's sources, numba, llvmlite, the runtime)."""
    digest = hashlib.sha256(software_fingerprint().encode())
    for path in sorted([*Path(__file__).parent.glob("*.py"),
                        *Path(__file__).parent.glob("*.json")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def graph_name(context: Context) -> str:
    """A name to find a graph's decisions by, quick to make: a hash of its execution plan and
    of its tensors' types, sizes and quantization. Graphs may share one (a resized input):
    their recorded reads tell them apart."""
    table = context.tensor_table()
    digest = hashlib.sha256(repr(context.execution_plan()).encode())
    for field in ("type", "scale", "zero_point", "allocation_type", "bytes", "quantization_type"):
        digest.update(np.ascontiguousarray(table[field]).tobytes())
    return digest.hexdigest()[:24]


def recall(cache: KernelCache, key: str, context: Context) -> Choice | None:
    """The decisions kept for `key` (the settings and graph), in memory or else in the cache
    directory, if the context reads as they were recorded; a copy, for the caller's graph to
    own."""
    kept = None
    if key not in CHOICES and ON_DISK:
        kept = cache.read_kept_object(_file_name(key), tuple)
    choice = CHOICES.find(key, context, kept)
    return choice.copy() if isinstance(choice, Choice) else None


def keep(cache: KernelCache, key: str, reads: dict, choice: Choice) -> None:
    """Keep decisions and the reads they were made from, for this process and the next."""
    CHOICES.keep(key, reads, choice.copy())
    if ON_DISK:
        cache.keep_object(_file_name(key), (reads, choice))


def _file_name(key: str) -> str:
    return kept_name("claims", (key + decided_by()).encode())
