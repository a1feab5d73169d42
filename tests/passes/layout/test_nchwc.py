"""nchwc_layout: onnxruntime's NCHWc layout captured as a pass."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

from fusionviz.passes.layout.nchwc import NCHWC
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import make_session, run_model, verify


def _cnn(channels: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = onh.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.2).astype(np.float32), "w1")
    w2 = onh.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), "w2")
    nodes = [
        oh.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        oh.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap"),
    ]
    g = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 32, 32])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, channels, 1, 1])], [w1, w2])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_nchwc_layout_captures_blocked_kernels_that_run_with_ort_off():
    model = _cnn()
    result = run_pipeline(model, ["nchwc_layout"])
    (rep,) = result.reports
    assert rep.error is None and rep.changes
    final = result.final
    nchwc_ops = [n.op_type for n in final.graph.node if n.domain == NCHWC]
    assert "Conv" in nchwc_ops
    assert any(n.op_type == "ReorderOutput" for n in final.graph.node)  # leaving the blocked layout is drawn
    assert any(o.domain == NCHWC for o in final.opset_import)
    assert [o.name for o in final.graph.output] == ["y"]
    # runs in onnxruntime with its optimizer off, same outputs
    out = run_model(make_session(final, level="off"), {"x": np.ones((1, 3, 32, 32), np.float32)})
    assert out["y"].shape == (1, 16, 1, 1)
    assert verify(result.original, final).ok
    # provenance: new nodes name the original nodes they came from
    srcs = {p.value for n in final.graph.node for p in n.metadata_props if p.key == "fusionviz.sources"}
    assert any("conv1" in s for s in srcs)


def test_nchwc_layout_skips_models_without_conv():
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (float[2,8] x) => (float[2,8] y) {
      y = Relu(x)
    }"""
    result = run_pipeline(onnx.parser.parse_model(text), ["nchwc_layout"])
    assert result.reports[0].changes == () and result.reports[0].error is None
    assert [n.op_type for n in result.final.graph.node] == ["Relu"]
