"""fusion-delegate: a JIT-fusing CPU delegate for TensorFlow Lite / LiteRT, in Python.

    from ai_edge_litert.interpreter import Interpreter
    from fusion_delegate import FusionDelegate
    interpreter = Interpreter(model_path=path, experimental_delegates=[FusionDelegate()])
"""
from .errors import (AbiMismatchError, DelegateOptionError, FusionDelegateError,
                     KernelCompileError, ModelFormatError, UnsupportedModelError)
from .fusion import FusionDelegate
from .options import FusionOptions
from .simple_delegate import SimpleDelegate, SimpleDelegateKernel

__version__ = "0.1.0"
__all__ = ["FusionDelegate", "FusionOptions", "SimpleDelegate", "SimpleDelegateKernel",
           "FusionDelegateError", "DelegateOptionError", "ModelFormatError",
           "UnsupportedModelError", "AbiMismatchError", "KernelCompileError"]
