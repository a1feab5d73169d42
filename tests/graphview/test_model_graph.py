"""Golden-structure tests: what a small model looks like as DOT."""

from __future__ import annotations

import onnx
import onnx.parser
from gv_helpers import conv_bn_relu, op_nodes, parse_dot

from fusionviz.graphview import RenderOptions, render_graph
from fusionviz.graphview.dot import FAMILY_FILL
from fusionviz.graphview.model_graph import build_display_graph, scope_from_name


def test_conv_bn_relu_structure():
    r = render_graph(conv_bn_relu())
    g = parse_dot(r.dot)
    ops = op_nodes(g)
    assert len(ops) == 3 and r.drawn == 3 and r.total == 3 and r.note is None
    # weights are folded into labels, never drawn: 3 op nodes + input + output + legend
    assert len(g.nodes()) == 6
    # x -> Conv -> BN -> Relu -> y
    assert len(g.edges()) == 4
    by_name = {r.node_ids[n.attr["id"]]: n for n in ops}
    conv = by_name["Conv_12"]
    assert "W 4×3×3×3" in conv.attr["label"] and "k" in conv.attr["label"]
    assert conv.attr["fillcolor"] == FAMILY_FILL["conv"]
    assert by_name["BatchNormalization_13"].attr["fillcolor"] == FAMILY_FILL["norm"]
    assert by_name["Relu_14"].attr["fillcolor"] == FAMILY_FILL["activation"]
    labels = [e.attr.get("label") for e in g.edges()]
    assert "1×4×8×8 f32" in labels and "1×3×8×8 f32" in labels
    shapes = {n.attr.get("shape") for n in g.nodes() if not n.attr.get("id")}
    assert {"invhouse", "house"} <= shapes


def test_constant_weights_folded_and_symbolic_dims():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 4] x) => (float[N, 2] y) {
        w = Constant <value = float[4, 2] {1,2,3,4,5,6,7,8}> ()
        s = Constant <value = int64[2] {-1, 2}> ()
        m = MatMul (x, w)
        y = Reshape (m, s)
    }""")
    r = render_graph(m)
    g = parse_dot(r.dot)
    assert r.drawn == 2 and len(op_nodes(g)) == 2
    labels = " ".join(n.attr["label"] for n in op_nodes(g))
    assert "B 4×2" in labels and "shape [-1,2]" in labels
    assert "N×2 f32" in [e.attr.get("label") for e in g.edges()]


def test_if_subgraph_is_a_collapsed_box():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool c, float[2] x) => (float[2] y) {
        y = If (c) <
            then_branch = t () => (float[2] a) { a = Relu (x) },
            else_branch = e () => (float[2] b) { b1 = Neg (x)  b = Abs (b1) }
        >
    }""")
    r = render_graph(m)
    g = parse_dot(r.dot)
    (node,) = op_nodes(g)
    assert "then_branch: 1 nodes" in node.attr["label"] and "else_branch: 2 nodes" in node.attr["label"]


def test_scopes_from_names():
    assert scope_from_name("/encoder/layer.3/attention/self/MatMul") == ("encoder", "layer.3", "attention", "self")
    assert scope_from_name("layers.0.c1.conv") == ("layers.0", "c1")
    assert scope_from_name("Conv_12") == ()
    assert scope_from_name("") == ()


def test_hub_tensor_not_drawn_as_edges():
    from fusionviz.graphview.synthetic import transformer_model

    m = transformer_model(8)
    dg = build_display_graph(m)
    assert "ext_mask" in dg.hubs
    r = render_graph(m, options=RenderOptions(max_nodes=10_000))
    g = parse_dot(r.dot)
    mask_producer = next(n for n in g.nodes() if r.node_ids.get(n.attr.get("id")) == "/embeddings/mask/Mul")
    # the hub's producer has no drawn out-edges; every consumer names the hub in its label
    assert g.out_degree(mask_producer) == 0
    assert sum("ext_mask (hub ×8)" in n.attr.get("label", "") for n in g.nodes()) == 8


def test_hub_rule_spread_not_fanout():
    from fusionviz.graphview.synthetic import transformer_model

    dg = build_display_graph(transformer_model(4))
    assert "ext_mask" in dg.hubs  # 4 readers, one per layer, far apart
    # a layer's input is read by q, k, v and the residual: close together, not a hub
    assert len(dg.consumers["/encoder/layer.1/out"]) == 4
    assert "/encoder/layer.1/out" not in dg.hubs


def test_compact_conv_attributes():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,3,9,9] x, float[4,3,3,3] w) => (float[1,4,4,4] y) {
        y = Conv <kernel_shape = [3, 3], strides = [2, 2], pads = [0, 0, 0, 0], auto_pad = "NOTSET"> (x, w)
    }""")
    (node,) = build_display_graph(m).nodes
    assert node.attrs == ["k3×3", "s2"]


def test_shape_inference_leaves_large_weights_out_of_its_copy():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from fusionviz.graphview.build import _inferred
    from fusionviz.graphview.model_graph import infer, tensor_infos, weightless

    w = numpy_helper.from_array(np.ones((512, 1024), np.float32), "W")  # 2 MiB
    b = numpy_helper.from_array(np.array([1, 512], np.int64), "shape")  # small: kept with its values
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
         helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["y"], name="rs")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    full = onnx.shape_inference.infer_shapes(model)
    got = infer(model)
    assert got.ByteSize() < 16_384  # the weight's 2 MiB are not in the inferred copy
    assert tensor_infos(got) == tensor_infos(full)
    assert tensor_infos(got)["y"] == ("f32", "1×512") and tensor_infos(got)["W"] == ("f32", "512×1024")
    assert len(model.graph.initializer[0].raw_data) == 2 * 2**20  # the model itself is untouched
    small = helper.make_model(helper.make_graph(g.node[1:2], "s", [helper.make_tensor_value_info(
        "a", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)]))
    assert weightless(small) is small
    dg = build_display_graph(model, inferred=_inferred(model))
    assert dg.by_key["mm"].weights == ["B 512×1024"]
