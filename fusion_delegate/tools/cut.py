"""Cut a partition out of a model as a model of its own, so that LiteRT and the delegate can be
timed on exactly the same ops (and inference_diff-style bisecting gets one-partition models)."""
from __future__ import annotations

from dataclasses import replace
from collections.abc import Sequence

from ..model import Model, Subgraph


def cut_partition(model: Model, nodes: Sequence[int], inputs: Sequence[int],
                  outputs: Sequence[int]) -> Model:
    """The given nodes of subgraph 0 as a one-subgraph model. Non-constant `inputs` become model
    inputs (constants stay constants); `outputs` become its outputs. Tensors are renumbered in
    order of first use."""
    graph = model.subgraphs[0]
    operators = [graph.operators[n] for n in sorted(nodes)]
    order: dict[int, int] = {}

    def new_index(tensor: int) -> int:
        if tensor < 0:
            return tensor
        return order.setdefault(tensor, len(order))

    model_inputs = [new_index(t) for t in inputs if graph.tensors[t].data is None]
    for t in inputs:
        new_index(t)
    ops = [replace(op, inputs=[new_index(t) for t in op.inputs],
                   outputs=[new_index(t) for t in op.outputs]) for op in operators]
    model_outputs = [new_index(t) for t in outputs]
    tensors = [graph.tensors[old] for old in order]
    name = f"{graph.name or 'main'}_nodes_{'_'.join(map(str, sorted(nodes)[:1]))}"
    return Model([Subgraph(tensors, ops, model_inputs, model_outputs, name)],
                 description=f"{model.description} (cut by fusion-delegate)")
