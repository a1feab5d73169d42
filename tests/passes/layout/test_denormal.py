"""denormal_flush: planted subnormal weights are counted, flushed when outputs stay equal."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnx_ir as ir

from fusionviz.passes.layout.denormal_flush import (
    count_denormals,
    find_denormal_initializers,
    flush_denormals,
)
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify

TINY = np.finfo(np.float32).tiny


def _model(w: np.ndarray, b: np.ndarray | None = None) -> onnx.ModelProto:
    inits = [onh.from_array(w, "w")]
    nodes = [oh.make_node("MatMul", ["x", "w"], ["m"], name="mm")]
    out = "m"
    if b is not None:
        inits.append(onh.from_array(b, "b"))
        nodes.append(oh.make_node("Add", ["m", "b"], ["y"], name="add"))
        out = "y"
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 16])],
                      [oh.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [4, 8])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _planted(n_denormal: int = 20) -> np.ndarray:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    idx = rng.choice(w.size, n_denormal, replace=False)
    flat = w.reshape(-1)
    flat[idx] = (rng.uniform(0.01, 0.99, n_denormal) * TINY * rng.choice([-1, 1], n_denormal)).astype(np.float32)
    return w


def test_counts_and_flushes_planted_denormals():
    w = _planted(20)
    assert count_denormals(w) == 20
    f = flush_denormals(w)
    assert count_denormals(f) == 0
    assert np.count_nonzero(f != w) == 20 and np.all(f[f != w] == 0)


def test_denormal_flush_pass_reports_and_keeps_outputs():
    model = _model(_planted(20), np.full(8, 0.5, np.float32))
    result = run_pipeline(model, ["denormal_flush"])
    (rep,) = result.reports
    assert rep.error is None
    (change,) = rep.changes
    assert change.detail.startswith("20 denormal values set to zero in 1 initializer")
    assert change.inputs == ("mm",)
    w_after = onh.to_array(next(t for t in result.final.graph.initializer if t.name == "w"))
    assert count_denormals(w_after) == 0
    assert verify(result.original, result.final).ok


def test_denormal_flush_does_nothing_without_denormals():
    model = _model(np.ones((16, 8), np.float32))
    result = run_pipeline(model, ["denormal_flush"])
    assert result.reports[0].changes == ()


def test_denormal_flush_refuses_when_outputs_would_change():
    # y = x @ w * 1e38: the product of a denormal weight and 1e38 is a normal number; flushing changes y
    w = np.zeros((16, 8), np.float32)
    w[:, 0] = TINY * 0.5
    text_model = _model(w)
    scale = onh.from_array(np.array(1e38, np.float32), "s")
    text_model.graph.initializer.append(scale)
    text_model.graph.node.append(oh.make_node("Mul", ["m", "s"], ["z"], name="scale"))
    text_model.graph.output[0].name = "z"
    found = find_denormal_initializers(ir.serde.deserialize_model(text_model))
    assert found["w"][1] == 16
    result = run_pipeline(text_model, ["denormal_flush"])
    assert result.reports[0].changes == ()
    w_after = onh.to_array(next(t for t in result.final.graph.initializer if t.name == "w"))
    assert count_denormals(w_after) == 16
