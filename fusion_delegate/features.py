"""What the cost model reads of a partition, computed once from its built kernel and the plan.

A partition's features are the nodes it replaces as the cost model prices them (CostKey), the
memory traffic of its kernel's loop nests (NestTraffic), what is beside it in the execution
plan (Cut) and whether a builtin kernel makes one of its inputs. They describe; worth.py
prices them and policy.py decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Sequence

from codegen.ir import KernelIR
from codegen.nests import ElementwiseNest, Schedule
from codegen.ops import OPS, REDUCTIONS, TRANSCENDENTAL, clamps_finite
from codegen.composites import COMPOSITES
from codegen.quant_ops import CONVERSIONS, XNNPACK_INT8

from .claims import op_name, qparams
from .context import Context, Partition

if TYPE_CHECKING:
    from codegen.pipeline import Built

#: Ops XNNPACK runs element by element, in place where it can: cutting its partition next to
#: one costs more than next to others (convolutions, matmuls).
ELEMENTWISE = frozenset(OPS) | CONVERSIONS
#: The op of an int8 kernel's table lookup (codegen.lower: a chain of int8 unary ops).
LOOKUP = "LUT"
#: The op whose fused cost prices a float op's fused activation clamp (RELU, RELU6,
#: RELU_N1_TO_1): XNNPACK clamps inside its op's kernel for free; the fused kernel's clamp
#: keeps NaN, two compares and selects per element, 0.10-0.19 ns where the kernel's
#: arithmetic bounds it on Emerald Rapids (perf/README.md, "Fused activations and the cut,
#: priced at 2 threads").
CLAMP = "RELU6"


@dataclass(frozen=True)
class CostKey:
    """One node the partition replaces, as the cost model prices it."""
    name: str               # OP; OP/int8 (or /uint8) for a quantized one; OP/fast approximated
    elements: int           # of its output; of its input for a reduction or a row op
    run: int | None = None  # what XNNPACK's kernel covers per call (broadcast_run); None: all
    inputs: int = 1         # its operands of its output's size, which LiteRT reads from memory
    litert: bool = True     # False: work only the fused kernel does (a fused activation's clamp)


@dataclass(frozen=True)
class NestTraffic:
    """One loop nest of the kernel: its elements, and the tensors of that size it reads and
    writes beyond one each (the fused cost line is that of a one-op nest: one in, one out)."""
    elements: int
    extra_streams: int = 0


class Cut(Enum):
    """What fusing a partition cuts out of XNNPACK's partition, by what is beside it; the
    value names the cost model's line that prices the cut (worth.CostModel.cut_us)."""
    NONE = None                     # no op outside reads or makes the partition's tensors
    ELEMENTWISE = "split"           # an elementwise op XNNPACK runs in place on cached data
    HEAVY = "split_heavy"           # only ops with buffers of their own: convolutions, matmuls
    APART = "apart"                 # elementwise ops, but not right before or after it


@dataclass(frozen=True)
class PartitionFeatures:
    """Everything the cost model needs of a partition at its current shapes."""
    ops: tuple[CostKey, ...]
    nests: tuple[NestTraffic, ...]
    cut: Cut = Cut.ELEMENTWISE
    builtin_input: bool = False     # a builtin kernel, on one thread, makes one of its inputs
    row_chain: int = 0              # row_chain_length of its kernel's schedule


@dataclass(frozen=True)
class PlanNode:
    """A node of the execution plan as cut_around sees it."""
    inputs: set[int]           # its tensors computed at run time
    outputs: set[int]
    elementwise: bool
    position: int              # in the plan
    builtin: bool = False      # run by LiteRT's builtin kernel, on one thread, not by XNNPACK


def partition_features(built: Built, partition: Partition,
                       plan: dict[int, PlanNode]) -> PartitionFeatures:
    """The features of a partition whose kernel is `built`, among the plan's nodes (plan_nodes)."""
    return PartitionFeatures(tuple(cost_keys(built.ir)), tuple(nest_traffic(built)),
                             cut_around(partition, plan), builtin_input(partition, plan),
                             row_chain_length(built.schedule))


def plan_nodes(context: Context) -> dict[int, PlanNode]:
    """Each node of the plan that reads a tensor computed at run time (a DEQUANTIZE of float16
    weights does not: XNNPACK folds it into the weights once). An int8 elementwise op XNNPACK
    does not run (quant_ops.XNNPACK_INT8) is LiteRT's builtin kernel's, on one thread."""
    nodes = {}
    for position, index in enumerate(context.execution_plan()):
        node = context.node(index)
        inputs = {t for t in node.inputs if t >= 0 and not context.tensor(t).is_constant}
        if inputs:
            name = op_name(node)
            builtin = (name in ELEMENTWISE and name not in XNNPACK_INT8 and any(
                qparams(context.tensor(t)) is not None for t in node.outputs))
            nodes[index] = PlanNode(inputs, set(node.outputs), name in ELEMENTWISE, position,
                                    builtin)
    return nodes


def cut_around(partition: Partition, nodes: dict[int, PlanNode]) -> Cut:
    """What is beside the partition (`nodes`: plan_nodes): the nodes outside it that make one
    of its inputs or read one of its outputs. An elementwise one runs right before or after
    the partition (Cut.ELEMENTWISE), or apart from it (Cut.APART: a squeeze-excite's gate MUL
    reads the swish its partition computes, but after the excite's convolutions)."""
    positions = [nodes[n].position for n in partition.nodes if n in nodes]
    ends = (min(positions, default=-2) - 1, max(positions, default=-2) + 1)
    inputs, outputs = set(partition.inputs), set(partition.outputs)
    beside = [node for index, node in nodes.items() if index not in partition.nodes
              and (node.outputs & inputs or node.inputs & outputs)]
    if not beside:
        return Cut.NONE
    if any(node.elementwise and node.position in ends for node in beside):
        return Cut.ELEMENTWISE
    return Cut.APART if any(node.elementwise for node in beside) else Cut.HEAVY


def builtin_input(partition: Partition, nodes: dict[int, PlanNode]) -> bool:
    """Whether a builtin kernel (one thread) makes one of the partition's inputs: an int8
    squeeze-excite gate's after a HARD_SWISH, which XNNPACK does not run."""
    inputs = set(partition.inputs)
    return any(node.builtin and node.outputs & inputs
               for index, node in nodes.items() if index not in partition.nodes)


def cost_keys(ir: KernelIR) -> list[CostKey]:
    """The cost model's key of each node the partition replaces: the op, for a quantized one
    `OP/int8` (its costs are measured apart: LiteRT often runs it on the builtin kernels, and
    a chain of them is one table lookup fused), and for one precision="fast" approximates
    `OP/fast` (same LiteRT cost, cheaper fused). A reduction or a composite row op (SOFTMAX,
    lowered to several ops: counted once) by its input's elements. Whole inputs: a residual
    ADD's two; swish's MUL reads x and LOGISTIC(x), made inside a SWISH op. A float op's fused
    activation clamp, which LiteRT does inside the op, is the fused kernel's work alone."""
    keys, seen = [], set()
    for op in ir.ops:
        values = [ir.value(t) for t in (*op.inputs, op.output)]
        quantized = [v.dtype for v in values if v.quantized]
        if not quantized and clamps_finite(dict(op.params).get("activation", 0)):
            keys.append(CostKey(CLAMP, math.prod(values[-1].shape), litert=False))
        whole = sum(math.prod(v.shape) == math.prod(values[-1].shape) for v in values[:-1])
        for node, name in op.sources:
            if (node, name) in seen:
                continue
            seen.add((node, name))
            elements = math.prod(values[0 if name in REDUCTIONS or name in COMPOSITES
                                        else -1].shape)
            inputs = 1
            if name in OPS and OPS[name].arity == 2 and node == op.node:
                # the root of a chain op (SWISH) reads x and a value made inside, of x's size
                inputs = whole + (len(op.inputs) == 1 == whole)
            if quantized:
                name = f"{name}/{quantized[0]}"
            elif ir.precision == "fast" and name in OPS and OPS[name].approximated:
                name = f"{name}/fast"
            run = (broadcast_run(values[-1].shape, [v.shape for v in values[:-1]])
                   if len(op.inputs) == 2 else elements)
            keys.append(CostKey(name, elements, run, inputs))
    return keys


def nest_traffic(built: Built) -> list[NestTraffic]:
    """Each loop nest of the kernel's schedule with the tensors of its size it reads beyond one
    and writes beyond one: a residual ADD's nest reads two."""
    ir = built.ir

    def beyond_one(tensors: tuple[int, ...], elements: int) -> int:
        return max(0, sum(math.prod(ir.value(t).shape) == elements for t in tensors) - 1)
    return [NestTraffic(nest.elements, beyond_one(nest.reads, nest.elements)
                        + beyond_one(nest.writes, nest.elements))
            for nest in built.schedule.nests]


def row_chain_length(schedule: Schedule) -> int:
    """The longest rows of an elementwise nest over [M, C] that reads an operand of one value
    per row ([1, H, W, 1] against [1, H, W, C]) and runs two or more transcendental ops or
    int8 table lookups in each row; 0 if none. Such a nest cannot be row-tiled
    (codegen.schedule): those ops run in one short loop a row, or stage by stage within each
    row, and the vector loop over a row ends in scalar iterations."""
    return max((nest.loops.sizes[1] for nest in schedule.nests
                if isinstance(nest, ElementwiseNest) and len(nest.loops.sizes) == 2
                and (False, True) in nest.loops.broadcast.values()
                and sum(op.op in TRANSCENDENTAL or op.op == LOOKUP
                        for op in nest.ops) >= 2), default=0)


def broadcast_run(output: Sequence[int], inputs: Sequence[Sequence[int]]) -> int:
    """Elements a binary op runs over in one call of XNNPACK's kernel: the innermost dims over
    which each input is either whole or broadcast throughout. A scalar operand broadcasts along
    every dim: one call (run = all the elements); a per-channel [C] one: a call per C."""
    rank = len(output)
    padded = [(1,) * (rank - len(shape)) + tuple(shape) for shape in inputs]
    run, pattern = 1, None
    for d in reversed(range(rank)):
        if output[d] == 1:
            continue
        here = tuple(shape[d] == output[d] for shape in padded)
        if pattern is not None and here != pattern:
            break
        pattern, run = here, run * output[d]
    return run
