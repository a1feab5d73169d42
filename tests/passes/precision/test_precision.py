"""Precision passes report their error vs fp32 instead of failing."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz.passes import registry
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.precision import calibration_feeds, precision_error, quantize_int8_static
from fusionviz.verify import make_session, run_model


def _classifier(classes: int = 10) -> onnx.ModelProto:
    """x (4, 64) -> Relu(x W1 + b1) W2 + b2 -> Softmax: class scores, batch 4."""
    rng = np.random.default_rng(0)
    inits = [
        onh.from_array((rng.standard_normal((64, 128)) * 0.1).astype(np.float32), "w1"),
        onh.from_array((rng.standard_normal(128) * 0.1).astype(np.float32), "b1"),
        onh.from_array((rng.standard_normal((128, classes)) * 0.1).astype(np.float32), "w2"),
        onh.from_array((rng.standard_normal(classes) * 0.1).astype(np.float32), "b2"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
        oh.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
        oh.make_node("Relu", ["a1"], ["r1"], name="relu"),
        oh.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
        oh.make_node("Add", ["m2", "b2"], ["logits"], name="add2"),
        oh.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    g = oh.make_graph(nodes, "clf", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
                      [oh.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, [4, classes])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("name", ["fp16", "int8_dynamic", "int8_static"])
def test_precision_pass_reports_error_vs_fp32(name):
    model = _classifier()
    assert not registry.get_pass(name).exact
    result = run_pipeline(model, [name])
    (rep,) = result.reports
    assert rep.error is None
    summary = rep.changes[-1].detail
    assert "max abs error" in summary and "cosine" in summary and "top-1 agreement" in summary
    err = precision_error(result.original, result.final)
    assert err.error is None
    assert 0 < err.max_abs_diff < 0.05  # numerics changed, but not wildly
    assert err.min_cosine > 0.99
    # inputs and outputs stay fp32
    assert result.final.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert result.final.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    out = run_model(make_session(result.final), {"x": np.ones((4, 64), np.float32)})
    assert out["probs"].dtype == np.float32


def test_fp16_keeps_blocked_ops_in_fp32():
    result = run_pipeline(_classifier(), ["fp16"])
    softmax = next(n for n in result.final.graph.node if n.op_type == "Softmax")
    producer = next(n for n in result.final.graph.node if softmax.input[0] in n.output)
    assert producer.op_type == "Cast"  # Softmax (block list) gets fp32 input
    types = {t.name: t.data_type for t in result.final.graph.initializer}
    assert types["w1"] == onnx.TensorProto.FLOAT16


def test_int8_static_takes_user_calibration_inputs():
    model = _classifier()
    feeds = calibration_feeds(model, n=3)
    assert len(feeds) == 3 and not np.array_equal(feeds[0]["x"], feeds[1]["x"])
    q = quantize_int8_static(model, feeds)
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)
    assert precision_error(model, q).min_cosine > 0.99


def test_precision_pass_that_cannot_convert_reports_no_change():
    # a string-typed model: the quantizer and converter have nothing to do, or fail; never raise
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (int64[3] x) => (int64[3] y) {
      y = Neg(x)
    }"""
    for name in ("int8_dynamic", "int8_static"):
        result = run_pipeline(onnx.parser.parse_model(text), [name])
        assert result.reports[0].error is None


@pytest.mark.parametrize(("name", "quantized_op"), [("int8_dynamic", "ConvInteger"), ("int8_static", "QuantizeLinear")])
def test_precision_with_every_exact_pass_quantizes_before_the_layout_pass(name, quantized_op):
    """With the NCHWc layout pass on, int8 used to run after it and found no float Conv to
    quantize (onnxruntime's nchwc kernels); precision now runs before the layout capture."""
    from fusionviz import samples

    if "resnet_ts" not in samples.sample_names():
        pytest.skip("sample_models/resnet_ts.onnx has not been generated")
    model = samples.load_sample("resnet_ts").proto
    result = run_pipeline(model, [*registry.default_passes(), name], keep_snapshots=False)
    rep = next(r for r in result.reports if r.name == name)
    assert rep.error is None and rep.changes
    order = [r.name for r in result.reports]
    assert order.index(name) < order.index("nchwc_layout")
    # the quantized graph went through the layout capture too: it loads and runs with ORT off
    captured_ops = {n.op_type for n in result.final.graph.node}
    assert captured_ops & {quantized_op, "QLinearConv", "ConvInteger", "DynamicQuantizeLinear"}
    from fusionviz.inputs import make_inputs

    run_model(make_session(result.final), make_inputs(model))
