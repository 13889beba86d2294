"""TFLite's seed example, the float32 ADD/SUB delegate, written on fusion_delegate's SimpleDelegate.

Usage: Interpreter(model_path=..., experimental_delegates=[AddSubDelegate()]).
"""
import ctypes

import numpy as np

from codegen.ir import broadcast_shapes
from fusion_delegate.simple_delegate import SimpleDelegate, SimpleDelegateKernel

ADD, SUB, FLOAT32 = 0, 41, 1


class AddSubKernel(SimpleDelegateKernel):
    """Runs the partition's ADD/SUB nodes in order with numpy."""

    def init(self, context, nodes, inputs, outputs):
        self.nodes, self.outputs = nodes, set(outputs)

    def prepare(self, context):
        shapes = {}
        for node in self.nodes:
            a, b = (shapes.get(t) or context.tensor(t).shape for t in node.inputs)
            shapes[node.outputs[0]] = broadcast_shapes(a, b)
            if node.outputs[0] in self.outputs:
                context.resize(node.outputs[0], shapes[node.outputs[0]])

    def invoke(self, context):
        values = {}
        for node in self.nodes:
            a, b = (values[t] if t in values else context.view(t) for t in node.inputs)
            op = np.add if node.builtin_code == ADD else np.subtract
            values[node.outputs[0]] = op(a, b)
            if node.outputs[0] in self.outputs:
                context.view(node.outputs[0])[...] = values[node.outputs[0]]


class AddSubDelegate(SimpleDelegate):
    """Claims float32 ADD and SUB nodes without a fused activation."""

    name = "add_sub_delegate"

    def is_node_supported(self, context, node):
        if node.builtin_code not in (ADD, SUB) or not node.builtin_data:
            return False
        activation = ctypes.c_int.from_address(node.builtin_data).value  # TfLiteAddParams
        tensors = [context.tensor(t) for t in node.inputs + node.outputs]
        return activation == 0 and all(t.type == FLOAT32 for t in tensors)

    def create_kernel(self):
        return AddSubKernel()
