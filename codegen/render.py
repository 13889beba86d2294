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
import textwrap
from dataclasses import dataclass

import numpy as np

from .ir import KernelIR, Op, verify
from .ops import ACTIVATIONS, HELPER_MODULES, OPS, TRANSCENDENTAL

INDENT = "    "
NAME_LIMIT = 24
LINE_LIMIT = 100
#: Below this many elements a kernel runs on one thread: waking threads costs more.
PARALLEL_MIN_ELEMENTS = 1 << 16
RESERVED = {"np", "carray", "cfunc", "njit", "prange", "context", "node", "tensors", "range",
            "min", "max", "misses", "part", "tile", "start", "stop", "FLT_MAX", "NAN", "INF",
            *HELPER_MODULES}


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
    threads = parallel_threads(ir.threads, nest)
    stages = Stages.of(ir, nest, names)
    fast = FastPath.of(ir)
    depth = 1 + len(nest.sizes) + (threads > 1) + stages.tiled     # of the loop bodies
    exact = loop_nest(nest, threads, stages, loop_body(ir, names, nest, stages, None, depth))
    if fast.pays:
        fast_bodies = loop_body(ir, names, nest, stages, fast, depth)
        lines = [*fast.comment(), "misses = np.int32(0)",
                 *loop_nest(nest, threads, stages, fast_bodies),
                 "if misses == 0:", INDENT + "return", *EXACT_LOOP_COMMENT, *exact]
    else:
        lines = exact
    if threads == 1:
        lines = stages.allocations() + lines
    parallel = ", parallel=True" if threads > 1 else ""
    signature = "void(" + ", ".join(array_type(len(nest.view_shape(t))) for t in memory) + ")"
    kernel = [f"@njit('{signature}',",
              f"      error_model='numpy', nogil=True, cache=True{parallel})",
              *wrap_call(f"def {ir.name}(", [names[t] for t in memory], "):"),
              *(INDENT + line for line in lines)]
    lines = header(ir, names, nest, threads) + [
        "", *module_imports(lines, threads > 1), "", *kernel, "", "",
        *entry_point(ir, names, nest, memory, layout), ""]
    return "\n".join(lines)


def varies_innermost(ir: KernelIR, tensor: int) -> bool:
    """The tensor changes along the innermost loop (else LLVM hoists what computes it)."""
    shape = ir.iteration_shape
    inner = max((d for d, n in enumerate(shape) if n != 1), default=None)
    own = (1,) * (len(shape) - len(ir.value(tensor).shape)) + ir.value(tensor).shape
    return inner is not None and own[inner] != 1


#: Kernels with several transcendental ops run them stage by stage over tiles of TILE elements
#: of the innermost dimension, kept in L1 between stages: a long loop body with several
#: polynomials runs out of vector registers and overlaps poorly; short loops do not.
TILE = 256
TILE_MIN = 64                           # innermost dimensions shorter than this: one loop


@dataclass(frozen=True)
class Stages:
    """The ops in loop order, grouped one transcendental op (and the cheap ops before it) per
    stage, and the tile buffers carrying values from one stage to a later one."""
    ops: tuple[tuple[Op, ...], ...]
    buffers: dict                       # tensor id -> buffer identifier

    @classmethod
    def of(cls, ir: KernelIR, nest: LoopNest, names: dict[int, str]) -> "Stages":
        expensive = {op.node for op in ir.ops
                     if op.op in TRANSCENDENTAL and varies_innermost(ir, op.output)}
        if len(expensive) < 2 or nest.sizes[-1] < TILE_MIN:
            return cls((ir.ops,), {})
        groups: list[list[Op]] = [[]]
        for op in ir.ops:
            if groups[-1] and groups[-1][-1].node in expensive:
                groups.append([])
            groups[-1].append(op)
        stage_of = {op.output: n for n, group in enumerate(groups) for op in group}
        crossing = sorted({t for n, group in enumerate(groups) for op in group
                           for t in op.inputs if stage_of.get(t, n) < n} - set(ir.outputs))
        taken = set(names.values()) | RESERVED
        buffers = {}
        for t in crossing:
            name, suffix = f"{names[t]}_tile", 1
            while name in taken:
                name, suffix = f"{names[t]}_tile_{suffix}", suffix + 1
            taken.add(name)
            buffers[t] = name
        return cls(tuple(tuple(group) for group in groups), buffers)

    @property
    def tiled(self) -> bool:
        return len(self.ops) > 1

    def allocations(self) -> list[str]:
        return [f"{name} = np.empty({TILE}, np.float32)" for name in self.buffers.values()]


EXACT_LOOP_COMMENT = ["# Exact loop, as LiteRT computes it."]


@dataclass(frozen=True)
class FastPath:
    """A second, cheaper loop for a kernel, exact unless `misses` says otherwise.

    TFLite's float kernels clamp every ADD/SUB/MUL/DIV result to +-FLT_MAX, which only changes
    +-inf. The fast loop leaves those clamps out, so it differs from the exact loop only if an
    unclamped value is +-inf. Such a value stays inf or NaN through ops that propagate it
    (ADD, SUB, MUL, NEG, ...), so the fast loop checks the values where that propagation ends:
    partition outputs and operands of any other op. It also runs ops with a `fast_expr` (sin,
    cos) and counts their `guard`. No miss: the fast loop's results are the exact ones, bit for
    bit (NaN payloads aside); any miss: the kernel runs the exact loop over everything.
    """
    dropped: int                       # clamps left out
    checked: tuple[int, ...]           # tensors counted by nonfinite()
    guarded: tuple[int, ...]           # nodes run with their fast_expr

    @classmethod
    def of(cls, ir: KernelIR) -> "FastPath":
        consumers: dict[int, list] = {}
        for op in ir.ops:
            for t in set(op.inputs):
                consumers.setdefault(t, []).append(op)
        dropped, unclamped = 0, set()
        for op in ir.ops:
            params = dict(op.params)
            if op.spec.clamps_overflow_only(params):
                dropped += 1
                unclamped.add(op.output)
            elif op.spec.propagates(params, fast=True) and unclamped & set(op.inputs):
                unclamped.add(op.output)
        checked = tuple(t for t in sorted(unclamped) if t in ir.outputs or any(
            not c.spec.propagates(dict(c.params), fast=True) for c in consumers.get(t, ())))
        guarded = tuple(op.node for op in ir.ops if op.spec.guard)
        return cls(dropped, checked, guarded)

    def comment(self) -> list[str]:
        """What the fast loop leaves out and counts, as a comment above it."""
        skipped = ["the clamps to +-FLT_MAX"] if self.dropped else []
        counted = ["inf/NaN values"] if self.checked else []
        if self.guarded:
            skipped.append("sin/cos's large-angle reduction")
            counted.append("angles of 2**16 or more")
        text = (f"Fast loop, without {' and '.join(skipped)}. `misses` counts the "
                f"{' and '.join(counted)} for which it could differ from LiteRT; any miss and "
                "the exact loop runs instead.")
        return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT))]

    @property
    def pays(self) -> bool:
        """Checks cost about what clamps do; guarded ops save far more than their guard."""
        return bool(self.guarded) or self.dropped > len(self.checked)


def array_type(ndim: int) -> str:
    """numba's spelling of a C-contiguous float32 array type: float32[:, ::1]."""
    return "float32[" + ", ".join([":"] * (ndim - 1) + ["::1"]) + "]"


def parallel_threads(requested: int, nest: LoopNest) -> int:
    """How many threads the outer loop is split over: 1 unless the kernel is large enough."""
    if requested <= 1 or math.prod(nest.sizes) < PARALLEL_MIN_ELEMENTS:
        return 1
    return min(requested, nest.sizes[0])


def loop_nest(nest: LoopNest, threads: int, stages: Stages, bodies: list[list[str]]
              ) -> list[str]:
    """The loops around the stage bodies. Tiled, the innermost dimension runs tile by tile,
    each stage's loop over the whole tile before the next stage's. With threads, the outermost
    loop is cut into one contiguous part per thread, a prange over the parts (numba's pool
    may be larger: the parts bound the threads used), and each part has its own tile buffers."""
    inner = len(nest.sizes) - 1
    levels = [(f"i{d}", n) for d, n in enumerate(nest.sizes[:-1])]
    if stages.tiled:
        levels.append(("tile", -(-nest.sizes[inner] // TILE)))
    else:
        levels.append((f"i{inner}", nest.sizes[inner]))
    lines, depth = [], 0
    for level, (name, n) in enumerate(levels):
        pad = INDENT * depth
        if level == 0 and threads > 1:
            step = -(-n // threads)
            lines += [f"{pad}for part in prange({threads}):",
                      *(pad + INDENT + line for line in stages.allocations()),
                      f"{pad}{INDENT}for {name} in range(part * {step}, "
                      f"min(part * {step} + {step}, {n})):"]
            depth += 2
        else:
            lines.append(f"{pad}for {name} in range({n}):")
            depth += 1
    pad = INDENT * depth
    if not stages.tiled:
        return lines + [pad + line for line in bodies[0]]
    lines += [f"{pad}start = tile * {TILE}",
              f"{pad}stop = min(start + {TILE}, {nest.sizes[inner]})"]
    for body in bodies:
        lines.append(f"{pad}for i{inner} in range(start, stop):")
        lines += [pad + INDENT + line for line in body]
    return lines


def wrap_call(opening: str, args: list[str], closing: str, indent: str = "",
              width: int = LINE_LIMIT) -> list[str]:
    """`opening arg, arg, ...closing`, broken into lines within `width`: continuation lines
    aligned after `opening`, or, where that leaves too little room, indented one level."""
    for hanging in (False, True):
        follow = indent + (INDENT if hanging else " " * len(opening))
        lines, line = ([indent + opening], follow) if hanging and args else ([], indent + opening)
        for i, arg in enumerate(args):
            piece = arg + (", " if i < len(args) - 1 else closing)
            if len(line) + len(piece.rstrip()) > width and line.strip():
                lines.append(line.rstrip())
                line = follow
            line += piece
        lines.append(line if args else indent + opening + closing)
        if all(len(line) <= width for line in lines):
            break
    return lines


def assignment(target: str, expr: str, width: int) -> list[str]:
    """`target = expr`, broken within `width` at the outermost call's commas, else at the
    outermost binary operator (the expression then in parentheses)."""
    line = f"{target} = {expr}"
    if len(line) <= width:
        return [line]
    depth, commas, operator = 0, [], None
    for i, char in enumerate(expr):
        depth += (char in "([") - (char in ")]")
        if depth == 1 and expr[i:i + 2] == ", ":
            commas.append(i)
        if depth == 0 and operator is None and expr[i:i + 3] in (" + ", " - ", " * ", " / "):
            operator = i
    call = re.match(r"[\w.]+\(", expr)
    if call and expr.endswith(")") and operator is None:
        bounds = [call.end(), *(i + 2 for i in commas), len(expr) + 1]
        args = [expr[a:b - 2] for a, b in zip(bounds, bounds[1:])]
        return wrap_call(f"{target} = {call.group()}", args, ")", width=width)
    if operator is not None:
        opening = f"{target} = ("
        return [opening + expr[:operator], " " * len(opening) + expr[operator + 1:] + ")"]
    return [line]


def loop_body(ir: KernelIR, names: dict[int, str], nest: LoopNest, stages: Stages,
              fast: FastPath | None, body_depth: int) -> list[list[str]]:
    """Per stage, one statement per op, into a temporary named after its output tensor, or
    straight into the output array when the tensor is a partition output (later uses read it
    back), or into a tile buffer when a later stage uses it. With `fast`, the fast loop's forms
    and its `misses` counts. Lines fit in LINE_LIMIT at `body_depth` indents."""
    width = LINE_LIMIT - len(INDENT) * body_depth
    exprs = {}
    for value in ir.values:
        if value.literal is not None:
            exprs[value.tensor] = literal(value.literal)
    for t in ir.inputs:
        exprs[t] = f"{names[t]}[{nest.index(t)}]"
    bodies = []
    for ops in stages.ops:
        lines, misses = [], []
        for op in ops:
            target = names[op.output]
            if op.output in ir.outputs:
                target = f"{target}[{nest.index(op.output)}]"
            elif op.output in stages.buffers:
                target = f"{stages.buffers[op.output]}[i{len(nest.sizes) - 1} - start]"
            args = [exprs[t] for t in op.inputs]
            if fast and op.node in fast.guarded:
                misses.append(op.spec.guard.format(a=args[0]))
            expr = OPS[op.op].render(args, dict(op.params), bool(fast))
            lines += assignment(target, expr, width)
            if fast and op.output in fast.checked:
                misses.append(f"nonfinite({target})")
            exprs[op.output] = target
        if misses:
            # An int32 max-reduction of one max per element: what LLVM vectorises at full width.
            if len(misses) == 1:
                lines += wrap_call("misses = max(", ["misses", *misses], ")", width=width)
            else:
                lines += wrap_call("misses = max(misses, max(", misses, "))", width=width)
        bodies.append(lines)
    return bodies


def module_imports(body: list[str], parallel: bool) -> list[str]:
    used = {name for line in body for name in re.findall(r"\b([a-z_0-9]+)\(", line)}
    numba_names = "carray, cfunc, njit" + (", prange" if parallel else "")
    lines = ["import numpy as np", f"from numba import {numba_names}", ""]
    by_module: dict[str, list[str]] = {}
    for name in sorted(used & set(HELPER_MODULES)):
        by_module.setdefault(HELPER_MODULES[name], []).append(name)
    for module, names in by_module.items():
        line = f"from {module} import {', '.join(names)}"
        lines += [line] if len(line) <= LINE_LIMIT else wrap_call(
            f"from {module} import (", names, ")")
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
        lines += [INDENT + line for line in assignment(
            names[t], f"carray(float32_pointer(load_i64({address})), {nest.view_shape(t)})",
            LINE_LIMIT - len(INDENT))]
    lines += [*wrap_call(f"{ir.name}(", [names[t] for t in memory], ")", INDENT),
              f"{INDENT}return 0"]
    return lines
