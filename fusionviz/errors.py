"""User-facing errors: the one place they are defined.

Every error a user can cause (a bad file, a bad flag, a model onnxruntime cannot run) is a
:class:`FusionvizError` whose ``str()`` is one readable sentence. The CLI prints it on one line
and exits 2; the app shows it with ``st.error``. Anything else that escapes is a bug.
"""

from __future__ import annotations


class FusionvizError(Exception):
    """Base class: ``str(err)`` is a single sentence meant for the user."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, bounded length: file names and protobuf messages can be huge or multi-line.
        message = " ".join(str(message).split())
        if len(message) > 500:
            message = message[:497] + "..."
        super().__init__(message)


class ModelLoadError(FusionvizError):
    """The input is not a loadable ONNX model."""


class EmptyModelError(ModelLoadError):
    """The file or upload has no bytes."""


class NotOnnxError(ModelLoadError):
    """The bytes are not a protobuf, or not an ONNX ModelProto."""


class ModelTooLargeError(ModelLoadError):
    """The input exceeds a configured size limit."""


class ExternalDataError(ModelLoadError):
    """External data is missing, truncated, or points outside the model's folder."""


class UnsafePathError(ExternalDataError):
    """A path inside the model or archive escapes its folder; it is refused, never read."""


class UnsupportedVersionError(ModelLoadError):
    """IR version or opset outside what this onnx/onnxruntime supports."""


class CheckerError(ModelLoadError):
    """The ONNX checker rejected the graph."""


class InputSpecError(FusionvizError):
    """A bad flag or setting: unknown pass name, malformed --shape, bad .npz."""


class PassError(FusionvizError):
    """A pass failed in a way that is reported to the user."""


class RuntimeLoadError(FusionvizError):
    """onnxruntime could not create a session or run the model."""


class VerificationError(FusionvizError):
    """Optimized outputs differ from the original beyond tolerance."""

    exit_code = 3


class RenderError(FusionvizError):
    """The graph could not be drawn (too large, or no renderer)."""


class BenchError(FusionvizError):
    """A benchmark worker failed, timed out or ran out of memory."""
