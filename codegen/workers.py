"""Compile kernels in this process and in workers beside it: numba compiles one at a time.

Each worker is a fresh interpreter (`python -m codegen.workers CLAIMS FILE...`, never
multiprocessing, which would import the user's main module again) that imports the kernel
modules it is given: their decorators compile them into numba's cache beside the files. The
caller compiles too, from the other end of the list, while the workers start (about a second
each): whoever creates a module's claim file first (in the CLAIMS directory) compiles it. The
caller then loads them from disk. Anything that goes wrong here (no worker starts, one dies or
hangs) only means the caller compiles those kernels itself, as it would have without workers.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .compile import KernelCache, _import

log = logging.getLogger("fusion_delegate.compile")

#: Fewer kernels than this compile in the caller alone: a worker takes about a second to start.
MIN_KERNELS = 3
TIMEOUT_SECONDS = 900
#: Names how many processes compile at once, the caller included (1: the caller alone), where
#: the cores this process may use are not all for compiling (pytest-xdist's workers, a CPU quota).
WORKERS_ENV = "FUSION_DELEGATE_COMPILE_WORKERS"


def default_workers() -> int:
    """The processes that compile at once: `WORKERS_ENV` if it is a positive number, else one
    per core this process may run on."""
    try:
        return max(1, int(os.environ[WORKERS_ENV]))
    except (KeyError, ValueError):
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)


def compile_ahead(cache: KernelCache, kernels: list[tuple[str, str]],
                  workers: int | None = None) -> int:
    """Compile the (name, source) kernels `cache` lacks in this process and up to `workers`
    - 1 others (default: `default_workers()`), if there are MIN_KERNELS of them, and return how
    many it lacked."""
    paths = cache.uncompiled(kernels)
    workers = min(workers or default_workers(), len(paths))
    if len(paths) < MIN_KERNELS or workers < 2:
        return len(paths)
    start = time.perf_counter()
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    claims = tempfile.mkdtemp(prefix="fusion_delegate_claims_")
    processes: list[subprocess.Popen] = []
    try:
        for _ in range(workers - 1):
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "codegen.workers", claims, *map(str, paths)], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        compile_claimed(claims, paths[::-1])
        for process in processes:
            process.wait(timeout=max(1.0, TIMEOUT_SECONDS - (time.perf_counter() - start)))
    except (OSError, subprocess.SubprocessError) as error:
        log.info("compile workers: %s; the rest compiles in this process", error)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(claims, ignore_errors=True)
    log.info("%d kernels compiled in %.1f s, here and in %d worker process%s", len(paths),
             time.perf_counter() - start, workers - 1, "es" if workers > 2 else "")
    return len(paths)


def compile_claimed(claims: str, paths: list[Path]) -> int:
    """Compile, in order, the kernel modules no other process has claimed in `claims`; the
    number that failed (their error is reported where the kernel is loaded)."""
    failed = 0
    for path in paths:
        try:
            os.close(os.open(os.path.join(claims, path.name), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        except OSError:
            return failed           # the claims are gone: the caller is done with them
        try:
            _import(path)
        except Exception:  # noqa: BLE001 - the caller compiles it again and reports the error
            failed += 1
    return failed


if __name__ == "__main__":
    sys.exit(1 if compile_claimed(sys.argv[1], [Path(p) for p in sys.argv[2:]]) else 0)
