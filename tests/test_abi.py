"""The ctypes mirrors against the header table and against a live interpreter."""
import numpy as np
import pytest
from fusion_delegate.runtime import schema

from conftest import builtin_interpreter
from fusion_delegate import abi
from fusion_delegate.demo import build_demo_model
from fusion_delegate.errors import AbiMismatchError
from fusion_delegate.model import read_model, tflite_dtype
from fusion_delegate.context import Context
from fusion_delegate.simple_delegate import SimpleDelegate


class RecordingDelegate(SimpleDelegate):
    """Claims nothing; records every tensor as the runtime's context reports it."""

    def initialize(self, context):
        abi.check_live_context(context.pointer)
        self.tensors = [context.tensor(i) for i in range(context.num_tensors)]
        self.names = [context.tensor_name(i) for i in range(context.num_tensors)]
        self.bytes = [context.pointer.contents.tensors[i].bytes for i in range(context.num_tensors)]
        plan = context.execution_plan()
        self.nodes = [context.node(i) for i in plan]
        together = Context(context.pointer)      # the same, read in bulk (gathered per field)
        together.prefetch(tensors=range(context.num_tensors), nodes=plan)
        self.read_together = ([together.tensor(i) for i in range(context.num_tensors)],
                              [together.node(i) for i in plan])

    def is_node_supported(self, context, node):
        return False


def test_struct_layout_matches_header_table():
    abi.check_layout()


def test_wrong_layout_table_is_refused_naming_struct_and_runtime(monkeypatch):
    size, offsets = abi.EXPECTED_LAYOUT["TfLiteTensor"]
    monkeypatch.setitem(abi.EXPECTED_LAYOUT, "TfLiteTensor", (size + 8, offsets))
    with pytest.raises(AbiMismatchError, match=r"TfLiteTensor: sizeof is 112, expected 120 "
                                               r"\("):
        abi.check_layout()


def test_context_tensors_agree_with_model_file(monkeypatch):
    monkeypatch.setattr(abi, "_GATHER_ONE_BY_ONE", 2)  # one read each, or numpy's gathers
    model_bytes = build_demo_model(tokens=8, width=16)
    model = read_model(model_bytes)
    delegate = RecordingDelegate()
    interpreter = builtin_interpreter(model_bytes, [delegate])
    file_tensors = model.subgraphs[0].tensors
    assert len(delegate.tensors) == len(file_tensors)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    assert delegate.read_together == (delegate.tensors, delegate.nodes)
    assert len(delegate.nodes) == len(model.subgraphs[0].operators)
    for seen, name, nbytes, expected in zip(delegate.tensors, delegate.names, delegate.bytes,
                                            file_tensors):
        assert name == expected.name
        assert seen.shape == tuple(expected.shape)
        assert seen.dtype == expected.dtype
        assert nbytes == int(np.prod(expected.shape)) * expected.dtype.itemsize
        assert seen.shape == tuple(details[seen.index]["shape"])


def test_every_tflite_type_maps_to_numpy_or_is_refused_by_name():
    for code, (name, dtype) in abi.TFLITE_TYPES.items():
        if dtype is None:
            with pytest.raises(TypeError, match=name):
                abi.numpy_dtype(code)
        else:
            assert abi.numpy_dtype(code) == dtype
            assert abi.TFLITE_TYPE_OF_DTYPE[dtype] == code
    # TfLiteType and the schema's TensorType number types differently; names and dtypes agree.
    schema_names = {k for k in vars(schema.TensorType) if not k.startswith("_")}
    for code, (name, dtype) in abi.TFLITE_TYPES.items():
        if dtype is not None:
            assert name in schema_names
            assert tflite_dtype(name) == dtype


def test_unknown_type_code_is_refused_by_name():
    with pytest.raises(TypeError, match="unknown type 99"):
        abi.numpy_dtype(99)


def test_a_constant_with_more_bytes_than_its_shape_needs_runs_with_the_delegate():
    """A byte-flipped MobileNetV3 (perf/mutation_fuzz.py) had a buffer of 360 bytes for 88
    floats: ai-edge-litert runs it, and so must the delegate (it failed every Prepare)."""
    from dataclasses import replace
    from fusion_delegate import FusionDelegate
    from fusion_delegate.model import ModelBuilder, write_model
    b = ModelBuilder()
    x = b.input("x", (4, 88))
    h = b.op("ADD", [x, b.const("bias", np.zeros(88, np.float32))],
             {"fused_activation_function": 0})
    b.output(b.op("MUL", [h, h], {"fused_activation_function": 0}))
    graph = read_model(b.to_bytes())
    tensors = graph.subgraphs[0].tensors
    (index,) = [i for i, t in enumerate(tensors) if t.name == "bias"]
    longer = np.linspace(-1, 1, 90, dtype=np.float32)     # 2 floats more than the shape's
    raw = np.dtype(np.float32, metadata={"tflite_type": "FLOAT32"})    # written byte for byte
    tensors[index] = replace(tensors[index], dtype=raw,
                             data=np.frombuffer(longer.tobytes(), np.uint8))
    model = write_model(graph)
    try:
        oracle = builtin_interpreter(model)
    except ValueError:      # tflite-runtime 2.14 refuses the model itself: so it does with us
        with pytest.raises(ValueError):
            builtin_interpreter(model, [FusionDelegate(min_speedup=0.0)])
        return
    delegate = FusionDelegate(min_speedup=0.0)
    ours = builtin_interpreter(model, [delegate])
    data = np.random.default_rng(0).standard_normal((4, 88)).astype(np.float32)
    for it in (ours, oracle):
        it.set_tensor(it.get_input_details()[0]["index"], data)
        it.invoke()
    got, want = (it.get_tensor(it.get_output_details()[0]["index"]) for it in (ours, oracle))
    assert delegate.kernels and np.array_equal(got, want)


def test_tensors_and_nodes_read_in_bulk_are_those_read_one_by_one_int8(monkeypatch):
    """Per-channel and per-tensor quantized tensors of the int8 demo (its convolutions)."""
    from fusion_delegate.demo import build_quantized_demo_model
    monkeypatch.setattr(abi, "_GATHER_ONE_BY_ONE", 2)
    delegate = RecordingDelegate()
    builtin_interpreter(build_quantized_demo_model(size=8, channels=16), [delegate])
    assert any(t.per_channel for t in delegate.tensors)
    assert any(t.scale and not t.per_channel for t in delegate.tensors)
    assert delegate.read_together == (delegate.tensors, delegate.nodes)


def test_the_live_layout_is_checked_once_per_runtime_library(monkeypatch):
    from fusion_delegate import FusionDelegate
    checked = []
    monkeypatch.setattr(abi, "_CHECKED_LIBRARIES", set())
    monkeypatch.setattr(abi, "check_live_context", checked.append)
    model = build_demo_model(tokens=8, width=16)
    for _ in range(2):
        builtin_interpreter(model, [FusionDelegate()])
    assert len(checked) == 1 and len(abi._CHECKED_LIBRARIES) == 1
