"""The constant values of a graph, identified by content: which value a node reads.

Rules (the code points back to them):

1. A name is a *constant* of a graph when it is an initializer (a sparse initializer too) or the
   one output of a ``Constant`` node of the default domain.
2. A constant's identity is its element type, its dims and its content, never its name nor the
   way it is stored: a weight moved from a ``Constant`` node to an initializer, or renamed, is
   the same value. A ``Constant``'s ``value_float`` / ``value_floats`` / ``value_int`` /
   ``value_ints`` / ``value_string`` / ``value_strings`` is the tensor it stands for (float32,
   int64 or string; a scalar, or 1-D for the list forms), so ``Constant<value_ints=[1, 2]>``
   and an int64 ``[2]`` initializer holding 1, 2 are the same value.
3. Content is hashed once per name and only when asked for (:meth:`ConstantValues.same`
   compares element type and dims first): ``raw_data`` bytes as they are; typed fields
   (``float_data``, ``int32_data``, ...) as the little-endian bytes ``raw_data`` would hold
   (through numpy), so the two storages of one tensor hash alike; 4-bit and 2-bit types, whose
   ``raw_data`` is packed, are hashed unpacked in both storages; strings with their lengths. A
   sparse tensor is hashed as its serialized proto (it equals only an identical sparse tensor).
4. External data (a proto loaded without its data): two tensors at the same place (the same
   file, by device, inode, size and modification time when ``base_dir`` resolves it, else the
   same location text; same offset and length) are equal without reading anything. Otherwise
   the bytes are read in chunks from the file under ``base_dir`` when there is one, and a
   tensor whose file cannot be read is identified by its place alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

logger = logging.getLogger(__name__)

#: Element types whose ``raw_data`` packs several elements in a byte (rule 3).
_PACKED = frozenset(getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
                    if hasattr(onnx.TensorProto, n))

#: Bytes read at a time from an external data file (rule 4).
_CHUNK = 1 << 22

#: ``Constant`` attributes that are not a ``TensorProto``: (element type, is a list) (rule 2).
_LITERAL_ATTRS = {
    "value_float": (onnx.TensorProto.FLOAT, False),
    "value_floats": (onnx.TensorProto.FLOAT, True),
    "value_int": (onnx.TensorProto.INT64, False),
    "value_ints": (onnx.TensorProto.INT64, True),
    "value_string": (onnx.TensorProto.STRING, False),
    "value_strings": (onnx.TensorProto.STRING, True),
}


def is_constant_node(node: onnx.NodeProto) -> bool:
    """A ``Constant`` node of the default domain with one named output (rule 1)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 \
        and bool(node.output[0])


def constant_node_tensor(node: onnx.NodeProto) -> onnx.TensorProto | onnx.SparseTensorProto | None:
    """The tensor a ``Constant`` node gives (rule 2); None when it has no value attribute."""
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
        if a.name == "sparse_value" and a.type == onnx.AttributeProto.SPARSE_TENSOR:
            return a.sparse_tensor
        if a.name in _LITERAL_ATTRS:
            dtype, is_list = _LITERAL_ATTRS[a.name]
            v = onnx.helper.get_attribute_value(a)
            if dtype == onnx.TensorProto.STRING:
                vals = list(v) if is_list else [v]
                return onnx.helper.make_tensor("", dtype, [len(vals)] if is_list else [], vals)
            arr = np.array(list(v) if is_list else v, dtype=np.float32 if dtype == onnx.TensorProto.FLOAT
                           else np.int64)
            return numpy_helper.from_array(arr, "")
    return None


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where an external tensor's bytes are (rule 4)."""

    file: tuple
    offset: int
    length: int
    path: Path | None


def dims_text(dims: tuple[int, ...]) -> str:
    """``[64,3,3,3]``; ``[]`` for a scalar."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def dtype_text(dtype: int) -> str:
    """The element type's ONNX name in lower case (``float``, ``int64``, ``float16``)."""
    try:
        return onnx.TensorProto.DataType.Name(dtype).lower()
    except ValueError:
        return f"type {dtype}"


class ConstantValues:
    """The constants of one graph (rule 1), compared by content (rules 2-4).

    Args:
        graph: the graph (its initializers and ``Constant`` nodes).
        base_dir: the folder external data locations are relative to, when the model was loaded
            without its external data (rule 4); None: external tensors are compared by place.
    """

    def __init__(self, graph: onnx.GraphProto, *, base_dir: str | os.PathLike | None = None) -> None:
        self._tensors: dict[str, onnx.TensorProto | onnx.SparseTensorProto] = {}
        self._initializers: set[str] = set()
        self._base = Path(base_dir).resolve() if base_dir is not None else None
        self._digests: dict[str, bytes] = {}
        for n in graph.node:
            if is_constant_node(n):
                t = constant_node_tensor(n)
                if t is not None:
                    self._tensors[n.output[0]] = t
        for s in graph.sparse_initializer:
            self._tensors[s.values.name] = s
            self._initializers.add(s.values.name)
        for t in graph.initializer:
            self._tensors[t.name] = t
            self._initializers.add(t.name)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def is_initializer(self, name: str) -> bool:
        """True when ``name`` is an initializer (not a ``Constant`` output)."""
        return name in self._initializers

    def dtype_dims(self, name: str) -> tuple[int, tuple[int, ...]]:
        """Element type and dims of the constant ``name``."""
        t = self._tensors[name]
        if isinstance(t, onnx.SparseTensorProto):
            return t.values.data_type, tuple(int(d) for d in t.dims)
        return t.data_type, tuple(int(d) for d in t.dims)

    def describe(self, name: str) -> str:
        """``[64,3,3,3] float``."""
        dtype, dims = self.dtype_dims(name)
        return f"{dims_text(dims)} {dtype_text(dtype)}"

    def digest(self, name: str) -> bytes:
        """A hash of the constant's element type, dims and content (rules 2-4), computed once."""
        d = self._digests.get(name)
        if d is None:
            d = self._digests[name] = self._hash(name)
        return d

    def same(self, name: str, other: ConstantValues, other_name: str) -> bool:
        """True when constant ``name`` here and ``other_name`` in ``other`` hold the same value."""
        if self.dtype_dims(name) != other.dtype_dims(other_name):
            return False
        a, b = self._place(name), other._place(other_name)
        if a is not None and b is not None and (a.file, a.offset, a.length) == (b.file, b.offset, b.length):
            return True  # rule 4: the same bytes on disk
        return self.digest(name) == other.digest(other_name)

    # ---------------------------------------------------------------- hashing (rules 3-4)

    def _place(self, name: str) -> _Place | None:
        t = self._tensors[name]
        if isinstance(t, onnx.SparseTensorProto) or t.data_location != onnx.TensorProto.EXTERNAL:
            return None
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info.get("length", -1) or -1)
        except ValueError:
            offset, length = 0, -1
        path = None
        file: tuple = ("location", loc, info.get("checksum", ""))
        if self._base is not None and loc:
            p = (self._base / loc).resolve()
            try:
                p.relative_to(self._base)
                st = p.stat()
            except (ValueError, OSError):
                pass
            else:
                path, file = p, ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        return _Place(file, offset, length, path)

    def _hash(self, name: str) -> bytes:
        t = self._tensors[name]
        dtype, dims = self.dtype_dims(name)
        h = hashlib.blake2b(digest_size=20)
        h.update(f"{dtype}:{dims}:".encode())
        if isinstance(t, onnx.SparseTensorProto):
            h.update(b"sparse:" + t.SerializeToString(deterministic=True))
            return h.digest()
        place = self._place(name)
        if place is not None:
            if not self._read_into(h, place):
                h.update(repr(("external", place.file, place.offset, place.length)).encode())
            return h.digest()
        if dtype == onnx.TensorProto.STRING:
            for s in t.string_data:
                h.update(len(s).to_bytes(8, "little"))
                h.update(s)
        elif t.raw_data and dtype not in _PACKED:
            h.update(t.raw_data)
        else:
            try:
                arr = numpy_helper.to_array(t)
                h.update(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
            except Exception:  # noqa: BLE001 - an unreadable tensor is known by its proto
                logger.debug("values: %s hashed as its proto", name)
                h.update(t.SerializeToString(deterministic=True))
        return h.digest()

    def _read_into(self, h, place: _Place) -> bool:
        if place.path is None:
            return False
        try:
            with open(place.path, "rb") as f:
                f.seek(place.offset)
                left = place.length
                while left != 0:
                    chunk = f.read(_CHUNK if left < 0 else min(_CHUNK, left))
                    if not chunk:
                        break
                    h.update(chunk)
                    left = left - len(chunk) if left > 0 else left
        except OSError as exc:
            logger.debug("values: cannot read %s: %s", place.path, exc)
            return False
        return True
