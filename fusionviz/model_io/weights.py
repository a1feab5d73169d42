"""Weights that stay on disk (rule 9 of :mod:`fusionviz.model_io`): the folder a model's on-disk
tensors are read from, a one-file model's weights referenced where they lie in the file, and
what onnxruntime and the passes are given instead of the bytes."""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import onnx

from fusionviz import errors
from fusionviz.model_io.limits import _size
from fusionviz.model_io.proto import _parse, iter_tensors

logger = logging.getLogger(__name__)


#: The metadata entry naming the folder a model's external tensors are relative to (rule 9).
WEIGHTS_DIR_KEY = "fusionviz.weights_dir"


#: With weights on disk, main-graph initializers of at least this many bytes stay there; smaller
#: ones (shape constants, biases) are read into memory, where shape inference can see them.
ON_DISK_MIN_TENSOR = 1 << 20


#: Page alignment of tensors in data files fusionviz writes (onnxruntime memory-maps aligned ones).
_ALIGN = 4096


#: protobuf cannot serialize a message of 2 GiB or more; above this a model is saved with external data.
PROTO_MAX_BYTES = 1_800_000_000


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
