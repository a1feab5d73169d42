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
