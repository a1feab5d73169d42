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

9. Weights stay on disk for a big model (``Limits.weights_on_disk_bytes``): its external data is
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

A content hash identifies a model for caching: sha256 over the deterministic serialization
(external data inlined), or, with weights on disk, over the graph with the tensors' places
(file, offset, length) and each data file's size and modification time (:func:`model_hash`).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import heapq
import io
import logging
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from fusionviz import errors

logger = logging.getLogger(__name__)

MIN_IR_VERSION = 3
MIN_OPSET = 7

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_ONNX_DOMAINS = ("", "ai.onnx")


def _env_number(name: str, default: float, scale: int = 1) -> int:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        logger.warning("ignoring %s=%r: not a number", name, os.environ.get(name))
        value = default
    return max(0, int(value * scale))


#: How a limit message says which setting raises the limit.
_RAISE_MODEL = " (set FUSIONVIZ_MAX_MODEL_MB to raise it)"
_RAISE_ARCHIVE = " (set FUSIONVIZ_MAX_ARCHIVE_MB to raise it)"

#: The metadata entry naming the folder a model's external tensors are relative to (rule 9).
WEIGHTS_DIR_KEY = "fusionviz.weights_dir"
#: With weights on disk, main-graph initializers of at least this many bytes stay there; smaller
#: ones (shape constants, biases) are read into memory, where shape inference can see them.
ON_DISK_MIN_TENSOR = 1 << 20
#: Page alignment of tensors in data files fusionviz writes (onnxruntime memory-maps aligned ones).
_ALIGN = 4096
#: protobuf cannot serialize a message of 2 GiB or more; above this a model is saved with external data.
PROTO_MAX_BYTES = 1_800_000_000


def _env_mb(name: str, default: float) -> int:
    return _env_number(name, default, 1024 * 1024)


def machine_memory_bytes() -> int:
    """Physical memory of this machine (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def default_model_mb() -> float:
    """The default model-size limit in MB: half this machine's memory, at least 500 MB."""
    return max(500.0, machine_memory_bytes() / 2 / 1024 / 1024)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Configurable limits (environment variables in brackets, sizes in MB).

    Attributes:
        max_model_bytes: largest model file or upload, external data included
            [FUSIONVIZ_MAX_MODEL_MB, default half the machine's memory, at least 500].
        max_archive_bytes: largest zip, and largest total uncompressed size of its members
            [FUSIONVIZ_MAX_ARCHIVE_MB, the model limit's default, at least 1000].
        max_archive_ratio: largest uncompressed/compressed ratio of a zip member above 1 MB
            (zip bombs) [FUSIONVIZ_MAX_ARCHIVE_RATIO, 200].
        max_archive_members: most members in a zip [FUSIONVIZ_MAX_ARCHIVE_MEMBERS, 10000].
        max_nodes: most nodes (subgraphs included) a model may have [FUSIONVIZ_MAX_NODES, 200000].
        weights_on_disk_bytes: a model whose weights (external data, or a one-file model's
            initializers) total at least this keeps them on disk (rule 9)
            [FUSIONVIZ_WEIGHTS_ON_DISK_MB, 256].
    """

    max_model_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_MODEL_MB", default_model_mb())
    )
    max_archive_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_MAX_ARCHIVE_MB", max(1000.0, default_model_mb()))
    )
    max_archive_ratio: float = dataclasses.field(
        default_factory=lambda: float(_env_number("FUSIONVIZ_MAX_ARCHIVE_RATIO", 200))
    )
    max_archive_members: int = dataclasses.field(
        default_factory=lambda: _env_number("FUSIONVIZ_MAX_ARCHIVE_MEMBERS", 10_000)
    )
    max_nodes: int = dataclasses.field(
        default_factory=lambda: _env_number("FUSIONVIZ_MAX_NODES", 200_000)
    )
    weights_on_disk_bytes: int = dataclasses.field(
        default_factory=lambda: _env_mb("FUSIONVIZ_WEIGHTS_ON_DISK_MB", 256)
    )


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


def weights_dir(model: onnx.ModelProto) -> str | None:
    """Rule 9: the folder ``model``'s external tensors are relative to, or None (all in memory)."""
    for p in model.metadata_props:
        if p.key == WEIGHTS_DIR_KEY:
            return p.value
    return None


def _drop_weights_dir(model: onnx.ModelProto) -> None:
    keep = [(p.key, p.value) for p in model.metadata_props if p.key != WEIGHTS_DIR_KEY]
    if len(keep) != len(model.metadata_props):
        del model.metadata_props[:]
        for k, v in keep:
            model.metadata_props.add(key=k, value=v)


def _set_weights_dir(model: onnx.ModelProto, folder: Path) -> None:
    _drop_weights_dir(model)
    model.metadata_props.add(key=WEIGHTS_DIR_KEY, value=str(folder))


def ir_model(model: onnx.ModelProto):
    """The onnx-ir model of ``model``; its external tensors (rule 9) read from its weights folder
    (onnx-ir memory-maps them when their values are needed). Errors are onnx-ir's own."""
    import onnx_ir as ir

    m = ir.serde.deserialize_model(model)
    folder = weights_dir(model)
    if folder:
        ir.external_data.set_base_dir(m.graph, folder)
    return m


def ort_session_config(model: onnx.ModelProto | None = None, *,
                       folder: str | None = None) -> dict[str, str]:
    """Session config entries onnxruntime needs to read ``model``'s weights from disk (rule 9).

    A model given as bytes has its external data read from ``folder``; prepacking is off then
    (it would copy every MatMul weight into memory beside the mapped file). Empty when the
    weights are in memory.
    """
    folder = folder or (weights_dir(model) if model is not None else None)
    if not folder:
        return {}
    return {"session.model_external_initializers_file_folder_path": folder,
            "session.disable_prepacking": "1"}


def _external_place(t: onnx.TensorProto) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in t.external_data}
    length = info.get("length")
    return info.get("location", ""), int(info.get("offset") or 0), int(length) if length else None


def _without_field(msg, skip: str):
    """A copy of ``msg`` without its field ``skip`` (the rest copied field by field)."""
    out = type(msg)()
    for fd, value in msg.ListFields():
        if fd.name == skip:
            continue
        target = getattr(out, fd.name)
        if fd.type == fd.TYPE_MESSAGE:
            repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
            if repeated:
                target.extend(value)
            else:
                target.CopyFrom(value)
        elif hasattr(target, "extend") and not isinstance(target, (str, bytes)):
            target.extend(value)
        else:
            setattr(out, fd.name, value)
    return out


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


# --------------------------------------------------------------------------- public entry points


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


def save_model(model: onnx.ModelProto, path: str | os.PathLike, *, external: bool | None = None) -> Path:
    """Save a model, its large weights in ``<name>.data`` next to it when asked or needed.

    Args:
        model: the model to write.
        path: destination ``.onnx`` path (folders are created).
        external: True: main-graph initializers of at least ``ON_DISK_MIN_TENSOR`` bytes go to
            ``<name>.data``; False: one file; None (default): external when the model keeps its
            weights on disk (rule 9) or would exceed protobuf's limit as one file.

    Returns:
        The path written (:func:`save_model_files` also says whether a data file was).

    Raises:
        errors.InputSpecError: the destination cannot be written.
    """
    return save_model_files(model, path, external=external)[0]


def save_model_files(model: onnx.ModelProto, path: str | os.PathLike, *,
                     external: bool | None = None) -> tuple[Path, Path | None]:
    """:func:`save_model`, returning ``(model file, data file or None)``."""
    p = Path(path)
    if external is None:
        external = weights_dir(model) is not None or model.ByteSize() > PROTO_MAX_BYTES
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if external:
            external = _save_external(model, p)
        else:
            if weights_dir(model) is not None:
                raise errors.InputSpecError(
                    f"Cannot write '{_short(str(p))}' as one file: its weights stay on disk; save it with "
                    "external data.")
            p.write_bytes(model.SerializeToString())
    except OSError as exc:
        raise errors.InputSpecError(f"Cannot write '{_short(str(p))}': {exc.strerror}.") from None
    return p, data_file_of(p) if external else None


def write_for_child(model: onnx.ModelProto | bytes, path: str | os.PathLike) -> Path:
    """Write a model for another process to open by ``path``: bytes as they are, a model as
    :func:`save_model` writes it (weights on disk, or over protobuf's limit: with its data file
    beside, never as one serialized message)."""
    p = Path(path)
    if isinstance(model, bytes):
        p.write_bytes(model)
        return p
    return save_model(model, p)


def bytes_on_disk(model: onnx.ModelProto) -> int:
    """Bytes of ``model``'s weights that stay on disk (rule 9); 0 when all are in memory."""
    if weights_dir(model) is None:
        return 0
    return sum(_external_place(t)[2] or 0 for t in model.graph.initializer
               if t.data_location == onnx.TensorProto.EXTERNAL)


def one_file_bytes(model: onnx.ModelProto) -> bytes:
    """``model`` as the bytes of one ``.onnx`` file (a download): weights on disk (rule 9) are
    read into it and the weights-folder entry dropped.

    Raises:
        errors.ModelTooLargeError: the model cannot be one file (protobuf's 2 GB limit).
    """
    folder = weights_dir(model)
    if folder is None:
        return model.SerializeToString()
    total = model.ByteSize() + bytes_on_disk(model)
    if total > PROTO_MAX_BYTES:
        raise errors.ModelTooLargeError(
            f"The model is {_size(total)}, over protobuf's 2 GB limit for one file; save it with its weights "
            "beside it (python -m fusionviz optimize MODEL -o OUT.onnx writes OUT.onnx.data).")
    out = _without_field(model, "graph")
    _drop_weights_dir(out)
    g = out.graph
    g.CopyFrom(_without_field(model.graph, "initializer"))
    for t in model.graph.initializer:
        new = g.initializer.add()
        if t.data_location != onnx.TensorProto.EXTERNAL:
            new.CopyFrom(t)
            continue
        new.CopyFrom(_without_field(t, "external_data"))
        new.ClearField("data_location")
        loc, offset, length = _external_place(t)
        with open(Path(folder) / loc, "rb") as f:
            f.seek(offset)
            new.raw_data = f.read(length) if length is not None else f.read()
    return out.SerializeToString()


def for_runtime(model: onnx.ModelProto, folder: str | os.PathLike) -> tuple[bytes | str, str | None]:
    """What onnxruntime (here or in a child) is given for ``model``: ``(bytes, weights folder or
    None)`` while the proto fits one protobuf message (with weights on disk: the graph only); a
    model over that (new tensors made in memory by the passes) is saved into ``folder`` (the
    caller's, removed by it) with its weights beside, and its path is given instead."""
    if model.ByteSize() < PROTO_MAX_BYTES:
        return model.SerializeToString(), weights_dir(model)
    return str(save_model(model, Path(folder) / "model.onnx", external=True)), None


def runtime_source(model: onnx.ModelProto, folder: str | os.PathLike) -> bytes | str:
    """What to give a runtime that compiles a model (a backend's ``compile``): its bytes when
    its weights are in memory, else the path of a copy written into ``folder`` (a folder the
    caller owns and removes) with its data file beside (:func:`write_for_child`)."""
    if weights_dir(model) is None:
        return model.SerializeToString()
    return str(write_for_child(model, Path(folder) / "model.onnx"))


def data_file_of(path: str | os.PathLike) -> Path:
    """The data file :func:`save_model` writes beside ``path`` (it exists only when it did)."""
    p = Path(path)
    return p.with_name(p.name + ".data")


def _save_external(model: onnx.ModelProto, p: Path) -> bool:
    """Write ``model`` with its large main-graph initializers in ``<name>.data``: external ones
    copied from where they are (rule 9), in chunks, inline ones moved out; ``model`` itself is
    not changed (snapshots share it). The data file is written beside and renamed at the end, so
    saving over the model's own files reads them whole first. False when no tensor was large
    enough to go there (then no data file is written)."""
    folder = weights_dir(model)
    data_file = data_file_of(p)
    partial = data_file.with_name(data_file.name + ".partial")
    out = _without_field(model, "graph")
    _drop_weights_dir(out)
    graph = _without_field(model.graph, "initializer")
    sources: dict[str, io.BufferedReader] = {}
    offset = 0
    try:
        with open(partial, "wb") as f:
            for t in model.graph.initializer:
                is_ext = t.data_location == onnx.TensorProto.EXTERNAL
                if not is_ext and len(t.raw_data) < ON_DISK_MIN_TENSOR:
                    graph.initializer.add().CopyFrom(t)
                    continue
                new = graph.initializer.add()
                new.CopyFrom(_without_field(t, "raw_data" if not is_ext else "external_data"))
                new.ClearField("data_location")
                pad = -offset % _ALIGN
                f.write(b"\0" * pad)
                offset += pad
                if is_ext:
                    loc, start, length = _external_place(t)
                    if folder is None:
                        raise errors.InputSpecError(
                            f"Cannot write '{_short(str(p))}': tensor '{_short(t.name, 60)}' refers to external data "
                            "fusionviz did not load.")
                    src = sources.get(loc)
                    if src is None:
                        src = sources[loc] = open(Path(folder) / loc, "rb")  # noqa: SIM115 - closed below
                    if length is None:
                        length = os.fstat(src.fileno()).st_size - start
                    src.seek(start)
                    left = length
                    while left:
                        chunk = src.read(min(left, 16 << 20))
                        if not chunk:
                            raise errors.ExternalDataError(f"External file '{_short(loc, 60)}' changed while it was read.")
                        f.write(chunk)
                        left -= len(chunk)
                else:
                    length = len(t.raw_data)
                    f.write(t.raw_data)
                _make_external(new, data_file.name, offset, length)
                offset += length
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        for src in sources.values():
            src.close()
    moved = offset > 0
    if moved:
        os.replace(partial, data_file)
    else:
        partial.unlink(missing_ok=True)
    out.graph.CopyFrom(graph)
    # Written beside and renamed: a one-file model's weights are read from its own file, which
    # must keep its bytes (a new inode) while anything still maps the old one.
    graph_partial = p.with_name(p.name + ".partial")
    graph_partial.write_bytes(out.SerializeToString())
    os.replace(graph_partial, p)
    return moved


def iter_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """Every graph of a model: the main graph, all nested subgraphs, and function bodies' subgraphs.

    Iterative (no recursion), so any nesting depth is safe.
    """
    stack: list[onnx.GraphProto] = [model.graph]
    node_lists = [f.node for f in model.functions]
    while stack or node_lists:
        if stack:
            g = stack.pop()
            yield g
            nodes = g.node
        else:
            nodes = node_lists.pop()
        for node in nodes:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH or attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of a model (initializers, sparse parts, attribute tensors), iteratively."""
    node_lists = [f.node for f in model.functions]
    for g in iter_graphs(model):
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        node_lists.append(g.node)
    for nodes in node_lists:
        for node in nodes:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                for sp in attr.sparse_tensors:
                    yield sp.values
                    yield sp.indices


def count_nodes(model: onnx.ModelProto) -> int:
    """Number of nodes in all graphs (subgraphs and function bodies' subgraphs included)."""
    return sum(len(g.node) for g in iter_graphs(model))


# --------------------------------------------------------------------------- internals


def _short(text: str, n: int = 120) -> str:
    text = errors.printable(" ".join(str(text).split()))
    return text if len(text) <= n else text[: n - 3] + "..."


def _size(n: int) -> str:
    if n < 10 * 1024:
        return f"{n} bytes"
    if n < 10 * 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    if n < 10 * 1024 ** 3:
        return f"{n / 1024 / 1024:.1f} MB"
    return f"{n / 1024 ** 3:.2f} GB"


def _looks_like_zip_file(p: Path) -> bool:
    if p.suffix.lower() == ".zip":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(4) in _ZIP_MAGIC
    except OSError:
        return False


MAX_FOLDER_ENTRIES = 20_000


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


def _not_a_model_hint(data: bytes) -> str:
    """Why bytes that are not a ModelProto are not one, in a few words (best effort)."""
    try:
        return _guess_content(data)
    except Exception:  # noqa: BLE001 - only a hint; never let it mask the real error
        return "its bytes are not a serialized ModelProto"


def _is_identifier(text: object) -> bool:
    return isinstance(text, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) is not None


def _guess_content(data: bytes) -> str:
    head = data[:4096]
    if head and sum(32 <= b < 127 or b in (9, 10, 13) for b in head) / len(head) > 0.95:
        return "it looks like a text file"
    for cls, what in ((onnx.GraphProto, "GraphProto"), (onnx.NodeProto, "NodeProto"),
                      (onnx.TensorProto, "TensorProto")):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except Exception:  # noqa: BLE001 - only a hint
            continue
        if cls is onnx.GraphProto and msg.node and all(_is_identifier(n.op_type) for n in msg.node):
            return f"it holds an ONNX {what}, not a ModelProto"
        if cls is onnx.NodeProto and _is_identifier(msg.op_type) and (msg.input or msg.output):
            return f"it holds an ONNX {what}, not a ModelProto"
        if cls is onnx.TensorProto and 0 < msg.data_type <= 26 and (msg.dims or msg.raw_data):
            return f"it holds an ONNX {what}, not a ModelProto"
    return "its bytes are not a serialized ModelProto"


def _parse(data: bytes, name: str) -> onnx.ModelProto:
    # Rule 1: parse only.
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        text = str(exc)
        if "depth" in text.lower() or "recursion" in text.lower():
            raise errors.NotOnnxError(
                f"'{_short(name)}' cannot be read: its subgraphs (If/Loop/Scan bodies) are nested "
                "deeper than protobuf allows (100 levels)."
            ) from None
        raise errors.NotOnnxError(
            f"'{_short(name)}' is not an ONNX model: {_not_a_model_hint(data)}."
        ) from None
    # Random bytes, text files and other messages sometimes parse: require the fields a model has.
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise errors.NotOnnxError(
            f"'{_short(name)}' is not an ONNX model: {_not_a_model_hint(data)} "
            "(no ir_version, graph or opset_import)."
        )
    return model


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


# ---- rule 9 for a one-file model: its weights are read where they are in the file itself


def _read_varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _wire_fields(buf, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) of each field in
    ``buf[start:end]``; groups and unknown wire types raise ValueError."""
    pos = start
    while pos < end:
        key, vpos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, vend = _read_varint(buf, vpos)
        elif wire == 1:
            vend = vpos + 8
        elif wire == 5:
            vend = vpos + 4
        elif wire == 2:
            length, vpos = _read_varint(buf, vpos)
            vend = vpos + length
        else:
            raise ValueError(f"wire type {wire}")
        if vend > end:
            raise ValueError("field past its message")
        yield field, wire, pos, vpos, vend
        pos = vend


def _len_field(field: int, payload: bytes) -> bytes:
    return _varint_bytes(field << 3 | 2) + _varint_bytes(len(payload)) + payload


_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14


def _tensor_by_reference(buf, start: int, end: int, location: str) -> bytes | None:
    """A TensorProto's bytes with its raw_data (when at least ON_DISK_MIN_TENSOR) replaced by an
    external reference to where it lies in the file; None when it stays as it is."""
    raws = [(vs, ve) for f, w, _, vs, ve in _wire_fields(buf, start, end) if f == _TENSOR_RAW_DATA and w == 2]
    has_ext = any(f in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION) for f, *_ in _wire_fields(buf, start, end))
    if len(raws) != 1 or has_ext or raws[0][1] - raws[0][0] < ON_DISK_MIN_TENSOR:
        return None
    vs, ve = raws[0]
    out = bytearray()
    for f, w, fs, _, fe in _wire_fields(buf, start, end):
        if not (f == _TENSOR_RAW_DATA and w == 2):
            out += buf[fs:fe]
    for key, value in (("location", location), ("offset", str(vs)), ("length", str(ve - vs))):
        entry = _len_field(1, key.encode()) + _len_field(2, value.encode())
        out += _len_field(_TENSOR_EXTERNAL_DATA, entry)
    out += _varint_bytes(_TENSOR_DATA_LOCATION << 3) + _varint_bytes(onnx.TensorProto.EXTERNAL)
    return bytes(out)


def _graph_of_one_file(path: Path, display: str) -> onnx.ModelProto | None:
    """Rule 9 without copying a weight: the model parsed from its file with every large
    main-graph initializer's raw_data left in the file and referenced there (location: the
    model file itself, at the bytes' offset), read through a memory map so the weights are never
    in memory. None when the file holds no such initializer or its layout is not the plain one
    this reads (the caller then parses the whole file)."""
    import mmap

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            out = bytearray()
            moved = 0
            for field, wire, fs, vs, ve in _wire_fields(buf, 0, len(buf)):
                if not (field == _MODEL_GRAPH and wire == 2):
                    out += buf[fs:ve]
                    continue
                graph = bytearray()
                for gf, gw, gfs, gvs, gve in _wire_fields(buf, vs, ve):
                    tensor = (_tensor_by_reference(buf, gvs, gve, path.name)
                              if gf == _GRAPH_INITIALIZER and gw == 2 else None)
                    if tensor is None:
                        graph += buf[gfs:gve]
                    else:
                        graph += _len_field(_GRAPH_INITIALIZER, tensor)
                        moved += 1
                out += _len_field(_MODEL_GRAPH, bytes(graph))
    except (ValueError, IndexError, OSError) as exc:
        logger.info("'%s' is read whole: %s", display, exc)
        return None
    if not moved:
        return None
    model = _parse(bytes(out), display)
    if sum(t.data_location == onnx.TensorProto.EXTERNAL for t in iter_tensors(model)) != moved:
        return None  # it also refers to external files: read whole, so rule 3 checks them
    _set_weights_dir(model, path.parent.resolve())  # the file's own entry, if any, is replaced
    return model


_OWNED_DIRS: list[Path] = []


def _remove_owned_dirs() -> None:
    while _OWNED_DIRS:
        shutil.rmtree(_OWNED_DIRS.pop(), ignore_errors=True)


atexit.register(_remove_owned_dirs)


def _make_external(t: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    t.ClearField("raw_data")
    del t.external_data[:]
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        t.external_data.add(key=key, value=value)


def _is_absolute(location: str) -> bool:
    return (os.path.isabs(location) or location.startswith(("/", "\\"))
            or re.match(r"^[A-Za-z]:", location) is not None)


def _load_external(model: onnx.ModelProto, base: Path, *, limits: Limits, current: int) -> int:
    """Rule 3: validate every external location, then read the bytes ourselves (rule 9: a big
    model's large main-graph initializers stay where they are)."""
    places = _check_external(model, base, limits=limits, current=current)
    total = sum(length for _, _, _, length in places)
    on_disk = total >= limits.weights_on_disk_bytes
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


def _unsafe_member_name(name: str) -> bool:
    norm = name.replace("\\", "/")
    return (norm.startswith("/") or re.match(r"^[A-Za-z]:", norm) is not None
            or ".." in Path(norm).parts or "\x00" in name)


def _check_members(zf: zipfile.ZipFile, limits: Limits, archive: str) -> list[zipfile.ZipInfo]:
    """Rules 2 and 4, on the central directory, before a byte is extracted."""
    infos = zf.infolist()
    if len(infos) > limits.max_archive_members:
        raise errors.ModelTooLargeError(
            f"Archive '{archive}' has {len(infos):,} entries, over the limit of "
            f"{limits.max_archive_members:,} (set FUSIONVIZ_MAX_ARCHIVE_MEMBERS to raise it)."
        )
    total = 0
    for info in infos:
        name = info.filename
        if _unsafe_member_name(name):
            raise errors.UnsafePathError(
                f"Archive entry '{_short(name, 60)}' escapes the archive folder; refused."
            )
        if stat.S_ISLNK(info.external_attr >> 16):
            raise errors.UnsafePathError(f"Archive entry '{_short(name, 60)}' is a symlink; refused.")
        total += info.file_size
        if total > limits.max_archive_bytes:
            raise errors.ModelTooLargeError(
                f"Archive '{archive}' expands to {_size(total)} or more, over the "
                f"{_size(limits.max_archive_bytes)} limit; refused (zip bomb?){_RAISE_ARCHIVE}."
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > 1_000_000 and ratio > limits.max_archive_ratio:
            raise errors.ModelTooLargeError(
                f"Archive entry '{_short(name, 60)}' compresses {ratio:.0f}:1, over the "
                f"{limits.max_archive_ratio:.0f}:1 limit; refused (zip bomb?; FUSIONVIZ_MAX_ARCHIVE_RATIO "
                "raises the limit)."
            )
    return infos


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


def _invalid_text_field(model: onnx.ModelProto) -> str | None:
    """Where a string field holds bytes that are not UTF-8 (protobuf then returns ``bytes``).

    Such names pass the ONNX checker but break every consumer that expects text (onnx-ir's
    serializer, DOT, JSON), so rule 1's parse is followed by this walk (iterative).
    """
    stack: list = [model]
    while stack:
        msg = stack.pop()
        for fd, value in msg.ListFields():
            repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
            if fd.type == fd.TYPE_STRING:
                for v in (value if repeated else (value,)):
                    if isinstance(v, bytes):
                        where = getattr(msg, "name", "") if fd.name != "name" else ""
                        where = f" of '{_short(where, 60)}'" if isinstance(where, str) and where else ""
                        return f"{msg.DESCRIPTOR.name}.{fd.name}{where}"
            elif fd.type == fd.TYPE_MESSAGE:
                if repeated:
                    stack.extend(value)
                else:
                    stack.append(value)
    return None


def _check_versions(model: onnx.ModelProto, name: str) -> None:
    # Rule 5.
    if not MIN_IR_VERSION <= model.ir_version <= onnx.IR_VERSION:
        raise errors.UnsupportedVersionError(
            f"'{_short(name)}' has IR version {model.ir_version}; supported are "
            f"{MIN_IR_VERSION}..{onnx.IR_VERSION}."
        )
    max_opset = onnx.defs.onnx_opset_version()
    max_ml = max((v for d, v in onnx.helper.OP_SET_ID_VERSION_MAP if d == "ai.onnx.ml"), default=5)
    for imp in model.opset_import:
        if imp.domain in _ONNX_DOMAINS:
            if not MIN_OPSET <= imp.version <= max_opset:
                raise errors.UnsupportedVersionError(
                    f"'{_short(name)}' uses ONNX opset {imp.version}; supported are "
                    f"{MIN_OPSET}..{max_opset}."
                )
        elif imp.domain == "ai.onnx.ml":
            if not 1 <= imp.version <= max_ml:
                raise errors.UnsupportedVersionError(
                    f"'{_short(name)}' uses ai.onnx.ml opset {imp.version}; supported are 1..{max_ml}."
                )
        elif imp.version < 0 or imp.version > 10_000:
            raise errors.UnsupportedVersionError(
                f"'{_short(name)}' imports domain '{_short(imp.domain, 40)}' at an invalid "
                f"version {imp.version}."
            )


def _raw_bits(dtype: int) -> int | None:
    """Bits per element in raw_data; None when not fixed (strings, unknown types).

    Sub-byte types (INT4, UINT4, FLOAT4E2M1, FLOAT6E2M3, INT2, ...) are packed.
    """
    if dtype in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
        name = onnx.TensorProto.DataType.Name(dtype)
    except (KeyError, ValueError, TypeError):
        return None
    m = re.fullmatch(r"U?INT(\d)|FLOAT(\d)E\dM\d", name)
    if m and int(m.group(1) or m.group(2)) < 8:
        return int(m.group(1) or m.group(2))
    return 8 * np_dtype.itemsize


def _typed_count(t: onnx.TensorProto) -> int:
    """Elements held in the typed repeated fields (complex types hold two numbers each)."""
    n = (len(t.float_data) + len(t.int32_data) + len(t.string_data) + len(t.int64_data)
         + len(t.double_data) + len(t.uint64_data))
    if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
        n //= 2
    return n


_KNOWN_DTYPES = frozenset(v for _, v in onnx.TensorProto.DataType.items())


def _check_declared_types(model: onnx.ModelProto, name: str) -> None:
    """Rule 6: element types of graph inputs/outputs/value_info must be types onnx knows."""
    for g in iter_graphs(model):
        for vi in (*g.input, *g.output, *g.value_info):
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is not None and tt.elem_type not in _KNOWN_DTYPES:
                raise errors.TensorDataError(
                    f"'{_short(name)}': value '{_short(vi.name, 60)}' has unknown element type "
                    f"{tt.elem_type}."
                )


def _check_tensor_data(model: onnx.ModelProto, name: str) -> None:
    """Rule 6: declared dims must match the data held (no 2**40-element tensors from 4 bytes)."""
    for t in iter_tensors(model):
        tname = _short(t.name or "(unnamed)", 60)
        if t.data_type not in _KNOWN_DTYPES:
            raise errors.TensorDataError(
                f"'{_short(name)}': tensor '{tname}' has unknown data type {t.data_type}."
            )
        dims = list(t.dims)
        if t.data_location == onnx.TensorProto.EXTERNAL:
            # Rule 9: a tensor kept on disk holds its declared bytes there, exactly.
            length = _external_place(t)[2] if weights_dir(model) is not None else None
            bits = _raw_bits(t.data_type)
            if length is not None and bits is not None and all(d >= 0 for d in dims):
                numel = 1
                for d in dims:
                    numel *= d
                needed = -(-numel * bits // 8)
                if length != needed:
                    raise errors.TensorDataError(
                        f"'{_short(name)}': tensor '{tname}' declares {numel:,} elements "
                        f"(dims {dims[:8]}, {needed:,} bytes) but its external data holds {length:,} bytes."
                    )
            continue
        if any(d < 0 for d in dims):
            raise errors.TensorDataError(
                f"'{_short(name)}': tensor '{tname}' declares a negative dimension {dims[:8]}."
            )
        numel = 1
        for d in dims:
            numel *= d  # python int: no overflow
        raw = len(t.raw_data)
        typed = _typed_count(t)
        if t.data_type == onnx.TensorProto.UNDEFINED or (raw == 0 and typed == 0 and numel <= 1):
            continue  # nothing claimed beyond what an empty/scalar placeholder needs
        bits = _raw_bits(t.data_type)
        if raw:
            if bits is None:
                continue
            needed = -(-numel * bits // 8)  # ceil: packed sub-byte types
            if raw != needed:
                raise errors.TensorDataError(
                    f"'{_short(name)}': tensor '{tname}' declares {numel:,} elements "
                    f"(dims {dims[:8]}, {needed:,} bytes) but holds {raw:,} bytes."
                )
        elif (bits is None or bits >= 8) and typed != numel:
            # Typed fields hold one value per element (two for complex; packed types skipped).
            raise errors.TensorDataError(
                f"'{_short(name)}': tensor '{tname}' declares {numel:,} elements (dims {dims[:8]}) "
                f"but holds {typed:,}."
            )


def _checker_sentence(exc: Exception, model: onnx.ModelProto) -> str:
    """Rule 7: the checker's complaint as one sentence that names the node."""
    text = str(exc)
    parts = text.split("==> Context:")
    reason = " ".join(parts[0].split()).rstrip(".")
    context = " ".join(parts[1].split()) if len(parts) > 1 else ""
    node = re.search(r"Name:\s*(.*?)\s+OpType:\s*(\S+)", context)
    # "input 'b' of node: name: add_a OpType: Add is not output of any previous nodes"
    m = re.search(r"input '(.*?)' of node:\s*name:\s*(.*?)\s+OpType:\s*(\S+)\s+is not output", text)
    if m:
        value, nname, op = m.groups()
        produced = {o for n in model.graph.node for o in n.output}
        if value in produced:
            return (f"input '{_short(value, 60)}' of node '{_short(nname, 60)}' ({op}) is produced "
                    "by a later node (the graph has a cycle or is not topologically sorted)")
        return (f"input '{_short(value, 60)}' of node '{_short(nname, 60)}' ({op}) is produced by no "
                "node and is neither a graph input nor an initializer")
    where = f" (node '{_short(node.group(1), 60)}', {node.group(2)})" if node else ""
    return f"{_short(reason or 'unknown reason', 240)}{where}"


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


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """What ``onnx.checker`` and shape inference are given for ``model``: the model itself, or
    with weights on disk (rule 9) a copy of its graph in which each external main-graph
    initializer is a graph input of the same type and shape (the checker would look for the
    data files in the current folder; rule 3 has checked them, and no shape depends on a large
    tensor's values)."""
    if weights_dir(model) is None:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inputs = {i.name for i in g.input}
    keep = []
    for t in g.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            keep.append(t)
        elif t.name not in inputs:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    if len(keep) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(keep)
    return out


def _graph_sort(graph: onnx.GraphProto, outer: set[str]) -> int:
    """Sort one graph's nodes topologically, stably (of the nodes ready to run, the one stored
    first goes first); returns how many nodes moved, 0 when already sorted or not sortable (a
    cycle, or an input no node makes: the checker names it)."""
    nodes = list(graph.node)
    known = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    seen = set(known)
    for n in nodes:
        if any(i not in seen and i in producer for i in n.input):
            break
        seen.update(n.output)
    else:
        return 0  # already in order: the common case, one linear pass
    deps = [{producer[i] for i in n.input if i in producer and i not in known} - {k} for k, n in enumerate(nodes)]
    users: list[list[int]] = [[] for _ in nodes]
    for k, d in enumerate(deps):
        for p in d:
            users[p].append(k)
    ready = [k for k, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            deps[u].discard(k)
            if not deps[u]:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        return 0  # a cycle: leave it to the checker
    moved = sum(1 for pos, k in enumerate(order) if pos != k)
    del graph.node[:]
    graph.node.extend(nodes[k] for k in order)
    return moved


def sort_topologically(model: onnx.ModelProto) -> int:
    """Rule 8: sort the main graph's nodes (and each subgraph's, values of enclosing graphs
    counting as known) into topological order in place; returns how many nodes moved."""
    moved = 0
    stack: list[tuple[onnx.GraphProto, set[str]]] = [(model.graph, set())]
    while stack:
        graph, outer = stack.pop()
        moved += _graph_sort(graph, outer)
        scope = outer | {i.name for i in graph.input} | {t.name for t in graph.initializer} | {
            o for n in graph.node for o in n.output}
        for n in graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append((a.g, scope))
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend((g, scope) for g in a.graphs)
    return moved
