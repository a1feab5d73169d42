"""Models for backend tests: tiny ones built here, the shipped ResNet sample, and skips.

``needs_openvino`` / ``needs_tvm`` skip a test with the backend's own reason when it cannot run
here (``Backend.available()``), so the reason shows in the pytest summary.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper, numpy_helper

from fusionviz.backends import get_backend

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def _skip_unless(name: str):
    why = get_backend(name).available()
    return pytest.mark.skipif(why is not None, reason=f"{name} is not available here: {why}")


needs_openvino = _skip_unless("openvino")
needs_tvm = _skip_unless("tvm")


def close(a: np.ndarray, b: np.ndarray) -> bool:
    """``|a - b| <= 1e-4 + 1e-3 |b|`` everywhere (``b`` is onnxruntime's output)."""
    return bool(np.all(np.abs(a.astype(np.float64) - b) <= 1e-4 + 1e-3 * np.abs(b)))


@pytest.fixture
def elementwise() -> onnx.ModelProto:
    """y = Sigmoid(Relu(x)) * x + 1: elementwise ops a backend fuses into one kernel."""
    return onnx.parser.parse_model(HEADER + """
g (float[2,16] x) => (float[2,16] y) {
  one = Constant<value = float {1.0}>()
  r = Relu(x)
  s = Sigmoid(r)
  m = Mul(s, x)
  y = Add(m, one)
}""")


@pytest.fixture
def conv_bn_relu() -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu → GlobalAveragePool, with named nodes (seeded weights)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="block/conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="block/bn"),
        helper.make_node("Relu", ["b"], ["r"], name="block/relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="head/pool"),
    ]
    graph = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def dynamic_rank_if() -> onnx.ModelProto:
    """An If whose branches return different ranks: onnxruntime runs it, OpenVINO's CPU plugin
    refuses it ("If operation with dynamic rank")."""
    return onnx.parser.parse_model(HEADER + """
g (float[3] x, bool c) => (float[M] y) {
  y = If(c) <then_branch = then_g () => (float[K] t) { t = Relu(x) },
             else_branch = else_g () => (float[A, B] e) { s = Constant<value_ints=[1,-1]>() e = Reshape(x, s) }>
}""")


@pytest.fixture
def inputs_for():
    """Deterministic float inputs for a model's (static) inputs."""
    def make(model: onnx.ModelProto) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(1)
        out = {}
        for i in model.graph.input:
            dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
            if i.type.tensor_type.elem_type == onnx.TensorProto.BOOL:
                out[i.name] = np.ones(dims, dtype=bool)
            else:
                out[i.name] = rng.standard_normal(dims).astype(np.float32)
        return out
    return make
