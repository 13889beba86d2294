"""Peers: the suite's workloads under another fusion compiler, jax.jit (XLA's CPU backend), and
models under another whole-graph CPU runtime, OpenVINO.

XLA is what a user would reach for instead of the delegate, so perf/suite.py times it beside
LiteRT when jax is installed (`pip install -e ".[peers]"`; never a runtime dependency). The
jnp computation is derived from the workload's model itself, op by op (`JNP_OPS`), not written
per workload: what the delegate fuses and what XLA fuses are the same graph. Constants become
jit constants (closed over, as weights are in a user's jax code), inputs are device arrays put
there once, and a call is `fn(*inputs).block_until_ready()`: the jit dispatch is part of
what a jax user pays per call, as `invoke()` is for LiteRT. Dispatch is synchronous (see
`configure`).

XLA runs on one core when the suite runs on one thread (`configure`, before jax is imported):
`--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`, as issue 14 measured it,
and the process pinned to one core (see `configure`).
The NONE activation's clamp to +-FLT_MAX is not applied (a jax user writes `a + b`); it only
changes +-inf, which the workloads' inputs never produce.

OpenVINO (`pip install -e ".[openvino]"`) reads a .tflite file itself, so perf/models.py and
perf/stencil.py time the very model LiteRT runs, compiled for its CPU plugin with float32
arithmetic and LiteRT's thread count (`openvino_config`), its inputs set once in its infer
request and `infer()` per call, as `invoke()` is for LiteRT.
"""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Callable

import numpy as np

from fusion_delegate.model import read_model

JAX = "jax"
OPENVINO = "openvino"
ONE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


class Unsupported(Exception):
    """The peer cannot run the model: an op or dtype the jnp translation does not cover, or
    what OpenVINO said when it could not read, compile or run it (the reason)."""


def configure(threads: int) -> int | None:
    """Keep XLA on one core when the suite runs on one thread; must run before jax is
    imported. Returns the core the process was pinned to (None: not pinned).

    The flags alone do not do it: jax 0.10's CPU client sizes its intra-op pool to the cores
    it may run on and splits a loop fusion of 64K elements into tasks for it, and dispatches
    asynchronously (another thread runs the computation): on this shared 2-core KVM machine
    `x + 1.0` over 4K elements took 30 us a call (2 context switches) with the flags, 5.3 us
    without async dispatch, and over 64K elements 39 us unpinned, 15 us pinned to one core.
    So the process is pinned to one core, as issue 14 measured XLA (the pool's threads,
    created later, inherit it; every method of the suite then runs on that core), and
    `jax_peer` turns async dispatch off (`jax_cpu_enable_async_dispatch`): both are XLA's
    fastest one-core setting here."""
    if "jax" in sys.modules or threads != 1:
        return None
    if ONE_THREAD_FLAGS not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = " ".join(
            filter(None, [os.environ.get("XLA_FLAGS"), ONE_THREAD_FLAGS]))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def installed(package: str) -> str | None:
    """The installed peer's version (JAX, OPENVINO), or None: then no column for it."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


#: TFLite's fused activations (ActivationFunctionType) as f(jnp, y); NONE without its clamp.
ACTIVATIONS = {0: lambda jnp, y: y,
               1: lambda jnp, y: jnp.maximum(y, 0.0),
               2: lambda jnp, y: jnp.clip(y, -1.0, 1.0),
               3: lambda jnp, y: jnp.clip(y, 0.0, 6.0)}


def _reduce(fn):
    """MEAN / SUM / REDUCE_MAX / REDUCE_MIN: axes from the constant second input."""
    def reduce(jnp, x, axes, options):
        axes = tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
        return getattr(jnp, fn)(x, axis=axes, keepdims=bool(options.get("keep_dims")))
    return reduce


def _ops() -> dict[str, Callable]:
    """TFLite op -> f(jnp, *inputs, options): one entry per op, its plain jnp meaning."""
    def nn(name):
        def call(jnp, *args, options):
            import jax
            return getattr(jax.nn, name)(*args)
        return call

    def unary(name):
        return lambda jnp, x, options: getattr(jnp, name)(x)

    return {
        "ADD": lambda jnp, a, b, options: a + b,
        "SUB": lambda jnp, a, b, options: a - b,
        "MUL": lambda jnp, a, b, options: a * b,
        "DIV": lambda jnp, a, b, options: a / b,
        "MAXIMUM": lambda jnp, a, b, options: jnp.maximum(a, b),
        "MINIMUM": lambda jnp, a, b, options: jnp.minimum(a, b),
        "SQUARED_DIFFERENCE": lambda jnp, a, b, options: jnp.square(a - b),
        "POW": lambda jnp, a, b, options: jnp.power(a, b),
        "PRELU": lambda jnp, x, alpha, options: jnp.where(x >= 0, x, x * alpha),
        "RELU": lambda jnp, x, options: jnp.maximum(x, 0.0),
        "RELU6": lambda jnp, x, options: jnp.clip(x, 0.0, 6.0),
        "RELU_N1_TO_1": lambda jnp, x, options: jnp.clip(x, -1.0, 1.0),
        "LEAKY_RELU": lambda jnp, x, options: jnp.where(x >= 0, x, x * options.get("alpha",
                                                                                    0.2)),
        "HARD_SWISH": lambda jnp, x, options: x * jnp.clip(x + 3.0, 0.0, 6.0) / 6.0,
        "LOGISTIC": nn("sigmoid"),
        "ELU": nn("elu"),
        "GELU": lambda jnp, x, options: __import__("jax").nn.gelu(
            x, approximate=bool(options.get("approximate"))),
        "TANH": unary("tanh"), "EXP": unary("exp"), "LOG": unary("log"),
        "SIN": unary("sin"), "COS": unary("cos"), "SQRT": unary("sqrt"),
        "ABS": unary("abs"), "NEG": unary("negative"), "SQUARE": unary("square"),
        "FLOOR": unary("floor"), "CEIL": unary("ceil"), "SIGN": unary("sign"),
        "RSQRT": lambda jnp, x, options: __import__("jax").lax.rsqrt(x),
        "SOFTMAX": lambda jnp, x, options: __import__("jax").nn.softmax(
            x * options.get("beta", 1.0), axis=-1),
        "MEAN": _reduce("mean"), "SUM": _reduce("sum"),
        "REDUCE_MAX": _reduce("max"), "REDUCE_MIN": _reduce("min"),
    }


JNP_OPS = _ops()


@dataclass(frozen=True)
class JaxPeer:
    """A model as one jitted jnp function over its inputs, and those inputs on the device."""
    fn: Callable
    args: tuple

    def __call__(self):
        return self.fn(*self.args).block_until_ready()

    def output(self) -> np.ndarray:
        return np.asarray(self())


def check_translatable(graph) -> None:
    """Raise Unsupported unless every op of the subgraph has a jnp translation and every
    tensor computed is float32 (quantized models have no jnp meaning here)."""
    for op in graph.operators:
        if op.op not in JNP_OPS:
            raise Unsupported(f"op {op.op} has no jnp translation")
        activation = op.options.get("fused_activation_function", 0)
        if activation not in ACTIVATIONS:
            raise Unsupported(f"{op.op}: fused activation {activation}")
    for t in graph.tensors:
        if np.dtype(t.dtype) != np.float32 and t.data is None:
            raise Unsupported(f"tensor {t.name} is {np.dtype(t.dtype).name}: float32 only")


def jnp_function(model: bytes) -> tuple[Callable, list[str]]:
    """The model's subgraph 0 as a function of its inputs (in order, by name) to its first
    output, with jnp ops; raises Unsupported for an op or dtype it does not translate."""
    graph = read_model(model).subgraphs[0]
    check_translatable(graph)
    import jax.numpy as jnp

    ops = JNP_OPS

    def fn(*inputs):
        values = {t: jnp.asarray(graph.tensors[t].data) for t in range(len(graph.tensors))
                  if graph.tensors[t].data is not None}
        values.update(zip(graph.inputs, inputs))
        for op in graph.operators:
            args = [values[t] if graph.tensors[t].dtype == np.float32 or t in graph.inputs
                    else graph.tensors[t].data for t in op.inputs]
            y = ops[op.op](jnp, *args, options=op.options)
            values[op.outputs[0]] = ACTIVATIONS[op.options.get(
                "fused_activation_function", 0)](jnp, y)
        return values[graph.outputs[0]]

    return fn, [graph.tensors[t].name for t in graph.inputs]


def jax_peer(model: bytes, inputs: dict[str, np.ndarray]) -> JaxPeer:
    """The model jitted, its inputs on the device, compiled by one call."""
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)    # see configure()
    fn, names = jnp_function(model)
    peer = JaxPeer(jax.jit(fn), tuple(jax.device_put(inputs[n]) for n in names))
    peer()
    return peer


# ---------------------------------------------------------------------------------- OpenVINO

def openvino_config(threads: int) -> dict:
    """float32 arithmetic (the CPU plugin would use bf16 or fp16 where the CPU has them) on
    LiteRT's thread count; the rest OpenVINO's defaults (latency hint: one stream)."""
    return {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}


@dataclass(frozen=True)
class OpenVinoPeer:
    """A model compiled by OpenVINO for the CPU, its inputs set once in its infer request."""
    request: object                 # openvino.InferRequest

    def __call__(self):
        return self.request.infer(share_outputs=True)   # no copy, as invoke() makes none

    def outputs(self, names: list[str]) -> list[np.ndarray]:
        """Copies of the outputs LiteRT calls `names` (OpenVINO keeps the .tflite's tensor
        names); raises Unsupported for a name OpenVINO does not have."""
        ports = {n: port for port in self.request.model_outputs for n in port.get_names()}
        missing = [n for n in names if n not in ports]
        if missing:
            raise Unsupported(f"no output named {missing[0]} (OpenVINO has {sorted(ports)})")
        return [self.request.get_tensor(ports[n]).data.copy() for n in names]


def openvino_peer(model: bytes, inputs: dict[str, np.ndarray], threads: int) -> OpenVinoPeer:
    """The .tflite model read by OpenVINO's TFLite frontend and compiled for its CPU plugin,
    `inputs` (by LiteRT's tensor names) set, run once; raises Unsupported with OpenVINO's
    reason when it cannot read, compile or run it (or is not installed)."""
    try:
        import openvino

        core = openvino.Core()
        with tempfile.NamedTemporaryFile(suffix=".tflite") as handle:   # it reads files only
            handle.write(model)
            handle.flush()
            compiled = core.compile_model(core.read_model(handle.name), "CPU",
                                          openvino_config(threads))
        request = compiled.create_infer_request()
        for port in compiled.inputs:
            name = next((n for n in port.get_names() if n in inputs), None)
            if name is None:
                raise Unsupported(f"no input of {sorted(inputs)} is named {port.get_any_name()}")
            request.get_tensor(port).data[...] = inputs[name]
        peer = OpenVinoPeer(request)
        peer()
    except Unsupported:
        raise
    except Exception as error:  # noqa: BLE001 - the reason goes in the table, the run goes on
        lines = [line for line in str(error).splitlines() if line.strip()] or [repr(error)]
        raise Unsupported(f"{type(error).__name__}: {lines[-1].strip()[:160]}") from None
    return peer
