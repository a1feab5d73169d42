"""Reading the protobuf: a parse whose failure is one sentence, and walks over a model's graphs
(subgraphs and functions included) and tensors, iterative so nesting cannot overflow the stack."""

from __future__ import annotations

import re
from collections.abc import Iterator

import onnx
from google.protobuf.message import DecodeError

from fusionviz import errors
from fusionviz.model_io.limits import _short

_ONNX_DOMAINS = ("", "ai.onnx")


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
