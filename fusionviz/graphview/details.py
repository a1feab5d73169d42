"""``node_details``: everything about one node, for the details panel and the CLI.

Weights are summarized (shape, dtype, min/max/mean/std); tensors whose data lives in an
external file that was not loaded get shape and dtype only. Values are plain JSON types.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fusionviz import errors
from fusionviz.graphview import dot as D
from fusionviz.graphview.model_graph import (
    PASSES_KEY,
    SOURCES_KEY,
    _count,
    _input_role,
    default_opset,
    dtype_short,
    format_dims,
    node_keys,
    scope_of,
    tensor_infos,
)

logger = logging.getLogger(__name__)

#: Largest weight (elements) whose statistics are computed.
MAX_STATS_ELEMENTS = 50_000_000


def _jsonable(v: object) -> object:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return {"tensor": {"dtype": dtype_short(v.data_type), "shape": list(v.dims)}}
    if isinstance(v, onnx.GraphProto):
        return {"graph": {"name": v.name, "nodes": _count(v)}}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (onnx.SparseTensorProto, onnx.TypeProto)):
        return str(type(v).__name__)
    return v


def weight_stats(t: onnx.TensorProto) -> dict:
    """Shape, dtype and (when the data is here) min/max/mean/std of a tensor."""
    out: dict = {"shape": list(t.dims), "dtype": dtype_short(t.data_type)}
    size = int(np.prod(t.dims)) if t.dims else 1
    out["elements"] = size
    if t.data_location == onnx.TensorProto.EXTERNAL or size > MAX_STATS_ELEMENTS:
        return out
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:  # noqa: BLE001 - odd dtypes: show what we have
        logger.info("cannot read tensor %s: %s", t.name, exc)
        return out
    if arr.size and np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_:
        a = arr.astype(np.float64).reshape(-1)
        if a.size:
            out.update(min=float(a.min()), max=float(a.max()), mean=float(a.mean()), std=float(a.std()))
    if arr.size <= 16:
        out["values"] = arr.reshape(-1).tolist()
    return out


def node_details(model: onnx.ModelProto, node_name: str) -> dict:
    """Details of the main-graph node ``node_name`` (a name, or ``#i`` for unnamed nodes).

    Returns:
        A dict with name, key, op, domain, scope, attributes, inputs, outputs (each with
        dtype/shape; weight inputs with stats), subgraphs, and provenance ({sources, passes}).

    Raises:
        RenderError: no such node.
    """
    from fusionviz.graphview.build import _inferred

    g = model.graph
    keys = node_keys(g.node)
    idx = None
    for i, k in enumerate(keys):
        if k == node_name:
            idx = i
            break
    if idx is None:
        for i, n in enumerate(g.node):
            if n.name == node_name:
                idx = i
                break
    if idx is None:
        raise errors.RenderError(f"No node named '{D.shorten(D.clean(node_name), 80)}' in the model.")
    node = g.node[idx]
    info = tensor_infos(_inferred(model))
    inits = {t.name: t for t in g.initializer}
    consts = {}
    producer: dict[str, str] = {}
    consumers: dict[str, list[str]] = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            producer[o] = keys[i]
        for t in n.input:
            consumers.setdefault(t, []).append(keys[i])
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    consts[n.output[0]] = a.t
    opset = default_opset(model)
    graph_inputs = {v.name for v in g.input}

    def tensor(t: str, j: int | None = None) -> dict:
        d: dict = {"name": t}
        if j is not None:
            d["role"] = _input_role(node.op_type, node.domain, j, opset)
        if t in info:
            d["dtype"], d["shape"] = info[t]
        w = inits.get(t) or consts.get(t)
        if w is not None:
            d["kind"] = "weight"
            d["stats"] = weight_stats(w)
            d.setdefault("dtype", dtype_short(w.data_type))
            d.setdefault("shape", format_dims(w.dims))
        elif t in graph_inputs:
            d["kind"] = "graph input"
        else:
            d["kind"] = "activation"
            if t in producer:
                d["producer"] = producer[t]
        return d

    attributes = {}
    for a in node.attribute:
        try:
            attributes[a.name] = _jsonable(helper.get_attribute_value(a))
        except Exception:  # noqa: BLE001
            attributes[a.name] = "?"
    meta = {p.key: p.value for p in node.metadata_props}
    return {
        "name": node.name,
        "key": keys[idx],
        "index": idx,
        "op": node.op_type,
        "domain": node.domain or "ai.onnx",
        "scope": "/".join(scope_of(node)),
        "attributes": attributes,
        "inputs": [tensor(t, j) if t else {"name": "", "kind": "omitted"} for j, t in enumerate(node.input)],
        "outputs": [{**tensor(t), "consumers": consumers.get(t, [])} for t in node.output if t],
        "provenance": {
            "sources": [s for s in meta.get(SOURCES_KEY, "").split(",") if s],
            "passes": [s for s in meta.get(PASSES_KEY, "").split(",") if s],
        },
        "metadata": {k: v for k, v in meta.items() if k not in (SOURCES_KEY, PASSES_KEY)},
    }
