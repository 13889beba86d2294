"""The compile cache: in memory across kernel objects, on disk across processes, never trusted
blindly."""
import json
import subprocess
import sys

import numpy as np
import pytest

from codegen.compile import KernelCache, cache_key
from conftest import ROOT, builtin_interpreter, run
from fusion_delegate import FusionDelegate
from fusion_delegate.model import ModelBuilder

NONE = {"fused_activation_function": 0}

SCRIPT = """
import json, sys
import numpy as np
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import builtin_interpreter, run
from fusion_delegate import FusionDelegate
delegate = FusionDelegate(cache_dir={cache!r}, min_speedup=0.0, num_threads=0)
interpreter = builtin_interpreter(open({model!r}, "rb").read(), [delegate],
                                  num_threads={threads})
x = np.arange(np.prod({shape}), dtype=np.float32).reshape({shape}) / 7
out = run(interpreter, [x])[0]
print(json.dumps({{"hits": [k.kernel.cache_hit for k in delegate.kernels.values()],
                  "parallel": ["prange" in k.kernel.source for k in delegate.kernels.values()],
                  "out": out.ravel()[::97].tolist()}}))
"""


def model_bytes(shape=(4, 6)) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape)
    h = b.op("MUL", [x, b.const("k", np.array(1.5, np.float32))], NONE)
    b.output(b.op("TANH", [b.op("ADD", [h, x], NONE)]))
    return b.to_bytes()


def in_new_process(tmp_path, cache, shape=(4, 6), threads=1) -> dict:
    model = tmp_path / "m.tflite"
    model.write_bytes(model_bytes(shape))
    script = SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), cache=str(cache),
                           model=str(model), shape=shape, threads=threads)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shape, threads", [((4, 6), 1), ((4, 1 << 15), 2)])
def test_second_process_initialises_without_compiling(tmp_path, shape, threads):
    cache = tmp_path / "cache"
    first = in_new_process(tmp_path, cache, shape, threads)
    second = in_new_process(tmp_path, cache, shape, threads)
    assert first["hits"] == [""]
    assert second["hits"] == ["disk"]
    assert first["parallel"] == second["parallel"] == [threads > 1]
    assert first["out"] == second["out"]


@pytest.mark.parametrize("damage", ["garble_source", "truncate_numba_index",
                                    "garble_numba_data"])
def test_corrupt_cache_entry_is_a_miss_and_is_rebuilt(tmp_path, damage):
    cache = tmp_path / "cache"
    expected = in_new_process(tmp_path, cache)["out"]
    if damage == "garble_source":
        [source] = cache.glob("*.py")
        source.write_text(source.read_text().replace("def ", "def broken syntax "))
    else:
        suffix = ".nbi" if "index" in damage else ".nbc"
        files = list((cache / "__pycache__").glob(f"*{suffix}"))
        assert files
        for path in files:
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2] if "truncate" in damage
                             else bytes(b ^ 0x5A for b in data))
    again = in_new_process(tmp_path, cache)
    assert again["hits"] == [""]
    assert again["out"] == expected


def test_kernels_outlive_kernel_objects_in_memory(tmp_path, rng):
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0)
    for _ in range(2):
        interpreter = builtin_interpreter(model_bytes(), [delegate])
        run(interpreter, [rng.standard_normal((4, 6)).astype(np.float32)])
    assert delegate.kernels[0].kernel.cache_hit == "memory"


def test_disk_cache_can_be_turned_off(tmp_path, rng, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    delegate = FusionDelegate(cache_dir="", min_speedup=0.0)
    run(builtin_interpreter(model_bytes(), [delegate]),
        [rng.standard_normal((4, 6)).astype(np.float32)])
    path = delegate.kernels[0].kernel.path
    assert str(tmp_path) not in str(path) and delegate.cache.directory is None


def test_cache_key_covers_source_versions_and_cpu():
    assert cache_key("a") != cache_key("b")
    assert len(cache_key("a")) == 20


def test_unwritable_cache_directory_gives_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = KernelCache(blocker / "cache")
    with pytest.raises(OSError):
        cache.get("k", "x = 1\n")


def test_kernels_compiled_in_one_process_keep_short_block_labels():
    """numba's block-label counter doubles with each nested inlining; kept across kernels, a
    few hundred compiles into a process LLVM refuses the names ("name is too long")."""
    from numba.core import ir_utils

    from codegen.ir import KernelIR, Op, Value
    from codegen.render import TensorTableLayout
    from conftest import kernel_source
    layout = TensorTableLayout(context_tensors_offset=16, tensor_size=112, tensor_data_offset=8)
    cache, digits = KernelCache(None), []
    for n in range(4):
        shape = (n + 3,)
        ir = KernelIR(0, tuple(Value(t, f"t{t}", shape) for t in range(4)),
                      (Op(0, "SIN", (0,), 1), Op(1, "MUL", (1, 0), 2, (("activation", 0),)),
                       Op(2, "EXP", (2,), 3)), inputs=(0,), outputs=(3,))
        cache.get(ir.name, kernel_source(ir, layout))
        digits.append(len(str(ir_utils._the_max_label._value)))
    assert digits[-1] <= digits[0] + 1, digits


def test_kernels_compile_interleaved_and_other_numba_code_does_not():
    """LLVM's small-loop cost is raised only while a kernel compiles: a chain of ops compiled
    inside has more multiplies (interleaved vectors), and numba code compiled after it as
    many as before it."""
    import numba

    from codegen.compile import _interleaving
    from codegen.scalar import hard_swish

    def chain(x, out):
        for i in range(x.size):
            out[i] = hard_swish(hard_swish(hard_swish(x[i])))

    def multiplies() -> int:
        compiled = numba.njit("void(float32[::1], float32[::1])")(chain)
        lines = next(iter(compiled.inspect_asm().values())).splitlines()
        return sum(line.split()[0] in ("mulps", "vmulps") for line in lines if line.strip())

    before = multiplies()
    with _interleaving():
        inside = multiplies()
    assert inside > before
    assert multiplies() == before
