"""Diff tests: hand-built before/after with provenance, and real pipeline passes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from gv_helpers import (
    constant_weights_model,
    conv_bn_relu,
    fused_after,
    lift_constants,
    op_nodes,
    parse_dot,
)
from onnx import numpy_helper

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
    assert d.counts == {"fused": 0, "removed": 0, "added": 0, "changed": 1, "lifted": 0, "unchanged": 2,
                        "absorbed": 0}
    assert d.what["Conv_12"] == ["input 1 (W) values changed, shape [4,3,3,3]"]
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
    res = run_pipeline(m, ["eliminate_identity"])
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


# ------------------------------------------------------------------ exact diff: lifted constants, what changed

CONSTANT_NODES = ("Constant_W", "Constant_B", "Constant_k", "Constant_shape")


@pytest.mark.parametrize("rename, typed", [(False, False), (True, False), (True, True)],
                         ids=["same_names", "new_names", "new_names_typed_storage"])
def test_constants_lifted_to_initializers_are_no_change(rename, typed):
    before = constant_weights_model()
    after = lift_constants(before, rename=rename, typed=typed)
    d = diff_models(before, after)
    assert d.counts["changed"] == 0 and d.counts["removed"] == 0
    assert d.counts["lifted"] == len(CONSTANT_NODES) and d.counts["unchanged"] == 3
    assert {k: d.status_before[k] for k in CONSTANT_NODES} == dict.fromkeys(CONSTANT_NODES, "lifted")
    assert d.lifted_to["Constant_W"] == ("lifted_W" if rename else "W")
    assert d.what == {}
    assert "lifted" in d.summary()


def test_lifted_nodes_are_hidden_by_changed_only_and_drawn_quietly():
    before = constant_weights_model()
    d = diff_models(before, lift_constants(before))
    r = render_graph(before, diff=d, side="before", options=RenderOptions(changed_only=True))
    assert r.drawn == 0 and "No node changed" in r.note
    r = render_graph(before, diff=d, side="before")
    g = parse_dot(r.dot)
    # value_ints Constants are drawn (tensor-valued ones are folded into their consumer's label)
    (shape,) = [n for n in op_nodes(g) if "Constant_shape" in n.attr["label"]]
    assert shape.attr["fillcolor"] == STATUS_STYLE["lifted"][0]
    assert "dotted" in shape.attr["style"] and shape.attr["penwidth"] == "1"
    assert "lifted to initializer" in shape.attr["label"]
    assert ("lifted to initializer", *STATUS_STYLE["lifted"][:2]) in r.legend
    assert "lifted to initializer" not in render_graph(before, diff=diff_models(before, before), side="before").dot


def test_weight_with_other_bytes_is_changed_and_its_constant_removed():
    before = constant_weights_model()
    w = numpy_helper.to_array(before.graph.node[0].attribute[0].t).copy()
    w[0, 0, 0, 0] += 1.0
    d = diff_models(before, lift_constants(before, change={"W": w}))
    assert d.status_after["Conv_1"] == "changed"
    assert d.what["Conv_1"] == ["input 1 (W) values changed, shape [4,3,3,3]"]
    assert d.status_before["Constant_W"] == "removed"  # its value reaches no node any more
    assert d.counts["lifted"] == 3 and d.counts["removed"] == 1 and d.counts["changed"] == 1


def test_weight_with_another_shape_names_both_shapes():
    before = constant_weights_model()
    d = diff_models(before, lift_constants(before, change={"shape": np.array([256, 1], dtype=np.int64)}))
    assert d.what["Reshape_3"] == ["input 1 (shape) values changed, shape [2]"]
    d = diff_models(before, lift_constants(before, change={"shape": np.array([1, 16, 16], dtype=np.int64)}))
    assert d.what["Reshape_3"] == ["input 1 (shape) shape [2] → [3]"]


def test_constant_of_a_removed_consumer_is_removed_not_lifted():
    before = constant_weights_model()
    after = lift_constants(before)
    (mul,) = [n for n in after.graph.node if n.op_type == "Mul"]
    after.graph.node.remove(mul)
    after.graph.node[-1].input[0] = "c"  # Reshape reads the Conv directly
    d = diff_models(before, after)
    assert d.status_before["Mul_2"] == "removed"
    assert d.status_before["Constant_k"] == "removed"
    assert d.status_after["Reshape_3"] == "unchanged"  # rewired activation input only
    assert d.counts["removed"] == 2 and d.counts["lifted"] == 3


def test_unused_constant_is_removed_not_lifted():
    before = constant_weights_model()
    before.graph.node.insert(0, onnx.helper.make_node("Constant", [], ["dead"], name="Constant_dead", value_float=1.0))
    after = lift_constants(before)
    after.graph.initializer.pop()  # a dead constant is dropped, not kept as an initializer
    d = diff_models(before, after)
    assert d.status_before["Constant_dead"] == "removed"


LEAKY = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x) => (float[2, 3] y) {
    y = LeakyRelu <alpha = 0.1> (x)
}"""


def _named(text: str) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type}_{i}"
    return m


@pytest.mark.parametrize("after_text, what", [
    pytest.param(LEAKY.replace("0.1", "0.2"), ["attribute alpha 0.1 → 0.2"], id="attribute_value"),
    pytest.param(LEAKY.replace("LeakyRelu <alpha = 0.1>", "LeakyRelu"), ["attribute alpha removed (0.1)"],
                 id="attribute_removed"),
    pytest.param(LEAKY.replace("LeakyRelu <alpha = 0.1>", "Elu <alpha = 0.1>"), ["op LeakyRelu → Elu"],
                 id="op"),
], )
def test_real_change_names_what_changed(after_text, what):
    before = _named(LEAKY)
    after = _named(after_text)
    after.graph.node[0].name = before.graph.node[0].name
    d = diff_models(before, after)
    assert d.status_after["LeakyRelu_0"] == "changed"
    assert d.what["LeakyRelu_0"] == what
    assert d.counts["changed"] == 1 and d.counts["unchanged"] == 0


def test_attribute_spelled_out_with_its_default_is_no_change():
    before = _named(LEAKY.replace("LeakyRelu <alpha = 0.1>", "LeakyRelu"))
    after = _named(LEAKY.replace("0.1", "0.01"))  # 0.01 is LeakyRelu's default alpha
    d = diff_models(before, after)
    assert d.status_after["LeakyRelu_0"] == "unchanged" and d.what == {}


def test_added_attribute_is_named():
    before = conv_bn_relu()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    after.graph.node[0].attribute.append(onnx.helper.make_attribute("dilations", [2, 2]))
    d = diff_models(before, after)
    assert d.what["Conv_12"] == ["attribute dilations added ([2,2])"]


def test_replacing_node_says_what_it_replaces_and_how_it_differs():
    before = conv_bn_relu()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    relu = after.graph.node[2]
    relu.CopyFrom(onnx.helper.make_node("LeakyRelu", list(relu.input), list(relu.output), name="LeakyRelu_fv1",
                                        alpha=0.2))
    onnx.helper.set_metadata_props(relu, {"fusionviz.sources": "Relu_14"})
    d = diff_models(before, after)
    assert d.status_after["LeakyRelu_fv1"] == "changed"
    assert d.what["LeakyRelu_fv1"] == ["replaces Relu_14", "op Relu → LeakyRelu", "attribute alpha added (0.2)"]


def test_subgraph_that_only_lifted_a_constant_is_no_change():
    def model(lifted: bool) -> onnx.ModelProto:
        one = onnx.numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one")
        body_nodes = [] if lifted else [onnx.helper.make_node("Constant", [], ["one"], name="c", value=one)]
        body_nodes.append(onnx.helper.make_node("Add", ["x", "one"], ["t"], name="add"))
        body = onnx.helper.make_graph(body_nodes, "then", [],
                                      [onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [1])],
                                      initializer=[one] if lifted else [])
        other = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["e"], name="id")], "else", [],
                                       [onnx.helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [1])])
        node = onnx.helper.make_node("If", ["cond"], ["y"], name="If_0", then_branch=body, else_branch=other)
        g = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
                                                 onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        return onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])

    assert diff_models(model(False), model(True)).status_after["If_0"] == "unchanged"
    changed = model(True)
    (then,) = [a.g for a in changed.graph.node[0].attribute if a.name == "then_branch"]
    then.node[0].op_type = "Sub"
    d = diff_models(model(False), changed)
    assert d.status_after["If_0"] == "changed"
    assert d.what["If_0"] == ["attribute then_branch changed (graph of 2 → 1 nodes)"]
    d = diff_models(model(True), changed)
    assert d.what["If_0"] == ["attribute then_branch changed (graph of 1 nodes)"]


def test_pipeline_constant_folding_lifts_constants_without_changes():
    before = constant_weights_model()
    res = run_pipeline(before, ["fold_constants"])
    d = diff_models(res.snapshots[0].model, res.snapshots[-1].model)
    assert d.counts["changed"] == 0, d.what
    assert d.counts["lifted"] >= 2  # the tensor-valued weights at least
    assert d.counts["removed"] == 0
