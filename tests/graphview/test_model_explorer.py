"""Export to Model Explorer, checked against its adapter schema.

The schema below is written from Model Explorer's own source (google-ai-edge/model-explorer,
``src/server/package/src/model_explorer/graph_builder.py``, ``node_data_builder.py``, ``types.py``
and ``utils.py``), not from our output: every dataclass with its fields, which are optional, and
their types. Graph JSON is what their server sends the UI (``convert_adapter_response``:
``dataclasses.asdict``, so every field is present, ``null`` where unset); node data is what
``ModelNodeData.to_json_string`` writes (``remove_none``: ``null`` fields dropped).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from gv_helpers import conv_bn_relu, fused_after

from fusionviz.graphview import diff_models
from fusionviz.graphview.model_explorer import (
    CHANGE_VALUES,
    NAN_VALUE,
    graph_json,
    graphs_json,
    write_export,
)
from fusionviz.graphview.overlays import error_overlay, memory_overlay, time_overlay

NUM = (int, float)
STR = (str,)

# graph_builder.py: field -> (types, may be null)
KEY_VALUE = {"key": (STR, False), "value": ((str, dict), False)}  # NodeAttributeValue = str | NodeIdsNodeAttributeValue
INCOMING_EDGE = {"sourceNodeId": (STR, False), "sourceNodeOutputId": (STR, False), "targetNodeInputId": (STR, False)}
METADATA_ITEM = {"id": (STR, False), "attrs": ((list,), False)}
GRAPH_NODE_STYLE = {"backgroundColor": (STR, False), "borderColor": (STR, False), "hoveredBorderColor": (STR, False)}
GRAPH_NODE = {"id": (STR, False), "label": (STR, False), "namespace": (STR, False), "subgraphIds": ((list,), False),
              "attrs": ((list,), False), "incomingEdges": ((list,), False), "outputsMetadata": ((list,), False),
              "inputsMetadata": ((list,), False), "style": ((dict,), True), "config": ((dict,), True)}
GRAPH = {"id": (STR, False), "nodes": ((list,), False), "groupNodeAttributes": ((dict,), True),
         "groupNodeConfigs": ((list,), True), "nodeLabelsToHide": ((list,), True), "tasksData": ((dict,), True),
         "layoutConfigs": ((dict,), True)}
GRAPH_COLLECTION = {"label": (STR, False), "graphs": ((list,), False), "graphSorting": (STR, False)}
GRAPH_SORTING = {"node_count_asc", "node_count_desc", "name_asc", "name_desc"}
# node_data_builder.py (after remove_none: optional fields may be absent, never null)
GRAPH_NODE_DATA = {"results": ((dict,), False), "thresholds": ((list,), False), "gradient": ((list,), False),
                   "hideInAggregatedStatsTable": ((bool,), False), "hideInChildrenStatsTable": ((bool,), False),
                   "showExpandedSummaryOnGroupNode": ((bool,), False),
                   "showLabelCountColumnsInChildrenStatsTable": ((bool,), False)}
GRAPH_NODE_DATA_OPTIONAL = {"hideAggregatedStats"}
NODE_DATA_RESULT = {"value": (NUM, False)}
NODE_DATA_RESULT_OPTIONAL = {"bgColor": STR, "textColor": STR}
THRESHOLD_ITEM = {"value": (NUM, False), "bgColor": (STR, False)}
THRESHOLD_ITEM_OPTIONAL = {"textColor": STR}


def _check(obj: dict, fields: dict, where: str, optional: dict | set | None = None) -> None:
    """Every field present with its type (null only where allowed); nothing else but the optional."""
    assert isinstance(obj, dict), where
    extra = set(obj) - set(fields) - set(optional or ())
    assert not extra, f"{where}: fields not in the schema: {extra}"
    for name, (types, nullable) in fields.items():
        assert name in obj, f"{where}: missing {name}"
        v = obj[name]
        if v is None:
            assert nullable, f"{where}.{name} is null"
            continue
        if types == (bool,):
            assert isinstance(v, bool), f"{where}.{name}: {type(v)}"
        else:
            assert isinstance(v, types) and not isinstance(v, bool), f"{where}.{name}: {type(v)}"
    for name, types in (optional.items() if isinstance(optional, dict) else ()):
        if name in obj:
            assert isinstance(obj[name], types), f"{where}.{name}"


def validate_graphs(doc: dict) -> None:
    """ModelExplorerGraphs: ``graphs`` or ``graphCollections`` (types.py)."""
    assert set(doc) <= {"graphs", "graphCollections"} and doc, doc.keys()
    graphs = list(doc.get("graphs", []))
    for c in doc.get("graphCollections", []):
        _check(c, GRAPH_COLLECTION, "GraphCollection")
        assert c["graphSorting"] in GRAPH_SORTING
        graphs += c["graphs"]
    ids = [g["id"] for g in graphs]
    assert len(set(ids)) == len(ids), "graph ids repeat"
    for g in graphs:
        _check(g, GRAPH, f"Graph {g.get('id')}")
        node_ids = [n["id"] for n in g["nodes"]]
        assert len(set(node_ids)) == len(node_ids), "node ids repeat within a graph"
        outputs = {}
        for n in g["nodes"]:
            where = f"GraphNode {n.get('id')}"
            _check(n, GRAPH_NODE, where)
            for kv in n["attrs"]:
                _check(kv, KEY_VALUE, where + ".attrs")
            for m in (*n["outputsMetadata"], *n["inputsMetadata"]):
                _check(m, METADATA_ITEM, where + ".metadata")
                for kv in m["attrs"]:
                    _check(kv, KEY_VALUE, where + ".metadata.attrs")
            if n["style"] is not None:
                _check(n["style"], GRAPH_NODE_STYLE, where + ".style")
            assert not n["namespace"].endswith("/") and all(n["subgraphIds"]), where
            outputs[n["id"]] = {m["id"] for m in n["outputsMetadata"]}
        for n in g["nodes"]:
            for e in n["incomingEdges"]:
                _check(e, INCOMING_EDGE, f"edge into {n['id']}")
                assert e["sourceNodeId"] in outputs, f"edge from a node not in graph {g['id']}"
                assert e["sourceNodeOutputId"] in outputs[e["sourceNodeId"]], "edge from an output with no metadata"
                assert e["targetNodeInputId"] in {m["id"] for m in n["inputsMetadata"]}


def validate_node_data(doc: dict, graphs: dict) -> None:
    """ModelNodeData.to_json_string: graph id -> GraphNodeData (node ids of that graph)."""
    by_id = {g["id"]: {n["id"] for n in g["nodes"]} for c in graphs["graphCollections"] for g in c["graphs"]}
    assert doc and set(doc) <= set(by_id)
    for graph_id, gd in doc.items():
        _check(gd, GRAPH_NODE_DATA, f"GraphNodeData {graph_id}", GRAPH_NODE_DATA_OPTIONAL)
        for key, r in gd["results"].items():
            assert key in by_id[graph_id], f"result for a node not in {graph_id}: {key}"
            _check(r, NODE_DATA_RESULT, f"result {key}", NODE_DATA_RESULT_OPTIONAL)
            assert math.isfinite(r["value"])
        values = []
        for t in gd["thresholds"]:
            _check(t, THRESHOLD_ITEM, "ThresholdItem", THRESHOLD_ITEM_OPTIONAL)
            values.append(t["value"])
        assert values == sorted(values) and len(set(values)) == len(values), "thresholds ascend"
        for gi in gd["gradient"]:
            assert 0 <= gi["stop"] <= 1


@pytest.fixture
def pair():
    before = conv_bn_relu()
    after = fused_after(before)
    return before, after, diff_models(before, after)


def test_the_export_follows_model_explorers_schema(tmp_path, pair):
    before, after, diff = pair
    overlays = {"memory": {"before": memory_overlay(before), "after": memory_overlay(after)},
                "time": {"before": time_overlay({"Conv_12": 0.2, "Relu_14": 50.0}), "after": time_overlay({})},
                "error": {"after": error_overlay([("FusedConv_fv1", math.nan)], ((1e-2, "a"), (math.inf, "b")))}}
    paths = write_export(tmp_path, "convnet", before, after, diff, overlays)
    assert sorted(p.name for p in paths) == ["graphs.json", "node_data_change.json", "node_data_error.json",
                                             "node_data_memory.json", "node_data_time.json"]
    graphs = json.loads((tmp_path / "graphs.json").read_text())
    validate_graphs(graphs)
    for p in paths[1:]:
        validate_node_data(json.loads(p.read_text()), graphs)
    err = json.loads((tmp_path / "node_data_error.json").read_text())["after"]["results"]["FusedConv_fv1"]
    assert err["value"] == NAN_VALUE and err["bgColor"]
    time = json.loads((tmp_path / "node_data_time.json").read_text())["before"]
    assert time["thresholds"][-1]["value"] == 50.0  # the unbounded step ends at the largest value


def test_nodes_edges_and_provenance(pair):
    before, after, diff = pair
    g = graph_json(after, "after", diff=diff, side="after")
    nodes = {n["id"]: n for n in g["nodes"]}
    assert set(nodes) == {"input:x", "FusedConv_fv1", "output:y"}
    fused = nodes["FusedConv_fv1"]
    assert fused["label"] == "FusedConv"
    assert fused["incomingEdges"] == [{"sourceNodeId": "input:x", "sourceNodeOutputId": "0", "targetNodeInputId": "0"}]
    attrs = {kv["key"]: kv["value"] for kv in fused["attrs"]}
    assert attrs["fusionviz.change"] == "fused"
    assert attrs["fusionviz.absorbed"] == "Conv_12, BatchNormalization_13, Relu_14"
    assert attrs["activation"] == "Relu" and "W 4×3×3×3" not in attrs["weights"] and "W float32[4,3,3,3]" in attrs["weights"]
    out = {kv["key"]: kv["value"] for kv in fused["outputsMetadata"][0]["attrs"]}
    assert out["tensor_name"] == "y" and out["tensor_shape"] == "float32[1,4,8,8]"
    assert fused["style"]["backgroundColor"]
    assert nodes["output:y"]["incomingEdges"][0]["sourceNodeId"] == "FusedConv_fv1"
    b = graph_json(before, "before", diff=diff, side="before")
    bn = next(n for n in b["nodes"] if n["id"] == "BatchNormalization_13")
    assert {"key": "fusionviz.went_into", "value": "FusedConv_fv1"} in bn["attrs"]
    assert bn["incomingEdges"][0] == {"sourceNodeId": "Conv_12", "sourceNodeOutputId": "0", "targetNodeInputId": "0"}


def test_change_class_is_node_data_with_the_change_colours(tmp_path, pair):
    before, after, diff = pair
    write_export(tmp_path, "convnet", before, after, diff)
    data = json.loads((tmp_path / "node_data_change.json").read_text())
    assert data["after"]["results"]["FusedConv_fv1"]["value"] == CHANGE_VALUES["fused"]
    assert data["before"]["results"]["Conv_12"]["value"] == CHANGE_VALUES["removed"]


def test_graph_names_with_scopes_become_namespaces():
    m = conv_bn_relu(("/layer1/conv/Conv", "/layer1/bn/BatchNormalization", "/layer1/Relu"))
    doc = graphs_json("m", [graph_json(m, "g")])
    validate_graphs(doc)
    ns = {n["id"]: n["namespace"] for n in doc["graphCollections"][0]["graphs"][0]["nodes"]}
    assert ns["/layer1/conv/Conv"] == "layer1/conv" and ns["/layer1/Relu"] == "layer1"


def test_the_validator_refuses_what_model_explorer_would(pair):
    before, after, diff = pair
    good = graphs_json("m", [graph_json(after, "after", diff=diff)])
    bad = json.loads(json.dumps(good))
    bad["graphCollections"][0]["graphs"][0]["nodes"][1]["incomingEdges"][0]["sourceNodeOutputId"] = 0
    with pytest.raises(AssertionError):
        validate_graphs(bad)
    bad = json.loads(json.dumps(good))
    del bad["graphCollections"][0]["graphs"][0]["nodes"][1]["outputsMetadata"]
    with pytest.raises(AssertionError):
        validate_graphs(bad)


def test_cli_export_me_writes_files_model_explorer_reads(run_cli, tmp_path, repo_root):
    out = tmp_path / "me"
    r = run_cli("export-me", "resnet_dynamo", "--all", "-o", out, "--time", timeout=300)
    assert r.code == 0, r.stderr
    graphs = json.loads((out / "graphs.json").read_text())
    validate_graphs(graphs)
    for name in ("node_data_change.json", "node_data_memory.json", "node_data_time.json"):
        validate_node_data(json.loads((out / name).read_text()), graphs)
    time = json.loads((out / "node_data_time.json").read_text())
    assert len(time["after"]["results"]) >= 20 and all(r["value"] >= 0 for r in time["after"]["results"].values())
    bad = run_cli("export-me", "resnet_dynamo", "--passes", "", "-o", out)
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert np.isfinite(sum(r["value"] for r in time["after"]["results"].values()))


def test_control_flow_bodies_are_graphs_their_nodes_open(tmp_path):
    from fusionviz.graphview.bodies import list_bodies
    from fusionviz.graphview.synthetic import control_flow_model
    from fusionviz.passes import run_pipeline

    model = control_flow_model()
    r = run_pipeline(model, ["fold_constants", "eliminate_identity"])
    write_export(tmp_path, "cf", r.original, r.final, diff_models(r.original, r.final))
    graphs = json.loads((tmp_path / "graphs.json").read_text())
    validate_graphs(graphs)
    by_id = {g["id"]: g for g in graphs["graphCollections"][0]["graphs"]}
    paths = [b.path for b in list_bodies(r.original)]
    assert "Loop_5/body/steps/If_2/then_branch" in paths
    for p in paths:
        assert f"before/{p}" in by_id
    ids = set(by_id)
    for g in by_id.values():
        for n in g["nodes"]:
            assert set(n["subgraphIds"]) <= ids  # every subgraph id names a graph of the file
    holder = next(n for n in by_id["before"]["nodes"] if n["id"] == "If_2")
    assert holder["subgraphIds"] == ["before/If_2/then_branch", "before/If_2/else_branch"]
    nested = next(n for n in by_id["before/Loop_5/body"]["nodes"] if n["id"] == "steps/If_2")  # a name with '/'
    assert nested["subgraphIds"] == ["before/Loop_5/body/steps/If_2/then_branch",
                                     "before/Loop_5/body/steps/If_2/else_branch"]
