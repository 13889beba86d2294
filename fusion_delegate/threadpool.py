"""The interpreter's own thread pool, where it can be reached and verified.

The interpreter keeps a pthreadpool of `num_threads` threads in its CpuBackendContext
(`CpuBackendContext::GetFromContext(context)->get_xnnpack_threadpool()`, in
tflite/kernels/cpu_backend_context.cc). A fused kernel split into parts runs them there, on
the threads the user gave the interpreter. XNNPACK takes the same pool only in builds with
TFLITE_KERNEL_USE_XNNPACK (tflite/delegates/xnnpack/xnnpack_delegate.cc); ai-edge-litert
2.3.0's wheel is built without it, and XNNPACK runs on a pool of its own beside the
interpreter's (a second worker thread appears; perf/README.md).

None of those functions is exported. Their addresses are read from the library's symbol table
(`.symtab`, local symbols), and nothing is called unless all of it checks out:
- the library is the one whose code the context's own callbacks point into;
- each function's machine code in memory is the bytes its symbol names in the file (a symbol
  table that does not belong to the loaded library fails here);
- the interpreter set its CPU backend context (GetFromContext aborts the process without);
- the pool the interpreter hands out runs as many threads as the interpreter was given.
Anything else: no pool, with the reason (kernels then run on one thread).
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
from dataclasses import dataclass

from . import abi

GET_FROM_CONTEXT = "_ZN6tflite17CpuBackendContext14GetFromContextEP13TfLiteContext"
GET_XNNPACK_THREADPOOL = "_ZN6tflite17CpuBackendContext22get_xnnpack_threadpoolEv"
PARALLELIZE_1D = "pthreadpool_parallelize_1d"
GET_THREADS_COUNT = "pthreadpool_get_threads_count"
FUNCTIONS = (GET_FROM_CONTEXT, GET_XNNPACK_THREADPOOL, PARALLELIZE_1D, GET_THREADS_COUNT)

#: TfLiteExternalContextType kTfLiteCpuBackendContext (tflite/core/c/common.h).
CPU_BACKEND_CONTEXT = 3
_GET_EXTERNAL_CONTEXT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
_POINTER_OF_POINTER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_COUNT_OF_POOL = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)


@dataclass(frozen=True)
class ThreadPool:
    """What a kernel needs to run parts on the pool: `pthreadpool_parallelize_1d` and the
    `pthreadpool_t` (0: the caller runs every part)."""
    parallelize: int
    pool: int
    threads: int


class NoPool(Exception):
    """Why the interpreter's pool cannot be used here."""


def interpreter_pool(context_address: int) -> ThreadPool:
    """The pool of the interpreter owning `context_address` (a TfLiteContext*), verified."""
    context = abi.TfLiteContext.from_address(context_address)
    threads = max(context.recommended_num_threads, 1)
    if not context.GetExternalContext:
        raise NoPool("the context has no GetExternalContext")
    functions = _library_functions(_library_of(context.GetExternalContext))
    # GetFromContext aborts the process where the interpreter set no CPU backend context.
    if not _GET_EXTERNAL_CONTEXT(context.GetExternalContext)(context_address,
                                                             CPU_BACKEND_CONTEXT):
        raise NoPool("the interpreter has no CPU backend context")
    backend = functions[GET_FROM_CONTEXT](context_address)
    if not backend:
        raise NoPool("the interpreter has no CPU backend context")
    pool = functions[GET_XNNPACK_THREADPOOL](backend) or 0
    counted = functions[GET_THREADS_COUNT](pool) if pool else 1
    if counted != threads:
        raise NoPool(f"the interpreter's pool runs {counted} threads, the interpreter "
                     f"{threads}")
    return ThreadPool(ctypes.cast(functions[PARALLELIZE_1D], ctypes.c_void_p).value, pool,
                      threads)


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    path: str


def _mappings() -> list[_Mapping]:
    """The process's file mappings (/proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError as error:
        raise NoPool(f"cannot read the process's mappings: {error}") from error
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found.append(_Mapping(start, end, int(fields[2], 16), fields[5]))
    return found


def _library_of(address: int) -> tuple[str, int]:
    """The shared library whose mapped code holds `address`, and its load address."""
    mappings = _mappings()
    owner = next((m for m in mappings if m.start <= address < m.end), None)
    if owner is None:
        raise NoPool("the interpreter's code is in no mapped file")
    base = next((m.start for m in mappings if m.path == owner.path and m.offset == 0), None)
    if base is None:
        raise NoPool(f"{os.path.basename(owner.path)} has no mapping of its start")
    return owner.path, base


@functools.lru_cache(maxsize=8)
def _library_functions(located: tuple[str, int]) -> dict[str, ctypes._CFuncPtr]:
    """The FUNCTIONS of the library at `located` (path, load address), each checked: its code
    in memory is the code its symbol names in the file."""
    path, base = located
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as image:
        symbols = _function_symbols(image, FUNCTIONS)
        missing = [name for name in FUNCTIONS if name not in symbols]
        if missing:
            raise NoPool(f"{os.path.basename(path)} has no symbol {missing[0]}")
        for name, (value, size) in symbols.items():
            offset = _file_offset(image, value)
            if offset is None or ctypes.string_at(base + value, size) != \
                    image[offset:offset + size]:
                raise NoPool(f"{name} in {os.path.basename(path)} is not the code its symbol "
                             f"table names")
    return {name: (_COUNT_OF_POOL if name == GET_THREADS_COUNT else _POINTER_OF_POINTER)(
        base + value) for name, (value, _) in symbols.items()}


def _elf_header(image: mmap.mmap) -> tuple:
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise NoPool("not a 64-bit little-endian ELF file")
    return struct.unpack_from("<QQQIHHHHHH", image, 0x18)


def _function_symbols(image: mmap.mmap, names: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(address, size) of the functions `names` in the ELF symbol table (.symtab)."""
    _, _, section_headers, _, _, _, _, entry_size, count, _ = _elf_header(image)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, section_headers + i * entry_size)
                for i in range(count)]
    wanted = {name.encode(): name for name in names}
    found = {}
    for _, kind, _, _, offset, size, link, _, _, symbol_size in sections:
        if kind != 2 or not symbol_size:          # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, symbol_size):
            name_at, info, _, _, value, length = struct.unpack_from("<IBBHQQ", image, at)
            if info & 0xF != 2 or not value:      # STT_FUNC, defined
                continue
            start = strings + name_at
            name = image[start:image.find(b"\0", start)]
            if name in wanted:
                found[wanted[name]] = (value, length)
    return found


def _file_offset(image: mmap.mmap, address: int) -> int | None:
    """Where the loadable segment holding `address` keeps it in the file."""
    _, program_headers, _, _, _, entry_size, count, _, _, _ = _elf_header(image)
    for i in range(count):
        kind, _, offset, virtual, _, size, _, _ = struct.unpack_from(
            "<IIQQQQQQ", image, program_headers + i * entry_size)
        if kind == 1 and virtual <= address < virtual + size:     # PT_LOAD
            return address - virtual + offset
    return None
