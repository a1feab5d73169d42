"""A tiny Conv + BatchNormalization + Relu model for the UI tests (fold_batchnorm changes it)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("W", rng.standard_normal((4, 3, 3, 3)) * 0.1), ("s", np.ones(4)), ("b", np.zeros(4)),
        ("m", np.zeros(4)), ("v", np.ones(4)))]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
