"""Kernels whose text is the same for every partition of their kind: one compiled kernel
serves them all (issue 33: compile less).

What tells such partitions apart (a lookup's table, the tensor's size) is not written into
the source but passed as the partition's data: bytes the caller keeps alive and puts in the
kernel's slot (`layout.slot_data_offset`), which the entry point reads on every call. A table
lookup over a whole tensor is the kind that pays: an int8 model has one per activation
(HARD_SWISH, LOGISTIC -> MUL, GELU, ...), 14-21 of them in the corpus's int8 CNNs, each
otherwise compiled on its own for the same machine code.

The data of a table lookup: the element count (int64), then the 256-byte table indexed by the
element's raw byte (codegen.lut).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import KernelIR
from .lut import byte_table
from .native import POINTERS
from .nests import Schedule, TableNest
from .render import header, legend, tensor_data
from .writer import INDENT, LINE_LIMIT, assignment


@dataclass(frozen=True)
class SharedKernel:
    """A kernel's source shared by every partition of its kind, and this partition's data."""
    name: str
    source: str
    legend: str                     # the partition's nodes and tensors, and what it computes
    data: bytes


def shared_kernel(ir: KernelIR, schedule: Schedule, layout) -> SharedKernel | None:
    """The shared kernel computing `ir` as `schedule` says, if it is of a shared kind: one
    table nest from the kernel's one input to its one output."""
    if len(schedule.nests) != 1 or schedule.buffers or not isinstance(schedule.nests[0],
                                                                       TableNest):
        return None
    nest = schedule.nests[0]
    op = nest.op
    if ir.inputs != op.inputs[:1] or ir.outputs != (op.output,):
        return None
    in_dtype, out_dtype = ir.value(op.inputs[0]).dtype, ir.value(op.output).dtype
    table = byte_table(np.array(dict(op.params)["table"], out_dtype), in_dtype)
    elements = int(np.prod(ir.value(op.output).shape))
    data = np.int64(elements).tobytes() + table.tobytes()
    names = {op.inputs[0]: "x", op.output: "y"}
    computes = header(ir, names, schedule)[2:]
    # Where the node lists its tensors is in the text: a constant operand may come first.
    positions = (ir.node_position(op.inputs[0])[1], ir.node_position(op.output)[1])
    return SharedKernel(*_table_lookup(in_dtype, out_dtype, positions, nest.shuffles, layout),
                        "\n".join([legend(ir, names), *computes]), data)


def _table_lookup(in_dtype: str, out_dtype: str, positions: tuple[int, int], shuffles: bool,
                  layout) -> tuple[str, str]:
    """The name and source of the table lookup from `in_dtype` to `out_dtype`, of the node's
    input and output at `positions`."""
    name = f"table_lookup_{in_dtype}_{out_dtype}"
    lookup = "lookup_bytes" if shuffles else "lookup_bytes_scalar"
    how = ("64 elements a step with byte shuffles" if shuffles
           else "one element at a time (the target has no byte shuffles)")
    pointers = sorted({POINTERS[in_dtype], POINTERS[out_dtype], "uint8_pointer"})

    def tensor(name: str, where: str, position: int, dtype: str) -> list[str]:
        return [INDENT + line for line in assignment(
            name, f"carray({POINTERS[dtype]}({tensor_data(layout, where, position)}), "
                  "(elements,))", LINE_LIMIT - len(INDENT))]
    lines = [
        f"# fusion_delegate kernel {name}. Do not edit.",
        f"# {in_dtype} -> {out_dtype} | 1 loop nest | shared by every partition that looks a "
        "whole", "# tensor up in one 256-entry table: the table and the element count are the "
        "partition's", "# data, read from the kernel's slot at each call (codegen.shared).",
        "",
        "from numba import carray, cfunc, njit",
        "",
        f"from codegen.lut import {lookup}",
        f"from codegen.native import {', '.join(pointers)}, load_i32, load_i64",
        "from codegen.compile import NoAliasCompiler",
        "",
        f"@njit('void({in_dtype}[::1], {out_dtype}[::1], uint8[::1])',",
        "      error_model='numpy', nogil=True, cache=True, pipeline_class=NoAliasCompiler)",
        f"def {name}(x, y, table):",
        f"{INDENT}# Nest 1 over the whole tensor, {how} (codegen.lut)",
        f"{INDENT}{lookup}(x, y, table)",
        "",
        "",
        "@cfunc('int32(int64, int64)', cache=True)",
        f"def {name}_invoke(context, node):",
        f"{INDENT}tensors = load_i64(context + {layout.context_tensors_offset})",
        f"{INDENT}inputs = load_i64(node + {layout.node_inputs_offset})",
        f"{INDENT}outputs = load_i64(node + {layout.node_outputs_offset})",
        f"{INDENT}# The partition's data: the element count, then the table.",
        f"{INDENT}data = load_i64(load_i64(node + {layout.node_user_data_offset}) + "
        f"{layout.slot_data_offset})",
        f"{INDENT}elements = load_i64(data)",
        *tensor("x", "inputs", positions[0], in_dtype),
        *tensor("y", "outputs", positions[1], out_dtype),
        f"{INDENT}table = carray(uint8_pointer(data + 8), (256,))",
        f"{INDENT}{name}(x, y, table)",
        f"{INDENT}return 0",
        ""]
    return name, "\n".join(lines)
