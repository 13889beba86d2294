"""Shared test helpers: the real LiteRT interpreter is the oracle, never a mock."""
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from codegen.ir import KernelIR, Op, Value
from codegen.render import TensorTableLayout, render_kernel
from codegen.schedule import plan
from codegen.target import Target, numba_target
from codegen.workers import WORKERS_ENV
from fusion_delegate.runtime import Interpreter, OpResolverType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# CI (.ci/run) runs the property tests on a fixed set of examples, so that a submission is judged
# on the same cases every time; elsewhere each run explores new ones.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# pytest-xdist already runs a test process per core: compile workers beside each would only add
# their start-up (codegen.workers). Tests of the workers ask for them by number.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault(WORKERS_ENV, "1")

BUILTIN = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
#: The target kernels are planned for: numba's, as the delegate plans them.
HOST = numba_target()
#: The target the plan-level tests' expectations are written for (Zen 4's: 64-byte vectors, 32
#: registers, VBMI), so that they hold on any machine: LLVM makes 32-byte vectors on Intel's
#: AVX-512 servers, 16-byte ones for `generic`.
AVX512 = Target("znver4", frozenset({"sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                                     "avx512dq", "avx512vl", "avx512vbmi"}), "x86_64", 64)


def builtin_interpreter(model: bytes, delegates=(), **kwargs) -> Interpreter:
    """LiteRT's builtin kernels, XNNPACK off: the oracle (or the host of our delegate)."""
    interpreter = Interpreter(model_content=model, experimental_delegates=list(delegates),
                              experimental_op_resolver_type=BUILTIN, **kwargs)
    interpreter.allocate_tensors()
    return interpreter


def run(interpreter: Interpreter, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Set inputs (resizing where the shape differs), invoke, return copies of all outputs."""
    details = interpreter.get_input_details()
    if any(tuple(d["shape"]) != a.shape for d, a in zip(details, inputs)):
        for d, a in zip(details, inputs):
            interpreter.resize_tensor_input(d["index"], list(a.shape))
        interpreter.allocate_tensors()
    for d, a in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], a)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as float32 values, NaN == NaN (any payload), and -0.0 != 0.0."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b))
                and np.array_equal(a[~nan].view(np.int32), b[~nan].view(np.int32)))


def wrong_op(monkeypatch, name: str, expr: str) -> None:
    """Render OPS[name] as `expr` for this test, its builds kept apart from the process's and
    the cache's (codegen.pipeline keeps builds by IR, which does not say how an op renders)."""
    import codegen.ops
    import codegen.pipeline
    spec = codegen.ops.OPS[name]
    monkeypatch.setitem(codegen.ops.OPS, name, replace(spec, expr=expr))
    monkeypatch.setattr(codegen.pipeline, "_BUILT", {})
    monkeypatch.setattr(codegen.pipeline, "_LOWERED", {})
    monkeypatch.setattr(codegen.pipeline, "KEEP_BUILDS", False)


@pytest.fixture(autouse=True)
def decided_anew(monkeypatch):
    """Each test's graphs are claimed anew (fusion_delegate.recall): tests patch how claims are
    made, which neither the process's nor the cache directory's kept decisions know of. Tests
    of recall turn it back on."""
    import fusion_delegate.recall
    fusion_delegate.recall.forget()
    monkeypatch.setattr(fusion_delegate.recall, "ON_DISK", False)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def foreign_calls(llvm_ir: str) -> set[str]:
    """Functions compiled code calls besides LLVM intrinsics, numba's runtime and the Python
    C API of its wrapper: libm (sinf, expf, ...) would show up here, by name."""
    called = set(re.findall(r"call [^@\n]*@([\w.$]+)\(", llvm_ir))
    return {name for name in called if not re.match(r"(llvm\.|NRT_|Py|_ZN|numba_)", name)}


def kernel_source(ir: KernelIR, layout: TensorTableLayout) -> str:
    """The kernel source of an IR as it is (no passes of codegen.pipeline): planned for AVX512,
    the target the render tests' expectations are written for, rendered."""
    return render_kernel(ir, plan(ir, AVX512), layout)


def ir_of(values: dict[int, tuple[int, ...]], ops, inputs, outputs) -> KernelIR:
    """A partition's IR by hand: float32 values by tensor id, ops as (op, inputs, output)."""
    return KernelIR(tuple(Value(t, shape) for t, shape in sorted(values.items())),
                    tuple(Op(n, op, ins, out, (("activation", 0),) if op in ("ADD", "MUL") else ())
                          for n, (op, ins, out) in enumerate(ops)), inputs, outputs)
