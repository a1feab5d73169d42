"""fp16 keeps in float32 the nodes onnxruntime cannot run in float16 (asked of onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.precision.kernels import fp16_refusals
from fusionviz.verify import make_session, run_model


def _scatter(reduction: str | None) -> onnx.ModelProto:
    """x (4, 8) * w -> ScatterElements(axis 0) of its first two rows back into it -> Relu."""
    rng = np.random.default_rng(0)
    w = onh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    idx = onh.from_array(np.array([[3] * 8, [1] * 8], np.int64), "idx")
    starts, ends, axes = (onh.from_array(np.array(v, np.int64), n) for v, n in (([0], "s"), ([2], "e"), ([0], "a")))
    extra = {"reduction": reduction} if reduction else {}
    nodes = [
        oh.make_node("Mul", ["x", "w"], ["h"], name="mul"),
        oh.make_node("Slice", ["h", "s", "e", "a"], ["u"], name="slice"),
        oh.make_node("ScatterElements", ["h", "idx", "u"], ["sc"], name="scatter", axis=0, **extra),
        oh.make_node("Relu", ["sc"], ["y"], name="relu"),
    ]
    g = oh.make_graph(nodes, "scatter", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])], [w, idx, starts, ends, axes])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _input_type(model: onnx.ModelProto, node_name: str, index: int = 0) -> int:
    """The element type ``node_name`` reads at ``index``: a graph input, an initializer or a node output."""
    node = next(n for n in model.graph.node if n.name == node_name)
    name = node.input[index]
    typed = onnx.shape_inference.infer_shapes(model)
    for v in (*typed.graph.input, *typed.graph.value_info, *typed.graph.output):
        if v.name == name:
            return v.type.tensor_type.elem_type
    return next(t.data_type for t in model.graph.initializer if t.name == name)


@pytest.mark.parametrize(
    "reduction, refused",
    [
        pytest.param("add", True, id="scatter_add_has_no_fp16_kernel"),
        pytest.param("mul", True, id="scatter_mul_has_no_fp16_kernel"),
        pytest.param("max", False, id="scatter_max_runs_in_fp16"),
        pytest.param(None, False, id="scatter_without_reduction_runs_in_fp16"),
    ],
)
def test_kernel_probe_asks_onnxruntime(reduction, refused):
    why = fp16_refusals(_scatter(reduction))
    assert ("scatter" in why) is refused
    assert "mul" not in why and "relu" not in why and "slice" not in why  # these run in fp16
    if refused:
        assert "ScatterElements" in why["scatter"] and "float16" in why["scatter"]


def test_kernel_probe_skips_what_stays_fp32_anyway():
    assert fp16_refusals(_scatter("add"), blocked_ops={"ScatterElements"}) == {}
    assert fp16_refusals(_scatter("add"), kept={"scatter"}) == {}


def test_fp16_keeps_scatter_add_in_fp32_and_the_result_runs():
    model = _scatter("add")
    result = run_pipeline(model, ["fp16"])
    (rep,) = result.reports
    assert rep.error is None and rep.changes  # the rest was converted
    final = result.final
    assert _input_type(final, "scatter", 0) == onnx.TensorProto.FLOAT
    assert _input_type(final, "scatter", 2) == onnx.TensorProto.FLOAT
    assert _input_type(final, "mul", 1) == onnx.TensorProto.FLOAT16  # the weight of the Mul is fp16
    out = run_model(make_session(final), {"x": np.ones((4, 8), np.float32)})
    ref = run_model(make_session(model), {"x": np.ones((4, 8), np.float32)})
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-2, atol=1e-2)
    (near,) = [n for n in rep.near_misses if n.blocker == "scatter"]
    assert near.kind == "no_kernel" and "float16" in near.reason
