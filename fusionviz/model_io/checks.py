"""The checks of loading (rules 4-8 of :mod:`fusionviz.model_io`): zip members, text fields,
versions, declared types, tensor data, the ONNX checker's sentence, topological order."""

from __future__ import annotations

import heapq
import re
import stat
import zipfile
from pathlib import Path

import onnx

from fusionviz import errors
from fusionviz.model_io.limits import (
    _RAISE_ARCHIVE,
    MIN_IR_VERSION,
    MIN_OPSET,
    Limits,
    _short,
    _size,
)
from fusionviz.model_io.proto import _ONNX_DOMAINS, iter_graphs, iter_tensors
from fusionviz.model_io.weights import _external_place, weights_dir


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
