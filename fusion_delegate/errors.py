"""Typed errors, named for who must act on them."""


class FusionDelegateError(Exception):
    """Base class of every error fusion-delegate raises on purpose."""


class DelegateOptionError(FusionDelegateError, ValueError):
    """An option given to the delegate or a tool is unknown or has a bad value."""


class ModelFormatError(FusionDelegateError, ValueError):
    """A .tflite file is missing, truncated or not a TFLite flatbuffer."""


class UnsupportedModelError(FusionDelegateError):
    """The model uses something the delegate cannot handle and cannot skip."""


class AbiMismatchError(FusionDelegateError, RuntimeError):
    """The running TFLite runtime's struct layout differs from the one we mirror."""


class KernelCompileError(FusionDelegateError, RuntimeError):
    """numba failed to compile a generated kernel; `source_path` holds its source."""

    def __init__(self, message: str, source_path: str | None = None):
        super().__init__(message if source_path is None else f"{message} (source: {source_path})")
        self.source_path = source_path


class KernelBuildError(FusionDelegateError, RuntimeError):
    """A partition's kernel cannot be built at the shapes it was prepared with."""
