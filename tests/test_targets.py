"""Kernels compiled for another CPU than the host (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES): code
generation follows numba's target, so nothing the target lacks reaches LLVM (which would end
the process), and the results are LiteRT's."""
import json
import subprocess
import sys

import pytest

from codegen.target import Target, numba_target, parse_features
from conftest import ROOT

# Feature lists as a deployment would pin them: AVX2 without AVX-512, AVX-512 without VBMI.
AVX2 = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe"
AVX512 = AVX2 + ",+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
TARGETS = {
    "generic": {"NUMBA_CPU_NAME": "generic"},
    "haswell": {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": AVX2},
    "skylake-avx512": {"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": AVX512},
    "host": {},
}

SCRIPT = """
import json, sys
import numpy as np
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import builtin_interpreter, run
from codegen.target import numba_target
from fusion_delegate import FusionDelegate
from fusion_delegate.demo import build_demo_model, build_quantized_demo_model

rng = np.random.default_rng(0)
report = {{"byte_shuffle": numba_target().byte_shuffle, "models": []}}
for model in (build_quantized_demo_model(size=20), build_demo_model(tokens=16, width=64)):
    delegate = FusionDelegate(cache_dir={cache!r}, min_speedup=0.0)
    fused = builtin_interpreter(model, [delegate])
    reference = builtin_interpreter(model)
    detail = fused.get_input_details()[0]
    if detail["dtype"] == np.int8:
        x = rng.integers(-128, 128, detail["shape"]).astype(np.int8)
    else:
        x = rng.standard_normal(detail["shape"]).astype(np.float32)
    [got], [want] = run(fused, [x]), run(reference, [x])
    report["models"].append({{
        "kernels": len(delegate.kernels), "dtype": str(want.dtype),
        "exact": bool(np.array_equal(got, want)),
        "close": bool(np.allclose(got, want, rtol=2e-6, atol=1e-6))}})
print(json.dumps(report))
"""


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_kernels_compiled_for_another_cpu_run_and_match_litert(tmp_path, name):
    script = SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), cache=str(tmp_path))
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("NUMBA_CPU")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env={**env, **TARGETS[name]})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if name in ("generic", "haswell", "skylake-avx512"):
        assert not report["byte_shuffle"]
    int8, float32 = report["models"]
    assert int8["kernels"] >= 1 and float32["kernels"] >= 1
    assert int8["exact"], "int8 kernels are bit-exact on every target"
    assert float32["close"]


def test_a_feature_counts_only_where_the_feature_string_names_it():
    named_only = Target(cpu="icelake-server", features=frozenset())
    assert not named_only.byte_shuffle and named_only.vector_bytes == 16
    vbmi = Target(cpu="haswell", features=parse_features("+avx2,+avx512f,+avx512bw,+avx512vbmi"))
    assert vbmi.byte_shuffle and vbmi.vector_bytes == 64
    assert parse_features(AVX2) >= {"avx2", "fma"} and "avx512f" not in parse_features(AVX2)
    assert Target("x", parse_features(AVX2)).vector_bytes == 32


def test_the_cache_key_follows_numbas_target():
    from codegen.compile import cpu_fingerprint
    assert cpu_fingerprint() == numba_target().fingerprint
    assert numba_target().cpu in cpu_fingerprint()
