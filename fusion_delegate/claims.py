"""Which nodes the fusion delegate claims, and for the others, why not.

A reason is a fixed phrase plus a value ("dtype int8 not supported", "rank 7 > 6"): `inspect`
prints it for each node and tests assert on it. A node whose result the kernel could not
reproduce exactly as the builtin kernel does is never claimed.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from codegen.ir import MAX_RANK, IRError, broadcast_shapes
from codegen.ops import ACTIVATIONS, OPS_BY_CODE

from . import abi
from .context import Context, NodeInfo
from .model import OP_NAMES

FLOAT32 = 1


@dataclass(frozen=True)
class FusedNode:
    """A claimed node as the kernel needs it: plain values, read once from the runtime."""
    index: int
    op: str
    inputs: tuple[int, ...]
    output: int
    params: tuple[tuple[str, object], ...]


def op_name(node: NodeInfo) -> str:
    if node.custom_name and node.builtin_code == 32:
        return f"CUSTOM({node.custom_name})"
    return OP_NAMES.get(node.builtin_code, f"builtin {node.builtin_code}")


def unsupported_reason(context: Context, node: NodeInfo) -> str | None:
    """None if the node can be fused, otherwise why it cannot."""
    spec = OPS_BY_CODE.get(node.builtin_code)
    if spec is None:
        return f"op {op_name(node)} not supported"
    if len(node.inputs) != spec.arity or len(node.outputs) != 1:
        return f"{len(node.inputs)} inputs / {len(node.outputs)} outputs, expected {spec.arity} / 1"
    if any(t < 0 for t in node.inputs):
        return "optional input missing"
    tensors = [context.tensor(t) for t in node.inputs + node.outputs]
    for tensor in tensors:
        if tensor.type != FLOAT32:
            return f"dtype {tensor.type_name.lower()} not supported"
        if len(tensor.shape) > MAX_RANK:
            return f"rank {len(tensor.shape)} > {MAX_RANK}"
        if tensor.is_dynamic:
            return f"dynamic tensor {tensor.name or tensor.index}"
    try:
        broadcast_shapes(*(t.shape for t in tensors[:-1]))
    except IRError:
        return f"shapes {' and '.join(str(list(t.shape)) for t in tensors[:-1])} do not broadcast"
    if (spec.params or spec.fused_activation) and not node.builtin_data:
        return "builtin params missing"
    activation = dict(fused_node(node).params).get("activation", 0)
    if activation not in ACTIVATIONS:
        return f"fused activation {activation} not supported"
    return None


def fused_node(node: NodeInfo) -> FusedNode:
    """The node's op and params, read from its builtin data once (in kernel init)."""
    spec = OPS_BY_CODE[node.builtin_code]
    params: dict[str, object] = {}
    if spec.fused_activation and node.builtin_data:
        params["activation"] = abi.TfLiteArithParams.from_address(node.builtin_data).activation
    if spec.name == "LEAKY_RELU":
        alpha = abi.TfLiteLeakyReluParams.from_address(node.builtin_data).alpha
        params["alpha"] = float(ctypes.c_float(alpha).value)
    if spec.name == "GELU":
        params["approximate"] = bool(abi.TfLiteGeluParams.from_address(node.builtin_data)
                                     .approximate)
    return FusedNode(index=node.index, op=spec.name, inputs=node.inputs, output=node.outputs[0],
                     params=tuple(sorted(params.items())))
