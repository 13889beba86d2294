"""What every tool does with an interpreter: load a checked model, build the interpreter with or
without the delegate, feed it random inputs, and time it.

Models go through `read_model` first so that LiteRT never sees a corrupt file: a bad file is
one clear `ModelFormatError`, not a crash inside the C++ runtime.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence

import numpy as np
from fusion_delegate.runtime import Interpreter, OpResolverType

from ..errors import UnsupportedModelError
from ..fusion import FusionDelegate
from ..model import Model, Subgraph, dtype_name, read_model
from ..options import FusionOptions

#: Which LiteRT kernels run the nodes the delegate leaves alone (or everything, without it).
RESOLVERS = {
    "xnnpack": OpResolverType.AUTO,
    "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "ref": OpResolverType.BUILTIN_REF,
}
RESOLVER_LABELS = {
    "xnnpack": "LiteRT default (XNNPACK)",
    "builtin": "LiteRT builtin kernels (no XNNPACK)",
    "ref": "LiteRT reference kernels",
}
DELEGATE_LABEL = "LiteRT + fusion_delegate"


@dataclass
class LoadedModel:
    """A model file that parsed cleanly, with the bytes LiteRT will load."""
    path: str
    data: bytes
    model: Model

    @property
    def graph(self) -> Subgraph:
        return self.model.subgraphs[0]

    @property
    def name(self) -> str:
        return Path(self.path).name


def load_model(path: str) -> LoadedModel:
    """Read and validate `path`; refuse inputs we cannot make random data for."""
    model = read_model(path)
    data = Path(path).read_bytes()
    graph = model.subgraphs[0]
    for index in graph.inputs:
        tensor = graph.tensors[index]
        if np.dtype(tensor.dtype).kind not in "fiub":
            raise UnsupportedModelError(
                f"{path}: input '{tensor.name}' has dtype {dtype_name(tensor.dtype)}; the tools "
                f"can only generate float, integer and bool inputs")
    return LoadedModel(path, data, model)


@dataclass
class Runner:
    """One interpreter, how long it took to build (compiling included), and its delegate."""
    label: str
    interpreter: Interpreter
    init_seconds: float
    delegate: FusionDelegate | None


def build(data: bytes, *, fuse: FusionOptions | None = None, resolver: str = "xnnpack",
          num_threads: int = 1) -> Runner:
    """An allocated interpreter; with `fuse`, the fusion delegate claims nodes first."""
    delegate = FusionDelegate(fuse) if fuse is not None else None
    start = time.perf_counter()
    interpreter = Interpreter(model_content=data, num_threads=num_threads,
                              experimental_delegates=None if delegate is None else [delegate],
                              experimental_op_resolver_type=RESOLVERS[resolver])
    interpreter.allocate_tensors()
    seconds = time.perf_counter() - start
    label = RESOLVER_LABELS[resolver] if delegate is None else DELEGATE_LABEL
    return Runner(label, interpreter, seconds, delegate)


def build_pair(data: bytes, options: FusionOptions, *, num_threads: int = 1,
               seed: int = 0) -> tuple[Runner, Runner, list[np.ndarray]]:
    """LiteRT's default interpreter and the delegated one, fed the same random inputs."""
    plain = build(data, num_threads=num_threads)
    fused = build(data, fuse=options, num_threads=num_threads)
    inputs = random_inputs(plain.interpreter, np.random.default_rng(seed))
    for runner in (plain, fused):
        set_inputs(runner.interpreter, inputs)
    return plain, fused, inputs


def _unit_draws(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """N(0.5, 1/3) re-drawn until inside [0, 1): inference_diff's input distribution."""
    values = rng.normal(0.5, 1 / 3, shape)
    outside = (values < 0) | (values >= 1)
    while outside.any():
        values[outside] = rng.normal(0.5, 1 / 3, int(outside.sum()))
        outside = (values < 0) | (values >= 1)
    return values


def random_inputs(interpreter: Interpreter, rng: np.random.Generator,
                  float_range: tuple[float, float] = (-1.0, 1.0)) -> list[np.ndarray]:
    """One array per input: floats in `float_range`, integers over their type's range,
    bools as 0/1 (inference_diff's rules)."""
    arrays = []
    for detail in interpreter.get_input_details():
        dtype = np.dtype(detail["dtype"])
        unit = _unit_draws(rng, tuple(int(d) for d in detail["shape"]))
        if dtype.kind == "f":
            low, high = float_range
            arrays.append((low + unit * (high - low)).astype(dtype))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            span = float(info.max) - float(info.min) + 1
            values = np.floor(float(info.min) + unit * span)
            arrays.append(np.clip(values, info.min, info.max).astype(dtype))
        else:
            arrays.append(unit >= 0.5)
    return arrays


def set_inputs(interpreter: Interpreter, arrays: Sequence[np.ndarray]) -> None:
    for detail, array in zip(interpreter.get_input_details(), arrays):
        interpreter.set_tensor(detail["index"], array)


def outputs(interpreter: Interpreter) -> list[np.ndarray]:
    """Copies: the interpreter reuses its output buffers on the next invoke."""
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def infer(interpreter: Interpreter, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Outputs for these inputs."""
    set_inputs(interpreter, arrays)
    interpreter.invoke()
    return outputs(interpreter)


def time_invoke(interpreter: Interpreter) -> float:
    """Seconds for one invoke."""
    start = time.perf_counter()
    interpreter.invoke()
    return time.perf_counter() - start


class Progress:
    """`[tag] 20/50 runs` lines on stderr, at most one a second, so long work shows life."""

    def __init__(self, tag: str, interval: float = 1.0) -> None:
        self.tag, self.interval = tag, interval
        self._last = time.perf_counter()

    def note(self, message: str) -> None:
        print(f"[{self.tag}] {message}", file=sys.stderr, flush=True)
        self._last = time.perf_counter()

    def tick(self, message: str) -> None:
        """Like `note`, but only if the last line is older than the interval."""
        if time.perf_counter() - self._last >= self.interval:
            self.note(message)


def interleaved_times(interpreters: Sequence[Interpreter], runs: int, *, min_secs: float = 0.0,
                      progress: Progress | None = None,
                      what: str = "runs") -> list[np.ndarray]:
    """Seconds per invoke for each interpreter, taking turns run by run (and swapping who goes
    first), so clock changes and machine noise hit all of them alike."""
    times: list[list[float]] = [[] for _ in interpreters]
    start, done = time.perf_counter(), 0
    while done < runs or time.perf_counter() - start < min_secs:
        order = range(len(interpreters)) if done % 2 == 0 else reversed(range(len(interpreters)))
        for k in order:
            times[k].append(time_invoke(interpreters[k]))
        done += 1
        if progress is not None:
            progress.tick(f"{done}/{runs} {what}" if done <= runs else f"{done} {what}")
    return [np.array(t) for t in times]


def interleaved_medians_us(runners: Sequence[Runner], runs: int,
                           progress: Progress | None = None) -> list[float]:
    """Median microseconds per invoke of each runner, from interleaved runs."""
    times = interleaved_times([r.interpreter for r in runners], runs, progress=progress)
    return [float(np.median(t)) * 1e6 for t in times]


def summarize(seconds: np.ndarray) -> dict[str, float]:
    """benchmark_model's statistics, in microseconds."""
    us = np.asarray(seconds, dtype=np.float64) * 1e6
    return {"count": int(us.size), "avg": float(us.mean()), "std": float(us.std()),
            "min": float(us.min()), "max": float(us.max()),
            "p50": float(np.percentile(us, 50)), "p90": float(np.percentile(us, 90)),
            "p99": float(np.percentile(us, 99))}
