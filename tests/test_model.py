"""Behaviour of fusion_delegate.model, with the real TFLite interpreter as the oracle."""

import math
import os
import random

import flatbuffers
import numpy as np
import pytest
from fusion_delegate.runtime import schema
from fusion_delegate.runtime import Interpreter, OpResolverType
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_delegate.errors import ModelFormatError
from fusion_delegate.model import (
    TENSOR_TYPE_NAMES,
    Model,
    ModelBuilder,
    Operator,
    Quantization,
    Subgraph,
    dtype_name,
    extract,
    read_model,
    save_model,
    write_model,
)

RELU = schema.ActivationFunctionType.RELU


def interpreter(content: bytes) -> Interpreter:
    it = Interpreter(model_content=content,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def run(content: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    it = interpreter(content)
    for detail, value in zip(it.get_input_details(), inputs):
        it.set_tensor(detail["index"], value)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def unpack(content: bytes) -> schema.ModelT:
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(content, 0))


def pack(model_t: schema.ModelT) -> bytes:
    """Serialize a hand-edited ModelT, to make files our writer would never produce."""
    builder = flatbuffers.Builder(0)
    builder.Finish(model_t.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def small_model() -> ModelBuilder:
    """relu6(x * c + y) with a fused RELU on the add, gelu(x), leaky_relu(y)."""
    b = ModelBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    c = b.const("c", np.array([0.5, -2.0, 3.0], np.float32))
    added = b.op("ADD", [b.op("MUL", [x, c]), y], {"fused_activation_function": RELU})
    b.output(b.op("RELU6", [added], name="relu6_out"),
             b.op("GELU", [x], {"approximate": True}),
             b.op("LEAKY_RELU", [y], {"alpha": 0.2}))
    return b


def test_builder_model_runs_in_interpreter_and_matches_numpy():
    rng = np.random.default_rng(0)
    x, y = (rng.normal(0, 3, (2, 3)).astype(np.float32) for _ in range(2))
    relu6, gelu, leaky = run(small_model().to_bytes(), x, y)
    c = np.array([0.5, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(relu6, np.clip(np.maximum(x * c + y, 0), 0, 6))
    tanh_gelu = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu, tanh_gelu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(leaky, np.where(y > 0, y, np.float32(0.2) * y), rtol=1e-6)


def test_gelu_opcode_above_127_uses_both_code_fields():
    b = ModelBuilder()
    b.output(b.op("GELU", [b.input("x", (4,))]))
    (code,) = unpack(b.to_bytes()).operatorCodes
    assert (code.builtinCode, code.deprecatedBuiltinCode) == (150, 127)
    assert read_model(b.to_bytes()).subgraphs[0].operators[0].op == "GELU"


def quantized_model() -> bytes:
    """x -> QUANTIZE (per-tensor int8) -> DEQUANTIZE, plus a per-channel int8 constant."""
    b = ModelBuilder()
    q = b.op("QUANTIZE", [b.input("x", (1, 4))], dtype=np.int8)
    b.output(b.op("DEQUANTIZE", [q], dtype=np.float32))
    w = b.const("w", np.arange(-4, 4, dtype=np.int8).reshape(2, 4))
    model = b.build()
    tensors = model.subgraphs[0].tensors
    tensors[q].quantization = Quantization(np.array([0.25], np.float32), np.array([3]))
    tensors[w].quantization = Quantization(np.array([0.5, 0.125], np.float32),
                                           np.zeros(2, np.int64), quantized_dimension=0)
    return write_model(model)


def test_extracted_operators_run_alone_and_give_the_whole_models_values():
    """MUL -> ADD -> RELU6 of small_model without the MUL: its output becomes an input, and
    RELU6's output, the graph's, the only output (the ADD's is read inside)."""
    graph = read_model(small_model().to_bytes()).subgraphs[0]
    sub = extract(graph, [2, 1]).subgraphs[0]
    assert [op.op for op in sub.operators] == ["ADD", "RELU6"]
    assert [sub.tensors[t].name for t in sub.outputs] == ["relu6_out"]
    x = np.array([[1.0, -2.0, 0.5], [4.0, 0.25, -1.0]], np.float32)
    y = np.array([[0.5, 3.0, -7.0], [1.0, 2.0, 9.0]], np.float32)
    whole = run(small_model().to_bytes(), x, y)[0]
    c = np.array([0.5, -2.0, 3.0], np.float32)
    inputs = {"x": x, "y": y}
    named = [inputs.get(sub.tensors[t].name, x * c) for t in sub.inputs]
    np.testing.assert_array_equal(run(write_model(Model([sub])), *named)[0], whole)


def test_interpreter_tensor_details_agree_with_read_model():
    for content in (small_model().to_bytes(), quantized_model()):
        tensors = read_model(content).subgraphs[0].tensors
        details = [d for d in interpreter(content).get_tensor_details()
                   if d["index"] < len(tensors)]
        assert len(details) == len(tensors)
        for d in details:
            t = tensors[d["index"]]
            assert (d["name"], tuple(d["shape"]), np.dtype(d["dtype"])) == (t.name, t.shape,
                                                                         t.dtype)
            qp = d["quantization_parameters"]
            if t.quantization is None:
                assert qp["scales"].size == 0
            else:
                np.testing.assert_array_equal(qp["scales"], t.quantization.scale)
                np.testing.assert_array_equal(qp["zero_points"], t.quantization.zero_point)


def test_quantized_model_runs_with_the_written_scale_and_zero_point():
    x = np.array([[0.0, 0.25, -1.0, 10.0]], np.float32)
    (out,) = run(quantized_model(), x)
    np.testing.assert_array_equal(out, np.clip(np.round(x / 0.25) + 3, -128, 127) * 0.25 - 0.75)


def test_write_read_write_round_trips_bytes_and_model():
    for content in (small_model().to_bytes(), quantized_model()):
        model = read_model(content)
        assert write_model(model) == content
        assert read_model(write_model(model)) == model


def test_options_survive_round_trip():
    ops = {op.op: op for op in read_model(small_model().to_bytes()).subgraphs[0].operators}
    assert ops["ADD"].options["fused_activation_function"] == RELU
    assert ops["ADD"].options_type == "AddOptions"
    assert ops["GELU"].options == {"approximate": True}
    assert ops["LEAKY_RELU"].options["alpha"] == pytest.approx(0.2)
    assert ops["RELU6"].options == {} and ops["RELU6"].options_type is None


def test_model_equality_compares_arrays_by_value():
    assert small_model().build() == small_model().build()
    changed = small_model().build()
    changed.subgraphs[0].tensors[2].data = np.array([0.5, -2.0, 4.0], np.float32)
    assert changed != small_model().build()


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "int16", "int32",
                                   "int64", "uint8", "uint16", "uint32", "uint64", "bool",
                                   "complex64", "complex128"])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
def test_read_model_returns_constant_data_with_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(1)
    data = (rng.normal(0, 50, shape) * (1 + 1j if "complex" in dtype else 1)).astype(dtype)
    b = ModelBuilder()
    b.output(b.const("k", data))
    (tensor,) = read_model(b.to_bytes()).subgraphs[0].tensors
    assert (tensor.dtype, tensor.shape, dtype_name(tensor.dtype)) == (data.dtype, shape, dtype)
    np.testing.assert_array_equal(tensor.data, data)


def test_constants_are_16_byte_aligned_in_the_file():
    b = ModelBuilder()
    for i in range(3):
        b.const(f"k{i}", np.full(i + 1, 7 + i, np.int8))
    content = b.to_bytes()
    for k in range(1, 4):
        assert content.find(bytes([6 + k]) * k) % 16 == 0


def test_tensor_type_table_covers_the_schema():
    schema_types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    assert TENSOR_TYPE_NAMES == schema_types
    assert dtype_name(np.float32) == "float32"


@pytest.mark.parametrize("type_name", ["STRING", "RESOURCE", "VARIANT", "INT4", "BFLOAT16"])
def test_types_without_numpy_dtype_read_as_tagged_object_dtype(type_name):
    code = getattr(schema.TensorType, type_name)
    b = ModelBuilder()
    b.output(b.const("k", np.array([1.0, 2.0], np.float32)))
    raw = unpack(b.to_bytes())
    raw.subgraphs[0].tensors.append(schema.TensorT())
    for tensor in raw.subgraphs[0].tensors:
        tensor.type = code
    model = read_model(pack(raw))
    const, activation = model.subgraphs[0].tensors
    assert const.dtype == np.dtype(object) and dtype_name(const.dtype) == type_name.lower()
    assert const.data.tobytes() == np.array([1.0, 2.0], np.float32).tobytes()
    assert activation.data is None and dtype_name(activation.dtype) == type_name.lower()
    assert read_model(write_model(model)) == model


def test_save_model_writes_atomically_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"old")
    save_model(small_model().build(), path)
    assert read_model(path) == read_model(small_model().to_bytes())
    assert os.listdir(tmp_path) == ["m.tflite"]


def test_unknown_option_key_raises_value_error_naming_valid_keys():
    b = ModelBuilder()
    x = b.input("x", (3,))
    with pytest.raises(ValueError, match="fused_activation_function.*pot_scale_int16"):
        b.op("ADD", [x, x], {"fused_activation": 1})
    with pytest.raises(ValueError, match="valid keys: approximate"):
        write_model(Model([Subgraph([b.build().subgraphs[0].tensors[0]],
                                    [Operator("GELU", [0], [0], {"approx": True})], [0], [0])]))
    with pytest.raises(ValueError, match="RELU6 has no options"):
        b.op("RELU6", [x], {"alpha": 1.0})


def test_default_options_table_matches_schema_names():
    expected = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions",
                "DIV": "DivOptions", "LEAKY_RELU": "LeakyReluOptions", "GELU": "GeluOptions",
                "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
                "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions",
                "POW": "PowOptions", "ABS": "AbsOptions", "NEG": "NegOptions",
                "EXP": "ExpOptions", "HARD_SWISH": "HardSwishOptions",
                "RESHAPE": "ReshapeOptions", "MEAN": "ReducerOptions", "SUM": "ReducerOptions",
                "SOFTMAX": "SoftmaxOptions", "CONCATENATION": "ConcatenationOptions",
                "FULLY_CONNECTED": "FullyConnectedOptions", "CONV_2D": "Conv2DOptions",
                "AVERAGE_POOL_2D": "Pool2DOptions", "RELU6": None, "LOGISTIC": None}
    b = ModelBuilder()
    x = b.input("x", (2, 2))
    for op, options_type in expected.items():
        b.op(op, [x])
    assert {op.op: op.options_type for op in b.build().subgraphs[0].operators} == expected


def test_reshape_options_with_a_list_round_trip_and_run():
    b = ModelBuilder()
    shape = b.const("shape", np.array([3, 2], np.int32))
    b.output(b.op("RESHAPE", [b.input("x", (2, 3)), shape], {"new_shape": [3, 2]}, shape=(3, 2)))
    content = b.to_bytes()
    (op,) = read_model(content).subgraphs[0].operators
    assert op.options == {"new_shape": [3, 2]}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(content, x)[0], x.reshape(3, 2))


def test_custom_op_keeps_code_and_custom_options():
    model = small_model().build()
    model.subgraphs[0].operators.append(
        Operator("CUSTOM", [0], [1], {"custom_options": b"\x01\x02"}, custom_code="MyFused"))
    op = read_model(write_model(model)).subgraphs[0].operators[-1]
    assert (op.op, op.custom_code, op.options) == ("CUSTOM", "MyFused",
                                                   {"custom_options": b"\x01\x02"})


# ------------------------------------------------------------------------------ bad input


def test_missing_file_raises_model_format_error_naming_it(tmp_path):
    path = tmp_path / "nope.tflite"
    with pytest.raises(ModelFormatError, match="nope.tflite: cannot read file"):
        read_model(path)


def test_empty_file_raises_model_format_error(tmp_path):
    path = tmp_path / "empty.tflite"
    path.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty.tflite: empty file"):
        read_model(path)


def test_wrong_file_identifier_raises_model_format_error(tmp_path):
    path = tmp_path / "other.tflite"
    content = bytearray(small_model().to_bytes())
    content[4:8] = b"XXXX"
    path.write_bytes(content)
    with pytest.raises(ModelFormatError, match=r"other.tflite: not a TFLite model"):
        read_model(path)


def read_or_format_error(source, label: str) -> None:
    """The contract for any input: a Model or a one-line ModelFormatError naming the source."""
    try:
        assert isinstance(read_model(source), Model)
    except ModelFormatError as e:
        assert str(e).startswith(f"{label}: ") and "\n" not in str(e)


def test_truncated_files_raise_model_format_error_naming_the_path(tmp_path):
    content = small_model().to_bytes()
    path = tmp_path / "cut.tflite"
    for n in range(1, len(content), 7):
        path.write_bytes(content[:n])
        read_or_format_error(path, str(path))
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(ModelFormatError, match="cut.tflite: truncated or corrupt"):
        read_model(path)


def test_random_bytes_raise_model_format_error():
    rng = random.Random(0)
    for n in range(300):
        junk = rng.randbytes(rng.randrange(1, 400))
        if n % 2:
            junk = junk[:4] + b"TFL3" + junk[8:]
        read_or_format_error(junk, "<bytes>")


def test_constant_size_mismatch_and_bad_indices_raise_model_format_error():
    raw = unpack(small_model().to_bytes())
    raw.subgraphs[0].tensors[2].shape = [4]
    with pytest.raises(ModelFormatError, match="constant buffer has 12 bytes, expected 16"):
        read_model(pack(raw))
    raw.subgraphs[0].tensors[2].shape = [3]
    raw.subgraphs[0].operators[0].inputs = [0, 99]
    with pytest.raises(ModelFormatError, match="tensor index 99 out of range"):
        read_model(pack(raw))
    raw.subgraphs[0].operators[0].inputs = [0, 2]
    raw.subgraphs[0].tensors[0].buffer = 7
    with pytest.raises(ModelFormatError, match="uses buffer 7"):
        read_model(pack(raw))


SMALL = small_model().to_bytes()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SMALL) - 1), st.integers(0, 7)),
                min_size=1, max_size=4))
def test_bit_flips_give_a_model_or_model_format_error(flips):
    content = bytearray(SMALL)
    for position, bit in flips:
        content[position] ^= 1 << bit
    read_or_format_error(bytes(content), "<bytes>")
