"""Safe model loading and saving.

Rules (numbered; the code points back to them):

1. Loading never executes anything: bytes are parsed as a protobuf, checked, and nothing else.
2. Size limits are enforced before parsing (``Limits.max_model_bytes``) and for archives before
   extraction (``max_archive_bytes``, ``max_archive_ratio`` against zip bombs).
3. External data ``location`` must be a relative path that resolves, after following symlinks,
   inside the model's folder. Absolute paths, ``..`` and symlinks out are refused *before* any
   byte is read. Offsets/lengths past the end of the file are refused.
4. Zip members that would land outside the extraction folder are refused; extraction goes to a
   temp dir this module owns and deletes.
5. IR version and opsets must be within what the installed onnx supports.
6. The ONNX checker must pass; its complaint is reduced to one sentence naming the node.

A content hash (sha256 over the serialized model with external data inlined) identifies a model
for caching.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from fusionviz import errors

logger = logging.getLogger(__name__)

MIN_IR_VERSION = 3
MIN_OPSET = 7


def _env_mb(name: str, default: float) -> int:
    try:
        return int(float(os.environ.get(name, default)) * 1024 * 1024)
    except ValueError:
        return int(default * 1024 * 1024)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Configurable limits (environment variables in brackets, sizes in MB).

    Attributes:
        max_model_bytes: largest model file or upload, external data included
            [FUSIONVIZ_MAX_MODEL_MB, default 500].
        max_archive_bytes: largest total uncompressed size of a zip [FUSIONVIZ_MAX_ARCHIVE_MB, 1000].
        max_archive_ratio: largest uncompressed/compressed ratio of a zip member (zip bombs).
        max_archive_members: most members in a zip.
        max_nodes: most nodes (subgraphs included) a model may have [FUSIONVIZ_MAX_NODES, 200000].
    """

    max_model_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_MODEL_MB", 500)
    )
    max_archive_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_ARCHIVE_MB", 1000)
    )
    max_archive_ratio: float = 200.0
    max_archive_members: int = 10_000
    max_nodes: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("FUSIONVIZ_MAX_NODES", "200000"))
    )


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A checked model, external data inlined, with its content hash."""

    proto: onnx.ModelProto
    name: str
    sha256: str
    size_bytes: int
    source: str

    @property
    def short_hash(self) -> str:
        return self.sha256[:12]


def model_hash(model: onnx.ModelProto) -> str:
    """Content hash of a model (deterministic serialization)."""
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


# --------------------------------------------------------------------------- public entry points


def load_path(path: str | os.PathLike, *, limits: Limits | None = None, check: bool = True) -> LoadedModel:
    """Load a model from an ``.onnx`` file, a folder holding one, or a ``.zip``."""
    limits = limits or Limits()
    p = Path(path)
    if not p.exists():
        raise errors.ModelLoadError(f"No such file or folder: {_short(str(p))}.")
    if p.is_dir():
        model_file = _find_single_model(p)
        return _load_file(model_file, limits=limits, check=check, display=p.name)
    if zipfile.is_zipfile(p):
        if p.stat().st_size > limits.max_archive_bytes:
            raise errors.ModelTooLargeError(
                f"Archive is {_mb(p.stat().st_size)}, over the {_mb(limits.max_archive_bytes)} limit."
            )
        with open(p, "rb") as f:
            return _load_zip(f.read(), name=p.name, limits=limits, check=check)
    return _load_file(p, limits=limits, check=check, display=p.name)


def load_bytes(data: bytes, *, name: str = "upload.onnx", limits: Limits | None = None,
               check: bool = True) -> LoadedModel:
    """Load a model from uploaded bytes: a serialized ModelProto or a zip holding one."""
    limits = limits or Limits()
    if not data:
        raise errors.EmptyModelError(f"'{_short(name)}' is empty (0 bytes).")
    if data[:4] == b"PK\x03\x04":
        return _load_zip(data, name=name, limits=limits, check=check)
    if len(data) > limits.max_model_bytes:
        raise errors.ModelTooLargeError(
            f"'{_short(name)}' is {_mb(len(data))}, over the {_mb(limits.max_model_bytes)} limit."
        )
    model = _parse(data, name)
    if _uses_external_data(model):
        raise errors.ExternalDataError(
            f"'{_short(name)}' stores weights in external files; upload a .zip of the model's folder instead."
        )
    return _finish(model, name=name, size=len(data), source="upload", limits=limits, check=check)


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> Path:
    """Save a model; weights go to an external file only when the proto would exceed 2 GB."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if model.ByteSize() > 1_800_000_000:
        onnx.save_model(model, str(p), save_as_external_data=True, location=p.name + ".data")
    else:
        p.write_bytes(model.SerializeToString())
    return p


# --------------------------------------------------------------------------- internals


def _short(text: str, n: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB"


def _find_single_model(folder: Path) -> Path:
    candidates = sorted(q for q in folder.rglob("*.onnx") if q.is_file())
    if not candidates:
        raise errors.ModelLoadError(f"Folder '{_short(folder.name)}' holds no .onnx file.")
    if len(candidates) > 1:
        # Prefer a model at the top level when exactly one is there.
        top = [q for q in candidates if q.parent == folder]
        if len(top) == 1:
            return top[0]
        names = ", ".join(q.name for q in candidates[:5])
        raise errors.ModelLoadError(
            f"Folder '{_short(folder.name)}' holds {len(candidates)} .onnx files ({names}); choose one."
        )
    return candidates[0]


def _parse(data: bytes, name: str) -> onnx.ModelProto:
    # Rule 1: parse only.
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise errors.NotOnnxError(
            f"'{_short(name)}' is not an ONNX model (not a valid protobuf: {_short(str(exc), 80)})."
        ) from None
    # Random bytes, text files and other messages sometimes parse: require the fields a model has.
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise errors.NotOnnxError(
            f"'{_short(name)}' is not an ONNX model (the protobuf has no ir_version, graph or opset_import)."
        )
    return model


def _uses_external_data(model: onnx.ModelProto) -> bool:
    return any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for t in external_data_helper._get_all_tensors(model)
    )


def _load_file(path: Path, *, limits: Limits, check: bool, display: str) -> LoadedModel:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise errors.ModelLoadError(f"Cannot read '{_short(display)}': {exc.strerror}.") from None
    if not stat.S_ISREG(path.stat().st_mode):
        raise errors.ModelLoadError(f"'{_short(display)}' is not a regular file.")
    if size == 0:
        raise errors.EmptyModelError(f"'{_short(display)}' is empty (0 bytes).")
    if size > limits.max_model_bytes:
        raise errors.ModelTooLargeError(
            f"'{_short(display)}' is {_mb(size)}, over the {_mb(limits.max_model_bytes)} limit."
        )
    data = path.read_bytes()
    model = _parse(data, display)
    ext_bytes = 0
    if _uses_external_data(model):
        ext_bytes = _load_external(model, path.parent.resolve(), limits=limits, current=size)
    return _finish(model, name=display, size=size + ext_bytes, source=str(path), limits=limits,
                   check=check)


def _load_external(model: onnx.ModelProto, base: Path, *, limits: Limits, current: int) -> int:
    """Rule 3: validate every external location, then read the bytes ourselves."""
    total = current
    for tensor in external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        tname = _short(tensor.name, 60)
        if not location:
            raise errors.ExternalDataError(f"Tensor '{tname}' has external data with no location.")
        if os.path.isabs(location) or location.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", location):
            raise errors.UnsafePathError(
                f"Tensor '{tname}' points to an absolute path '{_short(location, 60)}'; refused."
            )
        parts = Path(location.replace("\\", "/")).parts
        if ".." in parts:
            raise errors.UnsafePathError(
                f"Tensor '{tname}' points outside the model folder ('{_short(location, 60)}'); refused."
            )
        target = (base / location).resolve()
        if base != target and base not in target.parents:
            raise errors.UnsafePathError(
                f"Tensor '{tname}' external file '{_short(location, 60)}' resolves outside the model folder (symlink?); refused."
            )
        if not target.is_file():
            raise errors.ExternalDataError(
                f"Tensor '{tname}' needs external file '{_short(location, 60)}', which is missing."
            )
        fsize = target.stat().st_size
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else fsize - offset
        except ValueError:
            raise errors.ExternalDataError(f"Tensor '{tname}' has a non-numeric offset/length.") from None
        if offset < 0 or length < 0 or offset + length > fsize:
            raise errors.ExternalDataError(
                f"Tensor '{tname}' reads bytes {offset}..{offset + length} of '{_short(location, 60)}', "
                f"which has only {fsize}."
            )
        total += length
        if total > limits.max_model_bytes:
            raise errors.ModelTooLargeError(
                f"Model with external data exceeds the {_mb(limits.max_model_bytes)} limit."
            )
        with open(target, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return total - current


def _safe_members(zf: zipfile.ZipFile, limits: Limits) -> Iterable[zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > limits.max_archive_members:
        raise errors.ModelTooLargeError(f"Archive has {len(infos)} entries, over the limit.")
    total = 0
    for info in infos:
        name = info.filename
        # Rule 4: no absolute names, no '..', no symlink entries.
        if name.startswith(("/", "\\")) or ".." in Path(name.replace("\\", "/")).parts or re.match(r"^[A-Za-z]:", name):
            raise errors.UnsafePathError(f"Archive entry '{_short(name, 60)}' escapes the archive folder; refused.")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise errors.UnsafePathError(f"Archive entry '{_short(name, 60)}' is a symlink; refused.")
        total += info.file_size
        if total > limits.max_archive_bytes:
            raise errors.ModelTooLargeError(
                f"Archive expands to more than {_mb(limits.max_archive_bytes)}; refused (zip bomb?)."
            )
        if info.compress_size and info.file_size / max(info.compress_size, 1) > limits.max_archive_ratio and info.file_size > 1_000_000:
            raise errors.ModelTooLargeError(
                f"Archive entry '{_short(name, 60)}' compresses {info.file_size // max(info.compress_size, 1)}:1; refused (zip bomb?)."
            )
        yield info


def _load_zip(data: bytes, *, name: str, limits: Limits, check: bool) -> LoadedModel:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise errors.NotOnnxError(f"'{_short(name)}' looks like a zip but cannot be opened.") from None
    tmp = Path(tempfile.mkdtemp(prefix="fusionviz_zip_"))
    try:
        with zf:
            for info in list(_safe_members(zf, limits)):
                if info.is_dir():
                    continue
                dest = (tmp / info.filename).resolve()
                if tmp.resolve() not in dest.parents:
                    raise errors.UnsafePathError(f"Archive entry '{_short(info.filename, 60)}' escapes; refused.")
                dest.parent.mkdir(parents=True, exist_ok=True)
                written = 0
                with zf.open(info) as src, open(dest, "wb") as out:
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > limits.max_archive_bytes:
                            raise errors.ModelTooLargeError("Archive expands past the size limit; refused.")
                        out.write(chunk)
        model_file = _find_single_model(tmp)
        loaded = _load_file(model_file, limits=limits, check=check, display=model_file.name)
        return dataclasses.replace(loaded, source=f"zip:{name}")
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise errors.NotOnnxError(f"'{_short(name)}' is a broken zip archive ({_short(str(exc), 80)}).") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _count_nodes(graph: onnx.GraphProto) -> int:
    n = 0
    stack = [graph]
    while stack:
        g = stack.pop()
        n += len(g.node)
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)
    return n


def _check_versions(model: onnx.ModelProto, name: str) -> None:
    # Rule 5.
    if not MIN_IR_VERSION <= model.ir_version <= onnx.IR_VERSION:
        raise errors.UnsupportedVersionError(
            f"'{_short(name)}' has IR version {model.ir_version}; supported are {MIN_IR_VERSION}..{onnx.IR_VERSION}."
        )
    max_opset = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            if not MIN_OPSET <= imp.version <= max_opset:
                raise errors.UnsupportedVersionError(
                    f"'{_short(name)}' uses ONNX opset {imp.version}; supported are {MIN_OPSET}..{max_opset}."
                )
        elif imp.version < 0 or imp.version > 10_000:
            raise errors.UnsupportedVersionError(
                f"'{_short(name)}' imports domain '{_short(imp.domain, 40)}' at an invalid version {imp.version}."
            )


def _checker_sentence(exc: Exception) -> str:
    text = str(exc)
    node = re.search(r"(?:node|Node)\s*\(([^)]*)\)", text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    reason = lines[-1] if lines else "unknown reason"
    reason = re.sub(r"^\[ONNXRuntimeError\].*?:", "", reason)
    where = f" at node '{_short(node.group(1), 60)}'" if node else ""
    return f"{_short(reason, 200)}{where}"


def _finish(model: onnx.ModelProto, *, name: str, size: int, source: str, limits: Limits,
            check: bool) -> LoadedModel:
    _check_versions(model, name)
    n = _count_nodes(model.graph)
    if n > limits.max_nodes:
        raise errors.ModelTooLargeError(f"'{_short(name)}' has {n} nodes, over the limit of {limits.max_nodes}.")
    if check:
        try:
            onnx.checker.check_model(model, full_check=False)
        except (onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
            raise errors.CheckerError(f"'{_short(name)}' fails the ONNX checker: {_checker_sentence(exc)}.") from None
    display = Path(name).name or "model.onnx"
    return LoadedModel(proto=model, name=display, sha256=model_hash(model), size_bytes=size, source=source)
