"""fuse_hardswish: HardSwish / HardSigmoid chains into one op, and on into FusedConv.

Fixtures follow the exporters: Paddle2ONNX's PP-OCR chain at opset 11 (``x·clip(x + 3, 0, 6)/6``
with the Mul's operands swapped), the same at opset 14, an old torch MobileNetV3 export
(``x·(clip(x + 3, 0, 6)/6)``), Keras's ``hard_sigmoid`` (``clip(0.2·x + 0.5, 0, 1)``) and the
``x/6 + 0.5`` and ``·(1/6)`` spellings.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify
from tests.passes.fuse.test_conv import build, rand


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def ops(model: onnx.ModelProto) -> list[str]:
    """Op types, less the fixture's Constant nodes (some go unused in a case)."""
    return [n.op_type for n in model.graph.node if n.op_type != "Constant"]


def _assert_equal(result) -> None:
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


_CONSTANTS = {"three": 3.0, "six": 6.0, "zero": 0.0, "one": 1.0, "half": 0.5, "fifth": 0.2, "sixth": 0.16666667,
              "five": 5.0}


def _model(body: str, opset: int = 17, dtype: str = "float") -> onnx.ModelProto:
    """Paddle style (constants in Constant nodes) for float32; initializers for float16, which
    the ONNX text parser cannot spell."""
    consts = "\n  ".join(f"{k} = Constant <value = float {{{v}}}> ()" for k, v in _CONSTANTS.items())
    text = f"""
<ir_version: 8, opset_import: ["" : {opset}]>
g ({dtype}[1,4,8,8] x) => ({dtype}[1,4,8,8] y) {{
  {consts if dtype == "float" else ""}
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  {body}
}}"""
    arrays = {"W": rand(4, 4, 3, 3), "B": rand(4)}
    if dtype == "float16":
        arrays = {k: v.astype(np.float16) for k, v in arrays.items()}
        arrays.update({k: np.array(v, np.float16) for k, v in _CONSTANTS.items()})
    return build(text, **arrays)


PADDLE_CHAIN = "a = Add (c, three)\n  k = Clip (a, zero, six)\n  m = Mul (c, k)\n  y = Div (m, six)"

POSITIVE = {
    # case: (body, opset, ops after fuse_hardswish alone, ops after fuse_hardswish + fuse_conv_activation)
    "paddle_chain_opset11": (PADDLE_CHAIN, 11, ["Conv", "HardSigmoid", "Mul"], ["FusedConv"]),
    "paddle_chain_opset14": (PADDLE_CHAIN, 14, ["Conv", "HardSwish"], ["FusedConv"]),
    "product_times_a_sixth": ("a = Add (three, c)\n  k = Clip (a, zero, six)\n  m = Mul (k, c)\n  y = Mul (m, sixth)", 14,
                              ["Conv", "HardSwish"], ["FusedConv"]),
    "torch_mobilenetv3_gate_first": ("a = Add (c, three)\n  k = Clip (a, zero, six)\n  g = Div (k, six)\n  y = Mul (c, g)",
                                     14, ["Conv", "HardSwish"], ["FusedConv"]),
    "keras_hard_sigmoid": ("s = Mul (c, fifth)\n  a = Add (s, half)\n  y = Clip (a, zero, one)", 13,
                           ["Conv", "HardSigmoid"], ["FusedConv"]),
    "hard_sigmoid_x_over_six": ("s = Div (c, six)\n  a = Add (s, half)\n  y = Clip (a, zero, one)", 13,
                                ["Conv", "HardSigmoid"], ["FusedConv"]),
    "hard_sigmoid_shift_times_a_sixth": ("a = Add (c, three)\n  k = Clip (a, zero, six)\n  y = Mul (k, sixth)", 13,
                                         ["Conv", "HardSigmoid"], ["FusedConv"]),
}


@pytest.mark.parametrize("case", sorted(POSITIVE))
def test_fuse_hardswish_makes_one_op_and_then_one_fused_conv(case):
    body, opset, alone, with_conv = POSITIVE[case]
    model = _model(body, opset)
    result = run_pipeline(model, ["fuse_hardswish"])
    assert ops(result.final) == alone
    _assert_equal(result)
    for n in result.final.graph.node:
        if n.op_type == "HardSigmoid":
            a = _attrs(n)
            want = (0.2, 0.5) if case == "keras_hard_sigmoid" else (1 / 6, 0.5)
            assert a["alpha"] == pytest.approx(want[0], rel=1e-5) and a["beta"] == pytest.approx(want[1], rel=1e-5)
    fused = run_pipeline(model, ["fuse_hardswish", "fuse_conv_activation"])
    assert ops(fused.final) == with_conv
    act = _attrs(next(n for n in fused.final.graph.node if n.op_type == "FusedConv"))["activation"]
    assert act == (b"HardSigmoid" if "sigmoid" in case else b"HardSwish")
    _assert_equal(fused)


MUST_NOT = {
    "clip_bound_is_not_the_divisor": ("a = Add (c, three)\n  k = Clip (a, zero, five)\n  m = Mul (c, k)\n  y = Div (m, six)",
                                      "float"),
    "float16_has_no_cpu_kernel": (PADDLE_CHAIN, "float16"),
    "offset_is_computed": ("t = Relu (c)\n  a = Add (c, t)\n  k = Clip (a, zero, six)\n  m = Mul (c, k)\n  y = Div (m, six)",
                           "float"),
}


@pytest.mark.parametrize("case", sorted(MUST_NOT))
def test_fuse_hardswish_must_not_fuse(case):
    body, dtype = MUST_NOT[case]
    result = run_pipeline(_model(body, 14, dtype), ["fuse_hardswish"])
    assert not {"HardSwish", "HardSigmoid"} & set(ops(result.final))
    assert result.reports[0].changes == ()


def test_intermediate_used_elsewhere_is_kept():
    text = """
<ir_version: 8, opset_import: ["" : 14]>
g (float[1,4,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] k) {
  three = Constant <value = float {3.0}> ()
  six = Constant <value = float {6.0}> ()
  zero = Constant <value = float {0.0}> ()
  a = Add (x, three)
  k = Clip (a, zero, six)
  m = Mul (x, k)
  y = Div (m, six)
}"""
    result = run_pipeline(onnx.parser.parse_model(text), ["fuse_hardswish"])
    assert "HardSwish" not in ops(result.final) and "Clip" in ops(result.final)
    _assert_equal(result)


def test_conv_hard_sigmoid_gate_of_another_slope_is_not_hardswish():
    """x·HardSigmoid(x, 0.2, 0.5) is not HardSwish: the Conv stays apart from its gate."""
    model = _model("g = HardSigmoid <alpha=0.2, beta=0.5> (c)\n  y = Mul (c, g)", 11)
    result = run_pipeline(model, ["fuse_hardswish", "fuse_conv_activation"])
    assert ops(result.final) == ["Conv", "HardSigmoid", "Mul"]
