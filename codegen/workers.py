"""Compile kernels in worker processes, one per core: numba compiles under a process-wide lock.

Each worker is a fresh interpreter (`python -m codegen.workers FILE...`, never multiprocessing,
which would import the user's main module again) that imports the kernel modules it is given:
their decorators compile them into numba's cache beside the files. The caller then loads them
from disk. Anything that goes wrong here (no worker starts, one dies or hangs) only means the
caller compiles those kernels itself, as it would have without workers.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from .compile import KernelCache, _import

log = logging.getLogger("fusion_delegate.compile")

#: Fewer kernels than this compile in the caller: a worker takes about a second to start.
MIN_KERNELS = 3
TIMEOUT_SECONDS = 900


def compile_ahead(cache: KernelCache, kernels: list[tuple[str, str]],
                  workers: int | None = None) -> int:
    """Compile the (name, source) kernels `cache` lacks in up to `workers` processes (default:
    one per core), if there are MIN_KERNELS of them, and return how many it lacked."""
    paths = cache.uncompiled(kernels)
    workers = min(workers or os.cpu_count() or 1, len(paths))
    if len(paths) < MIN_KERNELS or workers < 2:
        return len(paths)
    start = time.perf_counter()
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    processes: list[subprocess.Popen] = []
    try:
        for group in (paths[k::workers] for k in range(workers)):
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "codegen.workers", *map(str, group)], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for process in processes:
            process.wait(timeout=max(1.0, TIMEOUT_SECONDS - (time.perf_counter() - start)))
    except (OSError, subprocess.SubprocessError) as error:
        log.info("compile workers: %s; the rest compiles in this process", error)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    log.info("%d kernels compiled in %d worker processes in %.1f s", len(paths), workers,
             time.perf_counter() - start)
    return len(paths)


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        try:
            _import(Path(path))
        except Exception:  # noqa: BLE001 - the caller compiles it again and reports the error
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
