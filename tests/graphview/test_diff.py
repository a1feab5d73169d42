"""Diff tests: hand-built before/after with provenance, and real pipeline passes."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest
from gv_helpers import conv_bn_relu, fused_after, op_nodes, parse_dot

from fusionviz.graphview import RenderOptions, diff_models, render_graph
from fusionviz.graphview.build import provenance_text
from fusionviz.graphview.dot import STATUS_STYLE
from fusionviz.passes import registry
from fusionviz.passes.pipeline import run_pipeline


def test_fused_node_counts_and_labels():
    before = conv_bn_relu()
    after = fused_after(before)
    d = diff_models(before, after)
    assert d.status_after == {"FusedConv_fv1": "fused"}
    assert d.status_before == {"Conv_12": "removed", "BatchNormalization_13": "removed", "Relu_14": "removed"}
    assert d.counts["fused"] == 1 and d.counts["removed"] == 3 and d.counts["unchanged"] == 0
    assert d.fused_into["Relu_14"] == "FusedConv_fv1"
    assert d.provenance["FusedConv_fv1"] == ["Conv_12", "BatchNormalization_13", "Relu_14"]
    assert d.passes["FusedConv_fv1"] == ["fold_batchnorm", "fuse_conv_activation"]

    g = parse_dot(render_graph(after, diff=d).dot)
    (fused,) = op_nodes(g)
    assert fused.attr["fillcolor"] == STATUS_STYLE["fused"][0]
    assert fused.attr["color"] == STATUS_STYLE["fused"][1]
    assert "← Conv_12 + BatchNormalization_13 + Relu_14" in fused.attr["label"]

    g = parse_dot(render_graph(before, diff=d, side="before").dot)
    nodes = op_nodes(g)
    assert len(nodes) == 3
    assert all(n.attr["fillcolor"] == STATUS_STYLE["removed"][0] for n in nodes)
    assert all("fused into FusedConv_fv1" in n.attr["label"] for n in nodes)
    assert any(e[1] == STATUS_STYLE["fused"][0] for e in render_graph(after, diff=d).legend)


def test_changed_weights_and_unchanged_nodes():
    before = conv_bn_relu()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    after.graph.initializer[0].raw_data = bytes(len(after.graph.initializer[0].raw_data))  # new W values
    d = diff_models(before, after)
    assert d.status_after["Conv_12"] == "changed"
    assert d.status_after["Relu_14"] == "unchanged"
    assert d.status_before["Conv_12"] == "changed"
    assert d.counts == {"fused": 0, "removed": 0, "added": 0, "changed": 1, "unchanged": 2, "absorbed": 0}
    g = parse_dot(render_graph(after, diff=d).dot)
    colours = sorted(n.attr["fillcolor"] for n in op_nodes(g))
    assert colours.count(STATUS_STYLE["changed"][0]) == 1


def test_identical_models_have_no_changes():
    m = conv_bn_relu()
    d = diff_models(m, m)
    assert d.counts["unchanged"] == 3 and sum(d.counts[k] for k in ("fused", "removed", "added", "changed")) == 0
    r = render_graph(m, diff=d, options=RenderOptions(changed_only=True))
    assert r.drawn == 0 and "No node changed" in r.note


def test_added_node_without_provenance():
    before = conv_bn_relu()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    after.graph.node[2].output[0] = "r"
    after.graph.node.append(onnx.helper.make_node("Identity", ["r"], ["y"], name="NewIdentity"))
    d = diff_models(before, after)
    assert d.status_after["NewIdentity"] == "added"
    assert d.counts["added"] == 1


def test_identity_elimination_pipeline_diff():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] x) => (float[2, 3] y) {
        a = Identity (x)
        b = Relu (a)
        c = Identity (b)
        y = Neg (c)
    }""")
    res = run_pipeline(m, ["identity_elimination"])
    before, after = res.snapshots[0].model, res.snapshots[-1].model
    d = diff_models(before, after)
    removed = [k for k, s in d.status_before.items() if s == "removed"]
    assert len(removed) == 2 and all(before.graph.node[[n.name for n in before.graph.node].index(k)].op_type
                                     == "Identity" for k in removed)
    assert d.counts["removed"] == 2 and d.counts["unchanged"] == 2
    g = parse_dot(render_graph(before, diff=d, side="before").dot)
    red = [n for n in op_nodes(g) if n.attr["fillcolor"] == STATUS_STYLE["removed"][0]]
    assert len(red) == 2 and all("removed" in n.attr["label"] for n in red)


@pytest.mark.parametrize("passes", [["fold_batchnorm"], ["fold_batchnorm", "fuse_conv_activation"]],
                         ids=["fold_batchnorm", "fold_batchnorm+fuse_conv_activation"])
def test_fusion_pass_positive_case(passes):
    missing = [p for p in passes if p not in registry.pass_names()]
    if missing:
        pytest.skip(f"passes not registered yet: {missing}")
    res = run_pipeline(conv_bn_relu(), passes)
    before, after = res.snapshots[0].model, res.snapshots[-1].model
    d = diff_models(before, after)
    # the BatchNormalization is gone (folded into the conv) in every case
    assert d.status_before["BatchNormalization_13"] == "removed"
    g = parse_dot(render_graph(before, diff=d, side="before").dot)
    red = [n for n in op_nodes(g) if n.attr["fillcolor"] == STATUS_STYLE["removed"][0]]
    assert red
    ga = parse_dot(render_graph(after, diff=d).dot)
    marked = [n for n in op_nodes(ga) if n.attr["fillcolor"] != "#ffffff"
              and n.attr["fillcolor"] in (STATUS_STYLE["fused"][0], STATUS_STYLE["changed"][0])]
    assert marked, "the conv that absorbed the BatchNormalization is highlighted"
    if "fuse_conv_activation" in passes:
        assert d.counts["fused"] >= 1
        assert any("Conv_12" in n.attr["label"] and "Relu_14" in n.attr["label"] for n in marked)


def test_provenance_text_shortens_long_lists():
    assert provenance_text(["a", "b"]) == "← a + b"
    long = provenance_text([f"Conv_{i}" for i in range(12)])
    assert long.startswith("← 12 nodes: Conv_0 + Conv_1 + … + Conv_11")
