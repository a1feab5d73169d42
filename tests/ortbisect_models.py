"""Models on which onnxruntime's own optimizers change the outputs (for the bisection tests).

``qdq_conv_with_float_bias``: a QDQ Conv whose bias is float. At level 1 onnxruntime's
``WeightBiasQuantization`` quantizes that bias to int32 at the scale input_scale × weight_scale
(0.25 here) and dequantizes it; 0.125 is not a multiple of 0.25, so every output of the Conv
moves by half a step before its QuantizeLinear, and about a quarter of the requantized outputs
land one output step (0.5) away from level off's. Level off computes the float bias exactly. The
arithmetic is exact (small integers times powers of two), so the difference is the same on any
CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def qdq_conv_with_float_bias(channels: int = 4, kernels: int = 8, size: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    wq = rng.integers(-3, 4, size=(kernels, channels, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.float32(0.25), "x_scale"), numpy_helper.from_array(np.uint8(128), "x_zero"),
        numpy_helper.from_array(wq, "w_q"), numpy_helper.from_array(np.float32(1.0), "w_scale"),
        numpy_helper.from_array(np.int8(0), "w_zero"),
        numpy_helper.from_array(np.float32(0.5), "y_scale"), numpy_helper.from_array(np.uint8(128), "y_zero"),
        numpy_helper.from_array(np.full(kernels, 0.125, np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], name="dequant_w"),
        helper.make_node("Conv", ["x_dq", "w_dq", "bias"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["conv", "y_scale", "y_zero"], ["y_q"], name="quant_y"),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"], name="dequant_y"),
    ]
    graph = helper.make_graph(
        nodes, "qdq_conv_float_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, kernels, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
