"""Quantized nodes to kernel ops: tables and fixed-point calls, exactly as LiteRT computes them.

codegen.quant_* know what each int8/uint8 builtin kernel computes. Here each quantized op of a
partition's IR becomes one of two kernel ops (codegen.ops.KERNEL_OPS):
- LUT, a 256-entry table indexed by the int8/uint8 operand: every unary op (DEQUANTIZE and
  int -> int QUANTIZE included) and a binary op whose other operand is one constant value. A
  LUT reading another LUT's output that nothing else reads takes the composed table, so a
  chain of unary int8 ops costs one lookup per element; so does a binary op whose operands
  are one tensor x and tables of x (an int8 swish, x * LOGISTIC(x)): it is the LUT of x;
- QCALL, the codegen.fixedpoint helper LiteRT's kernel amounts to: binary ops of two tensors
  and QUANTIZE from float32, with their Prepare-time constants as literals. ADD, SUB and
  SQUARED_DIFFERENCE rescale each input on its own before combining them: they become three
  QCALLs, one per input into an int32 value of that input's shape (a tensor of the kernel's
  own, with a negative id) and one from both to the output, so the schedule rescales a
  per-channel or one-value operand in a nest of its own shape, not once per element.
An int8/uint8 reduction (MEAN, SUM, REDUCE_MAX, REDUCE_MIN) becomes QSUM (QMAX, QMIN), the
exact sum (extreme) of its codes, and for MEAN and SUM a QCALL from each sum to its output code;
SOFTMAX and LOG_SOFTMAX the row's largest code, the exps from a table at its offset (ROW_LUT),
their ordered float sum and QCALLs per row and per element; L2_NORMALIZATION the sum of centred
squares and QCALLs per row and per element.
Several of LiteRT's x86 kernels round their vector blocks and their scalar tail differently
(see codegen/quant_paths.py). A kernel here computes one path per op: the one LiteRT takes for
every element at these shapes, or any path when all agree for these parameters; otherwise the op
cannot be built (IRError), and the delegate leaves its partition to LiteRT with that reason.
Float ops pass through unchanged.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .qparams import NUMPY_DTYPES, QuantError
from .ir import IRError, KernelIR, Op, Value, matmul_depth, reduced_shape
from .ops import KERNEL_OPS
from .quant_conv import prepare_depthwise
from .quant_matmul import matmul_unsupported, prepare_matmul
from .quant_parts import binary_parts
from .quant_paths import (ELEMENTWISE_BLOCK, REFERENCE, chain_regions, compose, paths_taken,
                          unary_block)
from .quant_prepare import prepare_binary
from .quant_reference import (binary_call, binary_scalar_table, run_qcall, unary_call,
                              unary_lookup)
from .quant_rows import (l2_norm_output, log_softmax_output, reduction_output,
                         reduction_unsupported, row_op_unsupported, softmax_output,
                         softmax_table)
from .quant_support import quant_unsupported


def lower(ir: KernelIR) -> KernelIR:
    """The IR with its quantized ops as LUT, ROW_LUT and QCALL ops and integer reductions, LUT
    chains composed."""
    ops = [lowered for op in ir.ops for lowered in _lower(ir, op)]
    values = {v.tensor: v for v in ir.values}
    for op in ops:
        if op.output not in values:
            values[op.output] = _kernel_value(values[op.inputs[0]], op)
    ir = replace(ir, values=tuple(values.values()))
    return replace(ir, ops=tuple(_without_identities(
        ir, _compose(ir, _tabulate(ir, _compose(ir, ops))))))


def _own(ir: KernelIR, op: Op, count: int) -> tuple[int, ...]:
    """Ids for `count` (up to 4) tensors of the kernel's own computing parts of the node `op`:
    negative, so never a model's."""
    position = ir.ops.index(op)
    return tuple(-4 * position - k for k in range(1, count + 1))


def _kernel_value(source: Value, op: Op) -> Value:
    """The value a kernel op computes for part of a node, a tensor of the kernel's own, named
    and typed as its lowering says (its `made` param): of the shape of `source`, its first
    operand, or for a reduction the reduced one."""
    params = dict(op.params)
    label, dtype = params["made"]
    shape = source.shape
    if op.reduction:
        shape = reduced_shape(source.shape, params["axes"], params["keep_dims"])
    return Value(op.output, shape, dtype=dtype)


def _made(label: str, dtype: str) -> tuple:
    """The `made` param of a kernel op computing a value of the kernel's own: its name's
    suffix and dtype (int32 for integer intermediates, float32 for softmax's exps and sums)."""
    return ("made", (label, dtype))


def _lower(ir: KernelIR, op: Op) -> list[Op]:
    operands = [ir.value(t) for t in op.inputs]
    out = ir.value(op.output)
    if op.op in KERNEL_OPS or not any(v.quantized for v in (*operands, out)):
        return [op]
    params = dict(op.params)
    if op.stencil:
        return [_depthwise(op, operands[0], out, params)]
    if op.matmul:
        return [_matmul(op, operands, out, params)]
    source = (("source", ((op.node, op.op),)),)
    if op.op == "QUANTIZE" and not operands[0].quantized:
        path = _one_path(op, unary_block("QUANTIZE", "float32", out.dtype), out)
        call, args = unary_call("QUANTIZE", None, out.quant, path)
        return [Op(op.node, "QCALL", op.inputs, op.output,
                   (("call", call), ("args", args), *source))]
    if op.reduction:
        return _reduction(ir, op, operands[0], out)
    if op.op in ("SOFTMAX", "LOG_SOFTMAX"):
        return _softmax(ir, op, operands[0], out)
    if op.op == "L2_NORMALIZATION":
        return _l2_normalization(ir, op, operands[0], out)
    if len(operands) == 1:
        lookup = unary_lookup(op.op, operands[0].quant,
                              out.quant if out.quantized else None, params)
        regions = chain_regions([lookup], math.prod(out.shape))
        if len(regions) > 1:
            raise IRError(f"node {op.node} ({op.op}): LiteRT rounds its vector blocks and its "
                          f"last {math.prod(out.shape) % lookup.block} elements differently")
        return [_table(op, op.inputs[0], regions[0][2] if regions else lookup.table, source)]
    path = _binary_path(ir, op, operands, out, params)
    constant = [i for i, v in enumerate(operands) if v.literal is not None]
    if constant:
        scalar = constant[0]
        table = binary_scalar_table(op.op, operands[0].quant, operands[1].quant, out.quant,
                                    int(operands[scalar].literal), scalar, params, path)
        return [_table(op, op.inputs[1 - scalar], table, source)]
    prepared = prepare_binary(op.op, operands[0].quant, operands[1].quant, out.quant, params)
    once = [i for i, v in enumerate(operands) if math.prod(v.shape) < math.prod(out.shape)]
    parts = binary_parts(op.op, prepared, out.dtype, path, once[0] if once else None)
    if parts is not None:
        return _rescaled_apart(ir, op, parts, source)
    call, args = binary_call(op.op, prepared, out.dtype, path)
    return [Op(op.node, "QCALL", op.inputs, op.output, (("call", call), ("args", args), *source))]


def _depthwise(op: Op, data: Value, out: Value, params: dict) -> Op:
    """An int8 depthwise convolution stays one op, with its Prepare's constants
    (`requantize`, codegen.quant_conv) in place of its filter's scales: the stencil nest
    computes it whole."""
    try:
        requantize = prepare_depthwise(data.quant, params.pop("filter_scales"), out.quant,
                                       params["activation"], out.shape[3],
                                       params.pop("sum_bound"))
    except (QuantError, KeyError) as error:
        raise IRError(f"node {op.node} ({op.op}): {error}") from error
    return replace(op, params=tuple(sorted({**params, "requantize": requantize}.items())))


def _matmul(op: Op, operands: list[Value], out: Value, params: dict) -> Op:
    """An int8 BATCH_MATMUL stays one op, with its Prepare's constants (`requantize`,
    codegen.quant_matmul): the matmul nest computes it whole."""
    lhs, rhs = operands
    depth = matmul_depth(lhs.shape, params["adj_x"])
    reason = matmul_unsupported(lhs.quant, rhs.quant, out.quant, depth)
    if reason:
        raise IRError(f"node {op.node} ({op.op}): {reason}")
    requantize = prepare_matmul(lhs.quant, rhs.quant, out.quant)
    return replace(op, params=tuple(sorted({**params, "requantize": requantize}.items())))


def _reduction(ir: KernelIR, op: Op, x: Value, out: Value) -> list[Op]:
    """An int8/uint8 reduction as the exact QSUM (QMAX, QMIN) of its codes and, for MEAN and
    SUM, a QCALL from each sum (a tensor of the kernel's own) to its output code. The QSUM
    computes the node (its source): it costs what the node costs."""
    params = dict(op.params)
    where = (op.op, x.quant, out.quant, x.shape, params["axes"], params["keep_dims"])
    reason = reduction_unsupported(*where)
    if reason:
        raise IRError(f"node {op.node} ({op.op}): {reason}")
    kept = tuple((key, value) for key, value in op.params if key in ("axes", "keep_dims"))
    source = ("source", ((op.node, op.op),))
    if op.op in ("REDUCE_MAX", "REDUCE_MIN"):
        kind, init = ("QMAX", x.quant.qmin) if op.op == "REDUCE_MAX" else ("QMIN", x.quant.qmax)
        return [Op(op.node, kind, op.inputs, op.output, (*kept, ("init", init), source))]
    call, args = reduction_output(*where)
    (total,) = _own(ir, op, 1)
    return [Op(op.node, "QSUM", op.inputs, total, (*kept, source, _made("sum", "int32"))),
            Op(op.node, "QCALL", (total,), op.output,
               (("call", call), ("args", args), ("source", ())))]


def _softmax(ir: KernelIR, op: Op, x: Value, out: Value) -> list[Op]:
    """An int8/uint8 SOFTMAX or LOG_SOFTMAX as optimized_ops computes it (codegen.quant_rows,
    "softmax"): each row's largest code (QMAX), the exps from a table at the row's offset
    (ROW_LUT), their sum in order (SUM, float32); then SOFTMAX's inverse of each row's sum and
    the rounding of each exp times it, or LOG_SOFTMAX's offset of each row (its max and log
    sum) and the rounding of each code's scaled value less it."""
    params = dict(op.params)
    beta = params.get("beta", 1.0)
    reason = row_op_unsupported(op.op, x.quant, out.quant, x.shape[-1], beta)
    if reason:
        raise IRError(f"node {op.node} ({op.op}): {reason}")
    largest, exps, total, per_row = _own(ir, op, 4)
    row = (("axes", (len(x.shape) - 1,)), ("keep_dims", True))
    table = tuple(softmax_table(x.quant, beta).tolist())
    ops = [Op(op.node, "QMAX", op.inputs, largest,
              (*row, ("init", x.quant.qmin), ("source", ((op.node, op.op),)),
               _made("max", "int32"))),
           Op(op.node, "ROW_LUT", (x.tensor, largest), exps,
              (("table", table), ("source", ()), _made("exp", "float32"))),
           Op(op.node, "SUM", (exps,), total, (*row, ("source", ()), _made("sum", "float32")))]
    if op.op == "SOFTMAX":
        call, args = softmax_output(out.quant)
        return [*ops, Op(op.node, "QCALL", (total,), per_row,
                         (("call", "softmax_inverse"), ("args", (out.quant.scale,)),
                          ("source", ()), _made("per_row", "float32"))),
                Op(op.node, "QCALL", (exps, per_row), op.output,
                   (("call", call), ("args", args), ("source", ())))]
    call, args = log_softmax_output(x.quant, out.quant)
    return [*ops, Op(op.node, "QCALL", (total, largest), per_row,
                     (("call", "log_softmax_offset"),
                      ("args", (x.quant.scale, out.quant.scale)), ("source", ()),
                      _made("per_row", "float32"))),
            Op(op.node, "QCALL", (x.tensor, per_row), op.output,
               (("call", call), ("args", args), ("source", ())))]


def _l2_normalization(ir: KernelIR, op: Op, x: Value, out: Value) -> list[Op]:
    """An int8/uint8 L2_NORMALIZATION (codegen.quant_rows): each row's exact sum of centred squares
    (QSUM), the inverse square root's multiplier and shift of it per row, and each code
    rescaled by them."""
    reason = row_op_unsupported(op.op, x.quant, out.quant, x.shape[-1])
    if reason:
        raise IRError(f"node {op.node} ({op.op}): {reason}")
    squares, total, multiplier, shift = _own(ir, op, 4)
    zero = (("args", (x.quant.zero_point,)),)
    row = (("axes", (len(x.shape) - 1,)), ("keep_dims", True))
    return [Op(op.node, "QCALL", op.inputs, squares,
               (("call", "centred_square"), *zero, ("source", ()), _made("square", "int32"))),
            Op(op.node, "QSUM", (squares,), total,
               (*row, ("source", ((op.node, op.op),)), _made("sum", "int32"))),
            Op(op.node, "QCALL", (total,), multiplier,
               (("call", "inv_sqrt_multiplier"), ("args", ()), ("source", ()),
                _made("multiplier", "int32"))),
            Op(op.node, "QCALL", (total,), shift,
               (("call", "inv_sqrt_shift"), ("args", ()), ("source", ()),
                _made("shift", "int32"))),
            Op(op.node, "QCALL", (x.tensor, multiplier, shift), op.output,
               (("call", l2_norm_output(x.quant)), *zero, ("source", ())))]


def _rescaled_apart(ir: KernelIR, op: Op, parts: tuple, source: tuple) -> list[Op]:
    """A binary op as a QCALL rescaling each input into an int32 value (tensors of the
    kernel's own) and one from both to the output. The input QCALLs compute no node on their
    own (no source): the node is the output's."""
    rescaled = _own(ir, op, 2)
    made = _made("rescaled", "int32")
    inputs = [Op(op.node, "LUT", (t,), r, (("table", args[0]), ("source", ()), made))
              if call == "LUT" else
              Op(op.node, "QCALL", (t,), r, (("call", call), ("args", args), ("source", ()), made))
              for t, r, (call, args) in zip(op.inputs, rescaled, parts)]
    call, args = parts[2]
    return [*inputs, Op(op.node, "QCALL", rescaled, op.output,
                        (("call", call), ("args", args), *source))]


def _table(op: Op, operand: int, table: np.ndarray, source: tuple) -> Op:
    return Op(op.node, "LUT", (operand,), op.output,
              (("table", tuple(table.tolist())), *source))


def _one_path(op: Op, block: int, out: Value) -> int:
    """The path of a position-dependent unary kernel when one covers the whole tensor."""
    n = math.prod(out.shape)
    if block and n % block and n > block:
        raise IRError(f"node {op.node} ({op.op}): LiteRT rounds its vector blocks of {block} "
                      f"and its last {n % block} elements differently")
    return ELEMENTWISE_BLOCK if block and n >= block else REFERENCE


def _binary_path(ir: KernelIR, op: Op, operands: list[Value], out: Value, params: dict) -> int:
    paths = paths_taken(op.op, out.dtype, operands[0].shape, operands[1].shape)
    if len(paths) <= 1:
        return paths[0] if paths else REFERENCE
    reason = quant_unsupported(op.op, [v.dtype for v in (*operands, out)],
                               [v.quant for v in operands], out.quant, params)
    if reason:
        raise IRError(f"node {op.node} ({op.op}): {reason}")
    return REFERENCE


def _compose(ir: KernelIR, ops: list[Op]) -> list[Op]:
    """Fold each LUT into the LUT reading its output, where nothing else reads that output."""
    readers = _reads(ops)
    pending: dict[int, Op] = {}              # a LUT's output -> the LUT, until its one reader
    result = []
    for op in ops:
        if op.op == "LUT" and op.inputs[0] in pending:
            first = pending.pop(op.inputs[0])
            table = compose(_array(ir, first), _array(ir, op))
            op = Op(op.node, "LUT", first.inputs, op.output,
                    (("table", tuple(table.tolist())),
                     ("source", dict(first.params)["source"] + dict(op.params)["source"])))
        result += [pending.pop(t) for t in op.inputs if t in pending]
        if (op.op == "LUT" and readers.get(op.output) == 1 and op.output not in ir.outputs
                and ir.value(op.output).quantized):
            pending[op.output] = op
        else:
            result.append(op)
    return result


def _tabulate(ir: KernelIR, ops: list[Op]) -> list[Op]:
    """A two-input QCALL whose operands are one byte tensor x and tables of x (a swish,
    x * LOGISTIC(x)) is a function of x alone: the LUT of its 256 values, computed by the same
    fixed-point helper on each code. A table of x that nothing else reads folds into it."""
    made = {op.output: op for op in ops if op.op == "LUT"}
    readers = _reads(ops)
    folded: set[int] = set()
    result = []
    for op in ops:
        sources = [(made[t].inputs[0], made[t]) if t in made else (t, None) for t in op.inputs]
        x, out = ir.value(sources[0][0]) if sources else None, ir.value(op.output)
        if (op.op != "QCALL" or len(op.inputs) != 2 or len({t for t, _ in sources}) != 1
                or not x.quantized or not out.quantized or x.shape != out.shape):
            result.append(op)
            continue
        params = dict(op.params)
        codes = x.quant.codes().astype(np.int64)
        operands = [codes if lut is None else _array(ir, lut)[codes - x.quant.qmin]
                    for _, lut in sources]
        values = run_qcall(params["call"], *[a.astype(np.int64) for a in operands],
                           *params["args"])
        gone = {lut.output for _, lut in sources if lut is not None
                and readers[lut.output] == op.inputs.count(lut.output)
                and lut.output not in ir.outputs}
        folded |= gone
        source = sum((dict(made[t].params)["source"] for t in sorted(gone)), ()) + params["source"]
        table = np.asarray(values).astype(NUMPY_DTYPES[out.dtype])
        result.append(_table(op, x.tensor, table, (("source", source),)))
    return [op for op in result if op.output not in folded]


def _without_identities(ir: KernelIR, ops: list[Op]) -> list[Op]:
    """The ops without the LUTs that map every code to itself (a MUL by a constant that leaves
    the codes as they are): their readers read their operand instead, and name their nodes
    among their own. One that writes a partition output stays."""
    same: dict[int, Op] = {}
    result = []
    for op in ops:
        if any(t in same for t in op.inputs):
            params = dict(op.params)
            if "source" in params:
                params["source"] = sum((dict(same[t].params)["source"] for t in op.inputs
                                        if t in same), ()) + params["source"]
            op = replace(op, inputs=tuple(same[t].inputs[0] if t in same else t
                                          for t in op.inputs), params=tuple(params.items()))
        x, out = ir.value(op.inputs[0]) if op.inputs else None, ir.value(op.output)
        if (op.op == "LUT" and op.output not in ir.outputs and x.quantized
                and x.dtype == out.dtype and np.array_equal(_array(ir, op), x.quant.codes())):
            same[op.output] = op
            continue
        result.append(op)
    return result


def _reads(ops: list[Op]) -> dict[int, int]:
    """How many times the ops read each tensor."""
    readers: dict[int, int] = {}
    for op in ops:
        for t in op.inputs:
            readers[t] = readers.get(t, 0) + 1
    return readers


def _array(ir: KernelIR, op: Op) -> np.ndarray:
    """A LUT op's table as the numpy array of its output dtype."""
    dtype = ir.value(op.output).dtype
    return np.array(dict(op.params)["table"], dtype=dtype)
