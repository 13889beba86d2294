"""A schedule to Python source, as readable as hand-written code.

Plain functions from data to text, keeping no state: the same IR gives the same schedule
(codegen.schedule) and the same text, byte for byte, and the text is the compile cache's key.
The generated module holds two functions: the kernel (`@njit`, over flat numpy arrays), one
commented block per loop nest (written by codegen.emit and codegen.emit_rows, one emitter per
kind of nest), and its native entry point (`@cfunc`), which reads the tensor addresses from the
TfLiteContext on every call, at offsets the caller passes in, and the arrays of the partition's
data (its tables, codegen.kernel_data) from the kernel's slot. This module assembles them: the
header, imports and constants, the fast and exact loops, the entry point.
"""
from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from dataclasses import dataclass

from .emit import (NestNames, allocations, elementwise_nest, nest_names, op_title,
                   row_block_nest, table_nest, unrolled_rows_nest)
from .emit_rows import rows_nest
from .emit_matmul import matmul_nest
from .emit_stencil import requantize_names, stencil_nest
from .fastpath import FastPath
from .ir import KernelIR, Value, verify
from .kernel_data import KernelData, kernel_data
from .names import KERNEL_HELPERS, identifiers
from .native import ARGUMENT_EXACT, ARGUMENT_MISSES, ARGUMENT_NEST, POINTERS, POOL_WORDS
from .nests import (ElementwiseNest, MatmulNest, RowBlockNest, RowsNest, Schedule, StencilNest,
                    TableNest, UnrolledRowsNest)
from .ops import ACTIVATIONS, CHAIN_OPS
from .variants import one_body
from .writer import INDENT, LINE_LIMIT, assignment, wrap_call


@dataclass(frozen=True)
class TensorTableLayout:
    """Where tensor data pointers live in the runtime's structs (checked by the ABI layer)."""
    context_tensors_offset: int
    tensor_size: int
    tensor_data_offset: int
    node_inputs_offset: int
    node_outputs_offset: int
    node_user_data_offset: int      # the kernel's slot ...
    slot_pool_offset: int           # ... and in it, the pool block (codegen.native.run_nests)
    slot_data_offset: int           # ... and the partition's data (codegen.kernel_data)


#: Params the header leaves out of an op's line: a LUT's table, the nodes it computes (in its
#: title), a QCALL's call and constants (in its statement), what a lowering op makes (the
#: value after `->`).
UNLISTED_PARAMS = ("table", "source", "call", "args", "made")


def header(ir: KernelIR, names: dict[int, str], schedule: Schedule) -> list[str]:
    """What the kernel computes, in the structure's own terms (no node or tensor ids: the text
    is shared by every partition computing the same; `legend` maps it to one)."""
    nests = len(schedule.nests)
    # Only where some op's math depends on it: kernels that read the same either way are one
    # text, so one compiled kernel serves both precisions.
    precision = f"precision {ir.precision} | " if any(
        op.spec.approximated or op.op in CHAIN_OPS for op in ir.ops) else ""
    lines = [f"# fusion_delegate kernel {ir.name}. Do not edit.",
             f"# {', '.join(sorted({v.dtype for v in ir.values}))} | "
             f"{precision}{nests} loop nest{'s' if nests > 1 else ''}"]
    for op in ir.ops:
        operands = []
        for t in op.inputs:
            value = ir.value(t)
            kind = "const " if value.literal is not None else ""
            operands.append(f"{names[t]} ({kind}{describe(value)})")
        params = "".join(f" {k}={ACTIVATIONS[v][0] if k == 'activation' else v}"
                         for k, v in op.params if k not in UNLISTED_PARAMS)
        out = ir.value(op.output)
        typed = describe(out) if out.quantized or any(
            ir.value(t).quantized for t in op.inputs) else ""
        result = names[op.output] + (f" ({typed})" if typed else "")
        lines.append(f"#   {op_title(op):<18} {', '.join(operands)}{params} -> {result}")
    return lines


def legend(ir: KernelIR, names: dict[int, str] | None = None) -> str:
    """Which model nodes a partition's kernel computes, which tensors it reads and writes by
    the kernel's `names` for them, and the quantization of its 8-bit values (comment lines):
    how to read its shared source for that partition."""
    names = names or identifiers(ir)
    nodes = ", ".join(str(n) for n in sorted({node for op in ir.ops for node, _ in op.sources}))
    tensors = ", ".join(f"{names[t]} = t{t}" for t in dict.fromkeys((*ir.inputs, *ir.outputs)))
    scales = [f"{names[v.tensor]} = {quantization(v)}" for v in ir.values
              if v.quantized and v.dtype != "int32" and v.tensor in names]
    lines = [f"# nodes {nodes}; tensors {tensors}"]
    if scales:
        lines += ["# " + line for line in textwrap.wrap("quantization: " + ", ".join(scales),
                                                        LINE_LIMIT - 2)]
    return "\n".join(lines)


def describe(value: Value) -> str:
    """`[1, 8]`, or with its dtype: `int8[1, 8]` (its quantization is the partition's, in
    its legend), `int32[8]` for a value of the kernel's own."""
    if value.dtype == "int32" or value.quantized:
        return f"{value.dtype}{list(value.shape)}"
    return str(list(value.shape))


def quantization(value: Value) -> str:
    """The real value of an 8-bit value's code q: `0.0235 * (q - 3)`."""
    q = value.quant
    offset = f" - {q.zero_point}" if q.zero_point > 0 else f" + {-q.zero_point}" \
        if q.zero_point < 0 else ""
    return f"{q.scale:.6g} * (q{offset})"


def render_kernel(ir: KernelIR, schedule: Schedule, layout: TensorTableLayout,
                  data: KernelData | None = None) -> str:
    """The whole kernel module's source: `ir` computed as `schedule` (codegen.schedule.plan)
    says, reading `data` (by default kernel_data(ir, schedule), which the caller may have)."""
    verify(ir)
    names = identifiers(ir)
    memory = list(ir.inputs) + [t for t in ir.outputs if t not in ir.inputs]
    local = nest_names(schedule, names)
    fast = schedule.fast
    parts = max(nest.threads for nest in schedule.nests)
    unstreamed = [dataclasses.replace(nest_local, values={}, lane_misses="")
                  for nest_local in local]
    exact = nest_blocks(ir, names, schedule, unstreamed, None, parts > 1)
    streamed = [t for nest in schedule.nests if nest.elements
                and isinstance(nest, ElementwiseNest) for t in nest.streamed]
    setup = allocations(ir, names, schedule, local)
    heap = [line for line in setup if HEAP_ALLOCATION.fullmatch(line)]
    setup = [line for line in setup if line not in heap]
    data = data if data is not None else kernel_data(ir, schedule)
    arguments = [*(names[t] for t in memory), *(a.name for a in data.arrays),
                 *(line.split(" = ")[0] for line in heap)]
    arrays = list(dict.fromkeys([*arguments, *(line.split(" = ")[0] for line in setup)]))
    nests: list[str] = []
    first: list[str] = []
    pooled: list[str] = []
    if fast or streamed or parts > 1:
        body = (one_body(exact, nest_blocks(ir, names, schedule, local, fast, parts > 1))
                if fast or streamed else exact)
        nests = nests_function(f"{ir.name}_nests", arrays, body, bool(fast), bool(streamed),
                               parts > 1)
        if parts > 1:
            specs = array_specs(ir, names, memory, data, heap + setup)
            nests += part_task(ir.name, arrays, specs, parts, fast, bool(streamed))
            setup += part_arguments(ir.name, arrays, parts)
            pooled = nest_parts(ir.name, schedule)

        def call(exact_flag: str) -> tuple[str, list[str]]:
            if parts > 1:
                return "run_nests(", ["pool", "arguments", "NESTS", exact_flag]
            return f"{ir.name}_nests(", [*arrays, exact_flag]
        width = LINE_LIMIT - len(INDENT) * (1 + bool(streamed))
        first = ([*fast_comment(fast, 1 + bool(streamed)),
                  *wrap_call(f"if {call('False')[0]}", call("False")[1], ") < INF_BITS:",
                             width=width), INDENT + "return"] if fast else
                 [*wrap_call(*call("False"), ")", width=width), "return"] if streamed else [])
        exact = wrap_call(*call("True"), ")", width=LINE_LIMIT - len(INDENT))
    if streamed:
        first = [*STREAMED_COMMENT, *all_line_aligned([names[t] for t in streamed]),
                 *(INDENT + line for line in first)]
    lines = [*first, *EXACT_LOOP_COMMENT, *exact] if first else exact
    lines = setup + lines
    pool = ["pool"] if parts > 1 else []
    signature = "void(" + ", ".join([*(f"{ir.value(t).dtype}[::1]" for t in memory),
                                     *(f"{a.dtype}[::1]" for a in data.arrays),
                                     *(f"{ALLOCATION.fullmatch(line)[3]}[::1]"
                                       for line in heap),
                                     *(["int64[::1]"] if pool else [])]) + ")"
    kernel = [f"@njit('{signature}',",
              "      error_model='numpy', nogil=True, cache=True, "
              "pipeline_class=NoAliasCompiler)",
              *wrap_call(f"def {ir.name}(", [*arguments, *pool], "):"),
              *(INDENT + line for line in lines)]
    table_lines = tables(ir, names)
    constants = module_constants([*lines, *nests, *table_lines]) + pooled
    dtypes = {ir.value(t).dtype for t in memory} | {a.dtype for a in data.arrays} | (
        {dtype for dtype, _ in specs.values()} | {"int64"} if parts > 1 else set())
    lines = header(ir, names, schedule) + [
        "", *module_imports([*lines, *nests, *constants, *table_lines], dtypes),
        *(["", *constants] if constants else []), *table_lines, "", *nests, *kernel, "", "",
        *entry_point(ir, names, memory, data, layout, heap, parts > 1), ""]
    return "\n".join(lines)


#: A buffer the kernel allocates: `name = np.empty(n, np.dtype)`, `np.full(n, fill,
#: np.dtype)` or `stack_empty(n, np.dtype)` (codegen.emit.allocations).
ALLOCATION = re.compile(r"(\w+) = (?:np\.empty|np\.full|stack_empty)\((\d+), (?:.*, )?np\.(\w+)\)")
#: One the entry point makes and passes in: an argument, LLVM knows it apart from the kernel's
#: other arrays (NoAliasCompiler); made in the kernel, a 3x3 convolution reading a buffer the
#: kernel had filled ran 8x slower (its taps' loads not known apart from its sums' stores).
HEAP_ALLOCATION = re.compile(r"\w+ = np\.(?:empty|full)\(.*\)")


def array_specs(ir: KernelIR, names: dict[int, str], memory: list[int], data: KernelData,
                setup: list[str]) -> dict[str, tuple[str, int]]:
    """Each array the kernel passes its nests: dtype and length."""
    specs = {names[t]: (ir.value(t).dtype, math.prod(ir.value(t).shape)) for t in memory}
    specs.update((a.name, (a.dtype, a.length)) for a in data.arrays)
    for line in setup:
        allocated = ALLOCATION.fullmatch(line)
        if allocated:
            specs[allocated[1]] = (allocated[3], int(allocated[2]))
    return specs


def part_arguments(name: str, arrays: list[str], parts: int) -> list[str]:
    """The kernel's lines filling the `arguments` its task reads (codegen.native's
    ARGUMENT_*): the nest and whether exactly (run_nests sets them), each part's misses, then
    the arrays' addresses."""
    first = ARGUMENT_MISSES + parts
    return [f"# What {name}_part reads: the nest, whether exactly, each part's misses, then",
            "# where the arrays are.",
            f"arguments = stack_empty({first + len(arrays)}, np.int64)",
            *(f"arguments[{first + k}] = {array}.ctypes.data" for k, array in enumerate(arrays))]


def part_task(name: str, arrays: list[str], specs: dict[str, tuple[str, int]], parts: int,
              fast: FastPath | None, streamed: bool) -> list[str]:
    """The native task the interpreter's pool runs for each part of a nest: the kernel's
    arrays from their addresses in `arguments`, one part of one nest, its misses stored."""
    first = ARGUMENT_MISSES + parts
    signature = ", ".join([*(f"{specs[array][0]}[::1]" for array in arrays), "boolean", "int64",
                           "int64"])
    returns = "int32" if fast else "void"
    result = "return " if fast else ""
    both = bool(fast) or streamed
    run = [f"@njit('{returns}({signature})',",
           "      error_model='numpy', nogil=True, cache=True, pipeline_class=NoAliasCompiler)",
           *wrap_call(f"def {name}_part_of(", [*arrays, "exact", "nest", "part"], "):"),
           f'{INDENT}"""Part `part` of nest `nest`: the nests with the arrays as arguments, which',
           f'{INDENT}LLVM then knows apart (NoAliasCompiler)."""',
           *([f"{INDENT}if exact:"] if both else []),
           *wrap_call(f"{result}{name}_nests(", [*arrays, "True", "nest", "part"], ")",
                      INDENT * (1 + both)),
           *(wrap_call(f"{result}{name}_nests(", [*arrays, "False", "nest", "part"], ")", INDENT)
             if both else []), "", ""]
    lines = [f"{INDENT}{line}" for k, array in enumerate(arrays) for line in assignment(
        array, f"carray({POINTERS[specs[array][0]]}(load_i64(arguments + {8 * (first + k)})), "
               f"({specs[array][1]},))", LINE_LIMIT - len(INDENT))]
    lines += wrap_call(f"{'misses = ' if fast else ''}{name}_part_of(",
                       [*arrays, f"load_i64(arguments + {8 * ARGUMENT_EXACT}) != 0",
                        f"load_i64(arguments + {8 * ARGUMENT_NEST})", "part"], ")", INDENT)
    if fast:
        lines.append(f"{INDENT}store_i64(arguments + {8 * ARGUMENT_MISSES} + 8 * part, misses)")
    return [*run, "@cfunc('void(int64, int64)', cache=True)",
            f"def {name}_part(arguments, part):",
            f'{INDENT}"""Part `part` of the nest `arguments` names, on a thread of the '
            'interpreter\'s',
            f'{INDENT}pool (codegen.native.run_nests)."""',
            *lines, "", ""]


def nest_parts(name: str, schedule: Schedule) -> list[str]:
    """The NESTS constant: each nest that computes anything, in order, with its parts."""
    entries = [f"({number}, {nest.threads})" for number, nest in enumerate(schedule.nests, 1)
               if nest.elements]
    return [f"# The nests in order, as (nest, parts): each part a call of {name}_part on the",
            "# interpreter's pool.",
            *wrap_call("NESTS = (", entries, ",)" if len(entries) == 1 else ")")]


#: The most arguments CPython's compiler passes one by one (STACK_USE_GUIDELINE).
CPYTHON_DIRECT_ARGS = 30


def nests_function(name: str, arrays: list[str], body: list[str], fast: bool,
                   streamed: bool = True, in_parts: bool = False) -> list[str]:
    """The nests once for both loops (codegen.variants), a function of the kernel's arrays:
    the exact loop and the fast one, or without a fast loop, the loop that streams its
    outputs. `in_parts`: one part of one nest a call (`nest`, `part`)."""
    first = (["The nests: with `exact` as LiteRT computes them; else the fast loop,",
              "which returns the largest magnitude() it checks. `exact` is a constant at",
              "each call: numba keeps one branch of each `if exact`."]
             if fast else
             ["The nests as LiteRT computes them: with `exact` storing the outputs,",
              "else streaming them past the caches. `exact` is a constant at",
              "each call: numba keeps one branch of each `if exact`."]
             if streamed else ["The nests as LiteRT computes them."])
    if in_parts:
        first.append("A call runs part `part` of nest `nest`.")
    docstring = [f'"""{first[0]}', *first[1:-1], f'{first[-1]}"""'] if len(first) > 1 else \
        [f'"""{first[0]}"""']
    extra = ["exact", "nest", "part"] if in_parts else ["exact"]
    # CPython passes more than 30 arguments as one tuple (*args), which numba cannot inline:
    # such a call compiles as a call, testing `exact` where it runs.
    inline = ", inline='always'" if len(arrays) + len(extra) <= CPYTHON_DIRECT_ARGS else ""
    return [f"@njit(error_model='numpy', nogil=True{inline})",
            *wrap_call(f"def {name}(", [*arrays, *extra], "):"),
            *(INDENT + line for line in docstring),
            *([f"{INDENT}misses = np.int32(0)"] if fast else []),
            *(INDENT + line for line in body),
            *([f"{INDENT}return misses"] if fast else []), "", ""]


def all_line_aligned(arrays: list[str]) -> list[str]:
    """`if line_aligned(a) and line_aligned(b) ...:`, a condition per line."""
    checks = [f"line_aligned({array})" for array in arrays]
    if len(checks) == 1:
        return [f"if {checks[0]}:"]
    return [f"if ({checks[0]}", *(f"{INDENT * 2}and {check}" for check in checks[1:-1]),
            f"{INDENT * 2}and {checks[-1]}):"]


def nest_blocks(ir: KernelIR, names: dict[int, str], schedule: Schedule,
                local: list[NestNames], fast: FastPath | None, in_parts: bool = False
                ) -> list[str]:
    """Every nest in order, each under a comment saying what it computes and how it loops;
    `in_parts`, each under `if nest == number:` (a call runs one)."""
    lines = []
    for number, (nest, nest_local) in enumerate(zip(schedule.nests, local), 1):
        if not nest.elements:
            continue
        block = EMITTERS[type(nest)](ir, names, nest, number, nest_local, fast)
        if in_parts:
            comments = next(k for k, line in enumerate(block) if not line.startswith("#"))
            block = [*block[:comments], f"if nest == {number}:",
                     *(INDENT + line for line in block[comments:])]
        lines += block
    return lines


EXACT_LOOP_COMMENT = ["# Exact loop, as LiteRT computes it."]


STREAMED_COMMENT = ["# Outputs that leave the caches anyway are stored past them (stream_store),",
                    "# where each starts on a cache line, as the vector stores need."]


def fast_comment(fast: FastPath, depth: int = 1) -> list[str]:
    """What the fast loop leaves out and counts, as a comment above it, `depth` indents in."""
    skipped = ["the clamps to +-FLT_MAX"] if fast.dropped else []
    counted = ["inf/NaN values"] if fast.checked else []
    if fast.guarded:
        skipped.append("sin/cos's large-angle reduction")
        counted.append("angles of 2**16 or more")
    text = (f"Fast loop, without {' and '.join(skipped)}. `misses` keeps the largest "
            "magnitude() (the bits of |value|) of the values it checks; it reaches INF_BITS "
            f"with any of the {' and '.join(counted)} for which the fast loop could differ "
            "from LiteRT, and then the exact loop runs instead.")
    return ["# " + line for line in textwrap.wrap(text, LINE_LIMIT - 2 - len(INDENT) * depth)]


def tables(ir: KernelIR, names: dict[int, str]) -> list[str]:
    """The module constants of the per-channel multipliers and shifts of the kernel's int8
    convolutions (codegen.emit_stencil; numba compiles them in as constants). Lookup tables
    are the partition's data (codegen.kernel_data)."""
    lines = []
    for op in ir.ops:
        requantize = dict(op.params).get("requantize") if op.stencil else None
        if requantize is not None and not requantize.uniform:
            for name, entries in zip(requantize_names(names, op),
                                     (requantize.multipliers, requantize.shifts)):
                lines += ["", *wrap_call(f"{name} = np.array([", list(map(str, entries)),
                                         "], np.int32)")]
    return lines


def module_imports(body: list[str], dtypes: set[str]) -> list[str]:
    """The imports of what `body` (all but the entry point) calls, and the entry point's."""
    code = [line.split("#")[0] for line in body]
    used = {name for line in code for name in re.findall(r"\b([a-z_0-9]+)\(", line)}
    numpy = ["import numpy as np"] if any(re.search(r"\bnp\.", line) for line in code) else []
    lines = [*numpy, "from numba import carray, cfunc, njit", ""]
    by_module: dict[str, list[str]] = {}
    for name in sorted(used & set(KERNEL_HELPERS)):
        by_module.setdefault(KERNEL_HELPERS[name], []).append(name)
    entry_helpers = sorted({POINTERS[dtype] for dtype in dtypes}) + ["load_i32", "load_i64"]
    by_module["codegen.native"] = list(dict.fromkeys(by_module.get("codegen.native", [])
                                                     + entry_helpers))
    for module, names in by_module.items():
        line = f"from {module} import {', '.join(names)}"
        lines += [line] if len(line) <= LINE_LIMIT else wrap_call(
            f"from {module} import (", names, ")")
    return lines + ["from codegen.compile import NoAliasCompiler"]


#: The module's constants, by name: float32 literals (float32_text) and the fast loop's bound.
CONSTANTS = {"FLT_MAX": "np.float32(3.4028234663852886e38)", "INF": "np.float32(np.inf)",
             "NAN": "np.float32(np.nan)", "INF_BITS": "np.int32(0x7F800000)"}


def module_constants(lines: list[str]) -> list[str]:
    """The definitions of the CONSTANTS `lines` use."""
    used = {name for line in lines for name in re.findall(r"\b[A-Z_]+\b", line.split("#")[0])}
    return [f"{name} = {value}" for name, value in CONSTANTS.items() if name in used]


def tensor_data(layout: TensorTableLayout, where: str, position: int) -> str:
    """The expression of the data address of the tensor the node lists at `position` of its
    `where` ("inputs" or "outputs", a TfLiteIntArray: its size, then the ids)."""
    tensor = f"tensors + load_i32({where} + {4 + 4 * position}) * {layout.tensor_size}"
    return f"load_i64({tensor} + {layout.tensor_data_offset})"


def entry_point(ir: KernelIR, names: dict[int, str], memory: list[int], data: KernelData,
                layout: TensorTableLayout, heap: list[str] = (),
                pooled: bool = False) -> list[str]:
    """The native invoke: each tensor's address is read from the context on every call, at the
    tensor id the node lists in its position (a TfLiteIntArray: its size, then the ids); the
    arrays of the partition's data where the node's slot says (codegen.kernel_data); the
    `heap` buffers (HEAP_ALLOCATION) made; `pooled`, the pool block from the slot too
    (codegen.native.run_nests)."""
    lines = ["@cfunc('int32(int64, int64)', cache=True)",
             f"def {ir.name}_invoke(context, node):",
             f"{INDENT}tensors = load_i64(context + {layout.context_tensors_offset})"]
    lists = {where for where, _ in map(ir.node_position, memory)}
    lines += [f"{INDENT}{where} = load_i64(node + {offset})" for where, offset
              in (("inputs", layout.node_inputs_offset), ("outputs", layout.node_outputs_offset))
              if where in lists]
    for t in memory:
        elements = math.prod(ir.value(t).shape)
        pointer = POINTERS[ir.value(t).dtype]
        lines += [INDENT + line for line in assignment(
            names[t], f"carray({pointer}({tensor_data(layout, *ir.node_position(t))}), "
                      f"({elements},))", LINE_LIMIT - len(INDENT))]
    if data.arrays:
        lines += [f"{INDENT}# The partition's tables and constants (codegen.kernel_data).",
                  f"{INDENT}data = load_i64(load_i64(node + {layout.node_user_data_offset}) + "
                  f"{layout.slot_data_offset})"]
        lines += [INDENT + line for a in data.arrays for line in assignment(
            a.name, f"carray({POINTERS[a.dtype]}(data + {a.offset}), ({a.length},))",
            LINE_LIMIT - len(INDENT))]
    if heap:
        lines += [f"{INDENT}# The kernel's buffers, made here: as its arguments, LLVM knows them "
                  "apart.", *(INDENT + line for line in heap)]
    if pooled:
        lines.append(f"{INDENT}pool = carray(int64_pointer(load_i64(node + "
                     f"{layout.node_user_data_offset}) + {layout.slot_pool_offset}), "
                     f"({POOL_WORDS},))")
    lines += [*wrap_call(f"{ir.name}(", [*(names[t] for t in memory),
                                         *(a.name for a in data.arrays),
                                         *(line.split(" = ")[0] for line in heap),
                                         *(["pool"] if pooled else [])], ")", INDENT),
              f"{INDENT}return 0"]
    return lines


#: The emitter of each kind of nest (codegen.nests).
EMITTERS = {ElementwiseNest: elementwise_nest, RowBlockNest: row_block_nest,
            UnrolledRowsNest: unrolled_rows_nest, RowsNest: rows_nest, TableNest: table_nest,
            StencilNest: stencil_nest, MatmulNest: matmul_nest}
