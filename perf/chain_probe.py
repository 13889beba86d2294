"""Where the time of an arithmetic chain goes: the delegate's kernel against its bounds (issue 14).

    .venv/bin/python perf/chain_probe.py [--cases chain16_c16 chain16 ...] [--sizes 64K 4M]
                                         [--variants nomiss bits ...] [--asm DIR]

For each case it times, in the same interleaved rounds (perf/timing.py, process pinned to one
core as perf/peers.py does for XLA):
- `interp`: the delegate inside the LiteRT interpreter, `invoke()` (what perf/suite.py times);
- with `--memory`, `kernel@arena`: the same compiled kernel's native entry point called through
  ctypes on a fake TfLiteContext whose tensor table points at the interpreter's own buffers
  (its arena);
- `kernel@numpy`: the same, pointing at numpy arrays (64-byte aligned, huge pages as numpy
  gives them);
- `kernel@numpy16`: numpy arrays at 16 bytes past a 64-byte boundary (np.empty's own offset for
  large arrays), to see what alignment costs;
- `kernel@4k`: numpy-like arrays on 4 KiB pages (madvise NOHUGEPAGE), to see what huge pages buy;
- one row per `--variants` entry: the kernel rendered with the schedule patched in this
  process and/or its source edited (SOURCE_EDITS below; features joined by `+`), compiled with
  numba and called like `kernel@numpy`. Since issue 14's item 2 every kernel is compiled with
  numba's `noalias` flag (codegen.compile.NoAliasCompiler) and checks `misses` as int32
  magnitudes, so `bits` finds nothing to change and `tilecheck` only cuts the nest into
  tiles (the renderer's row blocks and unrolled rows are what `tilecheck` and `unroll` were);
- `jax`: the model as one jax.jit function (perf/peers.py), when jax is installed.

`p10_us` is the 10th percentile of the rounds (see `low`), `median` the median; ns/elem is
p10 per element of the output; `vs_kernel` is kernel@numpy's p10 / the row's.
Variants are hypotheses about the generated loop, tested without touching codegen/: their
outputs are checked against the kernel's (bit for bit).
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perf import peers  # noqa: E402

PINNED = peers.configure(1) if peers.installed(peers.JAX) else None

import numpy as np  # noqa: E402

from codegen.compile import CompileError, KernelCache  # noqa: E402
from codegen.names import identifiers  # noqa: E402
from fusion_delegate import FusionDelegate  # noqa: E402
from fusion_delegate.fusion import LAYOUT  # noqa: E402
from fusion_delegate.model import read_model  # noqa: E402
from perf.suite import (DELEGATE, delegate_options, interpreter, parse_size,  # noqa: E402
                        set_inputs, size_name)
from perf.timing import interleaved  # noqa: E402
from perf.workloads import CHANNEL_WORKLOADS, WORKLOADS, Workload, chain16  # noqa: E402

CASES = {**WORKLOADS, **CHANNEL_WORKLOADS,
         **{f"chain16_c{c}": Workload(f"chain16_c{c}", chain16, c) for c in (16, 32, 64, 128)}}
TENSOR_SIZE, DATA_OFFSET, CONTEXT_TENSORS = (LAYOUT.tensor_size, LAYOUT.tensor_data_offset,
                                            LAYOUT.context_tensors_offset)
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64)
LIBC = ctypes.CDLL(None, use_errno=True)
MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_COLLAPSE = 14, 15, 25


# ------------------------------------------------------------------------------------ memory

def aligned(shape, dtype, offset: int = 0) -> np.ndarray:
    """An array whose data starts `offset` bytes past a 64-byte boundary."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(n * dtype.itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)


class Carver:
    """Arrays cut from one page-aligned buffer, the k-th starting at a 4 KiB boundary plus
    k * `skew` bytes (mod 4096): controls how the arrays' addresses relate modulo 4 KiB
    (4K aliasing of loads behind stores, L1 sets), which separate allocations leave to
    chance."""

    def __init__(self, skew: int, nbytes: int = 1 << 28) -> None:
        self.buffer = np.empty(nbytes + 8192, np.uint8)
        self.next = (-self.buffer.ctypes.data) % 4096
        self.count, self.skew = 0, skew

    def __call__(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        base = self.buffer.ctypes.data
        self.next += (-(base + self.next)) % 4096 + (self.count * self.skew) % 4096
        self.count += 1
        start, self.next = self.next, self.next + max(n, 1)
        return self.buffer[start:start + n].view(dtype).reshape(shape)


def small_pages(shape, dtype) -> np.ndarray:
    """An array on 4 KiB pages: anonymous mmap with MADV_NOHUGEPAGE before it is touched."""
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.madvise(MADV_NOHUGEPAGE)
    array = np.frombuffer(area, dtype, count=nbytes // dtype.itemsize).reshape(shape)
    array[...] = 0
    return array


def huge_pages_of(address: int, nbytes: int) -> tuple[int, int]:
    """(kB in huge pages, kB mapped) of the mappings that hold [address, address + nbytes)."""
    huge = total = 0
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            lo, hi = int(head.group(1), 16), int(head.group(2), 16)
            inside = lo < address + nbytes and address < hi
        elif inside and line.startswith("AnonHugePages:"):
            huge += int(line.split()[1])
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return huge, total


def madvise(address: int, nbytes: int, advice: int) -> int:
    """madvise over the whole pages of [address, address + nbytes): 0, or the errno."""
    start = address & ~0xFFF
    end = (address + nbytes + 0xFFF) & ~0xFFF
    LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return 0 if LIBC.madvise(start, end - start, advice) == 0 else ctypes.get_errno()


class FakeContext:
    """A TfLiteContext and TfLiteNode as far as a generated entry point reads them: the tensors
    pointer at offset 16, each tensor's data pointer at tensors + index * 112 + 8, and the
    node's input and output TfLiteIntArray pointers at offsets 0 and 8."""

    def __init__(self, arrays: dict[int, np.ndarray]) -> None:
        self.arrays = arrays
        self.table = np.zeros((max(arrays) + 1) * TENSOR_SIZE // 8, np.int64)
        for index, array in arrays.items():
            self.table[(index * TENSOR_SIZE + DATA_OFFSET) // 8] = array.ctypes.data
        self.context = np.zeros(8, np.int64)
        self.context[CONTEXT_TENSORS // 8] = self.table.ctypes.data
        self.address = self.context.ctypes.data

    def caller(self, kernel, ir):
        """A call of `kernel`'s entry point on this context, as the node of the partition `ir`
        is; it keeps both alive."""
        fn = ENTRY(kernel.address)
        lists = [np.array([len(ids), *ids], np.int32)
                 for ids in (ir.node_inputs or ir.inputs, ir.outputs)]
        node = np.array([ids.ctypes.data for ids in lists] + [0] * 8, np.int64)
        context, keep = self.address, (self, kernel, lists, node)

        def call():
            return fn(context, node.ctypes.data) if keep else None
        return call


# ----------------------------------------------------------------------------------- variants

def _kernel_def(source: str) -> tuple[str, str, str]:
    """(text before the kernel's body, the body, text from the entry point on)."""
    start = re.search(r"\n@njit\(.*?\ndef \w+\(.*?\):\n", source, re.S).end()
    body, tail = source[start:].split("\n\n\n@cfunc", 1)
    return source[:start], body, "\n\n\n@cfunc" + tail


def no_misses(source: str) -> str:
    """The fast loop without its `misses` bookkeeping (not exact for inf: a cost probe)."""
    head, body, tail = _kernel_def(source)
    if "misses" not in body:
        return source
    fast = body.split("    if misses == 0:")[0]
    fast = re.sub(r"\n +misses = max\(misses,[^\n]*(\n +[^\n]*\))*", "", fast)
    fast = fast.replace("    misses = np.int32(0)\n", "")
    return head + fast.rstrip() + "\n" + tail


def misses_by_bits(source: str) -> str:
    """`misses` as the largest |bits| of the checked values (an int32 max, 2 vector ops a
    value: and + max) instead of nonfinite()'s compare, mask-to-vector, shift and max; the
    check after the loop is then `misses <= 0x7F7FFFFF` (the largest finite float's bits)."""
    if "nonfinite(" not in source:
        return source
    source = re.sub(r"nonfinite\(([^()]*(?:\[[^\]]*\])?)\)", r"(as_int32(\1) & 0x7FFFFFFF)",
                    source)
    source = source.replace("if misses == 0:", "if misses <= 0x7F7FFFFF:")
    return source.replace("from codegen.native import ", "from codegen.native import as_int32, ")


def constants_as_globals(source: str, constants: dict[str, np.ndarray]) -> str:
    """Constants of more than one value baked into the module as global arrays (numba makes
    them LLVM constants): no runtime alias checks against them, and loads LLVM may hoist out
    of loops. Cost: the weights are in the source text, so one compile per distinct weights."""
    head, body, tail = _kernel_def(source)
    lines = []
    for name, values in constants.items():
        if values.size > 1 and re.search(rf"\b{name}\b", body):
            text = ", ".join(repr(float(v)) for v in values.ravel())
            lines.append(f"{name.upper()}_G = np.array([{text}], np.float32)")
            body = re.sub(rf"\b{name}\b(?!_)", f"{name.upper()}_G", body)
    marker = "\nFLT_MAX = "
    head = head.replace(marker, "\n" + "\n".join(lines) + marker, 1)
    return head + body + tail


def nontemporal_stores(source: str, outputs: list[str]) -> str:
    """Stores to partition outputs through store_nt (LLVM !nontemporal): the fast loop's
    stores, or the only loop's when there is no fast path."""
    head, body, tail = _kernel_def(source)
    fast, sep, exact = body.partition("    if misses")
    for name in outputs:
        fast = re.sub(rf"^( +)({name}(?:_t)?)\[([^\]]+)\] = (.*)$",
                      r"\1store_nt(\2, \3, \4)", fast, flags=re.M)
    head = head.replace("\nimport numpy as np\n",
                        "\nimport numpy as np\nfrom perf.probe_helpers import store_nt\n", 1)
    return head + fast + sep + exact + tail


def tile_checks(source: str, rows: int) -> str:
    """A two-level nest `for i0 in range(M): for i1 in range(C): ...` of the fast loop cut
    into tiles of `rows` rows, its per-element `misses` checks of partition outputs moved
    into one flat loop over each tile's output after the tile (still in L1): the inner loop
    then has no reduction to finish per row, and the checks vectorise at full length."""
    head, body, tail = _kernel_def(source)
    fast, sep, exact = body.partition("    if misses")
    lines = fast.split("\n")
    out = []
    k = 0
    while k < len(lines):
        outer = re.match(r"^(    )for i0 in range\((\d+)\):$", lines[k])
        inner = k + 1 < len(lines) and re.match(r"^        for i1 in range\((\d+)\):$",
                                                  lines[k + 1])
        if not (outer and inner):
            out.append(lines[k])
            k += 1
            continue
        m, c = int(outer.group(2)), int(inner.group(1))
        k += 2
        nest, checked = [], []
        while k < len(lines) and lines[k].startswith(" " * 12):
            check = re.match(r"^ +misses = max\(misses, nonfinite\((\w+)\[i0 \* \d+ \+ i1\]\)\)$",
                             lines[k])
            if check:
                checked.append(check.group(1))
            else:
                nest.append("    " + lines[k])
            k += 1
        out += [f"    for tile in range(0, {m}, {rows}):",
                f"        for i0 in range(tile, min(tile + {rows}, {m})):",
                f"            for i1 in range({c}):", *nest]
        for name in checked:
            out += [f"        for j in range(tile * {c}, min(tile + {rows}, {m}) * {c}):",
                    f"            misses = max(misses, np.int32(as_int32({name}[j])"
                    " & np.int32(0x7FFFFFFF)))"]
    fast = "\n".join(out)
    source = head + fast + sep + exact + tail
    source = source.replace("if misses == 0:", "if misses <= 0x7F7FFFFF:")
    return source.replace("from codegen.native import ", "from codegen.native import as_int32, ")


def unroll_row_slices(source: str, factor: int) -> str:
    """`unroll_rows` with each row's elements read and written through a slice per row
    (`x_r1 = x[(i0 + 1) * C:(i0 + 2) * C]`, indexed by i1 from 0, as the renderer's tile slices
    are), so no `(i0 + u) * C + i1` index is left for numba's wraparound checks."""
    source = unroll_rows(source, factor)
    head, body, tail = _kernel_def(source)
    fast, sep, exact = body.partition("    if misses")
    lines, out = fast.split("\n"), []
    k = 0
    while k < len(lines):
        outer = re.match(r"^    for i0 in range\(0, (\d+), (\d+)\):$", lines[k])
        if not outer:
            out.append(lines[k])
            k += 1
            continue
        inner = re.match(r"^        for i1 in range\((\d+)\):$", lines[k + 1])
        c = int(inner.group(1))
        block = []
        k += 2
        while k < len(lines) and lines[k].startswith(" " * 12):
            block.append(lines[k])
            k += 1
        text = "\n".join(block)
        slices = {}

        def to_slice(mt):
            name, u = mt.group(1), int(mt.group(2) or 0)
            slices[(name, u)] = f"{name}_r{u}"
            return f"{name}_r{u}[i1]"
        text = re.sub(rf"\b(\w+)\[(?:\(i0 \+ (\d+)\)|i0) \* {c} \+ i1\]", to_slice, text)
        out.append(lines[k - len(block) - 2])
        for (name, u), local in sorted(slices.items()):
            row = f"(i0 + {u})" if u else "i0"
            out.append(f"        {local} = {name}[{row} * {c}:({row} + 1) * {c}]")
        out.append(f"        for i1 in range({c}):")
        out += text.split("\n")
    return head + "\n".join(out) + sep + exact + tail


def _rewrite_fast_nests(source: str,
                        rewrite: Callable[[int, int, list[str]], list[str]]) -> str:
    """The kernel with each two-level nest `for i0 in range(M): for i1 in range(C): ...` of
    its fast loop replaced by `rewrite(M, C, body)` (body: the inner loop's lines, less their
    12 spaces of indentation); the exact loop after `if misses` is left as it is."""
    head, body, tail = _kernel_def(source)
    fast, sep, exact = body.partition("    if misses")
    lines = fast.split("\n")
    out, k = [], 0
    while k < len(lines):
        outer = re.match(r"^(    )for i0 in range\((\d+)\):$", lines[k])
        inner = k + 1 < len(lines) and re.match(r"^        for i1 in range\((\d+)\):$",
                                                  lines[k + 1])
        if not (outer and inner):
            out.append(lines[k])
            k += 1
            continue
        m, c = int(outer.group(2)), int(inner.group(1))
        k += 2
        nest = []
        while k < len(lines) and lines[k].startswith(" " * 12):
            nest.append(lines[k][12:])
            k += 1
        out += rewrite(m, c, nest)
    return head + "\n".join(out) + sep + exact + tail


def unroll_rows(source: str, factor: int) -> str:
    """Each two-level nest `for i0 in range(M): for i1 in range(C): ...` of the fast loop
    computes `factor` rows per inner iteration: the body once per row (i0 + u), every store
    after every load, so each per-channel operand (indexed by i1 only) is loaded once for
    `factor` rows (LLVM merges the identical loads, no aliasing question arises). Rows left
    over run in the plain nest."""
    def unrolled(m: int, c: int, nest: list[str]) -> list[str]:
        nest = [line.strip() for line in nest]
        local = {re.match(r"(\w+) = ", line).group(1) for line in nest
                 if re.match(r"\w+ = ", line) and not line.startswith("misses")}
        computed, stores, checks = [], [], []
        for u in range(factor):
            def row(text):
                text = re.sub(r"\bi0\b", f"(i0 + {u})" if u else "i0", text)
                return re.sub(r"\b(" + "|".join(sorted(local)) + r")\b", rf"\1_{u}", text) \
                    if local else text
            for line in nest:
                store = re.match(r"^(\w+\[[^\]]+\]) = (.*)$", line)
                if line.startswith("misses"):
                    checks.append(row(line))
                elif store:
                    value = f"stored_{len(stores)}"
                    computed.append(f"{value} = {row(store.group(2))}")
                    stores.append((row(store.group(1)), value))
                else:
                    computed.append(row(line))
        checks = [re.sub(r"nonfinite\(([^()]*\[[^\]]*\])\)",
                         lambda mt: f"nonfinite({dict(stores).get(mt.group(1), mt.group(1))})", ln)
                  for ln in checks]
        # One update of `misses` per iteration: two `misses = max(misses, ...)` in a row are
        # not a reduction LLVM's vectoriser recognises (the loop stays scalar), one max of a
        # balanced tree of the checks is.
        terms = [re.fullmatch(r"misses = max\(misses, (.*)\)", ln).group(1) for ln in checks]
        while len(terms) > 1:
            terms = [f"max({a}, {b})" for a, b in zip(terms[::2], terms[1::2])] + (
                [terms[-1]] if len(terms) % 2 else [])
        checks = [f"misses = max(misses, {terms[0]})"] if terms else []
        whole = m - m % factor
        out = [f"    for i0 in range(0, {whole}, {factor}):", f"        for i1 in range({c}):",
               *("            " + t for t in computed),
               *(f"            {target} = {value}" for target, value in stores),
               *("            " + t for t in checks)]
        if whole < m:
            out += [f"    for i0 in range({whole}, {m}):", f"        for i1 in range({c}):",
                    *("            " + t for t in nest)]
        return out

    return _rewrite_fast_nests(source, unrolled)


def channel_chunks(source: str, rows: int) -> str:
    """Each two-level nest `for i0 in range(M): for i1 in range(C): ...` of the fast loop runs
    in blocks of `rows` rows, and within a block one chunk of LANES channels at a time over
    all of the block's rows: each chunk's per-channel operands are one vector each, loaded once
    per block into registers (as C = 16's whole rows are), while the block stays in L1."""
    def chunked(m: int, c: int, nest: list[str]) -> list[str]:
        assert m % rows == 0 and c % 16 == 0, (m, c)
        return [f"    for b0 in range(0, {m}, {rows}):",
                f"        for c0 in range(0, {c}, 16):",
                f"            for i0 in range(b0, b0 + {rows}):",
                f"                for i1 in range(c0, c0 + 16):",
                *("                    " + t for t in nest)]

    return _rewrite_fast_nests(source, chunked)


SOURCE_EDITS = {"chunks": lambda src, info: channel_chunks(src, info["chunks"]),
                "nomiss": lambda src, info: no_misses(src),
                "bits": lambda src, info: misses_by_bits(src),
                "globals": lambda src, info: constants_as_globals(src, info["constants"]),
                "nt": lambda src, info: nontemporal_stores(src, info["outputs"]),
                "tilecheck": lambda src, info: tile_checks(src, info["tilecheck"]),
                "unroll": lambda src, info: unroll_rows(src, info["unroll"]),
                "rowslices": lambda src, info: unroll_row_slices(src, info["rowslices"])}


def render_with(ir, features: list[str]) -> str:
    """The kernel's source rendered by codegen with the schedule patched in this process only
    (`rowtile=0`: no row tiles, the plain [M, C] nest; `rowtile=N`: row tiles of N elements;
    `vblock=N`: tiles a multiple of N), then edited by SOURCE_EDITS."""
    from codegen import render, schedule
    from codegen.target import numba_target
    saved = (schedule.ROW_TILE, schedule._row_tileable, schedule.vector_block)
    try:
        for feature in features:
            key, _, value = feature.partition("=")
            if key == "rowtile" and value == "0":
                schedule._row_tileable = lambda loops: False
            elif key == "rowtile":
                schedule.ROW_TILE = int(value)
            elif key == "vblock":
                schedule.vector_block = lambda target, block=int(value): block
        return render.render_kernel(ir, schedule.plan(ir, numba_target()), LAYOUT)
    finally:
        schedule.ROW_TILE, schedule._row_tileable, schedule.vector_block = saved


def variant_source(ir, spec: str, info: dict) -> str:
    features = spec.split("+")
    source = render_with(ir, [f for f in features if f.split("=")[0] in ("rowtile", "vblock")])
    for feature in features:
        key, _, value = feature.partition("=")
        if key in SOURCE_EDITS:
            source = SOURCE_EDITS[key](source, {**info, key: int(value or 0)})
        elif key not in ("rowtile", "vblock"):
            raise SystemExit(f"unknown variant feature {feature!r}")
    return source


# --------------------------------------------------------------------------------------- main

def low(samples) -> float:
    """The 10th percentile of the rounds: with the process pinned to one core that
    neighbours also use, over half the batches can catch a preemption and lift the median
    (seen: 3x on some methods for a whole run); the fast rounds are the undisturbed ones."""
    return float(np.percentile(samples.values, 10))


def build(name: str, elements: int, cache_dir: str):
    case = CASES[name].case(elements)
    delegate = FusionDelegate(**delegate_options(cache_dir, 1))
    it = interpreter(case.model, DELEGATE, 1, delegate)
    set_inputs(it, case.inputs)
    it.invoke()
    (prepared,) = delegate.kernels.values()
    return case, it, delegate, prepared


def arena_array(it, index: int) -> np.ndarray:
    """The interpreter's buffer of a tensor, as an array that holds no reference to the
    interpreter (which refuses to invoke while a view of its arena is alive)."""
    view = it.tensor(index)()
    address, count, dtype = view.ctypes.data, view.size, view.dtype
    del view
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(address),
                         dtype)


def model_arrays(case, alloc) -> dict[int, np.ndarray]:
    """Every tensor of the model as an array from `alloc(shape, dtype)`, inputs and constants
    filled in."""
    graph = read_model(case.model).subgraphs[0]
    arrays = {}
    for index, tensor in enumerate(graph.tensors):
        array = alloc(tensor.shape or (1,), tensor.dtype)
        if tensor.data is not None:
            array[...] = tensor.data
        elif tensor.name in case.inputs:
            array[...] = case.inputs[tensor.name]
        arrays[index] = array
    return arrays


def per_call(name: str, elements: int, seconds: float, cache_dir: str) -> None:
    """Single calls, interleaved call by call: the kernel on three separate sets of numpy
    arrays and on 4 KiB pages, the interpreter, and a second interpreter whose partition
    tensors were madvised into huge pages (MADV_HUGEPAGE + MADV_COLLAPSE). Shows whether a slow
    figure belongs to a buffer (it stays slow) or to the moment (every method flips between
    modes)."""
    case, it, delegate, prepared = build(name, elements, cache_dir)
    contexts = [FakeContext(model_arrays(case, aligned)) for _ in range(3)]
    contexts.append(FakeContext(model_arrays(case, small_pages)))
    it2, ir = build(name, elements, cache_dir)[1], prepared.ir
    for index in (*ir.inputs, *ir.outputs):     # the second interpreter's arena, in huge pages
        array = arena_array(it2, index)
        for advice in (MADV_HUGEPAGE, MADV_COLLAPSE):
            madvise(array.ctypes.data, array.nbytes, advice)
        del array
    calls = [c.caller(prepared.kernel, ir) for c in contexts] + [it.invoke, it2.invoke]
    labels = ["numpy_a", "numpy_b", "numpy_c", "4k", "interp", "interp+collapse"]
    for call in calls:
        call()
    times: dict[str, list[float]] = {label: [] for label in labels}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for label, call in zip(labels, calls):
            start = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - start)
    for label in labels:
        ms = np.array(times[label]) * 1e3
        p10, p50, p90 = np.percentile(ms, [10, 50, 90])
        print(f"{name} {size_name(elements)} {label:15} {len(ms)} calls: p10 {p10:.2f} "
              f"p50 {p50:.2f} p90 {p90:.2f} min {ms.min():.2f} ms; first: "
              + " ".join(f"{t:.1f}" for t in ms[:12]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["chain16_c16", "chain16_c64", "chain16",
                                                       "bias_relu6_scale", "layernorm_tail"])
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=[64 << 10, 4 << 20])
    parser.add_argument("--variants", nargs="*", default=["nomiss"],
                        help="features joined by +: rowtile=N, vblock=N, "
                        + ", ".join(SOURCE_EDITS) + " (the source edits were written against "
                        "the renderer of their time: one whose edit no longer applies is "
                        "reported and skipped)")
    parser.add_argument("--memory", action="store_true",
                        help="also arena / alignment / 4K-page rows")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--collapse", action="store_true",
                        help="also kernel@arena+collapse: an arena madvised into huge pages")
    parser.add_argument("--copy", action="store_true",
                        help="also np.copyto of one output's size: the x -> out traffic alone")
    parser.add_argument("--skew", type=int, default=None,
                        help="cut every array from one buffer, the k-th at k * SKEW bytes past "
                             "a 4 KiB boundary (default: separate 64-byte-aligned arrays)")
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--asm", type=Path, help="write each kernel's source, asm and IR here")
    parser.add_argument("--per-call", type=float, metavar="SECONDS",
                        help="instead: single calls interleaved for SECONDS (see per_call)")
    args = parser.parse_args(argv)
    cache_root = tempfile.mkdtemp(prefix="chain_probe_")
    if args.per_call:
        for elements in args.sizes:
            for name in args.cases:
                per_call(name, elements, args.per_call, cache_root)
        return
    print(f"load {os.getloadavg()[0]:.2f}, pinned core {PINNED}")
    print(f"{'case':18} {'elems':6} {'method':34} {'p10_us':>9} {'median':>9} {'ns/elem':>8} "
          f"{'vs_kernel':>9}")
    for elements in args.sizes:
        for name in args.cases:
            case, it, delegate, prepared = build(name, elements, cache_root)
            kernel, ir = prepared.kernel, prepared.ir
            out_index = ir.outputs[0]
            allocator = (lambda: aligned) if args.skew is None else (lambda: Carver(args.skew))
            numpy_arrays = model_arrays(case, allocator())
            methods = {"interp": it.invoke}
            if args.copy:
                src, dst = aligned(case.elements, np.float32), aligned(case.elements, np.float32)
                src[...] = 1.0
                dst[...] = 0.0
                methods["copy(x->out)"] = lambda src=src, dst=dst: np.copyto(dst, src)
            contexts = {"kernel@numpy": FakeContext(numpy_arrays)}
            if args.memory:
                arena = {i: arena_array(it, i) for i in (*ir.inputs, *ir.outputs)}
                contexts["kernel@arena"] = FakeContext({**numpy_arrays, **arena})
                contexts["kernel@numpy16"] = FakeContext(
                    model_arrays(case, lambda s, d: aligned(s, d, 16)))
                contexts["kernel@4k"] = FakeContext(model_arrays(case, small_pages))
            if args.collapse:
                # A second interpreter's arena, advised into huge pages (what the delegate could
                # do at prepare): MADV_HUGEPAGE, then MADV_COLLAPSE (Linux 6.1+) to make them now.
                it2 = build(name, elements, cache_root)[1]
                arena2 = {i: arena_array(it2, i) for i in (*ir.inputs, *ir.outputs)}
                codes = [madvise(a.ctypes.data, a.nbytes, advice) for a in arena2.values()
                         for advice in (MADV_HUGEPAGE, MADV_COLLAPSE)]
                print(f"  madvise errnos: {codes}")
                contexts["kernel@arena+collapse"] = FakeContext({**numpy_arrays, **arena2})
                contexts["kernel@arena+collapse"].interpreter = it2
            for label, context in contexts.items():
                methods[label] = context.caller(kernel, ir)
            methods["kernel@numpy"]()
            reference = numpy_arrays[out_index].copy()
            names = {identifiers(ir)[t]: t for t in (*ir.inputs, *ir.outputs)}
            graph = read_model(case.model).subgraphs[0]
            info = {"constants": {n: graph.tensors[t].data for n, t in names.items()
                                  if graph.tensors[t].data is not None},
                    "outputs": [n for n, t in names.items() if t in ir.outputs]}
            for label in args.variants:
                source = variant_source(ir, label, info)
                try:
                    compiled = KernelCache(tempfile.mkdtemp(dir=cache_root)).get(kernel.name,
                                                                                 source)
                except CompileError as error:
                    print(f"  {label}: its edit does not fit this kernel's source ({error})")
                    continue
                asm = compiled.inspect_asm() if args.asm else ""
                context = FakeContext(model_arrays(case, allocator()))
                methods[label] = context.caller(compiled, ir)
                methods[label]()
                if args.memory:
                    methods[label + "@arena"] = FakeContext(
                        {**context.arrays, **arena}).caller(compiled, ir)
                got = context.arrays[out_index]
                if args.memory:
                    pages = [huge_pages_of(a.ctypes.data, a.nbytes)[0] for a in
                             (context.arrays[ir.inputs[0]], got)]
                    print(f"  {label}: input / output mappings {pages[0]} / {pages[1]} kB in "
                          "huge pages")
                if not np.array_equal(got.view(np.int32), reference.view(np.int32)):
                    print(f"  warning: variant {label} differs from the kernel", file=sys.stderr)
                if args.asm:
                    args.asm.mkdir(parents=True, exist_ok=True)
                    stem = args.asm / f"{name}_{size_name(elements)}_{label}"
                    stem.with_suffix(".py").write_text(source)
                    stem.with_suffix(".s").write_text(asm)
            if not args.no_jax and peers.installed(peers.JAX):
                try:
                    methods["jax"] = peers.jax_peer(case.model, case.inputs)
                except peers.Unsupported as reason:
                    print(f"  jax: {reason}", file=sys.stderr)
            if args.asm:
                args.asm.mkdir(parents=True, exist_ok=True)
                stem = args.asm / f"{name}_{size_name(elements)}"
                stem.with_suffix(".py").write_text(kernel.source)
                stem.with_suffix(".s").write_text(kernel.inspect_asm())
            if args.memory:
                for label, context in contexts.items():
                    out = context.arrays[out_index]
                    huge, total = huge_pages_of(out.ctypes.data, out.nbytes)
                    first = context.arrays[ir.inputs[0]]
                    print(f"  {label}: output at {out.ctypes.data % 4096} mod 4096, input "
                          f"{first.ctypes.data % 4096}; "
                          f"{huge} of {total} kB of its mapping in huge pages")
            times = interleaved(methods, args.rounds, 0.002, args.seconds)
            base = low(times["kernel@numpy"])
            for label, samples in times.items():
                t = low(samples)
                print(f"{name:18} {size_name(elements):6} {label:34} {t * 1e6:9.1f} "
                      f"{samples.median * 1e6:9.1f} {t * 1e9 / case.elements:8.3f} "
                      f"{base / t:8.2f}x")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
