"""fuse_matmul_integer: dynamically quantized MatMuls into DynamicQuantizeMatMul / MatMulIntegerToFloat.

The fixtures are written by onnxruntime's own dynamic quantizer (``quantize_dynamic``, the tool
that makes such models: int8 and uint8 weights, per tensor and per channel) from a float model of
a transformer's shapes: one input read by a query, key and value projection (their
DynamicQuantizeLinear is shared) and an output projection with a bias. onnxruntime's level
extended is asked for the same ops on the same groups.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from fusionviz.passes import run_pipeline

RNG = np.random.default_rng(11)
D = 32


def _float_model() -> onnx.ModelProto:
    def w(name, *shape):
        return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", f"w{p}"], [p], name=f"proj_{p}") for p in "qkv"]
    nodes += [helper.make_node("Add", ["q", "k"], ["qk"], name="add_qk"),
              helper.make_node("Add", ["qk", "v"], ["h"], name="add_v"),
              helper.make_node("MatMul", ["h", "wo"], ["o"], name="proj_o"),
              helper.make_node("Add", ["o", "bo"], ["y"], name="bias_o")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, D])],
                              [w("wq", D, D), w("wk", D, D), w("wv", D, D), w("wo", D, D), w("bo", D)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _quantized(weight_type: QuantType, per_channel: bool) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(_float_model(), src)
        quantize_dynamic(src, dst, weight_type=weight_type, per_channel=per_channel)
        return onnx.load(dst)


def _run(model: onnx.ModelProto, level) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    x = np.random.default_rng(3).standard_normal((1, 8, D)).astype(np.float32)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _ort_extended_ops(model: onnx.ModelProto) -> Counter:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "saved.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return Counter(n.op_type for n in onnx.load(path).graph.node if n.domain == "com.microsoft")


@pytest.mark.parametrize("weight_type,per_channel", [(QuantType.QInt8, False), (QuantType.QUInt8, False),
                                                     (QuantType.QInt8, True)])
def test_the_quantizer_s_groups_become_onnxruntime_s_kernels(weight_type, per_channel):
    original = _quantized(weight_type, per_channel)
    assert Counter(n.op_type for n in original.graph.node)["MatMulInteger"] == 4
    result = run_pipeline(original, ["fuse_matmul_integer"])
    (rep,) = result.reports
    assert rep.error is None and rep.status == "applied"
    ours = Counter(n.op_type for n in result.final.graph.node if n.domain == "com.microsoft")
    # the shared input's DynamicQuantizeLinear stays for its three MatMulIntegerToFloat; the output
    # projection's input is its own: one DynamicQuantizeMatMul with the bias inside
    assert ours == {"MatMulIntegerToFloat": 3, "DynamicQuantizeMatMul": 1}
    assert ours == _ort_extended_ops(original)
    ops = [n.op_type for n in result.final.graph.node]
    assert "MatMulInteger" not in ops and "Cast" not in ops and ops.count("DynamicQuantizeLinear") == 1
    dqm = next(n for n in result.final.graph.node if n.op_type == "DynamicQuantizeMatMul")
    assert len(dqm.input) == 5 and dqm.input[4]  # the bias went in
    onnx.checker.check_model(result.final, full_check=True)
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for a, b in zip(_run(result.final, off), _run(original, off), strict=True):
        np.testing.assert_array_equal(a, b)  # the same int32 sums, scaled by the same products


def test_a_product_read_elsewhere_stays_and_says_why():
    model = _quantized(QuantType.QInt8, False)
    g = model.graph
    cast = next(n for n in g.node if n.op_type == "Cast")
    g.output.append(helper.make_tensor_value_info(cast.output[0], TensorProto.FLOAT, None))
    result = run_pipeline(model, ["fuse_matmul_integer"])
    (rep,) = result.reports
    assert Counter(n.op_type for n in result.final.graph.node)["MatMulInteger"] == 1
    assert any("graph output" in m.reason for m in rep.near_misses)
