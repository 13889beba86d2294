"""The delegate's options: one table of names, types, defaults and checks.

Options come as keyword arguments (`FusionDelegate(cache_dir=...)`) or as `key=value` strings,
the way external delegates and `--option` flags take them. Unknown keys and bad values are
refused with a message naming the valid choices.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, fields

from codegen.ops import PRECISIONS

from .errors import DelegateOptionError


@dataclass(frozen=True)
class FusionOptions:
    #: Keep at most this many partitions, largest first (<= 0: no limit).
    max_delegated_partitions: int = 0
    #: Stop at the first partition with fewer nodes (TFLite's semantics). 1 by default: the
    #: cost model decides what pays, and one int8 node XNNPACK does not take (HARD_SWISH, ...)
    #: pays on its own.
    min_nodes_per_partition: int = 1
    #: Directory of compiled kernels; "" turns the disk cache off.
    cache_dir: str = "default"
    #: Claim a partition only if the measured cost model (worth.py) predicts at least this
    #: speedup over LiteRT at one thread, a margin for the model's error that grows with the
    #: interpreter's threads (1.1: 1.2 at two, and 1.8 between XNNPACK's threaded ops:
    #: policy.ClaimPolicy.pays). 0: claim all.
    min_speedup: float = 1.1
    #: Parts a large partition's loops split into, run on the interpreter's own thread pool
    #: (fusion_delegate.threadpool; one thread where it cannot be verified); 0: the
    #: interpreter's num_threads. One by default: LiteRT's wheels run XNNPACK on a pool of its
    #: own, and two pools on the same cores gain less than they cost on some graphs
    #: (perf/README.md, "Kernels on the interpreter's thread pool").
    num_threads: int = 1
    #: Node indices never to claim, comma-separated ("12,13,20"): what an error names to step
    #: around a partition, and how per-partition gains are measured.
    exclude_nodes: str = ""
    #: "fast": cheaper exp/log/sin/cos/tanh/logistic/ELU/GELU (and swish, mish chains), each
    #: within approx_tolerance of the builtin kernels, never more than XNNPACK (LiteRT's default
    #: path) differs from them itself; NaN, +-inf and -0.0 stay the builtin ones. "exact": the
    #: builtin kernels' results within the tolerances of codegen.ops.
    precision: str = "fast"
    #: 1: where `fusion-delegate tune` stored claims in cache_dir for this graph, CPU target,
    #: thread counts and versions (fusion_delegate.tuning), they replace the cost model's
    #: (unless min_speedup is 0, which claims all); 0: the cost model decides.
    use_tuned: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = {"int": int, "float": (int, float), "str": str}[f.type]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise DelegateOptionError(
                    f"option {f.name} must be {f.type}, got {value!r} ({type(value).__name__})")
        if self.min_speedup < 0:
            raise DelegateOptionError(f"option min_speedup must be >= 0, got {self.min_speedup}")
        if self.num_threads < 0:
            raise DelegateOptionError(f"option num_threads must be >= 0, got {self.num_threads}")
        if self.use_tuned not in (0, 1):
            raise DelegateOptionError(f"option use_tuned must be 0 or 1, got {self.use_tuned}")
        if self.precision not in PRECISIONS:
            raise DelegateOptionError(f"option precision must be one of "
                                      f"{', '.join(repr(p) for p in PRECISIONS)}, "
                                      f"got {self.precision!r}")
        self.excluded_nodes  # noqa: B018 - validates the list now, not at the first claim

    @property
    def excluded_nodes(self) -> frozenset[int]:
        items = [item.strip() for item in self.exclude_nodes.split(",") if item.strip()]
        if not all(item.isdigit() for item in items):
            raise DelegateOptionError(f"option exclude_nodes must be node indices separated by "
                                      f"commas, got '{self.exclude_nodes}'")
        return frozenset(int(item) for item in items)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_kwargs(cls, **kwargs) -> "FusionOptions":
        for key in kwargs:
            check_known(key)
        return cls(**kwargs)

    @classmethod
    def parse(cls, pairs: list[str] | dict[str, str]) -> "FusionOptions":
        """Options from `key=value` strings (or a str->str dict), converted and validated."""
        items = pairs.items() if isinstance(pairs, dict) else [_split(p) for p in pairs]
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for key, text in items:
            check_known(key)
            values[key] = _convert(key, text, types[key])
        return cls(**values)


def check_known(key: str) -> None:
    names = FusionOptions.names()
    if key not in names:
        close = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise DelegateOptionError(f"unknown option '{key}'; valid: {', '.join(names)}{hint}")


def _split(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep or not key.strip():
        raise DelegateOptionError(f"option '{pair}' is not of the form key=value")
    return key.strip(), value.strip()


def _convert(key: str, text: str, kind: str) -> object:
    try:
        return {"int": int, "float": float, "str": str}[kind](text)
    except ValueError:
        raise DelegateOptionError(f"option {key} must be {kind}, got '{text}'") from None
