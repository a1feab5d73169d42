"""Export to Google Model Explorer: our graphs, provenance and overlays in its graph JSON and
node-data JSON, so its users can open what fusionviz shows.

The format is Model Explorer's adapter schema (``model_explorer/graph_builder.py`` and
``node_data_builder.py`` of google-ai-edge/model-explorer), written the way its server writes it:

1. Graph JSON: ``{"graphCollections": [{"label", "graphs", "graphSorting"}]}``; each graph
   ``{"id", "nodes", "groupNodeAttributes", "groupNodeConfigs", "nodeLabelsToHide", "tasksData",
   "layoutConfigs"}`` and each node ``{"id", "label", "namespace", "subgraphIds", "attrs",
   "incomingEdges", "outputsMetadata", "inputsMetadata", "style", "config"}`` (every field of
   their dataclasses, ``null`` where optional and unset, as ``dataclasses.asdict`` gives them).
   Attribute values are strings (``KeyValue.value``).
2. One graph per side of the pair (ids ``before`` and ``after`` by default), in one collection
   labelled with the model's name, so Model Explorer's two panes can show them side by side.
   A node's id is its key (its name, or ``#i``), its label the op type, its namespace its name
   scope (without the label). Graph inputs and outputs are nodes of their own (labels ``Input``
   and ``Output``, ids ``input:NAME`` / ``output:NAME``); weights are not nodes (a node's attrs
   say which weights it reads).
3. Edges: ``incomingEdges`` of the consumer, ``sourceNodeOutputId`` the index of the tensor among
   the producer's outputs and ``targetNodeInputId`` its index among the consumer's inputs (both as
   strings); ``outputsMetadata`` has an item per output (``id`` the index) with ``tensor_name``,
   ``tensor_shape`` ("float32[1,3,224,224]") and ``__tensor_tag``; ``inputsMetadata`` an item per
   input with ``__tensor_tag`` (the tensor's name).
4. Provenance as attrs: ``fusionviz.change`` (the change class), ``fusionviz.absorbed`` (the
   original nodes a fused node came from), ``fusionviz.passes``, ``fusionviz.what`` (what
   changed), ``fusionviz.went_into`` (before side). Changed nodes also carry ``style`` in the
   change colours.
5. Control-flow bodies (If/Loop/Scan) are graphs of their own, ids ``<side>/<body path>``
   (``after/If_0/then_branch``, nested ``after/If_0/then_branch/Loop_3/body``: ``graphview.bodies``),
   and the node that holds them lists them in ``subgraphIds``, so Model Explorer opens them from
   it; a body both sides have is compared on its own (its change class and provenance attrs).
6. Node data: ``ModelNodeData`` JSON, ``{graph id: GraphNodeData}``, each ``{"results": {node id:
   {"value": number, "bgColor"?}}, "thresholds": [{"value", "bgColor"}], "gradient": [],
   "hideInAggregatedStatsTable", "hideInChildrenStatsTable", "showExpandedSummaryOnGroupNode",
   "showLabelCountColumnsInChildrenStatsTable"}`` (``to_json_string``: ``null`` fields dropped).
   A numeric overlay's thresholds are its scale (the last, unbounded step ends at the largest
   value); a NaN value (NaN/Inf introduced) is written as -1 with its own ``bgColor``. The change
   class is a node-data file too: value 0 unchanged, 1 changed, 2 fused or added, 3 removed,
   4 lifted, each result with its change colour.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import onnx

from fusionviz.graphview import dot as D
from fusionviz.graphview.model_graph import (
    PASSES_KEY,
    SOURCES_KEY,
    node_keys,
    scope_of,
)

#: Rule 6: the change class as a number.
CHANGE_VALUES = {"unchanged": 0, "changed": 1, "fused": 2, "added": 2, "removed": 3, "lifted": 4}
#: Rule 6: the value a NaN takes in node data.
NAN_VALUE = -1


def _kv(key: str, value: object) -> dict:
    return {"key": key, "value": str(value)}


def _elem_name(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "unknown"


def _shapes(model: onnx.ModelProto) -> dict[str, str]:
    """Rule 3: tensor name -> "float32[1,3,224,224]" from shape inference."""
    from fusionviz.graphview.build import _inferred

    g = _inferred(model).graph
    out: dict[str, str] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                        for d in tt.shape.dim) if tt.HasField("shape") else "?"
        out[vi.name] = f"{_elem_name(tt.elem_type)}[{dims}]"
    for t in model.graph.initializer:
        out[t.name] = f"{_elem_name(t.data_type)}[{','.join(str(d) for d in t.dims)}]"
    return out


def _attr_text(a: onnx.AttributeProto) -> str:
    from fusionviz.graphview.details import _jsonable
    from fusionviz.graphview.panel import attr_text

    try:
        return attr_text(_jsonable(onnx.helper.get_attribute_value(a)))
    except Exception:  # noqa: BLE001 - an odd attribute still exports
        return "?"


def graph_json(model: onnx.ModelProto, graph_id: str, *, diff=None, side: str = "after",
               subgraphs: Mapping[str, list[str]] | None = None) -> dict:
    """Rules 1-5: one Model Explorer ``Graph`` (as a dict) of ``model``'s main graph
    (``subgraphs``: node key -> ids of the graphs of its bodies)."""
    g = model.graph
    keys = node_keys(g.node)
    shapes = _shapes(model)
    inits = {t.name for t in g.initializer}
    producer: dict[str, tuple[str, int]] = {}
    for key, n in zip(keys, g.node, strict=True):
        for i, t in enumerate(n.output):
            if t:
                producer[t] = (key, i)
    real_inputs = [vi.name for vi in g.input if vi.name not in inits]
    for name in real_inputs:
        producer[name] = (f"input:{name}", 0)
    status = (diff.status_after if side == "after" else diff.status_before) if diff is not None else {}

    def out_meta(i: int, t: str) -> dict:
        return {"id": str(i), "attrs": [_kv("tensor_name", t), _kv("tensor_shape", shapes.get(t, "?")),
                                        _kv("__tensor_tag", t)]}

    def node(id_: str, label: str, namespace: str = "", attrs=(), incoming=(), outputs=(), inputs=(),
             style=None) -> dict:
        return {"id": id_, "label": label, "namespace": namespace, "subgraphIds": list((subgraphs or {}).get(id_, ())),
                "attrs": list(attrs),
                "incomingEdges": list(incoming), "outputsMetadata": list(outputs), "inputsMetadata": list(inputs),
                "style": style, "config": None}

    nodes = [node(f"input:{name}", "Input", attrs=[_kv("name", name)], outputs=[out_meta(0, name)])
             for name in real_inputs]
    for key, n in zip(keys, g.node, strict=True):
        attrs = [_kv("name", n.name or key), _kv("op", n.op_type), _kv("domain", n.domain or "ai.onnx")]
        attrs += [_kv(a.name, _attr_text(a)) for a in n.attribute]
        weights = [t for t in n.input if t in inits]
        if weights:
            attrs.append(_kv("weights", ", ".join(f"{t} {shapes.get(t, '?')}" for t in weights)))
        meta = {p.key: p.value for p in n.metadata_props}
        st = status.get(key, "")
        style = None
        if diff is not None:
            attrs.append(_kv("fusionviz.change", st or "unchanged"))
            if st in D.STATUS_STYLE:
                fill, border, _ = D.STATUS_STYLE[st]
                style = {"backgroundColor": fill, "borderColor": border, "hoveredBorderColor": border}
        absorbed = (diff.provenance.get(key) if diff is not None and side == "after" else None) \
            or [s for s in meta.get(SOURCES_KEY, "").split(",") if s]
        if absorbed and absorbed != [key]:
            attrs.append(_kv("fusionviz.absorbed", ", ".join(absorbed)))
        passes = (diff.passes.get(key) if diff is not None and side == "after" else None) \
            or [s for s in meta.get(PASSES_KEY, "").split(",") if s]
        if passes:
            attrs.append(_kv(PASSES_KEY, ", ".join(passes)))
        if diff is not None and side == "after" and diff.what.get(key):
            attrs.append(_kv("fusionviz.what", "; ".join(diff.what[key])))
        if diff is not None and side == "before":
            went = diff.fused_into.get(key) or diff.lifted_to.get(key)
            if went:
                attrs.append(_kv("fusionviz.went_into", went))
        incoming = []
        inputs_meta = []
        for j, t in enumerate(n.input):
            inputs_meta.append({"id": str(j), "attrs": [_kv("__tensor_tag", t)]})
            if t and t in producer:
                src, k = producer[t]
                incoming.append({"sourceNodeId": src, "sourceNodeOutputId": str(k), "targetNodeInputId": str(j)})
        outputs = [out_meta(i, t) for i, t in enumerate(n.output) if t]
        nodes.append(node(key, n.op_type, "/".join(scope_of(n)), attrs, incoming, outputs, inputs_meta, style))
    for o in g.output:
        incoming = [{"sourceNodeId": producer[o.name][0], "sourceNodeOutputId": str(producer[o.name][1]),
                     "targetNodeInputId": "0"}] if o.name in producer else []
        nodes.append(node(f"output:{o.name}", "Output", attrs=[_kv("name", o.name)], incoming=incoming,
                          inputs=[{"id": "0", "attrs": [_kv("__tensor_tag", o.name)]}]))
    return {"id": graph_id, "nodes": nodes, "groupNodeAttributes": None, "groupNodeConfigs": None,
            "nodeLabelsToHide": None, "tasksData": None, "layoutConfigs": None}


def side_graphs(models: Mapping[str, onnx.ModelProto], side: str, graph_id: str, diff) -> list[dict]:
    """Rule 5: the main graph of ``models[side]`` and one graph per control-flow body."""
    from fusionviz import errors
    from fusionviz.graphview.bodies import body_model, list_bodies
    from fusionviz.graphview.diff import diff_models

    model = models[side]
    other = models["after" if side == "before" else "before"]
    found = list_bodies(model)
    subgraphs: dict[str, dict[str, list[str]]] = {}
    for b in found:
        subgraphs.setdefault(b.parent, {}).setdefault(b.node, []).append(f"{graph_id}/{b.path}")
    out = [graph_json(model, graph_id, diff=diff, side=side, subgraphs=subgraphs.get(""))]
    for b in found:
        body = body_model(model, b.path)
        try:
            twin = body_model(other, b.path)
        except errors.FusionvizError:
            twin = None  # the other side has no such body (folded into its parent)
        body_diff = None
        if twin is not None and diff is not None:
            body_diff = diff_models(twin, body) if side == "after" else diff_models(body, twin)
        out.append(graph_json(body, f"{graph_id}/{b.path}", diff=body_diff, side=side,
                              subgraphs=subgraphs.get(b.path)))
    return out


def graphs_json(label: str, graphs: list[dict]) -> dict:
    """Rules 1-2: the ``graphCollections`` document holding ``graphs``."""
    return {"graphCollections": [{"label": label, "graphs": graphs, "graphSorting": "node_count_desc"}]}


def _graph_node_data(results: dict, thresholds: list) -> dict:
    return {"results": results, "thresholds": thresholds, "gradient": [], "hideInAggregatedStatsTable": False,
            "hideInChildrenStatsTable": False, "showExpandedSummaryOnGroupNode": False,
            "showLabelCountColumnsInChildrenStatsTable": False}


def overlay_node_data(overlays: Mapping[str, object]) -> dict:
    """Rule 6: ``ModelNodeData`` of one overlay kind: graph id -> its ``GraphNodeData``
    (``overlays``: graph id -> ``graphview.overlays.Overlay``)."""
    from fusionviz.graphview.build import value_fill

    out = {}
    for graph_id, ov in overlays.items():
        results = {}
        finite = [v for _, v in ov.values if math.isfinite(v)]
        for key, v in ov.values:
            if math.isnan(v):
                results[key] = {"value": NAN_VALUE, "bgColor": D.HEAT_NAN}
            elif math.isfinite(v):
                results[key] = {"value": v}
        thresholds = []
        top = max(finite) if finite else 0.0
        for bound, _ in ov.scale:
            value = bound if math.isfinite(bound) else max(top, thresholds[-1]["value"] if thresholds else 0.0)
            if thresholds and value <= thresholds[-1]["value"]:
                continue
            thresholds.append({"value": value, "bgColor": value_fill(bound, ov.scale, ov.fills)})
        out[graph_id] = _graph_node_data(results, thresholds)
    return out


def change_node_data(diff, graph_ids: Mapping[str, str]) -> dict:
    """Rule 6: the change class as ``ModelNodeData`` (``graph_ids``: side -> graph id)."""
    out = {}
    for side, graph_id in graph_ids.items():
        status = diff.status_after if side == "after" else diff.status_before
        results = {}
        for key, st in status.items():
            fill = D.STATUS_STYLE[st][0] if st in D.STATUS_STYLE else "#ffffff"
            results[key] = {"value": CHANGE_VALUES.get(st, 0), "bgColor": fill}
        out[graph_id] = _graph_node_data(results, [])
    return out


def export_files(label: str, before: onnx.ModelProto, after: onnx.ModelProto, diff,
                 overlays: Mapping[str, Mapping[str, object]] | None = None,
                 graph_ids: tuple[str, str] = ("before", "after")) -> dict[str, str]:
    """File name -> JSON text: ``graphs.json``, ``node_data_change.json`` and one
    ``node_data_<kind>.json`` per overlay kind (``overlays``: kind -> side -> Overlay)."""
    ids = dict(zip(("before", "after"), graph_ids, strict=True))
    models = {"before": before, "after": after}
    doc = graphs_json(label, [g for side in ("before", "after")
                              for g in side_graphs(models, side, ids[side], diff)])
    files = {"graphs.json": doc, "node_data_change.json": change_node_data(diff, ids)}
    for kind, by_side in (overlays or {}).items():
        files[f"node_data_{kind}.json"] = overlay_node_data({ids[s]: ov for s, ov in by_side.items()})
    return {name: json.dumps(data, indent=1, allow_nan=False) for name, data in files.items()}


def export_zip(files: Mapping[str, str]) -> bytes:
    """The files of :func:`export_files` in one zip (the Graph page's download)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def write_export(out_dir: str | Path, label: str, before: onnx.ModelProto, after: onnx.ModelProto, diff,
                 overlays: Mapping[str, Mapping[str, object]] | None = None,
                 graph_ids: tuple[str, str] = ("before", "after")) -> list[Path]:
    """:func:`export_files` written into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in export_files(label, before, after, diff, overlays, graph_ids).items():
        p = out / name
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    return paths
