"""Claims measured on the user's machine by `fusion-delegate tune`, found again by the delegate.

The cost model predicts from a fit on one CPU whether a partition pays; `tune` measures it,
whole model in the loop, on the CPU and at the thread count the model will run at, and stores
the nodes to claim. The delegate finds them by what they depend on (`TuningKey`): the graph (its
ops, and its tensors' types, shapes and quantization: a resized input makes another graph), the
CPU target kernels are compiled for, the thread counts, the option that changes the kernels'
math, and the software that made the kernels and runs the rest (codegen's sources, numba,
llvmlite, the runtime and its version). A stored decision replaces the claim policy's choices; it never claims a node the kernels
cannot reproduce (claims.py decides that first).

Decisions are JSON files in the kernel cache's `tuned/` directory, one per graph, so a shipped
cache directory carries them. Keys are computed only where that directory exists (`tune` makes
it). They are data, not code; a file that does not parse is ignored (logged once), and the cost
model decides.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import llvmlite
import numba

from codegen.compile import untrusted_reason, write_atomic
from codegen.kept import helpers_digest

from . import runtime
from .claims import NotClaimed
from .context import Context

log = logging.getLogger("fusion_delegate")

FORMAT = 1
_REPORTED: set[str] = set()


@dataclass(frozen=True)
class TuningKey:
    """What a tuned decision holds for."""
    graph: str               # graph_fingerprint
    target: str              # the CPU target kernels compile for (codegen.target)
    threads: int             # the interpreter's
    kernel_threads: int      # the parts a kernel's nests split into
    precision: str           # the `precision` option
    software: str            # software_fingerprint()


@dataclass(frozen=True)
class Decision:
    """The nodes to claim, and what `tune` measured for them (whole model, per invoke)."""
    claimed: frozenset[int]
    tuned_at: str            # ISO date
    litert_us: float         # LiteRT's default path
    default_us: float        # the delegate with the cost model's claims
    tuned_us: float          # with these claims

    @property
    def speedup(self) -> float:
        return self.litert_us / self.tuned_us

    def reason(self, node: int) -> NotClaimed | None:
        """Why a node the kernels reproduce is left to LiteRT (None: claimed)."""
        if node in self.claimed:
            return None
        return NotClaimed("left to LiteRT by `fusion-delegate tune` ({}): the model measured "
                          "faster without it", self.tuned_at[:10])


@functools.cache
def software_fingerprint() -> str:
    """A hash of what measured decisions were measured with: kernels from other codegen
    sources or compilers, or another runtime's XNNPACK, may time otherwise."""
    text = " ".join([helpers_digest(), numba.__version__, llvmlite.__version__,
                     str(runtime.RUNTIME)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def graph_fingerprint(context: Context) -> str:
    """A hash of the graph as claims and kernels see it: each node's op and operands, and each
    operand's type, shape, constness and quantization (weights' values do not count)."""
    digest = hashlib.sha256()
    tensors: set[int] = set()
    for index in context.execution_plan():
        node = context.node(index)
        digest.update(repr((index, node.builtin_code, node.custom_name, node.version,
                            node.inputs, node.outputs)).encode())
        tensors.update(t for t in (*node.inputs, *node.outputs) if t >= 0)
    for index in sorted(tensors):
        t = context.tensor(index)
        digest.update(repr((index, t.type, t.shape, t.is_constant, t.scale, t.zero_point,
                            t.per_channel)).encode())
    return digest.hexdigest()[:32]


class DecisionStore:
    """The tuned decisions under a kernel cache directory (None: none are kept)."""

    def __init__(self, cache_directory: Path | None) -> None:
        self.directory = cache_directory / "tuned" if cache_directory is not None else None

    @property
    def in_use(self) -> bool:
        """Whether decisions may be stored here: a graph's key (a hash of all its nodes and
        tensors, a few ms for a large model) is computed only then."""
        return self.directory is not None and self.directory.is_dir()

    def create(self) -> None:
        """Make the directory, private, so that delegates compute keys and find decisions."""
        if self._trusted() is None:
            raise OSError(f"no usable cache directory to store tuned decisions in "
                          f"({self.directory.parent if self.directory else 'cache_dir is off'})")
        self.directory.mkdir(mode=0o700, exist_ok=True)

    def _trusted(self) -> Path | None:
        """The directory, where its cache directory can be trusted (codegen.compile)."""
        if self.directory is None or untrusted_reason(self.directory.parent):
            return None
        return self.directory

    def _path(self, key: TuningKey) -> Path | None:
        directory = self._trusted()
        return None if directory is None else directory / f"{key.graph}.json"

    def _entries(self, path: Path) -> list[dict]:
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
                raise ValueError(f"not a format {FORMAT} decisions file")
            return data["entries"]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, AttributeError) as error:
            if str(path) not in _REPORTED:
                _REPORTED.add(str(path))
                log.warning("tuned decisions %s ignored: %s", path, error)
            return []

    def find(self, key: TuningKey) -> Decision | None:
        """The decision stored for `key`, if any."""
        path = self._path(key)
        if path is None:
            return None
        for entry in self._entries(path):
            try:
                if _holds(entry, key):
                    return Decision(frozenset(int(n) for n in entry["claimed"]),
                                    str(entry["tuned_at"]), float(entry["litert_us"]),
                                    float(entry["default_us"]), float(entry["tuned_us"]))
            except (KeyError, TypeError, ValueError) as error:
                log.warning("tuned decisions %s: an entry is ignored: %r", path, error)
        return None

    def save(self, key: TuningKey, decision: Decision) -> Path:
        """Store `decision` for `key`, replacing what was stored for it."""
        self.create()
        path = self._path(key)
        entries = [e for e in self._entries(path) if not _holds(e, key)]
        entries.append({**asdict(key), **asdict(decision), "claimed": sorted(decision.claimed)})
        write_atomic(path, json.dumps({"format": FORMAT, "entries": entries}, indent=1) + "\n")
        return path


def _holds(entry: object, key: TuningKey) -> bool:
    """Whether a stored entry is the one for `key` (one that is no object is no one's)."""
    wanted = asdict(key)
    return isinstance(entry, dict) and {k: entry.get(k) for k in wanted} == wanted
