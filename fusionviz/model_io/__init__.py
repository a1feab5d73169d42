"""Safe model loading and saving.

Rules (numbered; the code points back to them):

1. Loading never executes anything: bytes are parsed as a protobuf, checked, and nothing else.
   Nothing is written except into a temp dir this module creates and deletes (zip extraction).
2. Size limits are enforced before parsing (``Limits.max_model_bytes``) and for archives before
   extraction (``max_archive_bytes``, ``max_archive_ratio`` against zip bombs), and again while
   extracting (a header may lie about the expanded size).
3. External data ``location`` must be a relative path that resolves, after following symlinks,
   inside the model's folder. Absolute paths, ``..`` and symlinks out are refused *before* any
   byte is read. Offsets/lengths past the end of the file are refused.
4. Zip members that would land outside the extraction folder (absolute, ``..``, drive letters)
   and symlink members are refused before anything is extracted.
5. IR version and opsets must be within what the installed onnx supports.
6. Every text field must be valid UTF-8 (protobuf hands invalid text back as bytes, which the
   checker accepts and every later step chokes on). Every tensor (initializers, Constant values, subgraphs, functions) must hold exactly the data
   its dims declare: a tensor claiming 2**40 elements with 4 bytes of data is refused, so no
   later step allocates what the file only pretends to hold.
7. The ONNX checker must pass; its complaint is reduced to one sentence naming the node.
8. A graph whose nodes are stored out of topological order (onnxruntime runs such files; the
   checker refuses them) is sorted first, stably, and ``LoadedModel.notes`` says so; a graph
   with a cycle or a value no node makes is left as it is for the checker to name.

Every model walk here is iterative (explicit stack), so deeply nested If/Loop subgraphs cannot
cause a RecursionError; protobuf itself refuses messages nested deeper than 100 levels, which is
reported as such.

9. Weights stay on disk for a big model (``Limits.weights_on_disk_bytes``, and always from 1.8 GB
   of external data, which no protobuf can hold): its external data is
   checked (rule 3) but not read; a one-file model is read through a memory map, its protobuf
   fields walked, and each large main-graph initializer's ``raw_data`` left in the file and
   referenced where it lies (location: the model file itself, offset and length of those
   bytes), so no weight is copied into memory (a file this walk cannot follow is read whole).
   The in-memory proto then holds the graph and small tensors only: main-graph initializers of
   at least ``ON_DISK_MIN_TENSOR`` bytes are external references whose exact byte count rule 6
   checks, relative to the folder named by the model's ``fusionviz.weights_dir`` metadata entry
   (:func:`weights_dir`), which every consumer of the tensors reads: the passes (onnx-ir
   memory-maps them), onnxruntime sessions (:func:`ort_session_config`), :func:`save_model`
   (copies the bytes into the result's own data file and drops the entry). A model's own
   ``fusionviz.weights_dir`` entry is removed on load: only fusionviz sets it, after rule 3. A
   zip's extracted files stay until the process ends when its weights stay on disk. Smaller
   models are read into memory as before.
10. New weights on disk (:mod:`fusionviz.model_io.spill`): within a command that asks for it
   (``optimize``), the large tensors the passes make for a model whose weights stay on disk
   are written to a data file of the process's own and memory-mapped; the model's weights
   folder becomes the deepest folder holding that file and the model's own, its locations the
   paths below it. Nothing of the model's weights is copied; the file goes when the command ends.

A content hash identifies a model for caching: sha256 over the deterministic serialization
(external data inlined), or, with weights on disk, over the graph with the tensors' places
(file, offset, length) and each data file's size and modification time (:func:`model_hash`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

import onnx

from fusionviz import errors
from fusionviz.model_io.checks import (
    _check_declared_types,
    _check_members,
    _check_tensor_data,
    _check_versions,
    _checker_sentence,
    _invalid_text_field,
    checkable,
    sort_topologically,
)
from fusionviz.model_io.limits import (
    _RAISE_ARCHIVE,
    _RAISE_MODEL,
    MAX_FOLDER_ENTRIES,
    MIN_IR_VERSION,
    MIN_OPSET,
    Limits,
    _short,
    _size,
    default_model_mb,
    machine_memory_bytes,
)
from fusionviz.model_io.proto import _parse, count_nodes, iter_graphs, iter_tensors
from fusionviz.model_io.save import (
    data_file_of,
    for_runtime,
    runtime_source,
    save_model,
    save_model_files,
    write_for_child,
)
from fusionviz.model_io.weights import (
    _OWNED_DIRS,
    ON_DISK_MIN_TENSOR,
    PROTO_MAX_BYTES,
    WEIGHTS_DIR_KEY,
    _drop_weights_dir,
    _external_place,
    _graph_of_one_file,
    _is_absolute,
    _make_external,
    _set_weights_dir,
    _without_field,
    bytes_on_disk,
    ir_model,
    one_file_bytes,
    ort_session_config,
    weights_dir,
)

__all__ = [
    "Limits", "LoadedModel", "MAX_FOLDER_ENTRIES", "MIN_IR_VERSION", "MIN_OPSET", "ON_DISK_MIN_TENSOR",
    "PROTO_MAX_BYTES", "WEIGHTS_DIR_KEY", "bytes_on_disk", "checkable", "count_nodes", "data_file_of",
    "default_model_mb", "for_runtime", "ir_model", "iter_graphs", "iter_tensors", "load_bytes", "load_path",
    "machine_memory_bytes", "model_hash", "one_file_bytes", "ort_session_config", "runtime_source",
    "save_model", "save_model_files", "sort_topologically", "weights_dir", "write_for_child",
]

logger = logging.getLogger(__name__)


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A checked model with its content hash.

    Attributes:
        proto: the model; its external data is inlined, except for a big model whose weights
            stay on disk (rule 9: large initializers are external references relative to
            :attr:`weights_dir`).
        name: file name for display (no folders).
        sha256: content hash of ``proto`` (see :func:`model_hash`).
        size_bytes: bytes read: the model file plus its external data.
        source: where it came from: a path, ``upload`` or ``zip:<name>``.
    """

    proto: onnx.ModelProto
    name: str
    sha256: str
    size_bytes: int
    source: str
    notes: tuple[str, ...] = ()  # what loading changed, one sentence each (rule 8)

    @property
    def short_hash(self) -> str:
        """The first 12 hex digits of :attr:`sha256`."""
        return self.sha256[:12]

    @property
    def weights_dir(self) -> str | None:
        """The folder its weights stay in (rule 9), or None when they are in memory."""
        return weights_dir(self.proto)


def model_hash(model: onnx.ModelProto) -> str:
    """Content hash of a model.

    Args:
        model: the model, as :func:`load_path` returns it.

    Returns:
        sha256 hex digest of the deterministic serialization: equal models (same fields, any
        source) give equal hashes; any change in graph, weights or metadata changes it. With
        weights on disk (rule 9) the serialization holds each tensor's place (file, offset,
        length), and each data file's size and modification time are hashed too. A model too big
        for one protobuf message is hashed initializer by initializer.
    """
    h = hashlib.sha256()
    if model.ByteSize() < PROTO_MAX_BYTES:
        h.update(model.SerializeToString(deterministic=True))
    else:
        graph = _without_field(model.graph, "initializer")
        rest = _without_field(model, "graph")
        h.update(rest.SerializeToString(deterministic=True))
        h.update(graph.SerializeToString(deterministic=True))
        for t in model.graph.initializer:
            h.update(t.SerializeToString(deterministic=True))
    folder = weights_dir(model)
    if folder:
        files = sorted({_external_place(t)[0] for t in iter_tensors(model)
                        if t.data_location == onnx.TensorProto.EXTERNAL})
        for loc in files:
            try:
                st = (Path(folder) / loc).stat()
                h.update(f"{loc}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            except OSError:
                h.update(f"{loc}\0missing\0".encode())
    return h.hexdigest()


def load_path(path: str | os.PathLike, *, limits: Limits | None = None,
              check: bool = True) -> LoadedModel:
    """Load a model from an ``.onnx`` file, a folder holding one, or a ``.zip``.

    Args:
        path: a model file (external data next to it is read safely), a folder holding exactly
            one model (or one at its top level), or a zip archive of such a folder.
        limits: size/node limits; defaults from the environment (see :class:`Limits`).
        check: run the ONNX checker (rule 7). Rules 1-6 always apply.

    Returns:
        The checked model with external data inlined.

    Raises:
        errors.ModelLoadError: (a subclass) with one sentence saying what is wrong.
    """
    limits = limits or Limits()
    p = Path(path)
    try:
        return _load_path(p, limits=limits, check=check)
    except OSError as exc:  # unreadable file or folder, name too long, I/O error
        raise errors.ModelLoadError(
            f"Cannot read '{_short(str(p))}': {exc.strerror or type(exc).__name__}."
        ) from None


def _load_path(p: Path, *, limits: Limits, check: bool) -> LoadedModel:
    if not p.exists():
        raise errors.ModelLoadError(f"No such file or folder: '{_short(str(p))}'.")
    if p.is_dir():
        model_file = _find_single_model(p, display=p.name)
        return _load_file(model_file, limits=limits, check=check, display=model_file.name)
    if not stat.S_ISREG(p.stat().st_mode):  # a FIFO or device would block or never end
        raise errors.ModelLoadError(f"'{_short(p.name)}' is not a regular file.")
    if _looks_like_zip_file(p):
        size = p.stat().st_size
        if size > limits.max_archive_bytes:
            raise errors.ModelTooLargeError(
                f"Archive '{_short(p.name)}' is {_size(size)}, over the "
                f"{_size(limits.max_archive_bytes)} limit{_RAISE_ARCHIVE}."
            )
        return _load_zip(p.read_bytes(), name=p.name, limits=limits, check=check)
    return _load_file(p, limits=limits, check=check, display=p.name)


def load_bytes(data: bytes, *, name: str = "upload.onnx", limits: Limits | None = None,
               check: bool = True) -> LoadedModel:
    """Load a model from uploaded bytes: a serialized ModelProto or a zip holding one.

    Args:
        data: the uploaded bytes.
        name: the upload's file name, for messages only (never used as a path).
        limits: size/node limits; defaults from the environment.
        check: run the ONNX checker.

    Returns:
        The checked model.

    Raises:
        errors.ModelLoadError: (a subclass) with one sentence saying what is wrong. A bare
            model that refers to external data is refused: upload a zip of its folder instead.
    """
    limits = limits or Limits()
    data = bytes(data)
    if not data:
        raise errors.EmptyModelError(f"'{_short(name)}' is empty (0 bytes).")
    if data[:4] in _ZIP_MAGIC:
        if len(data) > limits.max_archive_bytes:
            raise errors.ModelTooLargeError(
                f"Archive '{_short(name)}' is {_size(len(data))}, over the "
                f"{_size(limits.max_archive_bytes)} limit{_RAISE_ARCHIVE}."
            )
        return _load_zip(data, name=name, limits=limits, check=check)
    if len(data) > limits.max_model_bytes:
        raise errors.ModelTooLargeError(
            f"'{_short(name)}' is {_size(len(data))}, over the {_size(limits.max_model_bytes)} limit{_RAISE_MODEL}."
        )
    if len(data) >= limits.weights_on_disk_bytes:
        on_disk = _upload_on_disk(data, name)  # rule 9: the weights stay in a file fusionviz owns
        if on_disk is not None:
            return _finish(on_disk, name=name, size=len(data), source="upload", limits=limits, check=check)
    model = _parse(data, name)
    _drop_weights_dir(model)
    if _uses_external_data(model):
        raise errors.ExternalDataError(
            f"'{_short(name)}' stores weights in external files; upload a .zip of the model's "
            "folder instead."
        )
    return _finish(model, name=name, size=len(data), source="upload", limits=limits, check=check)


def _upload_on_disk(data: bytes, name: str) -> onnx.ModelProto | None:
    """Rule 9 for a big upload: its bytes written to a folder fusionviz owns (removed when the
    process ends) and read from there as a one-file model; None (nothing kept) when no weight is
    large enough or the file refers to external data."""
    folder = Path(tempfile.mkdtemp(prefix="fusionviz_upload_")).resolve()
    try:
        path = folder / "upload.onnx"
        path.write_bytes(data)
        model = _graph_of_one_file(path, name)
    except OSError as exc:
        logger.info("upload kept in memory: %s", exc)
        model = None
    if model is None:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    _OWNED_DIRS.append(folder)
    return model


def _looks_like_zip_file(p: Path) -> bool:
    if p.suffix.lower() == ".zip":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(4) in _ZIP_MAGIC
    except OSError:
        return False


def _find_single_model(folder: Path, *, display: str) -> Path:
    """The one .onnx file in ``folder`` (or the one at its top level); the search is bounded."""
    candidates: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise errors.ModelLoadError(
                f"'{_short(display)}' holds more than {MAX_FOLDER_ENTRIES:,} entries; give the "
                ".onnx file itself."
            )
        dirs.sort()
        for f in files:
            q = Path(root) / f
            if f.lower().endswith(".onnx") and q.is_file():
                candidates.append(q)
    candidates.sort()
    if not candidates:
        raise errors.ModelLoadError(f"'{_short(display)}' holds no .onnx file.")
    if len(candidates) > 1:
        # Prefer a model at the top level when exactly one is there.
        top = [q for q in candidates if q.parent == folder]
        if len(top) == 1:
            return top[0]
        names = ", ".join(_short(q.name, 40) for q in candidates[:5])
        raise errors.ModelLoadError(
            f"'{_short(display)}' holds {len(candidates)} .onnx files ({names}); choose one."
        )
    return candidates[0]


def _uses_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in iter_tensors(model))


def _load_file(path: Path, *, limits: Limits, check: bool, display: str) -> LoadedModel:
    try:
        st = path.stat()
    except OSError as exc:
        raise errors.ModelLoadError(f"Cannot read '{_short(display)}': {exc.strerror}.") from None
    if not stat.S_ISREG(st.st_mode):
        raise errors.ModelLoadError(f"'{_short(display)}' is not a regular file.")
    size = st.st_size
    if size == 0:
        raise errors.EmptyModelError(f"'{_short(display)}' is empty (0 bytes).")
    if size > limits.max_model_bytes:
        raise errors.ModelTooLargeError(
            f"'{_short(display)}' is {_size(size)}, over the {_size(limits.max_model_bytes)} limit{_RAISE_MODEL}."
        )
    model = _graph_of_one_file(path, display) if size >= limits.weights_on_disk_bytes else None
    if model is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise errors.ModelLoadError(f"Cannot read '{_short(display)}': {exc.strerror}.") from None
        model = _parse(data, display)
        del data
        _drop_weights_dir(model)  # rule 9: only fusionviz names where weights are
    ext_bytes = 0
    if weights_dir(model) is None and _uses_external_data(model):
        ext_bytes = _load_external(model, path.parent.resolve(), limits=limits, current=size)
    return _finish(model, name=display, size=size + ext_bytes, source=str(path), limits=limits,
                   check=check)


def _load_external(model: onnx.ModelProto, base: Path, *, limits: Limits, current: int) -> int:
    """Rule 3: validate every external location, then read the bytes ourselves (rule 9: a big
    model's large main-graph initializers stay where they are)."""
    places = _check_external(model, base, limits=limits, current=current)
    total = sum(length for _, _, _, length in places)
    # weights near 2 GB or more stay on disk whatever the setting: one protobuf cannot hold them
    on_disk = total >= min(limits.weights_on_disk_bytes, PROTO_MAX_BYTES)
    keep = {id(t) for t in model.graph.initializer} if on_disk else set()
    kept = False
    for tensor, target, offset, length in places:
        if id(tensor) in keep and length >= ON_DISK_MIN_TENSOR:
            _make_external(tensor, _external_place(tensor)[0], offset, length)  # offset and length explicit
            kept = True
            continue
        loc = _short(_external_place(tensor)[0], 60)
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                raw = f.read(length)
        except OSError as exc:
            raise errors.ExternalDataError(f"Cannot read '{loc}': {exc.strerror}.") from None
        if len(raw) != length:
            raise errors.ExternalDataError(f"External file '{loc}' changed while it was read.")
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.ClearField("data_location")  # as if it had always been inline: same hash
    if kept:
        _set_weights_dir(model, base)
    return total


def _check_external(model: onnx.ModelProto, base: Path, *, limits: Limits,
                    current: int) -> list[tuple[onnx.TensorProto, Path, int, int]]:
    """Rule 3 on every external tensor: (tensor, file, offset, length) of each, nothing read."""
    total = current
    places = []
    for tensor in iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        tname = _short(tensor.name, 60)
        loc = _short(location, 60)
        if not location:
            raise errors.ExternalDataError(f"Tensor '{tname}' has external data with no location.")
        if "\x00" in location:
            raise errors.UnsafePathError(f"Tensor '{tname}' has a malformed external location; refused.")
        if _is_absolute(location):
            raise errors.UnsafePathError(
                f"Tensor '{tname}' points to an absolute path '{loc}'; refused, not read."
            )
        if ".." in Path(location.replace("\\", "/")).parts:
            raise errors.UnsafePathError(
                f"Tensor '{tname}' points outside the model folder ('{loc}'); refused, not read."
            )
        try:
            target = (base / location).resolve()
        except (OSError, RuntimeError):  # symlink loop
            raise errors.UnsafePathError(
                f"Tensor '{tname}' external file '{loc}' cannot be resolved (symlink loop?); refused."
            ) from None
        if base != target and base not in target.parents:
            raise errors.UnsafePathError(
                f"Tensor '{tname}' external file '{loc}' resolves outside the model folder "
                "(symlink?); refused, not read."
            )
        if not target.exists():
            raise errors.ExternalDataError(
                f"Tensor '{tname}' needs external file '{loc}', which is missing."
            )
        if not target.is_file():
            raise errors.ExternalDataError(
                f"Tensor '{tname}' external data '{loc}' is not a regular file; refused."
            )
        fsize = target.stat().st_size
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else fsize - offset
        except ValueError:
            raise errors.ExternalDataError(
                f"Tensor '{tname}' has a non-numeric external offset/length."
            ) from None
        if offset < 0 or length < 0 or offset + length > fsize:
            raise errors.ExternalDataError(
                f"Tensor '{tname}' reads bytes {offset}..{offset + length} of '{loc}', which has "
                f"only {fsize} (past the end of the file)."
            )
        total += length
        places.append((tensor, target, offset, length))
    if total > limits.max_model_bytes:
        raise errors.ModelTooLargeError(
            f"The model with its external data is {_size(total)}, over the "
            f"{_size(limits.max_model_bytes)} limit{_RAISE_MODEL}."
        )
    return places


def _load_zip(data: bytes, *, name: str, limits: Limits, check: bool) -> LoadedModel:
    archive = _short(name)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError):
        raise errors.ArchiveError(f"'{archive}' looks like a zip archive but cannot be opened.") from None
    tmp = Path(tempfile.mkdtemp(prefix="fusionviz_zip_")).resolve()
    try:
        with zf:
            infos = _check_members(zf, limits, archive)
            written_total = 0
            for info in infos:
                if info.is_dir():
                    continue
                dest = (tmp / info.filename).resolve()
                if tmp not in dest.parents:  # belt and braces for rule 4
                    raise errors.UnsafePathError(
                        f"Archive entry '{_short(info.filename, 60)}' escapes the archive folder; refused."
                    )
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as out:
                    written = 0
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        written_total += len(chunk)
                        # Rule 2 again: headers can lie about sizes.
                        if written > info.file_size or written_total > limits.max_archive_bytes:
                            raise errors.ModelTooLargeError(
                                f"Archive entry '{_short(info.filename, 60)}' expands past its "
                                f"declared size or the {_size(limits.max_archive_bytes)} limit; refused (zip bomb?)"
                                f"{_RAISE_ARCHIVE}."
                            )
                        out.write(chunk)
        model_file = _find_single_model(tmp, display=name)
        loaded = _load_file(model_file, limits=limits, check=check, display=model_file.name)
        folder = loaded.weights_dir
        if folder and (Path(folder) == tmp or tmp in Path(folder).parents):
            _OWNED_DIRS.append(tmp)  # rule 9: its weights stay in the extracted files until exit
            tmp = None
        return dataclasses.replace(loaded, source=f"zip:{name}")
    except errors.FusionvizError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
            NotImplementedError, RuntimeError) as exc:
        # e.g. bad CRC, unsupported compression, encrypted member, disk full
        raise errors.ArchiveError(
            f"'{archive}' is a broken or unsupported zip archive ({_short(str(exc), 80)})."
        ) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _finish(model: onnx.ModelProto, *, name: str, size: int, source: str, limits: Limits,
            check: bool) -> LoadedModel:
    _check_versions(model, name)
    bad_text = _invalid_text_field(model)
    if bad_text:
        raise errors.NotOnnxError(
            f"'{_short(name)}' has text that is not valid UTF-8 (in {bad_text}); refused."
        )
    n = count_nodes(model)
    if n > limits.max_nodes:
        raise errors.ModelTooLargeError(
            f"'{_short(name)}' has {n:,} nodes, over the limit of {limits.max_nodes:,} (set FUSIONVIZ_MAX_NODES "
            "to raise it)."
        )
    _check_tensor_data(model, name)
    _check_declared_types(model, name)
    notes: list[str] = []
    moved = sort_topologically(model)
    if moved:
        notes.append(f"'{_short(name)}' stores its nodes out of topological order (as onnxruntime allows, the "
                     f"ONNX checker does not); {moved:,} were moved into order on load (the model computes the same).")
        logger.info(notes[-1])
    if check:
        try:
            onnx.checker.check_model(checkable(model), full_check=False)
        except (onnx.checker.ValidationError, ValueError, RuntimeError, TypeError) as exc:
            raise errors.CheckerError(
                f"'{_short(name)}' fails the ONNX checker: {_checker_sentence(exc, model)}."
            ) from None
    display = Path(name).name or "model.onnx"
    return LoadedModel(proto=model, name=display, sha256=model_hash(model), size_bytes=size,
                       source=source, notes=tuple(notes))
