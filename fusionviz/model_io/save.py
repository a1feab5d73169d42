"""Writing a model (rule 9 of :mod:`fusionviz.model_io`): with its weights beside it when they
stay on disk or pass protobuf's 2 GB, and the copies child processes read."""

from __future__ import annotations

import io
import os
from pathlib import Path

import onnx

from fusionviz import errors
from fusionviz.model_io.limits import _short
from fusionviz.model_io.weights import (
    _ALIGN,
    ON_DISK_MIN_TENSOR,
    PROTO_MAX_BYTES,
    _drop_weights_dir,
    _external_place,
    _make_external,
    _without_field,
    weights_dir,
)


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
