"""The compile cache: in memory across kernel objects, on disk across processes, never trusted
blindly."""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen import machine_code
from codegen.compile import CompileError, KernelCache, cache_key
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
print(json.dumps({{"modules_imported": [m for m in sys.modules
                                         if m.startswith("fusion_delegate_kernels.")],
                  "hits": [k.kernel.cache_hit for k in delegate.kernels.values()],
                  "parallel": ["_part(arguments, part)" in k.kernel.source for k in delegate.kernels.values()],
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
    """numba's entries damaged (the kept machine code gone, so that they are what loads)."""
    cache = tmp_path / "cache"
    expected = in_new_process(tmp_path, cache)["out"]
    [kept] = cache.glob("*.native")
    kept.unlink()
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


@pytest.mark.parametrize("damage", ["truncate", "garble", "other_python", "missing_symbol",
                                    "wrong_entry_name"])
def test_damaged_machine_code_loads_the_kernel_through_numba(tmp_path, damage):
    """Kept machine code (codegen.machine_code) that is damaged, for another Python, needs a
    symbol this process lacks or names no function: never linked (an unresolved symbol would
    end the process), the kernel loads from numba's cache instead, same results."""
    cache = tmp_path / "cache"
    expected = in_new_process(tmp_path, cache)["out"]
    [kept] = cache.glob("*.native")
    data = kept.read_bytes()
    if damage in ("truncate", "garble"):
        data = data[: len(data) // 2] if damage == "truncate" else bytes(b ^ 0x5A for b in data)
    else:
        record = pickle.loads(data)
        symbol, code, outside = record["functions"]["invoke"]
        if damage == "other_python":
            record["python"] = "cpython-27"
        elif damage == "missing_symbol":
            outside = [*outside, "fusion_delegate_no_such_symbol"]
        else:
            symbol = symbol + "_none"
        record["functions"]["invoke"] = (symbol, code, outside)
        data = pickle.dumps(record)
    kept.write_bytes(data)
    assert machine_code.link(data) is None
    again = in_new_process(tmp_path, cache)
    assert again["hits"] == ["disk"]
    assert again["out"] == expected


def test_kept_machine_code_runs_without_importing_the_kernel_module(tmp_path):
    """A warm start links the kept objects: the kernel's module is not imported (numba's
    loader not run) until its loop is asked for."""
    cache = tmp_path / "cache"
    first = in_new_process(tmp_path, cache)
    second = in_new_process(tmp_path, cache)
    assert second["hits"] == ["disk"] and second["out"] == first["out"]
    assert second["modules_imported"] == []


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


SOURCE = "x = 1\n\nfrom numba import njit\n\n@njit\ndef k(a):\n    return a\n" \
         "\nk_invoke = type('E', (), {'address': 0, 'cache_hits': {}})\n"


def test_a_cache_dir_that_is_a_file_compiles_privately_and_says_so(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = KernelCache(blocker)
    kernel = cache.get("k", SOURCE)
    assert blocker.parent not in kernel.path.parents and blocker.read_text() == "not a directory"
    assert "not used (not a directory)" in caplog.text


def test_a_new_cache_dir_is_private(tmp_path):
    KernelCache(tmp_path / "a" / "cache").get("k", SOURCE)
    assert (tmp_path / "a" / "cache").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("how", ["group_writable", "other_owner", "group_writable_pycache"])
def test_a_cache_dir_others_can_write_is_never_loaded_from(tmp_path, caplog, how):
    """numba's cache entries are pickles: whoever can write them runs code in every process
    that loads them."""
    directory = tmp_path / "cache"
    KernelCache(directory).get("k", SOURCE)
    if how == "group_writable":
        directory.chmod(0o775)
    elif how == "group_writable_pycache":
        (directory / "__pycache__").mkdir(exist_ok=True)
        (directory / "__pycache__").chmod(0o777)
    else:
        if os.getuid() != 0:
            pytest.skip("changing a directory's owner needs root")
        os.chown(directory, 65534, -1)
    kernel = KernelCache(directory).get("k", SOURCE)
    assert directory not in kernel.path.parents
    assert "not used (" in caplog.text and ("writable by group" in caplog.text
                                            or "owned by uid 65534" in caplog.text)


def test_a_cache_entry_others_can_write_is_compiled_again(tmp_path):
    directory = tmp_path / "cache"
    first = KernelCache(directory).get("k", SOURCE)
    first.path.chmod(0o666)
    again = KernelCache(directory).get("k", SOURCE)
    assert again.path == first.path and again.path.stat().st_mode & 0o022 == 0


def test_kernels_compiled_in_one_process_keep_short_block_labels():
    """numba's block-label counter doubles with each nested inlining; kept across kernels, a
    few hundred compiles into a process LLVM refuses the names ("name is too long")."""
    from numba.core import ir_utils

    from codegen.ir import KernelIR, Op, Value
    from conftest import kernel_source
    from fusion_delegate.fusion import LAYOUT
    cache, digits = KernelCache(None), []
    for n in range(4):
        shape = (n + 3,)
        ir = KernelIR(tuple(Value(t, shape) for t in range(4)),
                      (Op(0, "SIN", (0,), 1), Op(1, "MUL", (1, 0), 2, (("activation", 0),)),
                       Op(2, "EXP", (2,), 3)), inputs=(0,), outputs=(3,))
        cache.get(ir.name, kernel_source(ir, LAYOUT))
        digits.append(len(str(ir_utils._the_max_label._value)))
    assert digits[-1] <= digits[0] + 1, digits


def test_a_kernels_table_is_kept_and_read_back_without_loading_the_kernel(tmp_path, monkeypatch):
    """An island's table (codegen.islands) is kept beside its kernel: a new process reads it
    and loads no kernel; a damaged file or one others could have written is computed again."""
    from codegen.ir import KernelIR, Op, Value
    from codegen.kernel_data import KernelData
    from conftest import kernel_source
    from fusion_delegate.fusion import LAYOUT
    ir = KernelIR((Value(0, (256,)), Value(1, (256,))), (Op(0, "TANH", (0,), 1),),
                  inputs=(0,), outputs=(1,))
    source = kernel_source(ir, LAYOUT)
    no_data = KernelData((), b"")
    codes = np.linspace(-4, 4, 256, dtype=np.float32)
    first = np.empty(256, np.float32)
    KernelCache(tmp_path).run_kept(ir.name, source, no_data, codes, first)
    assert np.allclose(first, np.tanh(codes), rtol=1e-6, atol=0)
    (kept,) = tmp_path.glob("*.npy")

    def no_kernel(self, name, source):
        raise AssertionError("the kept table should have been read")
    again = np.empty(256, np.float32)
    with monkeypatch.context() as patch:
        patch.setattr(KernelCache, "get", no_kernel)
        KernelCache(tmp_path).run_kept(ir.name, source, no_data, codes, again)
    assert again.tobytes() == first.tobytes()

    for damage in ("truncate", "others can write"):
        if damage == "truncate":
            kept.write_bytes(kept.read_bytes()[:40])
        else:
            np.save(kept, np.zeros(256, np.float32))
            kept.chmod(0o666)
        recomputed = np.empty(256, np.float32)
        KernelCache(tmp_path).run_kept(ir.name, source, no_data, codes, recomputed)
        assert recomputed.tobytes() == first.tobytes(), damage


def test_a_build_is_kept_and_read_back_in_a_new_process_without_lowering(tmp_path,
                                                                          monkeypatch):
    """A partition's build (codegen.pipeline: lowering, tables, schedule, source) is kept
    beside the kernels: a process without it in memory reads it back, lowers nothing and gets
    the same source; a damaged file, or one others could have written, is built again, and
    with KEEP_BUILDS off none is kept."""
    import codegen.pipeline as pipeline
    from codegen.ir import KernelIR, Op, Value
    from fusion_delegate.fusion import LAYOUT
    ir = KernelIR((Value(0, (64,)), Value(1, (64,)), Value(2, (64,))),
                  (Op(0, "TANH", (0,), 1), Op(1, "NEG", (1,), 2)), inputs=(0,), outputs=(2,))
    monkeypatch.setattr(pipeline, "_BUILT", {})
    first = pipeline.build(ir, LAYOUT, cache=KernelCache(tmp_path))
    (kept,) = tmp_path.glob("build_*.pickle")

    def no_lowering(ir):
        raise AssertionError("the kept build should have been read")
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_BUILT", {})                  # as in a new process
        patch.setattr(pipeline, "lowered", no_lowering)
        assert pipeline.island_kernels(ir, LAYOUT, cache=KernelCache(tmp_path)) == []
        again = pipeline.build(ir, LAYOUT, cache=KernelCache(tmp_path))
    assert again == first

    for damage in ("truncate", "others can write"):
        if damage == "truncate":
            kept.write_bytes(kept.read_bytes()[:40])
        else:
            kept.chmod(0o666)
        monkeypatch.setattr(pipeline, "_BUILT", {})
        lowered, lower = [], pipeline.lowered
        with monkeypatch.context() as patch:
            patch.setattr(pipeline, "lowered", lambda ir: lowered.append(ir) or lower(ir))
            rebuilt = pipeline.build(ir, LAYOUT, cache=KernelCache(tmp_path))
        assert lowered and rebuilt.source == first.source, damage

    monkeypatch.setattr(pipeline, "KEEP_BUILDS", False)       # as tests that change an op do
    monkeypatch.setattr(pipeline, "_BUILT", {})
    pipeline.build(ir, LAYOUT, cache=KernelCache(tmp_path / "off"))
    assert not list((tmp_path / "off").glob("build_*"))


def test_an_int8_table_is_kept_and_read_back_in_a_new_process(tmp_path, monkeypatch):
    """unary_lookup's tables are kept beside the kernels of the cache codegen.kept names:
    a process without them in memory reads them back instead of computing them, equal to the
    computed ones; other arguments are another file; a damaged file, or one others could
    have written, is computed again."""
    import codegen.kept
    import codegen.quant_reference as reference
    from codegen.qparams import QParams
    x, y = QParams(0.05, 3), QParams(1 / 256, -128)
    monkeypatch.setattr(codegen.kept, "_CACHE", None)
    computed = reference._lookup("LOGISTIC", x, y, {})
    codegen.kept.keep_in(KernelCache(tmp_path))
    reference._kept_lookup.cache_clear()
    first = reference.unary_lookup("LOGISTIC", x, y)
    (kept,) = tmp_path.glob("lookup_*.pickle")
    assert np.array_equal(first.table, computed.table)

    def not_again(*args):
        raise AssertionError("the kept table should have been read")
    with monkeypatch.context() as patch:
        patch.setattr(reference, "_lookup", not_again)
        reference._kept_lookup.cache_clear()                      # as in a new process
        again = reference.unary_lookup("LOGISTIC", x, y)
    assert again.table.tobytes() == computed.table.tobytes() and not again.table.flags.writeable
    reference._kept_lookup.cache_clear()
    reference.unary_lookup("LOGISTIC", QParams(0.05, 4), y)
    assert len(list(tmp_path.glob("lookup_*.pickle"))) == 2

    for damage in ("truncate", "others can write"):
        if damage == "truncate":
            kept.write_bytes(kept.read_bytes()[:40])
        else:
            kept.chmod(0o666)
        made, lookup = [], reference._lookup
        with monkeypatch.context() as patch:
            patch.setattr(reference, "_lookup", lambda *a: made.append(a) or lookup(*a))
            reference._kept_lookup.cache_clear()
            recomputed = reference.unary_lookup("LOGISTIC", x, y)
        assert made and recomputed.table.tobytes() == computed.table.tobytes(), damage
    reference._kept_lookup.cache_clear()


def test_the_target_probe_is_kept_beside_the_kernels(tmp_path, monkeypatch):
    """The vector width LLVM gives numba's target is probed by compiling a loop (20 ms of a
    warm start) once: a new process reads it from the cache directory."""
    import codegen.kept
    import codegen.target as target
    monkeypatch.setattr(codegen.kept, "_CACHE", None)
    codegen.kept.keep_in(KernelCache(tmp_path))
    probes, probe = [], target.vectorised_bytes
    monkeypatch.setattr(target, "vectorised_bytes", lambda cg: probes.append(1) or probe(cg))
    try:
        target.numba_target.cache_clear()
        first = target.numba_target()
        target.numba_target.cache_clear()                         # as in a new process
        again = target.numba_target()
    finally:
        target.numba_target.cache_clear()
    assert probes == [1] and again == first
    assert len(list(tmp_path.glob("vector_width_*.pickle"))) == 1


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


def test_kernels_compile_with_shallow_scope_copies_and_numba_is_left_as_found(rng):
    """While a kernel compiles, a copy of a numba scope shares its variables (the inliner's
    per-block copies are then linear, not quadratic) but not its maps: the copy's new
    variables are not the original's. Inlined code computes the same, asm and values, and
    numba's Scope has its own deepcopy again afterwards."""
    import copy

    import numba
    from numba.core import ir

    from codegen.compile import _scopes_copied_shallow
    from codegen.scalar import hard_swish

    def chain(x, out):
        for i in range(x.size):
            out[i] = hard_swish(hard_swish(x[i]) * x[i])

    def compiled():
        kernel = numba.njit("void(float32[::1], float32[::1])")(chain)
        return kernel, next(iter(kernel.inspect_asm().values()))

    x = (rng.standard_normal(1000) * 4).astype(np.float32)
    plain, plain_asm = compiled()
    scope = ir.Scope(None, ir.Loc("f.py", 1))
    variable = scope.define("v", ir.Loc("f.py", 2))
    with _scopes_copied_shallow():
        shallow, shallow_asm = compiled()
        copied = copy.deepcopy(scope)
        copied.redefine("v", ir.Loc("f.py", 3))
    assert copied is not scope and copied.localvars.get("v") is variable
    assert scope.get("v") is variable and "v.1" not in scope.localvars._con
    assert "__deepcopy__" not in vars(ir.Scope)
    assert shallow_asm.count("\n") == plain_asm.count("\n")
    outputs = [np.empty_like(x), np.empty_like(x)]
    plain(x, outputs[0])
    shallow(x, outputs[1])
    assert outputs[0].tobytes() == outputs[1].tobytes()


def test_kernels_load_without_numba_llvm_lock_events_and_numba_is_left_as_found():
    """numba's start and end events on every LLVM call (7-12% of a warm start) are off
    while a kernel module is imported, and back, the same callbacks, afterwards."""
    from llvmlite import binding
    from numba.core import event

    from codegen.compile import _llvm_lock_events_off

    class Starts(event.Listener):
        def __init__(self):
            self.count = 0

        def on_start(self, _):
            self.count += 1

        def on_end(self, _):
            pass

    callbacks = list(binding.ffi.lib._lock._cblist)
    assert callbacks                                   # numba's, registered at its import
    starts = Starts()
    with event.install_listener("numba:llvm_lock", starts):
        with _llvm_lock_events_off():
            binding.get_process_triple()
        inside = starts.count
        binding.get_process_triple()
    assert inside == 0 and starts.count > 0
    assert binding.ffi.lib._lock._cblist == callbacks


SHIPPED = """
import json, sys
sys.path[:0] = [{root!r}]
from fusion_delegate import FusionDelegate
from fusion_delegate.runtime import Interpreter
report = []
for model in {models!r}:
    delegate = FusionDelegate(cache_dir={cache!r}, min_speedup=0.0)
    Interpreter(model_path=model, experimental_delegates=[delegate]).allocate_tensors()
    report += [(k.kernel.cache_hit, str(k.kernel.path)) for k in delegate.kernels.values()]
print(json.dumps(report))
"""


def test_a_shipped_read_only_cache_is_loaded_from_and_a_missing_kernel_compiles_elsewhere(
        tmp_path):
    """`fusion-delegate compile` into a directory, then a process that finds it on a read-only
    file system (a container image): the kernels it holds load from it, one it lacks compiles
    in a private directory."""
    from fusion_delegate.demo import build_demo_model, build_quantized_demo_model
    shipped, readonly = tmp_path / "shipped", tmp_path / "readonly"
    int8, float32 = tmp_path / "int8.tflite", tmp_path / "float32.tflite"
    int8.write_bytes(build_quantized_demo_model(size=16))
    float32.write_bytes(build_demo_model(tokens=8, width=32))
    done = subprocess.run([sys.executable, "-m", "fusion_delegate", "compile", str(int8),
                           "--option", f"cache_dir={shipped}", "--option", "min_speedup=0"],
                          cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    readonly.mkdir()
    script = SHIPPED.format(root=str(ROOT), models=[str(int8), str(float32)],
                            cache=str(readonly))
    mount = (f"mount --bind {shipped} {readonly} && mount -o remount,bind,ro {readonly} && "
             f"touch {readonly}/probe 2>/dev/null; test ! -e {shipped}/probe")
    if subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True).returncode:
        pytest.skip("needs a mount namespace (root) to make a read-only file system")
    done = subprocess.run(["unshare", "-m", "sh", "-c", f'{mount} && "$0" -c "$1"',
                           sys.executable, script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (int8_hit, int8_path), *float32_kernels = json.loads(done.stdout.splitlines()[-1])
    assert int8_hit == "disk" and int8_path.startswith(str(readonly))
    assert float32_kernels and all(hit == "" and not path.startswith(str(readonly))
                                   for hit, path in float32_kernels)


def test_kernels_compile_ahead_in_worker_processes_and_then_load_from_disk(tmp_path):
    """Worker processes compile the kernels a cache lacks into it (numba compiles one kernel
    at a time per process); the caller then only loads them, and no worker outlives the call.
    A kernel a worker cannot compile is compiled, and its error reported, by the caller."""
    from codegen.workers import compile_ahead
    from fusion_delegate.fusion import LAYOUT
    from codegen.ir import KernelIR, Op, Value
    from conftest import kernel_source
    kernels = []
    for n in range(3):
        ir = KernelIR(tuple(Value(t, (n + 5,)) for t in range(3)),
                      (Op(0, "EXP", (0,), 1), Op(1, "MUL", (1, 0), 2, (("activation", 0),))),
                      inputs=(0,), outputs=(2,))
        kernels.append((ir.name, kernel_source(ir, LAYOUT)))
    broken = ("p9_broken", "def p9_broken(:\n")
    cache = KernelCache(tmp_path)
    assert compile_ahead(cache, [*kernels, broken], workers=2) == 4
    assert len(list((tmp_path / "__pycache__").glob("*.nbi"))) == 2 * len(kernels)
    assert [cache.get(*k).cache_hit for k in kernels] == ["", "", ""]
    assert compile_ahead(cache, kernels, workers=2) == 0
    with pytest.raises(CompileError):
        cache.get(*broken)
    assert compile_ahead(KernelCache(tmp_path / "other"), kernels[:2], workers=2) == 2
    assert not children_running("codegen.workers")


def children_running(command: str) -> list[int]:
    """This process's children whose command line names `command` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and command in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_the_compile_workers_are_one_per_core_unless_the_environment_says(monkeypatch):
    from codegen.workers import WORKERS_ENV, default_workers
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert default_workers() == 3
    monkeypatch.setenv(WORKERS_ENV, "0")
    assert default_workers() == 1
    monkeypatch.setenv(WORKERS_ENV, "many")
    assert default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.delenv(WORKERS_ENV)
    assert default_workers() == len(os.sched_getaffinity(0))
