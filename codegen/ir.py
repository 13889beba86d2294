"""The IR of one partition: a DAG of elementwise ops over tensors of known shape (not all of
one shape: codegen.schedule places each op in a loop nest over its own).

IR nodes are frozen dataclasses, so an IR prints, compares and hashes. The delegate builds one
per partition and set of input shapes; `codegen.pipeline.build` plans and renders it as source text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .ops import KERNEL_OPS, MATMULS, OPS, REDUCTIONS, STENCILS
from .window import conv_output_shape

MAX_RANK = 6


#: int32: values a kernel computes for itself (a quantized op's rescaled inputs, codegen.lower).
DTYPES = ("float32", "int8", "uint8", "int32")


@dataclass(frozen=True)
class Value:
    """A tensor the kernel reads, computes or writes."""
    tensor: int                       # tensor index in the model
    shape: tuple[int, ...]
    literal: float | int | None = None  # a one-element constant, emitted as a literal
    dtype: str = "float32"            # one of DTYPES
    quant: object = None              # codegen.qparams.QParams of an int8/uint8 tensor

    @property
    def quantized(self) -> bool:
        return self.dtype in ("int8", "uint8")


@dataclass(frozen=True)
class Op:
    """One fused node: `output = OPS[op](*inputs, **params)`."""
    node: int                         # node index in the model
    op: str
    inputs: tuple[int, ...]           # tensor ids
    output: int
    params: tuple[tuple[str, object], ...] = ()

    @property
    def spec(self):
        return (OPS.get(self.op) or REDUCTIONS.get(self.op) or STENCILS.get(self.op)
                or MATMULS.get(self.op) or KERNEL_OPS[self.op])

    @property
    def reduction(self) -> bool:
        return self.op in REDUCTIONS

    @property
    def stencil(self) -> bool:
        """Each output reads a window of its first input (codegen.ops.STENCILS)."""
        return self.op in STENCILS

    @property
    def matmul(self) -> bool:
        """Each output sums products along a row of one operand and a column of the other
        (codegen.ops.MATMULS)."""
        return self.op in MATMULS

    @property
    def init(self) -> str:
        """A reduction's starting value: its spec's, or its own (QMAX, QMIN: the code range's
        end, by dtype)."""
        return str(dict(self.params).get("init", self.spec.init))

    @property
    def sources(self) -> tuple[tuple[int, str], ...]:
        """(node, op) of the TFLite nodes this op computes: itself, or those a kernel op was
        made of."""
        return dict(self.params).get("source", ((self.node, self.op),))

    @property
    def source_ops(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.sources)


@dataclass(frozen=True)
class KernelIR:
    """A partition ready to render: values by tensor id, ops in topological order.

    Nothing in it names the partition or the model: partitions that compute the same thing
    have equal IRs up to tensor ids, and one compiled kernel (whose source names no tensor id)
    serves them all."""
    values: tuple[Value, ...]
    ops: tuple[Op, ...]
    inputs: tuple[int, ...]           # read from memory (non-literal partition inputs)
    outputs: tuple[int, ...]          # written to memory, in the delegate node's output order
    #: The delegate node's inputs (`node->inputs`), where the kernel finds its own `inputs`;
    #: empty means `inputs` themselves.
    node_inputs: tuple[int, ...] = ()
    threads: int = 1                  # the outer loop may be split over this many threads
    precision: str = "exact"          # codegen.ops.PRECISIONS: which math the ops render
    #: Where the kernel reads its fixed-point constants: "text", or "data" (codegen.kernel_data)
    #: for a kernel run once on 256 codes (an island's), whose speed does not matter.
    constants: str = "text"
    _by_tensor: dict = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_tensor", {v.tensor: v for v in self.values})

    def value(self, tensor: int) -> Value:
        return self._by_tensor[tensor]

    def node_position(self, tensor: int) -> tuple[str, int]:
        """Where the delegate node lists a tensor the kernel reads or writes: ("inputs", i)
        or ("outputs", i)."""
        node_inputs = self.node_inputs or self.inputs
        if tensor in node_inputs:
            return "inputs", node_inputs.index(tensor)
        return "outputs", self.outputs.index(tensor)

    @property
    def name(self) -> str:
        """Named after what it fuses, like Inductor's cpp_fused_add_relu_0."""
        ops = []
        for name in (name.lower() for op in self.ops for name in op.source_ops):
            if name not in ops:
                ops.append(name)
        return "fused_" + "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")

    def bytes_moved(self) -> int:
        """Bytes read and written once each: the memory-bandwidth lower bound of the kernel."""
        return sum(math.prod(self.value(t).shape) * (4 if self.value(t).dtype == "float32" else 1)
                   for t in self.inputs + self.outputs)


class IRError(ValueError):
    """The IR breaks an invariant; the message names the node, op and operands."""


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy / TFLite broadcasting (CalculateShapeForBroadcast); a 0 dim stays 0."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise IRError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...],
                  keep_dims: bool) -> tuple[int, ...]:
    """A reduction's output shape: `shape` without `axes` (normalised, sorted, non-negative),
    or with them set to 1 under keep_dims (reduce.cc ResizeOutputTensor)."""
    if any(not 0 <= a < len(shape) for a in axes) or list(axes) != sorted(set(axes)):
        raise IRError(f"axes {list(axes)} are not sorted distinct axes of {list(shape)}")
    if keep_dims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def stencil_shape(ir: KernelIR, op: Op) -> tuple[int, ...]:
    """A depthwise convolution's output shape, or IRError where its operands do not fit:
    data [N, H, W, C], weights [1, KH, KW, C * M], bias [C * M], float32 (or int8 data and
    weights, int32 bias)."""
    data, weights, bias = (ir.value(t) for t in op.inputs)
    dtypes = tuple(v.dtype for v in (data, weights, bias))
    if (len(data.shape) != 4 or len(weights.shape) != 4 or weights.shape[0] != 1
            or weights.shape[3] % data.shape[3] or bias.shape != weights.shape[3:]
            or dtypes not in (("float32",) * 3, ("int8", "int8", "int32"))):
        raise IRError(f"node {op.node} ({op.op}): data {list(data.shape)}, weights "
                      f"{list(weights.shape)} and bias {list(bias.shape)} are not float32 "
                      f"(or int8, int8, int32) [N, H, W, C], [1, KH, KW, C * M] and [C * M]")
    return conv_output_shape(data.shape, weights.shape, dict(op.params))


def matmul_output_shape(lhs: tuple[int, ...], rhs: tuple[int, ...], adj_x: bool,
                        adj_y: bool) -> tuple[int, ...]:
    """BATCH_MATMUL's output shape (batch_matmul.cc ResizeOutputTensor): the batch dims
    broadcast, then [M, N] of lhs [..., M, K] (adj_x: [..., K, M]) and rhs [..., K, N]
    (adj_y: [..., N, K]); IRError where the operands do not fit."""
    if not 2 <= len(lhs) <= 5 or not 2 <= len(rhs) <= 5:
        raise IRError(f"BATCH_MATMUL of ranks {len(lhs)} and {len(rhs)} (2 to 5 only)")
    m, k = (lhs[-1], lhs[-2]) if adj_x else (lhs[-2], lhs[-1])
    depth, n = (rhs[-1], rhs[-2]) if adj_y else (rhs[-2], rhs[-1])
    if k != depth:
        raise IRError(f"BATCH_MATMUL of {list(lhs)} and {list(rhs)}: depths {k} and {depth}")
    return (*broadcast_shapes(lhs[:-2], rhs[:-2]), m, n)


def matmul_depth(lhs: tuple[int, ...], adj_x: bool) -> int:
    """K, the length of BATCH_MATMUL's sums: lhs's last dim, or its second last (adj_x)."""
    return lhs[-2] if adj_x else lhs[-1]


def verify(ir: KernelIR) -> None:
    """Check arity, defined-before-use and shapes against OPS before rendering."""
    defined = {v.tensor for v in ir.values if v.literal is not None} | set(ir.inputs)
    for op in ir.ops:
        spec = (OPS.get(op.op) or REDUCTIONS.get(op.op) or STENCILS.get(op.op)
                or MATMULS.get(op.op) or KERNEL_OPS.get(op.op))
        where = f"node {op.node} ({op.op})"
        if spec is None:
            raise IRError(f"{where}: no such op in OPS")
        if op.op in OPS and any(ir.value(t).quantized for t in (*op.inputs, op.output)):
            raise IRError(f"{where}: quantized operands: lower the IR first (codegen.lower)")
        if spec.arity and len(op.inputs) != spec.arity:
            raise IRError(f"{where}: {len(op.inputs)} inputs, {op.op} takes {spec.arity}")
        missing = [t for t in op.inputs if t not in defined]
        if missing:
            raise IRError(f"{where}: inputs {missing} are used before they are defined")
        if op.reduction:
            params = dict(op.params)
            expected = reduced_shape(ir.value(op.inputs[0]).shape, params["axes"],
                                     params["keep_dims"])
        elif op.stencil:
            expected = stencil_shape(ir, op)
        elif op.matmul:
            params = dict(op.params)
            expected = matmul_output_shape(*(ir.value(t).shape for t in op.inputs),
                                           params["adj_x"], params["adj_y"])
        else:
            expected = broadcast_shapes(*(ir.value(t).shape for t in op.inputs))
        if ir.value(op.output).shape != expected:
            raise IRError(f"{where}: output shape {ir.value(op.output).shape}, inputs broadcast "
                          f"to {expected}")
        if len(expected) > MAX_RANK:
            raise IRError(f"{where}: rank {len(expected)} > {MAX_RANK}")
        defined.add(op.output)
    for tensor in ir.outputs:
        if tensor not in defined:
            raise IRError(f"output tensor {tensor} is never computed")
