"""Which TFLite runtime we run in, and the refusal of runtimes outside the supported ranges.

The refusal tests replace what the environment reports (`runtime._version`, `runtime._is_loaded`):
they test our own version logic, not a runtime. The first tests run against the real one.
"""
import importlib
import os
import re
import sys

import pytest

from conftest import ROOT
from fusion_delegate import FusionDelegate, runtime
from fusion_delegate.runtime import UnsupportedRuntimeError
from fusion_delegate.simple_delegate import SimpleDelegate

LITERT, TFLITE_RUNTIME, TENSORFLOW = (runtime.SPEC_BY_NAME[name] for name in
                                      ("ai-edge-litert", "tflite-runtime", "tensorflow"))


def test_the_runtime_in_use_is_detected_and_supported():
    found = runtime.RUNTIME
    assert found in runtime.installed()
    assert found.is_supported, f"{found} is outside {found.spec.supported}"
    assert (runtime.NAME, runtime.VERSION) == (found.spec.name, found.version)
    module = importlib.import_module(found.spec.package)
    if hasattr(module, "__version__"):
        assert module.__version__ == found.version
    assert runtime.Interpreter.__module__ == found.spec.interpreter_module
    assert hasattr(runtime.OpResolverType, "BUILTIN_WITHOUT_DEFAULT_DELEGATES")
    runtime.check_supported()


def test_schema_module_has_the_object_api_the_model_reader_uses():
    for name in ("Model", "ModelT", "BufferT", "TensorT", "OperatorT", "BuiltinOperator",
                 "TensorType", "BuiltinOptions"):
        assert hasattr(runtime.schema, name), name
    spec = runtime.RUNTIME.spec
    if spec.schema_module:  # the runtime's own, not another installed runtime's
        assert os.path.samefile(runtime.schema.__file__, runtime._schema_file(spec))


def test_without_any_schema_module_the_model_reader_says_what_to_install(monkeypatch):
    monkeypatch.setattr(runtime, "RUNTIME", runtime.Found(TFLITE_RUNTIME, "2.14.0"))
    monkeypatch.setattr(runtime, "_schema_file", lambda spec: None)
    for spec in runtime.SPECS:
        monkeypatch.delitem(sys.modules, spec.schema_module or "-", raising=False)
    with pytest.raises(UnsupportedRuntimeError, match=r"tflite-runtime 2\.14\.0 ships none\. "
                                                      r"ai-edge-litert .* and tensorflow ship one"):
        runtime._schema_module()


def test_pyproject_declares_the_same_ai_edge_litert_range():
    tomllib = pytest.importorskip("tomllib")
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [d.replace(" ", "") for d in dependencies if d.startswith("ai-edge-litert")]
    assert declared == [LITERT.supported.replace(" ", "")]


def test_readme_states_the_supported_ranges():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Supported runtimes"):readme.index("## Options")]
    for spec in runtime.SPECS:
        row = next(line for line in section.splitlines() if line.startswith(f"| {spec.name}"))
        assert spec.supported.replace(f"{spec.name} ", "").replace(",", ", ") in row, row


@pytest.mark.parametrize("text, parsed", [
    ("2.3.0", (2, 3, 0)), ("2.14", (2, 14, 0)), ("2.4.0.dev20261026", (2, 4, 0)),
    ("2.15.0.post1", (2, 15, 0)), ("2.16.0rc1", (2, 16, 0)), ("garbage", (0,))])
def test_versions_parse_to_their_release(text, parsed):
    assert runtime.parse_version(text) == parsed


def fake_environment(monkeypatch, versions: dict, loaded=()):
    """Pretend exactly these runtimes are installed (name -> version) and these imported."""
    monkeypatch.setattr(runtime, "_version", lambda spec: versions.get(spec.name))
    monkeypatch.setattr(runtime, "_is_loaded", lambda spec: spec.name in loaded)
    monkeypatch.delenv(runtime.ALLOW_UNSUPPORTED_ENV, raising=False)


@pytest.mark.parametrize("create", [FusionDelegate, SimpleDelegate],
                         ids=["FusionDelegate", "SimpleDelegate"])
def test_too_old_runtime_is_refused_at_creation_naming_found_and_supported(monkeypatch, create):
    below = ".".join(map(str, LITERT.minimum[:-1] + (LITERT.minimum[-1] - 1,)))
    fake_environment(monkeypatch, {"ai-edge-litert": below}, loaded=["ai-edge-litert"])
    with pytest.raises(UnsupportedRuntimeError) as error:
        create()
    message = str(error.value)
    assert f"ai-edge-litert {below}" in message
    assert LITERT.supported in message
    assert runtime.ALLOW_UNSUPPORTED_ENV in message


def test_too_new_runtime_is_refused(monkeypatch):
    newer = ".".join(map(str, LITERT.below)) + ".dev20261026"
    fake_environment(monkeypatch, {"ai-edge-litert": newer}, loaded=["ai-edge-litert"])
    with pytest.raises(UnsupportedRuntimeError, match=re.escape(f"ai-edge-litert {newer}")):
        FusionDelegate()


def test_no_runtime_at_all_is_refused_listing_every_supported_range(monkeypatch):
    fake_environment(monkeypatch, {})
    with pytest.raises(UnsupportedRuntimeError, match="no TFLite runtime found") as error:
        FusionDelegate()
    for spec in runtime.SPECS:
        assert spec.supported in str(error.value)


def test_an_imported_unsupported_runtime_is_refused_even_beside_a_supported_one(monkeypatch):
    fake_environment(monkeypatch, {"ai-edge-litert": "2.3.0", "tensorflow": "2.10.0"},
                     loaded=["ai-edge-litert", "tensorflow"])
    expected = r"imported: tensorflow 2\.10\.0; fusion-delegate supports " + re.escape(
        TENSORFLOW.supported)
    with pytest.raises(UnsupportedRuntimeError, match=expected):
        FusionDelegate()


def test_an_unsupported_runtime_installed_but_not_imported_is_not_held_against_us(monkeypatch):
    fake_environment(monkeypatch, {"ai-edge-litert": "2.3.0", "tensorflow": "2.10.0"},
                     loaded=["ai-edge-litert"])
    FusionDelegate()
    fake_environment(monkeypatch, {"ai-edge-litert": "2.3.0", "tensorflow": "2.10.0"})
    FusionDelegate()


def test_only_unsupported_runtimes_installed_is_refused(monkeypatch):
    fake_environment(monkeypatch, {"tflite-runtime": "2.13.0"})
    with pytest.raises(UnsupportedRuntimeError,
                       match=r"installed: tflite-runtime 2\.13\.0; fusion-delegate supports "
                             + re.escape(TFLITE_RUNTIME.supported)):
        FusionDelegate()


def test_the_refusal_can_be_overridden(monkeypatch):
    fake_environment(monkeypatch, {"ai-edge-litert": "1.0.1"}, loaded=["ai-edge-litert"])
    monkeypatch.setenv(runtime.ALLOW_UNSUPPORTED_ENV, "1")
    FusionDelegate()


def test_selection_follows_the_environment_variable_then_what_is_imported(monkeypatch):
    fake_environment(monkeypatch, {"ai-edge-litert": "2.3.0", "tflite-runtime": "2.14.0"},
                     loaded=["tflite-runtime"])
    monkeypatch.delenv(runtime.RUNTIME_ENV, raising=False)
    assert runtime.select().spec is TFLITE_RUNTIME
    monkeypatch.setenv(runtime.RUNTIME_ENV, "ai-edge-litert")
    assert runtime.select().spec is LITERT
    monkeypatch.setenv(runtime.RUNTIME_ENV, "tensorflow")
    with pytest.raises(UnsupportedRuntimeError, match="tensorflow is not installed"):
        runtime.select()
    monkeypatch.setenv(runtime.RUNTIME_ENV, "tf-lite")
    with pytest.raises(UnsupportedRuntimeError, match="not a runtime we know"):
        runtime.select()
    fake_environment(monkeypatch, {"ai-edge-litert": "2.3.0", "tflite-runtime": "2.14.0"})
    monkeypatch.delenv(runtime.RUNTIME_ENV)
    assert runtime.select().spec is LITERT
