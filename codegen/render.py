"""IR to Python source: one loop nest per partition, as readable as hand-written code.

Plain functions from data to text, keeping no state: the same IR gives the same text, byte for
byte, and the text is the compile cache's key. The generated module holds two functions: the
loop nest (`@njit`, over numpy arrays) and its native entry point (`@cfunc`), which reads the
tensor addresses from the TfLiteContext on every call, at offsets the caller passes in.
"""
from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass

import numpy as np

from .ir import KernelIR, verify
from .ops import ACTIVATIONS, HELPER_MODULES, OPS

INDENT = "    "
NAME_LIMIT = 24
LINE_LIMIT = 100
#: Below this many elements a kernel runs on one thread: waking threads costs more.
PARALLEL_MIN_ELEMENTS = 1 << 16
RESERVED = {"np", "carray", "cfunc", "njit", "prange", "context", "node", "tensors", "range",
            "FLT_MAX", "NAN", "INF", *HELPER_MODULES}


@dataclass(frozen=True)
class TensorTableLayout:
    """Where tensor data pointers live in the runtime's structs (checked by the ABI layer)."""
    context_tensors_offset: int
    tensor_size: int
    tensor_data_offset: int


@dataclass(frozen=True)
class LoopNest:
    """The collapsed iteration space and, per tensor, which of its dims are broadcast."""
    sizes: tuple[int, ...]
    broadcast: dict                      # tensor id -> tuple[bool, ...] over `sizes`

    def view_shape(self, tensor: int) -> tuple[int, ...]:
        dims = tuple(n for n, b in zip(self.sizes, self.broadcast[tensor]) if not b)
        return dims or (1,)

    def index(self, tensor: int) -> str:
        names = [f"i{d}" for d, b in enumerate(self.broadcast[tensor]) if not b]
        return ", ".join(names) if names else "0"


def collapse(shape: tuple[int, ...], operands: dict) -> LoopNest:
    """Drop size-1 dims and merge adjacent dims with the same broadcast pattern for every
    operand (TFLite's broadcast collapsing), so the inner loop is as long as possible."""
    rank = len(shape)
    masks = {}
    for tensor, operand_shape in operands.items():
        aligned = (1,) * (rank - len(operand_shape)) + tuple(operand_shape)
        masks[tensor] = [a == 1 and s != 1 for a, s in zip(aligned, shape)]
    keep = [d for d in range(rank) if shape[d] != 1]
    sizes: list[int] = []
    merged = {t: [] for t in operands}
    for d in keep:
        pattern = [masks[t][d] for t in operands]
        if sizes and pattern == [merged[t][-1] for t in operands]:
            sizes[-1] *= shape[d]
            continue
        sizes.append(shape[d])
        for t in operands:
            merged[t].append(masks[t][d])
    if not sizes:
        return LoopNest((1,), {t: (False,) for t in operands})
    return LoopNest(tuple(sizes), {t: tuple(m) for t, m in merged.items()})


def literal(value: float) -> str:
    """A float32 literal: a bare Python float would make numba compute in float64."""
    value = np.float32(value)
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "INF" if value > 0 else "-INF"
    if value == np.finfo(np.float32).max:
        return "FLT_MAX"
    if value == -np.finfo(np.float32).max:
        return "-FLT_MAX"
    text = np.format_float_positional(value, unique=True, trim="0")
    if len(text) > 12:
        text = np.format_float_scientific(value, unique=True, trim="0")
    return f"np.float32({text})"


def identifiers(ir: KernelIR) -> dict[int, str]:
    """Tensor id -> Python identifier from the tensor name: deduplicated, cut, or t{id}."""
    names: dict[int, str] = {}
    taken = set(RESERVED)
    for value in sorted(ir.values, key=lambda v: v.tensor):
        base = re.sub(r"[^0-9a-zA-Z]+", "_", value.name.split("/")[-1] or "").strip("_").lower()
        base = base[:NAME_LIMIT].rstrip("_")
        if not base or base[0].isdigit() or keyword.iskeyword(base) or re.fullmatch(r"i\d+", base):
            base = f"t{value.tensor}"
        name, suffix = base, 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names[value.tensor] = name
    return names


def render_expr(op, args: list[str]) -> str:
    """One op as a numba expression over its operands' expressions."""
    return OPS[op.op].render(args, dict(op.params))


def header(ir: KernelIR, names: dict[int, str], nest: LoopNest, threads: int) -> list[str]:
    shape = list(ir.iteration_shape)
    source = f", generated from {ir.model}" if ir.model else ""
    on_threads = f" | {threads} threads" if threads > 1 else ""
    lines = [f"# fusion_delegate kernel {ir.name}{source}. Do not edit.",
             f"# partition {ir.partition} | nodes {', '.join(str(op.node) for op in ir.ops)} | "
             f"{ir.dtype} | {shape} collapsed to {list(nest.sizes)}{on_threads}"]
    for op in ir.ops:
        operands = []
        for t in op.inputs:
            value = ir.value(t)
            kind = "const " if value.literal is not None else ""
            operands.append(f"{names[t]} (t{t}, {kind}{list(value.shape)})")
        params = "".join(f" {k}={ACTIVATIONS[v][0] if k == 'activation' else v}"
                         for k, v in op.params)
        lines.append(f"#   node {op.node:<4} {op.op:<18} {', '.join(operands)}{params} "
                     f"-> {names[op.output]} (t{op.output})")
    return lines


def render_kernel(ir: KernelIR, layout: TensorTableLayout) -> str:
    """The whole kernel module's source."""
    verify(ir)
    names = identifiers(ir)
    memory = list(ir.inputs) + [t for t in ir.outputs if t not in ir.inputs]
    nest = collapse(ir.iteration_shape, {t: ir.value(t).shape for t in memory})
    body = loop_body(ir, names, nest)
    threads = parallel_threads(ir.threads, nest)
    inner = INDENT * len(nest.sizes)
    parallel = ", parallel=True" if threads > 1 else ""
    signature = "void(" + ", ".join(array_type(len(nest.view_shape(t))) for t in memory) + ")"
    kernel = [f"@njit('{signature}',",
              f"      error_model='numpy', nogil=True, cache=True{parallel})",
              *wrap_call(f"def {ir.name}(", [names[t] for t in memory], "):"),
              *(INDENT + line for line in loop_lines(nest, threads)),
              *(INDENT + inner + line for line in body)]
    lines = header(ir, names, nest, threads) + [
        "", *module_imports(body, threads > 1), "", *kernel, "", "",
        *entry_point(ir, names, nest, memory, layout), ""]
    return "\n".join(lines)


def array_type(ndim: int) -> str:
    """numba's spelling of a C-contiguous float32 array type: float32[:, ::1]."""
    return "float32[" + ", ".join([":"] * (ndim - 1) + ["::1"]) + "]"


def parallel_threads(requested: int, nest: LoopNest) -> int:
    """How many threads the outer loop is split over: 1 unless the kernel is large enough."""
    if requested <= 1 or math.prod(nest.sizes) < PARALLEL_MIN_ELEMENTS:
        return 1
    return min(requested, nest.sizes[0])


def loop_lines(nest: LoopNest, threads: int) -> list[str]:
    """The loop headers; with threads, the outer loop is a prange over that many threads."""
    lines = [f"set_num_threads({threads})"] if threads > 1 else []
    for d, n in enumerate(nest.sizes):
        loop = "prange" if threads > 1 and d == 0 else "range"
        lines.append(f"{INDENT * d}for i{d} in {loop}({n}):")
    return lines


def wrap_call(opening: str, args: list[str], closing: str, indent: str = "") -> list[str]:
    """`opening arg, arg, ...closing`, broken into lines within LINE_LIMIT."""
    lines, line = [], indent + opening
    for i, arg in enumerate(args):
        piece = arg + (", " if i < len(args) - 1 else closing)
        if len(line) + len(piece.rstrip()) > LINE_LIMIT:
            lines.append(line.rstrip())
            line = indent + " " * len(opening)
        line += piece
    return lines + [line if args else indent + opening + closing]


def loop_body(ir: KernelIR, names: dict[int, str], nest: LoopNest) -> list[str]:
    """One statement per op, into a temporary named after its output tensor, or straight into
    the output array when the tensor is a partition output (later uses read it back)."""
    exprs = {}
    for value in ir.values:
        if value.literal is not None:
            exprs[value.tensor] = literal(value.literal)
    for t in ir.inputs:
        exprs[t] = f"{names[t]}[{nest.index(t)}]"
    lines = []
    for op in ir.ops:
        target = names[op.output]
        if op.output in ir.outputs:
            target = f"{target}[{nest.index(op.output)}]"
        lines.append(f"{target} = {render_expr(op, [exprs[t] for t in op.inputs])}")
        exprs[op.output] = target
    return lines


def module_imports(body: list[str], parallel: bool) -> list[str]:
    used = {name for line in body for name in re.findall(r"\b([a-z_0-9]+)\(", line)}
    numba_names = "carray, cfunc, njit" + (", prange, set_num_threads" if parallel else "")
    lines = ["import numpy as np", f"from numba import {numba_names}", ""]
    by_module: dict[str, list[str]] = {}
    for name in sorted(used & set(HELPER_MODULES)):
        by_module.setdefault(HELPER_MODULES[name], []).append(name)
    lines += [f"from {module} import {', '.join(names)}" for module, names in by_module.items()]
    lines += ["from codegen.native import float32_pointer, load_i64", "",
              "FLT_MAX = np.float32(3.4028234663852886e38)", "INF = np.float32(np.inf)",
              "NAN = np.float32(np.nan)"]
    return lines


def entry_point(ir: KernelIR, names: dict[int, str], nest: LoopNest, memory: list[int],
                layout: TensorTableLayout) -> list[str]:
    """The native invoke: tensor addresses are read from the context on every call."""
    lines = ["@cfunc('int32(int64, int64)', cache=True)",
             f"def {ir.name}_invoke(context, node):"]
    if math.prod(nest.sizes) == 0:
        return lines + [f"{INDENT}return 0"]
    lines.append(f"{INDENT}tensors = load_i64(context + {layout.context_tensors_offset})")
    for t in memory:
        address = f"tensors + {t} * {layout.tensor_size} + {layout.tensor_data_offset}"
        lines.append(f"{INDENT}{names[t]} = carray(float32_pointer(load_i64({address})), "
                     f"{nest.view_shape(t)})")
    lines += [*wrap_call(f"{ir.name}(", [names[t] for t in memory], ")", INDENT),
              f"{INDENT}return 0"]
    return lines
