"""fusion-delegate: a JIT-fusing CPU delegate for TensorFlow Lite / LiteRT, in Python.

    from ai_edge_litert.interpreter import Interpreter
    from fusion_delegate import FusionDelegate
    interpreter = Interpreter(model_path=path, experimental_delegates=[FusionDelegate()])
"""
import importlib

from .errors import (AbiMismatchError, DelegateOptionError, FusionDelegateError,
                     KernelCompileError, ModelFormatError, UnsupportedModelError)
from .options import FusionOptions

__version__ = "0.1.0"
__all__ = ["FusionDelegate", "FusionOptions", "SimpleDelegate", "SimpleDelegateKernel",
           "FusionDelegateError", "DelegateOptionError", "ModelFormatError",
           "UnsupportedModelError", "AbiMismatchError", "KernelCompileError"]

#: The delegate classes, imported on first use: they need numba, which claiming and the
#: package's other modules do not.
_DELEGATES = {"FusionDelegate": ".fusion", "SimpleDelegate": ".simple_delegate",
              "SimpleDelegateKernel": ".simple_delegate"}


def __getattr__(name: str):
    if name in _DELEGATES:
        return getattr(importlib.import_module(_DELEGATES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
