"""fuse_silu: SiLU / Swish (``x·sigmoid(α·x)``) into onnxruntime's QuickGelu.

Fixtures follow the exporters: torch (YOLOv8's ``Conv → Sigmoid, Mul(x, s)``, dynamo and
TorchScript alike), Paddle2ONNX's ``Mul(s, x)`` order, tf2onnx / Keras ``swish`` with a β
(``x·sigmoid(β·x)``, β in a Constant), CLIP's QuickGELU (``x·sigmoid(1.702·x)``) and a float16
SiLU, which stays (onnxruntime's CPU QuickGelu is float32 only).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify
from tests.passes.fuse.test_conv import rand


def _model(body: str, dtype: str = "float", beta: float = 1.0) -> onnx.ModelProto:
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g ({dtype}[1,4,8,8] x) => ({dtype}[1,4,8,8] y) {{
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  {body}
}}"""
    model = onnx.parser.parse_model(text)
    np_type = np.float16 if dtype == "float16" else np.float32
    model.graph.initializer.extend([onnx.numpy_helper.from_array(rand(4, 4, 3, 3).astype(np_type), "W"),
                                    onnx.numpy_helper.from_array(rand(4).astype(np_type), "B"),
                                    onnx.numpy_helper.from_array(np.array(beta, np_type), "beta")])
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model: onnx.ModelProto, *passes: str):
    result = run_pipeline(model, list(passes) or ["fuse_silu"])
    assert all(r.error is None for r in result.reports)
    v = verify(result.original, result.final)
    assert v.ok, v.summary()
    return result


@pytest.mark.parametrize("body,alpha", [
    ("s = Sigmoid (c)\n  y = Mul (c, s)", 1.0),  # torch (YOLOv8)
    ("s = Sigmoid (c)\n  y = Mul (s, c)", 1.0),  # Paddle2ONNX order
    ("b = Mul (c, beta)\n  s = Sigmoid (b)\n  y = Mul (c, s)", 1.5),  # Keras swish(β), tf2onnx
    ("b = Mul (beta, c)\n  s = Sigmoid (b)\n  y = Mul (s, c)", 1.702),  # CLIP's QuickGELU
])
def test_silu_and_swish_become_one_quickgelu(body, alpha):
    result = _run(_model(body, beta=alpha))
    nodes = [n for n in result.final.graph.node]
    assert [n.op_type for n in nodes] == ["Conv", "QuickGelu"]
    (qg,) = [n for n in nodes if n.op_type == "QuickGelu"]
    assert qg.domain == "com.microsoft"
    assert onnx.helper.get_attribute_value(qg.attribute[0]) == pytest.approx(alpha, rel=1e-6)
    (rep,) = result.reports
    (change,) = rep.changes
    assert sorted(change.in_ops) == sorted(["Sigmoid", "Mul"] + (["Mul"] if "beta" in body else []))


def test_a_sigmoid_read_elsewhere_stays():
    result = run_pipeline(_model("s = Sigmoid (c)\n  m = Mul (c, s)\n  y = Add (m, s)"), ["fuse_silu"])
    assert "QuickGelu" not in [n.op_type for n in result.final.graph.node]


def test_float16_stays_and_says_why():
    result = run_pipeline(_model("s = Sigmoid (c)\n  y = Mul (c, s)", dtype="float16"), ["fuse_silu"])
    assert "QuickGelu" not in [n.op_type for n in result.final.graph.node]
    (rep,) = result.reports
    assert any("float32 only" in m.reason for m in rep.near_misses)


def test_conv_then_silu_in_all_says_the_conv_stays_apart():
    result = _run(_model("s = Sigmoid (c)\n  y = Mul (c, s)"), "fuse_conv_activation", "fuse_silu")
    conv = next(r for r in result.reports if r.name == "fuse_conv_activation")
    assert any("fuse_silu makes the Sigmoid and the Mul one QuickGelu" in m.reason for m in conv.near_misses)
    assert [n.op_type for n in result.final.graph.node] == ["Conv", "QuickGelu"]
