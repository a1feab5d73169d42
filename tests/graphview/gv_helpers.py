"""Shared helpers for graph-view tests: tiny models from ONNX text, DOT parsing."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pygraphviz
from onnx import helper, numpy_helper

CONV_BN_RELU = """
<ir_version: 8, opset_import: ["" : 17]>
convnet (float[1,3,8,8] x) => (float[1,4,8,8] y) {
    c = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, W, B)
    b = BatchNormalization (c, scale, bias, mean, var)
    y = Relu (b)
}
"""


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def conv_bn_relu(names: tuple[str, str, str] = ("Conv_12", "BatchNormalization_13", "Relu_14")) -> onnx.ModelProto:
    m = onnx.parser.parse_model(CONV_BN_RELU)
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    rng = np.random.default_rng(0)
    m.graph.initializer.extend([
        _init("W", rng.standard_normal((4, 3, 3, 3))), _init("B", np.zeros(4)),
        _init("scale", np.ones(4)), _init("bias", np.zeros(4)), _init("mean", np.zeros(4)),
        _init("var", np.ones(4)),
    ])
    return m


def fused_after(before: onnx.ModelProto) -> onnx.ModelProto:
    """Conv+BN+Relu → one FusedConv carrying provenance, as a fusion pass would leave it."""
    after = onnx.ModelProto()
    after.CopyFrom(before)
    del after.graph.node[:]
    n = helper.make_node("FusedConv", ["x", "W", "B"], ["y"], name="FusedConv_fv1", domain="com.microsoft",
                         activation="Relu", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    helper.set_metadata_props(n, {"fusionviz.sources": "Conv_12,BatchNormalization_13,Relu_14",
                                  "fusionviz.passes": "fold_batchnorm,fuse_conv_activation"})
    after.graph.node.append(n)
    keep = {"W", "B"}
    inits = [t for t in after.graph.initializer if t.name in keep]
    del after.graph.initializer[:]
    after.graph.initializer.extend(inits)
    after.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return after


def parse_dot(dot: str) -> pygraphviz.AGraph:
    return pygraphviz.AGraph(string=dot)


def op_nodes(g: pygraphviz.AGraph) -> list:
    return [n for n in g.nodes() if (n.attr.get("id") or "").startswith("fv-")]


def constant_weights_model() -> onnx.ModelProto:
    """Conv + Mul + Reshape whose weights are Constant nodes, as Paddle2ONNX writes them."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["W"], name="Constant_W", value=numpy_helper.from_array(w)),
        helper.make_node("Constant", [], ["B"], name="Constant_B",
                         value=numpy_helper.from_array(np.arange(4, dtype=np.float32))),
        helper.make_node("Constant", [], ["k"], name="Constant_k", value_float=0.5),
        helper.make_node("Constant", [], ["shape"], name="Constant_shape", value_ints=[1, 256]),
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="Conv_1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "k"], ["m"], name="Mul_2"),
        helper.make_node("Reshape", ["m", "shape"], ["y"], name="Reshape_3"),
    ]
    graph = helper.make_graph(nodes, "paddle_like",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 256])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def lift_constants(model: onnx.ModelProto, *, rename: bool = True, typed: bool = False,
                   change: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """Every Constant node made an initializer, as constant folding does.

    Args:
        rename: give each initializer a new name (consumers are rewired to it).
        typed: store the values in the typed fields (``float_data``...) instead of ``raw_data``.
        change: Constant output name -> the values its initializer gets instead.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    change = change or {}
    keep, renames = [], {}
    for n in out.graph.node:
        if n.op_type != "Constant":
            keep.append(n)
            continue
        a = n.attribute[0]
        if a.name == "value":
            arr = numpy_helper.to_array(a.t)
        elif a.name == "value_float":
            arr = np.array(a.f, dtype=np.float32)
        else:
            arr = np.array(list(a.ints), dtype=np.int64)
        arr = change.get(n.output[0], arr)
        name = f"lifted_{n.output[0]}" if rename else n.output[0]
        renames[n.output[0]] = name
        if typed:
            t = helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape,
                                   arr.reshape(-1).tolist())
        else:
            t = numpy_helper.from_array(arr, name)
        out.graph.initializer.append(t)
    del out.graph.node[:]
    for n in keep:
        for i, x in enumerate(n.input):
            n.input[i] = renames.get(x, x)
        out.graph.node.append(n)
    return out
