"""A bias Add kept apart from a Conv / ConvTranspose: into the bias, and through to a BatchNorm after it.

PP-OCR's detector heads (Paddle2ONNX) upsample with ``ConvTranspose → Add(bias) →
BatchNormalization`` and end with ``ConvTranspose → Add(scalar bias)``.
"""

from __future__ import annotations

import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify
from tests.passes.fuse.test_conv import bn_params, build, ops, rand


def _assert_equal(result) -> None:
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


def _head(inbound: str, add: str = "Add (u, T)", bn: bool = True, group: int = 1) -> str:
    out = "y" if not bn else "a"
    tail = "\n  y = BatchNormalization <epsilon=1e-5> (a, gamma, beta, mean, var)" if bn else ""
    return f"""
<ir_version: 8, opset_import: ["" : 12]>
g (float[1,4,6,6] x) => (float[1,4,N,M] y) {{
  u = {inbound.format(group=group)}
  {out} = {add}{tail}
}}"""


CT = "ConvTranspose <strides=[2,2], kernel_shape=[2,2], group={group}> (x, W)"
CONV = "Conv <pads=[1,1,1,1]> (x, Wc, Bc)"

POSITIVE = {
    # case: (text, passes, ops after)
    "ppocr_convtranspose_bias_add_bn": (_head(CT), ["fold_batchnorm"], ["ConvTranspose"]),
    "grouped_convtranspose_bias_add_bn": (_head(CT, group=2), ["fold_batchnorm"], ["ConvTranspose"]),
    "bias_first_then_bn_by_two_passes": (_head(CT), ["fuse_conv_add_bias", "fold_batchnorm"], ["ConvTranspose"]),
    "conv_bias_add_bn": (_head(CONV), ["fold_batchnorm"], ["Conv"]),
    "ppocr_last_convtranspose_scalar_bias": (_head(CT, "Add (u, S)", bn=False), ["fuse_conv_add_bias"],
                                             ["ConvTranspose"]),
    "convtranspose_sub_bias": (_head(CT, "Sub (u, T)", bn=False), ["fuse_conv_add_bias"], ["ConvTranspose"]),
}

ARRAYS = dict(W=rand(4, 4, 2, 2), Wc=rand(4, 4, 3, 3), Bc=rand(4), T=rand(1, 4, 1, 1, seed=5),
              S=rand(1, 1, 1, 1, seed=6), P=rand(1, 4, 12, 12, seed=7), **bn_params(4))


@pytest.mark.parametrize("case", sorted(POSITIVE))
def test_bias_add_folds(case):
    text, passes, after = POSITIVE[case]
    arrays = dict(ARRAYS)
    if "grouped" in case:
        arrays["W"] = rand(4, 2, 2, 2)  # (C_in, C_out / group, k, k): 4 output channels in 2 groups
    result = run_pipeline(build(text, **arrays), passes)
    assert ops(result.final) == after
    _assert_equal(result)


MUST_NOT = {
    "add_of_a_position_map_stays_between": (_head(CT, "Add (u, P)"), ["fuse_conv_add_bias", "fold_batchnorm"]),
    "add_of_a_computed_tensor_stays": (_head(CT, "Add (u, u)"), ["fuse_conv_add_bias", "fold_batchnorm"]),
}


@pytest.mark.parametrize("case", sorted(MUST_NOT))
def test_bias_add_must_not_fold(case):
    text, passes = MUST_NOT[case]
    result = run_pipeline(build(text, **ARRAYS), passes)
    assert ops(result.final) == ["ConvTranspose", "Add", "BatchNormalization"]
    assert all(r.changes == () for r in result.reports)
