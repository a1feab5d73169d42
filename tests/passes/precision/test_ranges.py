"""Activation ranges: fp16 keeps the nodes around values that grow beyond its range in fp32."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

from fusionviz.inputs import plan_inputs
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.precision.ranges import FP16_MAX, overflowing_nodes, peak_magnitudes

# A LayerNorm as TensorFlow exports it: the sum of squares on large inputs (the edge set's 255s:
# 64 * 255^2 = 4.2e6) is computed by a sensitive op kept in fp32, but the converter casts it to
# fp16 for the Squeeze, which onnxruntime runs in fp16: infinity, where fp32 gives 202.
GROWING = """
<ir_version: 8, opset_import: ["": 18]>
g (float[1,64] x) => (float[1] y) {
  axes = Constant <value = int64[1] {1}> ()
  s = ReduceSumSquare <keepdims = 1> (x, axes)
  q = Squeeze (s, axes)
  k = Constant <value = float {10000.0}> ()
  y = Div (q, k)
}"""


def growing_model() -> onnx.ModelProto:
    model = onnx.parser.parse_model(GROWING)
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}"
    onnx.checker.check_model(model, full_check=True)
    return model


def run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    """As verification runs it: onnxruntime's optimizer off."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_peak_magnitudes_sees_the_activation_beyond_fp16():
    peaks = peak_magnitudes(growing_model())
    assert peaks["s"][0] > FP16_MAX and peaks["s"][1] == "edge"
    assert peaks["y"][0] < FP16_MAX / 2  # scaled back into range


def test_overflowing_nodes_names_producer_and_reader_with_reason():
    keep = overflowing_nodes(growing_model())
    assert set(keep) == {"n1", "n2", "n4"}  # the reduction that makes it, the nodes that read it
    assert "'s' reaches" in keep["n1"] and "edge inputs" in keep["n1"] and "65504" in keep["n1"]


def test_fp16_output_stays_finite_where_fp32_activation_overflows_fp16():
    model = growing_model()
    result = run_pipeline(model, ["fp16"])
    assert any(n.op_type == "Cast" for n in result.final.graph.node), "fp16 did not run"
    for kind, feeds in plan_inputs(model).input_sets():
        got, ref = run(result.final, feeds), run(model, feeds)
        assert np.all(np.isfinite(got)), kind
        np.testing.assert_allclose(got, ref, rtol=1e-2)


def test_unrunnable_model_has_no_ranges_and_no_error():
    model = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["": 17]>
g (float[1,6] x) => (float[1,4] y) {
  s = Constant <value = int64[2] {1, 4}> ()
  y = Reshape (x, s)
}""")
    assert peak_magnitudes(model) == {}
    assert overflowing_nodes(model) == {}


# The same value read from inside an If branch: the branch's nodes stay fp32 with the If, and
# must read the fp32 value, not the fp16 copy the converter makes for the main graph's readers.
BRANCHED = """
<ir_version: 8, opset_import: ["": 18]>
g (float[1,64] x, bool c) => (float[1] y, float[1,64] z) {
  axes = Constant <value = int64[1] {1}> ()
  s = ReduceSumSquare <keepdims = 1> (x, axes)
  t = Relu (s)
  b = If (c) <
    then_branch = th () => (float[1] tq) { ax = Constant <value = int64[1] {1}> ()
                                           tq = Squeeze (t, ax) },
    else_branch = el () => (float[1] eq) { ax2 = Constant <value = int64[1] {1}> ()
                                           eq = Squeeze (t, ax2) }
  >
  k = Constant <value = float {10000.0}> ()
  y = Div (b, k)
  two = Constant <value = float {2.0}> ()
  z = Mul (x, two)
}"""


def test_fp16_keeps_if_branches_reading_a_large_outer_value_valid_and_finite():
    model = onnx.parser.parse_model(BRANCHED)
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}"
    for node in model.graph.node:
        for attr in node.attribute:
            for j, inner in enumerate(attr.g.node):
                inner.name = f"{attr.name}_{j}"
    onnx.checker.check_model(model, full_check=True)
    result = run_pipeline(model, ["fp16"])
    report = result.reports[0]
    assert report.declined is None and report.changes, report.declined
    onnx.checker.check_model(result.final, full_check=True)
    for kind, feeds in plan_inputs(model).input_sets():
        got, ref = run(result.final, feeds), run(model, feeds)
        assert np.all(np.isfinite(got)), kind
        np.testing.assert_allclose(got, ref, rtol=1e-2)
