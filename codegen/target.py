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
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """What generated code may use: the CPU name and the explicit ISA features numba gives LLVM."""
    cpu: str
    features: frozenset[str]
    machine: str = "x86_64"

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
    def vector_bytes(self) -> int:
        """The widest vector register LLVM will use for float arithmetic."""
        if not self.x86:
            return 16
        if "avx512f" in self.features:
            return 64
        return 32 if "avx" in self.features else 16

    @property
    def lanes(self) -> int:
        """float32 elements of one such vector."""
        return self.vector_bytes // 4

    @property
    def vector_registers(self) -> int:
        """Vector registers LLVM may allocate: 32 with AVX-512 (and on AArch64), else 16."""
        return 32 if not self.x86 or "avx512f" in self.features else 16

    @property
    def fingerprint(self) -> str:
        """What a compiled kernel depends on, for cache keys."""
        return f"{self.machine}-{self.cpu}-{'+'.join(sorted(self.features))}"


def parse_features(text: str) -> frozenset[str]:
    """The enabled features of an LLVM feature string (`+avx2,-avx512f,...`)."""
    return frozenset(item[1:] for item in text.split(",") if item.startswith("+"))


@functools.cache
def numba_target() -> Target:
    """The target numba's CPU code generator compiles for in this process."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    return Target(cpu=codegen._get_host_cpu_name(),
                  features=parse_features(codegen._get_host_cpu_features()),
                  machine=platform.machine().lower())
