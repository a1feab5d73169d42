"""User-facing errors: the one place they are defined.

Every error a user can cause (a bad file, a bad flag, a model onnxruntime cannot run) is a
:class:`FusionvizError` whose ``str()`` is one readable sentence. The CLI prints it on one line
and exits 2; the app shows it with ``st.error``. Anything else that escapes is a bug.
"""

from __future__ import annotations

import re
import unicodedata

#: Longest message a user sees; model-derived names can be 10,000 characters long.
MAX_MESSAGE_CHARS = 500

_SPECIAL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: object, max_chars: int | None = None) -> str:
    """``text`` made safe for a terminal or a one-line message.

    Control and format characters (ANSI escapes, carriage returns, NUL, bidi overrides such as
    U+202E) are replaced by visible escapes (``\\x1b``, ``\\r``, ``\\u202e``) so text taken from a
    model can neither move the cursor nor hide or reorder what is printed around it. Newlines and
    tabs are escaped too. With ``max_chars`` the result is shortened and says how much was cut.

    Args:
        text: any object; ``str()`` of it is used.
        max_chars: optional length bound of the result.

    Returns:
        A string with no control or format characters.
    """
    s = str(text)
    if not s.isprintable():
        out = []
        for ch in s:
            if ch.isprintable():
                out.append(ch)
            elif unicodedata.category(ch) == "Zs":  # no-break and other odd spaces
                out.append(" ")
            elif ch in _SPECIAL:
                out.append(_SPECIAL[ch])
            else:
                code = ord(ch)
                out.append(f"\\x{code:02x}" if code < 0x100 else
                           f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        s = "".join(out)
    if max_chars is not None and len(s) > max_chars:
        cut = len(s) - max_chars
        s = s[:max_chars] + f"...(+{cut} chars)"
    return s


class FusionvizError(Exception):
    """Base class: ``str(err)`` is a single sentence meant for the user."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, bounded length, no control characters: file names, tensor names and
        # protobuf messages can be huge, multi-line, or carry terminal escape sequences.
        message = printable(" ".join(str(message).split()))
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
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


class TensorDataError(ModelLoadError):
    """A tensor's declared shape does not match the data it holds (e.g. dims of 2**40, 4 bytes)."""


class ArchiveError(NotOnnxError):
    """A zip archive is broken or holds no single model."""


class InputSpecError(FusionvizError):
    """A bad flag or setting: unknown pass name, malformed --shape, bad .npz.

    ``page``: the same in the app's words, where the message names a command-line flag (the app
    has a control for it instead); None when the message reads the same in both.
    """

    def __init__(self, message: str = "", *, page: str | None = None) -> None:
        super().__init__(message)
        self.page = page


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


class GraphPathError(FusionvizError):
    """A body path (``NODE/then_branch``, nested ``NODE/then_branch/NODE/body``) names no
    If/Loop/Scan body of the model; the message names the bodies there are."""


_ORT_ALLOC = re.compile(r"Failed to allocate memory for requested buffer of size (\d+)")
_ORT_NODE = re.compile(r"while running (\w+) node\. Name:'([^']*)'")
#: onnxruntime's own source position and the C++ function around it, e.g.
#: "/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::
#: AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) ".
_ORT_SOURCE = re.compile(r"(?:\S*/)?[\w\-]+\.(?:cc|cpp|h):\d+(?:\s+[\w:<>*&~ ]+\([^()]*\)(?:\s*const)?)?\s*")


def _size(n: int) -> str:
    for unit, div in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} bytes"


def readable_runtime_message(text: str) -> str:
    """onnxruntime's internal messages in words: its allocator's ``bfc_arena.cc`` failure becomes
    one line saying how much memory which node wanted; any other source position and C++
    signature of onnxruntime's is cut out. Other text comes back as it is."""
    alloc = _ORT_ALLOC.search(text)
    if alloc:
        node = _ORT_NODE.search(text)
        where = f" for node '{node.group(2)}' ({node.group(1)})" if node else ""
        return (f"onnxruntime ran out of memory: it could not allocate {_size(int(alloc.group(1)))}{where}. "
                "Smaller inputs need less (Inputs on the Model page).")
    return _ORT_SOURCE.sub("", text) if ".cc:" in text or ".h:" in text else text
