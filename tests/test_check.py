"""`fusion-delegate check` and fusion_delegate.testing: they pass on correct kernels, find
deliberately wrong ones (tests/faults.py, injected in a child process) within a small budget,
and refuse what they cannot check with exit status 2."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from conftest import builtin_interpreter
from fusion_delegate.demo import build_demo_model, build_quantized_demo_model
from fusion_delegate.model import ModelBuilder
from fusion_delegate.testing import EDGE_VALUES, assert_equivalent, tensor_inputs
from fusion_delegate.tolerances import beyond, distance

ROOT = Path(__file__).resolve().parents[1]
NONE = {"fused_activation_function": 0}
#: The search's budget in these tests: a fault must be found well within it.
SECONDS = "20"


def mul_add_model() -> bytes:
    """Two bit-exact ops over rows with a tail, the product an output too."""
    b = ModelBuilder("mul_add")
    x, y = b.input("x", (3, 37)), b.input("y", (3, 37))
    product = b.op("MUL", [x, y], NONE)
    b.output(product, b.op("ADD", [product, x], NONE))
    return b.to_bytes()


def add_model() -> bytes:
    """x + y: -0.0 only where both are -0.0."""
    b = ModelBuilder("add")
    b.output(b.op("ADD", [b.input("x", (3, 37)), b.input("y", (3, 37))], NONE))
    return b.to_bytes()


def unrunnable_model() -> bytes:
    """An ADD of shapes that do not broadcast: LiteRT itself refuses to prepare it."""
    b = ModelBuilder("unrunnable")
    b.output(b.op("ADD", [b.input("x", (3,)), b.input("y", (4,))], NONE, shape=(4,)))
    return b.to_bytes()


def bool_input_model() -> bytes:
    b = ModelBuilder("bool")
    b.output(b.op("LOGICAL_NOT", [b.input("x", (4,), np.bool_)]))
    return b.to_bytes()


def dynamic_shape_model() -> bytes:
    b = ModelBuilder("dynamic")
    x = b.input("x", (1, 4))
    b._tensors[x].shape_signature = (-1, 4)
    b.output(b.op("NEG", [x]))
    return b.to_bytes()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("check")
    for name, make in (("mul_add", mul_add_model), ("add", add_model),
                       ("demo", build_demo_model), ("qdemo", build_quantized_demo_model),
                       ("unrunnable", unrunnable_model),
                       ("bool", bool_input_model), ("dynamic", dynamic_shape_model)):
        (root / f"{name}.tflite").write_bytes(make())
    np.savez(root / "wrong_shape.npz", x=np.zeros((3, 36), np.float32),
             y=np.zeros((3, 37), np.float32))
    np.savez(root / "wrong_dtype.npz", x=np.zeros((3, 37)), y=np.zeros((3, 37), np.float32))
    return root


def cli(root: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child process with its own kernel cache, claiming every partition it can
    build, with `fault` injected."""
    prefix = [str(ROOT / "tests" / "faults.py"), fault] if fault else ["-m", "fusion_delegate"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *prefix, *args, "--option", "min_speedup=0", "--option",
                           f"cache_dir={root / ('kernels_' + (fault or 'ok').replace(':', '_'))}"],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)


# --- the search finds wrong kernels ------------------------------------------------------------
@pytest.mark.parametrize("fault, model", [("round:MUL", "mul_add"), ("negzero:MUL", "mul_add"),
                                          ("tail_lsb", "qdemo")])
def test_check_finds_an_injected_fault_names_the_partition_and_saves_the_input(models, fault,
                                                                              model):
    failing = models / f"{fault.replace(':', '_')}.npz"
    result = cli(models, "check", f"{model}.tflite", "--seconds", SECONDS,
                 "--save-failing", str(failing), fault=fault)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert out.splitlines()[-1] == "check: MISMATCH"
    assert re.search(r"MISMATCH, \d+ of \d+ elements beyond tolerance", out)
    assert re.search(r"worst at \(.*\): got .*, want .*: \d+ (ulp|LSB), .* absolute; "
                     r"tolerance 0 \(bit-exact\)", out)
    assert re.search(r"partition 0 \(nodes [\d,]+: [A-Z0-9_ ]+\) is responsible; to run without "
                     r"it pass exclude_nodes=\"[\d,]+\"", out)
    assert failing.is_file() and f"--inputs {failing}" in out
    if fault == "round:MUL":   # the saved input replays: diff with the fault sees the error
        replay = cli(models, "diff", f"{model}.tflite", "--inputs", str(failing),
                     "--tolerance", "0", fault=fault)
        assert replay.returncode == 1 and f"inputs from {failing}" in replay.stdout
        assert "FAIL" in replay.stdout.splitlines()[-1]


def test_check_probes_the_same_element_of_both_operands_before_searching(models):
    """x + y loses a zero's sign only at an element where both are -0.0: the probes put it
    there, so one random example is enough."""
    result = cli(models, "check", "add.tflite", "--seconds", SECONDS, "--max-examples", "1",
                 "--save-failing", str(models / "negzero_add.npz"), fault="negzero:ADD")
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"searched \d+ inputs", result.stdout)
    assert result.stdout.splitlines()[-1] == "check: MISMATCH"


# --- and passes on correct ones ----------------------------------------------------------------
@pytest.mark.parametrize("model", ["mul_add", "demo", "qdemo"])
def test_check_passes_on_the_demo_models(models, model):
    result = cli(models, "check", f"{model}.tflite", "--seconds", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "check: pass (no input found beyond tolerance)"
    assert re.search(r"^output '.*' (float32|int8)\[[\dx]+\]: (ok|identical)$", result.stdout,
                     re.M)
    assert re.search(r"^partition 0 output '.*' \([A-Z_0-9]+, node \d+\) \S+: (ok|identical)$",
                     result.stdout, re.M)


def test_check_of_a_model_with_nothing_delegated_passes_at_once(models):
    """The outputs are LiteRT's own: no search, whatever the budget."""
    result = cli(models, "check", "mul_add.tflite", "--seconds", "600",
                 "--option", "exclude_nodes=0,1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == \
        "check: pass (nothing delegated: the outputs are LiteRT's own)"


def test_check_tries_the_given_inputs_first(models):
    inputs = models / "given.npz"
    np.savez(inputs, x=np.full((2, 3, 37), -0.0, np.float32), y=np.ones((2, 3, 37), np.float32))
    result = cli(models, "check", "mul_add.tflite", "--seconds", "1", "--inputs", str(inputs),
                 "--max-examples", "1")
    assert result.returncode == 0, result.stderr
    assert "(2 given first)" in result.stdout


# --- what it cannot check: one line, exit status 2 ---------------------------------------------
@pytest.mark.parametrize("model, extra, message", [
    ("unrunnable", [], "the reference (LiteRT builtin kernels (no XNNPACK)) cannot run this "
                       "model: Given shapes, [3] and [4], are not broadcastable"),
    ("bool", [], "input 'x' has dtype bool: only float and integer inputs can be checked"),
    ("dynamic", [], "input 'x' has a dynamic shape [-1, 4]: give it a fixed shape"),
    ("mul_add", ["--inputs", "wrong_shape.npz"],
     "wrong_shape.npz: input 'x' must have shape [3, 37] (or [N, 3, 37]), the file has [3, 36]"),
    ("mul_add", ["--inputs", "wrong_dtype.npz"],
     "wrong_dtype.npz: input 'x' must be float32, the file has float64"),
])
def test_what_check_cannot_compare_exits_2_with_one_line(models, model, extra, message):
    result = cli(models, "check", f"{model}.tflite", "--seconds", "1", *extra)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [f"fusion-delegate: error: {message}"] or \
        (len(errors) == 1 and message in errors[0]), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_diff_refuses_inputs_that_do_not_fit_with_exit_2(models):
    result = cli(models, "diff", "mul_add.tflite", "--inputs", "wrong_dtype.npz")
    assert result.returncode == 2 and "must be float32" in result.stderr
    assert "Traceback" not in result.stderr


# --- the testing API ---------------------------------------------------------------------------
def test_distance_counts_a_zero_of_the_other_sign_and_a_lone_nan():
    want = np.array([0.0, -0.0, 1.0, np.nan, np.nan, np.inf], np.float32)
    got = np.array([-0.0, -0.0, np.nextafter(np.float32(1), np.float32(2)), np.nan, 1.0,
                    -np.inf], np.float32)
    assert distance(got, want).tolist() == [1, 0, 1, 0, np.inf, np.inf]
    assert beyond(got, want, np.zeros(6)).tolist() == [True, False, True, False, True, True]
    codes = np.array([5, -128], np.int8)
    assert distance(codes, np.array([4, -128], np.int8)).tolist() == [1, 0]


@settings(max_examples=15, deadline=None)
@given(inputs=tensor_inputs(mul_add_model()))
def test_assert_equivalent_passes_on_correct_kernels(inputs):
    assert [a.shape for a in inputs] == [(3, 37), (3, 37)]
    comparison = assert_equivalent(mul_add_model(), inputs,
                                   options={"cache_dir": "", "min_speedup": 0.0})
    assert comparison.ok and all(v.bound == 0 for v in comparison.verdicts)


def test_assert_equivalent_reports_inputs_that_do_not_fit():
    with pytest.raises(ValueError, match=r"input 'x' must be float32\[3, 37\], got float64"):
        assert_equivalent(mul_add_model(), [np.zeros((3, 37)), np.zeros((3, 37), np.float32)],
                          options={"cache_dir": "", "min_speedup": 0.0})


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_float_strategy_mixes_in_edge_values():
    strategy = tensor_inputs(mul_add_model())
    seen = np.concatenate([a.reshape(-1) for _ in range(60) for a in strategy.example()])
    assert np.isnan(seen).any() and np.isinf(seen).any()
    assert (np.signbit(seen) & (seen == 0)).any()
    assert set(EDGE_VALUES[np.isfinite(EDGE_VALUES)].tolist()) & set(seen.tolist())


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_int8_strategy_from_an_interpreter_reaches_every_code():
    interpreter = builtin_interpreter(build_quantized_demo_model())
    [detail] = interpreter.get_input_details()
    strategy = tensor_inputs(interpreter)
    seen = set()
    for _ in range(20):
        [array] = strategy.example()
        assert array.shape == tuple(detail["shape"]) and array.dtype == np.int8
        seen |= set(np.unique(array).tolist())
    assert seen == set(range(-128, 128))


# --- the README's example ----------------------------------------------------------------------
def test_readme_pytest_example_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- pytest-example:begin -->\n```python\n(.*?)```\n"
                      r"<!-- pytest-example:end -->", readme, re.S)
    assert block, "README.md lost its pytest example"
    (tmp_path / "model.tflite").write_bytes(build_quantized_demo_model())
    (tmp_path / "test_model.py").write_text(block.group(1))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_model.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
