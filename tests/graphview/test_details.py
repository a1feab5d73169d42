"""node_details: op, attributes, tensors with shapes, weight stats, provenance."""

from __future__ import annotations

import pytest
from gv_helpers import conv_bn_relu, fused_after

from fusionviz import errors
from fusionviz.graphview import node_details


def test_conv_details():
    d = node_details(conv_bn_relu(), "Conv_12")
    assert d["op"] == "Conv" and d["domain"] == "ai.onnx"
    assert d["attributes"]["kernel_shape"] == [3, 3]
    x, w, b = d["inputs"]
    assert x["kind"] == "graph input" and x["shape"] == "1×3×8×8" and x["dtype"] == "f32"
    assert w["kind"] == "weight" and w["role"] == "W" and w["stats"]["shape"] == [4, 3, 3, 3]
    assert w["stats"]["min"] <= w["stats"]["mean"] <= w["stats"]["max"] and w["stats"]["std"] > 0
    assert b["stats"]["values"] == [0.0] * 4
    (out,) = d["outputs"]
    assert out["shape"] == "1×4×8×8" and out["consumers"] == ["BatchNormalization_13"]


def test_provenance_in_details():
    d = node_details(fused_after(conv_bn_relu()), "FusedConv_fv1")
    assert d["provenance"]["sources"] == ["Conv_12", "BatchNormalization_13", "Relu_14"]
    assert d["provenance"]["passes"] == ["fold_batchnorm", "fuse_conv_activation"]
    assert d["domain"] == "com.microsoft"


def test_unknown_node():
    with pytest.raises(errors.RenderError, match="No node named"):
        node_details(conv_bn_relu(), "nope")
