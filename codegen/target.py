"""The CPU kernels are compiled for: numba's configured target, never the host behind its back.

numba compiles for `NUMBA_CPU_NAME` / `NUMBA_CPU_FEATURES` when they are set (a portable cache
is built with `generic`), else for the host. Code that picks instructions (the byte-shuffle
lookup) or vector shapes must ask this target: an AVX-512 intrinsic handed to LLVM for a target
without AVX-512 ends the process with "LLVM ERROR", which no Python handler can catch.

An ISA feature counts only where the feature string numba gives LLVM names it (`+avx512vbmi`):
LLVM honours an explicit feature whatever the CPU name, while what a bare CPU name implies is
not visible from llvmlite, so a CPU name alone enables nothing (at worst a slower loop).
"""
from __future__ import annotations

import functools
import platform
import re
from dataclasses import dataclass

from .kept import kept


@dataclass(frozen=True)
class Target:
    """What generated code may use: the CPU name and the explicit ISA features numba gives LLVM,
    and the widest vectors LLVM's loop vectoriser makes of float32 loops for them."""
    cpu: str
    features: frozenset[str]
    machine: str = "x86_64"
    vector_bytes: int = 16

    @property
    def x86(self) -> bool:
        return self.machine in ("x86_64", "amd64")

    @property
    def byte_shuffle(self) -> bool:
        """VPERMI2B on 512-bit vectors (AVX-512 VBMI): 64 table lookups an instruction pair."""
        return self.x86 and {"avx512vbmi", "avx512bw"} <= self.features

    @property
    def streaming_stores(self) -> bool:
        """Non-temporal stores (`movnt`, SSE2): every x86-64 CPU has them."""
        return self.x86

    @property
    def lanes(self) -> int:
        """float32 elements of one such vector."""
        return self.vector_bytes // 4

    @property
    def vector_registers(self) -> int:
        """Vector registers LLVM may allocate: 32 with AVX-512 (and on AArch64), else 16."""
        return 32 if not self.x86 or "avx512f" in self.features else 16

    @functools.cached_property
    def fingerprint(self) -> str:
        """What a compiled kernel depends on, for cache keys."""
        return f"{self.machine}-{self.cpu}-{'+'.join(sorted(self.features))}"


def parse_features(text: str) -> frozenset[str]:
    """The enabled features of an LLVM feature string (`+avx2,-avx512f,...`)."""
    return frozenset(item[1:] for item in text.split(",") if item.startswith("+"))


def implied_vector_bytes(features: frozenset[str], machine: str = "x86_64") -> int:
    """The vector width the explicit features alone guarantee: what a target is taken to have
    where LLVM cannot be asked."""
    if machine not in ("x86_64", "amd64"):
        return 16
    if "avx512f" in features:
        return 64
    return 32 if "avx" in features else 16


@functools.cache
def numba_target() -> Target:
    """The target numba's CPU code generator compiles for in this process."""
    from numba.core.registry import cpu_target

    import llvmlite

    codegen = cpu_target.target_context.codegen()
    cpu, feature_text = codegen._get_host_cpu_name(), codegen._get_host_cpu_features()
    features, machine = parse_features(feature_text), platform.machine().lower()

    def probe() -> int:
        try:
            return vectorised_bytes(codegen)
        except Exception:  # noqa: BLE001 - an llvmlite that cannot take the probe: the features
            return implied_vector_bytes(features, machine)
    # The probe compiles a loop (20 ms, a third of a warm start): kept beside the kernels.
    width = kept("vector_width", (machine, cpu, feature_text, llvmlite.__version__), int, probe)
    return Target(cpu=cpu, features=features, machine=machine, vector_bytes=width)


@functools.cache
def host_vector_bytes() -> int:
    """This CPU's vector width, which XNNPACK uses (it picks its kernels at run time)."""
    import llvmlite.binding as llvm

    return implied_vector_bytes(parse_features(llvm.get_host_cpu_features().flatten()),
                                platform.machine().lower())


def vector_shortfall() -> float:
    """How many times narrower than this CPU's the vectors kernels are compiled for (1 at
    least): a portable target (`generic`, `haswell`) run on an AVX-512 CPU computes at half
    the width or less, where XNNPACK uses the whole."""
    return max(1.0, host_vector_bytes() / numba_target().vector_bytes)


#: A float32 loop for LLVM's loop vectoriser: the registers it makes of it say the vector width
#: numba's target gets, including what a CPU name implies without a feature string
#: (`NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""` gives AVX2) and the width LLVM prefers on
#: some AVX-512 CPUs (256 bits on skylake-avx512).
_PROBE = """
define void @vector_probe(ptr noalias nocapture %out, ptr noalias nocapture readonly %x, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %from = getelementptr inbounds float, ptr %x, i64 %i
  %value = load float, ptr %from, align 4
  %square = fmul float %value, %value
  %to = getelementptr inbounds float, ptr %out, i64 %i
  store float %square, ptr %to, align 4
  %next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


def vectorised_bytes(codegen) -> int:
    """The widest float vector of the probe loop as numba's codegen optimises it (its IR: the
    registers of the assembly, which takes as long again to emit, are as wide)."""
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock

    library = codegen.create_library("vector_probe")
    library.add_llvm_module(llvm.parse_assembly(_PROBE))
    with global_compiler_lock:
        library.finalize()
    lanes = [int(n) for n in re.findall(r"<(\d+) x float>", library.get_llvm_str())]
    return max(16, 4 * max(lanes, default=4))
