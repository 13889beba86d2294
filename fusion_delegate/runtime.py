"""Which TFLite Python runtime the delegate runs in, and whether it is one we support.

The delegate is a ctypes `TfLiteDelegate`: any interpreter that takes `experimental_delegates`
through `_get_native_delegate_pointer()` accepts it. The ranges below are the versions tested
with it (tests/compat/run.sh, the README's "Supported runtimes"): same structs, the delegate's
lifecycle works, and where their own kernels differ from those the fused kernels reproduce
(ai-edge-litert >= 2.1.6), the difference is known and listed (tests/compat/test_host_kernels.py).
Outside them the delegate refuses to be created rather than risk a struct layout it does not
know, which would corrupt memory instead of failing.

Which runtime will host a delegate cannot be known when it is created (several may be installed),
so `check_supported()` looks at what is already imported, else at what is installed;
`abi.check_live_context()` at the first prepare under each runtime library remains the safety
net.

One place picks the runtime for tools and tests: `FUSION_DELEGATE_RUNTIME` (a name below) if set,
else one whose interpreter is already imported, else the first installed in the order below.
This module then exposes, lazily (importing tensorflow takes seconds): `Interpreter`,
`OpResolverType`, `schema` (the flatbuffers schema module with its object API), `NAME`,
`VERSION` and `RUNTIME`.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass

from .errors import FusionDelegateError

#: Names the environment variables this module reads.
RUNTIME_ENV = "FUSION_DELEGATE_RUNTIME"
ALLOW_UNSUPPORTED_ENV = "FUSION_DELEGATE_ALLOW_UNSUPPORTED_RUNTIME"


class UnsupportedRuntimeError(FusionDelegateError, RuntimeError):
    """No supported TFLite runtime is installed, or the one in use is outside our ranges."""


@dataclass(frozen=True)
class RuntimeSpec:
    name: str                        #: as users `pip install` it
    package: str                     #: its top-level import name
    interpreter_module: str          #: has `Interpreter` and `OpResolverType`
    schema_module: str | None        #: flatbuffers schema, object API included; None: ships none
    distributions: tuple[str, ...]   #: the PyPI names that install `package`
    minimum: tuple[int, ...]         #: oldest supported version, inclusive
    below: tuple[int, ...]           #: first unsupported newer version

    @property
    def supported(self) -> str:
        return f"{self.name} >={_dotted(self.minimum)},<{_dotted(self.below)}"


SPECS: tuple[RuntimeSpec, ...] = (
    RuntimeSpec("ai-edge-litert", "ai_edge_litert", "ai_edge_litert.interpreter",
                "ai_edge_litert.schema_py_generated",
                ("ai-edge-litert", "ai-edge-litert-nightly"), (1, 2), (2, 4)),
    RuntimeSpec("tflite-runtime", "tflite_runtime", "tflite_runtime.interpreter", None,
                ("tflite-runtime", "tflite-runtime-nightly"), (2, 14), (2, 15)),
    RuntimeSpec("tensorflow", "tensorflow", "tensorflow.lite.python.interpreter",
                "tensorflow.lite.python.schema_py_generated",
                ("tensorflow", "tensorflow-cpu", "tf-nightly", "tf-nightly-cpu",
                 "tensorflow-intel", "tensorflow-aarch64", "tensorflow-macos"), (2, 18), (2, 22)),
)
SPEC_BY_NAME = {spec.name: spec for spec in SPECS}


@dataclass(frozen=True)
class Found:
    """An installed runtime: its spec and version string."""
    spec: RuntimeSpec
    version: str

    @property
    def is_supported(self) -> bool:
        return self.spec.minimum <= parse_version(self.version) < self.spec.below

    @property
    def is_loaded(self) -> bool:
        """Its interpreter is already imported: it may be the one hosting the delegate."""
        return _is_loaded(self.spec)

    def __str__(self) -> str:
        return f"{self.spec.name} {self.version}"


def parse_version(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of '2.4.0.dev2026', '2.15.0.post1', ...; a pre-release counts as
    its release, so a nightly of an unsupported version is unsupported too."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    if not match:
        return (0,)
    return tuple(int(part or 0) for part in match.groups())


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _is_loaded(spec: RuntimeSpec) -> bool:
    # tf.lite.Interpreter is reachable as soon as tensorflow is imported.
    return spec.interpreter_module in sys.modules or (
        spec.package == "tensorflow" and "tensorflow" in sys.modules)


def _version(spec: RuntimeSpec) -> str | None:
    """The installed version, or None. The loaded module's own version first, then the
    distribution's metadata (without importing: importing tensorflow takes seconds)."""
    module = sys.modules.get(spec.package)
    version = getattr(module, "__version__", None) if module is not None else None
    if isinstance(version, str) and version:
        return version
    return _installed_version(spec)


@functools.cache
def _installed_version(spec: RuntimeSpec) -> str | None:
    """The distribution's version, read once per process (0.1 ms a runtime, and every
    FusionDelegate() checks)."""
    try:
        if importlib.util.find_spec(spec.package) is None:
            return None
    except (ImportError, ValueError):
        return None
    for distribution in spec.distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"


def installed() -> list[Found]:
    """Every known runtime that can be imported here, in SPECS order."""
    found = []
    for spec in SPECS:
        version = _version(spec)
        if version is not None:
            found.append(Found(spec, version))
    return found


def supported_ranges() -> str:
    return ", ".join(spec.supported for spec in SPECS)


def select() -> Found:
    """The runtime tools and tests use (see the module docstring)."""
    found = installed()
    wanted = os.environ.get(RUNTIME_ENV, "").strip()
    if wanted:
        if wanted not in SPEC_BY_NAME:
            raise UnsupportedRuntimeError(
                f"{RUNTIME_ENV}={wanted!r} is not a runtime we know; known: "
                f"{', '.join(SPEC_BY_NAME)}")
        for item in found:
            if item.spec.name == wanted:
                return item
        raise UnsupportedRuntimeError(f"{RUNTIME_ENV}={wanted!r} but {wanted} is not installed")
    if not found:
        raise UnsupportedRuntimeError(
            f"no TFLite runtime is installed; fusion-delegate supports {supported_ranges()}")
    loaded = [item for item in found if item.is_loaded]
    return (loaded or found)[0]


def check_supported() -> None:
    """Refuse, with one message naming what was found and what is supported, when no
    supported runtime is installed, or when an imported runtime (a possible host of the
    delegate) is outside the supported range. Set FUSION_DELEGATE_ALLOW_UNSUPPORTED_RUNTIME=1
    to try anyway: the struct check at prepare still runs."""
    if os.environ.get(ALLOW_UNSUPPORTED_ENV, "") not in ("", "0"):
        return
    found = installed()
    if not found:
        raise UnsupportedRuntimeError(
            f"no TFLite runtime found (ai_edge_litert, tflite_runtime and tensorflow cannot be "
            f"imported); fusion-delegate supports {supported_ranges()}")
    loaded = [item for item in found if item.is_loaded]
    candidates = loaded or found
    unsupported = [item for item in candidates if not item.is_supported]
    if unsupported and (loaded or len(unsupported) == len(candidates)):
        names = ", ".join(str(item) for item in unsupported)
        wanted = ", ".join(item.spec.supported for item in unsupported)
        where = "imported" if loaded else "installed"
        raise UnsupportedRuntimeError(
            f"unsupported TFLite runtime {where}: {names}; fusion-delegate supports {wanted} "
            f"(all supported: {supported_ranges()}). To try anyway, set "
            f"{ALLOW_UNSUPPORTED_ENV}=1")


def _schema_file(spec: RuntimeSpec) -> str | None:
    """Where `spec`'s package keeps its schema module, found without importing the package."""
    try:
        package = importlib.util.find_spec(spec.package)
    except (ImportError, ValueError):
        return None
    if package is None or not package.submodule_search_locations:
        return None
    relative = spec.schema_module.split(".", 1)[1].replace(".", os.sep) + ".py"
    for location in package.submodule_search_locations:
        path = os.path.join(location, relative)
        if os.path.isfile(path):
            return path
    return None


def _schema_module():
    """The flatbuffers schema module: the runtime's own, else one another installed runtime
    ships (tflite-runtime ships none). A module not imported yet is loaded from its file, under
    a private name, so that no second runtime's package (and native library) is imported."""
    runtime = __getattr__("RUNTIME")
    specs = [runtime.spec] + [spec for spec in SPECS if spec is not runtime.spec]
    for spec in specs:
        if not spec.schema_module:
            continue
        if spec.schema_module in sys.modules:
            return sys.modules[spec.schema_module]
        path = _schema_file(spec)
        if path is None:
            continue
        name = f"{__name__}._schema_of_{spec.package}"
        loader = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        sys.modules[name] = module
        return module
    raise UnsupportedRuntimeError(
        f"reading and writing .tflite models needs the TFLite flatbuffers schema module with its "
        f"object API (schema_py_generated.py), and {runtime} ships none. ai-edge-litert "
        f"(fusion-delegate's default dependency) and tensorflow ship one: install either; it is "
        f"read from its file, that runtime is not imported. (The `tflite` package has no object "
        f"API; tflite-support's schema predates fields the model reader uses.)")


_LAZY = {
    "RUNTIME": lambda: select(),
    "NAME": lambda: __getattr__("RUNTIME").spec.name,
    "VERSION": lambda: __getattr__("RUNTIME").version,
    "interpreter_module": lambda: importlib.import_module(
        __getattr__("RUNTIME").spec.interpreter_module),
    "Interpreter": lambda: __getattr__("interpreter_module").Interpreter,
    "OpResolverType": lambda: __getattr__("interpreter_module").OpResolverType,
    "schema": _schema_module,
}


def __getattr__(name: str):
    """Module attributes computed on first use, then kept."""
    if name in globals():
        return globals()[name]
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _LAZY[name]()
    globals()[name] = value
    return value
