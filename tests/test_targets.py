"""Kernels compiled for another CPU than the host (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES): code
generation follows numba's target, so nothing the target lacks reaches LLVM (which would end
the process), and the results are LiteRT's."""
import json
import subprocess
import sys

import pytest

from codegen.target import (Target, host_vector_bytes, implied_vector_bytes, numba_target,
                            parse_features)
from conftest import HOST, ROOT

# Feature lists as a deployment would pin them: AVX2 without AVX-512, AVX-512 without VBMI.
AVX2 = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe"
AVX512 = AVX2 + ",+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
TARGETS = {
    "generic": {"NUMBA_CPU_NAME": "generic"},
    "haswell": {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": AVX2},
    # A CPU name alone: LLVM takes the features it implies, which llvmlite does not list.
    "haswell-named": {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ""},
    "skylake-avx512": {"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": AVX512},
    "host": {},
}

SCRIPT = """
import json, sys
import numpy as np
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import builtin_interpreter, run
from codegen.target import numba_target, vector_shortfall
from fusion_delegate import FusionDelegate
from fusion_delegate.demo import build_demo_model, build_quantized_demo_model

rng = np.random.default_rng(0)
report = {{"byte_shuffle": numba_target().byte_shuffle,
          "vector_bytes": numba_target().vector_bytes, "shortfall": vector_shortfall(),
          "models": []}}
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
    if name != "host":
        assert not report["byte_shuffle"]
    # What LLVM's vectoriser makes of a float32 loop there (256 bits: skylake-avx512 prefers it).
    assert report["vector_bytes"] == {"generic": 16, "host": HOST.vector_bytes}.get(name, 32)
    assert report["shortfall"] == max(1.0, host_vector_bytes() / report["vector_bytes"])
    int8, float32 = report["models"]
    assert int8["kernels"] >= 1 and float32["kernels"] >= 1
    assert int8["exact"], "int8 kernels are bit-exact on every target"
    assert float32["close"]


def test_an_instruction_counts_only_where_the_feature_string_names_it():
    named_only = Target(cpu="icelake-server", features=frozenset())
    assert not named_only.byte_shuffle
    vbmi = Target(cpu="haswell", features=parse_features("+avx2,+avx512f,+avx512bw,+avx512vbmi"))
    assert vbmi.byte_shuffle and vbmi.vector_registers == 32
    assert parse_features(AVX2) >= {"avx2", "fma"} and "avx512f" not in parse_features(AVX2)
    assert implied_vector_bytes(parse_features(AVX2)) == 32
    assert implied_vector_bytes(frozenset()) == 16


def test_the_cache_key_follows_numbas_target():
    from codegen.compile import cpu_fingerprint
    assert cpu_fingerprint() == numba_target().fingerprint
    assert numba_target().cpu in cpu_fingerprint()
