"""A scalar affine before an unpadded Conv folded into it, with the Mul's operands in either order.

PP-LCNetV3 (PP-OCRv4, Paddle2ONNX) ends every activation with a learnable affine block,
``Add(Mul(C(1,), h), C(1,))``: the constant comes first in the Mul, and the next Conv is often
a 1×1 pointwise one.
"""

from __future__ import annotations

import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify
from tests.passes.fuse.test_conv import build, ops, rand


def _text(mul: str, pads: str) -> str:
    return f"""
<ir_version: 8, opset_import: ["" : 12]>
g (float[1,4,8,8] x) => (float[1,6,N,M] y) {{
  h = Relu (x)
  m = {mul}
  a = Add (m, T)
  y = Conv <pads={pads}> (a, W, B)
}}"""


ARRAYS = dict(S=rand(1, seed=3), T=rand(1, seed=4), B=rand(6))


@pytest.mark.parametrize("mul", ["Mul (S, h)", "Mul (h, S)"], ids=["constant_first_paddle", "constant_second"])
def test_scalar_affine_folds_into_the_next_pointwise_conv(mul):
    model = build(_text(mul, "[0,0,0,0]"), W=rand(6, 4, 1, 1), **ARRAYS)
    result = run_pipeline(model, ["fuse_conv_affine"])
    assert ops(result.final) == ["Relu", "Conv"]
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


def test_scalar_affine_before_a_padded_conv_must_not_fold():
    """The padding would be zeros of the affine's output, not of its input: not exact."""
    model = build(_text("Mul (S, h)", "[1,1,1,1]"), W=rand(6, 4, 3, 3), **ARRAYS)
    result = run_pipeline(model, ["fuse_conv_affine"])
    assert ops(result.final) == ["Relu", "Mul", "Add", "Conv"]
