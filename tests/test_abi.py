"""The ctypes mirrors against the header table and against a live interpreter."""
import numpy as np
import pytest
from fusion_delegate.runtime import schema

from conftest import builtin_interpreter
from fusion_delegate import abi
from fusion_delegate.demo import build_demo_model
from fusion_delegate.errors import AbiMismatchError
from fusion_delegate.model import read_model, tflite_dtype
from fusion_delegate.simple_delegate import SimpleDelegate


class RecordingDelegate(SimpleDelegate):
    """Claims nothing; records every tensor as the runtime's context reports it."""

    def initialize(self, context):
        abi.check_live_context(context.pointer)
        self.tensors = [context.tensor(i) for i in range(context.num_tensors)]
        self.bytes = [context.pointer.contents.tensors[i].bytes for i in range(context.num_tensors)]

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


def test_context_tensors_agree_with_model_file(tmp_path):
    model_bytes = build_demo_model(tokens=8, width=16)
    model = read_model(model_bytes)
    delegate = RecordingDelegate()
    interpreter = builtin_interpreter(model_bytes, [delegate])
    file_tensors = model.subgraphs[0].tensors
    assert len(delegate.tensors) == len(file_tensors)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    for seen, nbytes, expected in zip(delegate.tensors, delegate.bytes, file_tensors):
        assert seen.name == expected.name
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
