"""Opening a model by its path on the server, and the app's upload limit (no Streamlit here).

Rules:

1. Off unless the server's operator allows it: ``FUSIONVIZ_OPEN_PATHS`` lists the folders
   (``os.pathsep``-separated, ``dir1:dir2`` on Linux) under which a path may be opened. Unset or
   empty: nobody can open a path (an app deployed for untrusted users stays as it was).
2. A path is checked after resolving it (``~``, ``..`` and symbolic links): it must lie under one
   of the folders, resolved the same way. A relative path is taken from the first folder.
3. What may be opened is what ``fusionviz.model_io.load_path`` opens: an ``.onnx`` file, a
   ``.zip`` of a folder, or a folder holding one model. Anything else is refused here, before a
   byte is read, with a sentence saying why (outside the folders, no such file, not ONNX).
4. The upload limit is the command line's model-size limit (``model_io.Limits``,
   ``FUSIONVIZ_MAX_MODEL_MB``), in Streamlit's megabytes (2**20 bytes).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from fusionviz import errors

OPEN_PATHS_ENV = "FUSIONVIZ_OPEN_PATHS"
MODEL_SUFFIXES = (".onnx", ".zip")
HOW_TO_ENABLE = (f"Start the server with {OPEN_PATHS_ENV} set to the folders it may open, e.g. "
                 f"`{OPEN_PATHS_ENV}=/data/models:/srv/onnx streamlit run app.py`; only files under "
                 "those folders can be opened.")


def allowed_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Rule 1: the folders paths may be opened under (resolved; empty: opening by path is off)."""
    env = os.environ if environ is None else environ
    raw = env.get(OPEN_PATHS_ENV, "") or ""
    out: list[Path] = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if not part:
            continue
        try:
            p = Path(part).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if p not in out:
            out.append(p)
    return out


def _shown(text: str, n: int = 160) -> str:
    return errors.printable(text, n)


def resolve_model_path(text: str, allowed: Sequence[Path]) -> Path:
    """Rules 2-3: the path a user typed, checked; the resolved path to load.

    Raises:
        fusionviz.errors.ModelLoadError: opening by path is off, the path is empty, outside the
            allowed folders, missing, or not an ONNX model (one sentence each).
    """
    if not allowed:
        raise errors.ModelLoadError(f"Opening a model by path is off on this server. {HOW_TO_ENABLE}")
    text = (text or "").strip()
    if not text:
        raise errors.ModelLoadError("Type the path of an .onnx file, a .zip or a folder on the server.")
    if "\x00" in text:
        raise errors.ModelLoadError("That path holds a NUL character; it cannot name a file.")
    try:
        raw = Path(text).expanduser()
        if not raw.is_absolute():
            raw = allowed[0] / raw
        p = raw.resolve()
    except (OSError, RuntimeError, ValueError):
        raise errors.ModelLoadError(f"Cannot resolve '{_shown(text)}' (a symbolic link loop?).") from None
    if not any(p == d or p.is_relative_to(d) for d in allowed):
        folders = ", ".join(str(d) for d in allowed)
        raise errors.ModelLoadError(
            f"'{_shown(text)}' is outside the folders this server opens ({folders}; {OPEN_PATHS_ENV}).")
    try:
        exists, is_dir, is_file = p.exists(), p.is_dir(), p.is_file()
    except OSError as exc:
        raise errors.ModelLoadError(f"Cannot read '{_shown(text)}': {exc.strerror or type(exc).__name__}.") from None
    if not exists:
        raise errors.ModelLoadError(f"No such file or folder on the server: '{_shown(text)}'.")
    if is_dir:
        return p
    if not is_file:
        raise errors.ModelLoadError(f"'{_shown(text)}' is not a regular file.")
    if p.suffix.lower() not in MODEL_SUFFIXES:
        raise errors.ModelLoadError(
            f"'{_shown(p.name)}' is not an ONNX model: open an .onnx file, a .zip of a model folder, "
            "or a folder holding one model.")
    return p


def upload_limit_mb(max_model_bytes: int | None = None) -> int:
    """Rule 4: the largest upload, in Streamlit's MB, equal to the model-size limit (rounded up)."""
    if max_model_bytes is None:
        from fusionviz.model_io import Limits

        max_model_bytes = Limits().max_model_bytes
    return max(1, math.ceil(max_model_bytes / 2**20))
