"""FusedConv with its sum input: Conv + residual Add [+ activation] in one onnxruntime kernel.

Fixtures are shaped like the exports where the residual Add sits: torch's ResNet block (static
dims, BatchNorm folded first), Paddle2ONNX's PP-OCR blocks (symbolic ``DynamicDimension`` dims,
an Identity after the Add) and a downsampling block whose two strided branches meet in an Add.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from fusionviz.passes import nearmiss
from fusionviz.passes.dims import DimKeys
from fusionviz.passes.fuse import fuse_conv_activation as fca
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.shapes import infer_shapes
from fusionviz.verify import verify
from tests.passes.fuse.test_conv import bn_params, build, ops, rand


@pytest.fixture(autouse=True)
def nchw_cpu(request, monkeypatch):
    """Rules 1-4 as on a CPU where onnxruntime leaves every Conv in NCHW (rule 5 finds nothing);
    the rule 5 tests below ask onnxruntime for real."""
    if "rule5" not in request.node.name:
        monkeypatch.setattr(fca, "nchwc_absorbed", lambda model: set())


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _fused(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "FusedConv"]


def _assert_equal(result, shapes=None) -> None:
    v = verify(result.original, result.final, shapes=shapes)
    assert v.ok, v.summary()


TORCH_BASIC_BLOCK = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
  c1 = Conv <pads=[1,1,1,1]> (x, W1)
  n1 = BatchNormalization (c1, gamma, beta, mean, var)
  r1 = Relu (n1)
  c2 = Conv <pads=[1,1,1,1]> (r1, W2)
  n2 = BatchNormalization (c2, gamma, beta, mean, var)
  s = Add (n2, x)
  y = Relu (s)
}"""


def test_torch_basic_block_ends_as_two_fused_convs_with_the_shortcut_as_sum_input():
    model = build(TORCH_BASIC_BLOCK, W1=rand(4, 4, 3, 3), W2=rand(4, 4, 3, 3, seed=5), **bn_params(4))
    result = run_pipeline(model, ["fold_batchnorm", "fuse_conv_activation"])
    assert ops(result.final) == ["FusedConv", "FusedConv"]
    second = _fused(result.final)[1]
    assert list(second.input)[3] == "x" and _attrs(second)["activation"] == b"Relu"
    sources = next(p.value for p in second.metadata_props if p.key == "fusionviz.sources").split(",")
    assert {op for n in result.original.graph.node if n.name in sources for op in [n.op_type]} == {
        "Conv", "BatchNormalization", "Add", "Relu"}
    _assert_equal(result)


PADDLE_BLOCK = """
<ir_version: 8, opset_import: ["" : 11]>
g (float["DynamicDimension.0",4,"DynamicDimension.1","DynamicDimension.2"] x)
  => (float["DynamicDimension.0",4,"DynamicDimension.1","DynamicDimension.2"] y) {
  c1 = Conv <pads=[1,1,1,1], group=4, kernel_shape=[3,3]> (x, W1, B1)
  h = HardSigmoid <alpha=0.2, beta=0.5> (c1)
  c2 = Conv <kernel_shape=[1,1]> (h, W2, B2)
  s = Add (x, c2)
  y = Identity (s)
}"""


def test_paddle_block_with_symbolic_dims_is_proved_through_the_graph():
    model = build(PADDLE_BLOCK, W1=rand(4, 1, 3, 3), B1=rand(4), W2=rand(4, 4, 1, 1, seed=7), B2=rand(4, seed=8))
    result = run_pipeline(model, ["eliminate_identity", "fuse_conv_activation"])
    fused = _fused(result.final)
    assert len(fused) == 2 and ops(result.final) == ["FusedConv", "FusedConv"]
    assert _attrs(fused[0])["activation"] == b"HardSigmoid" and len(fused[0].input) == 3
    assert list(fused[1].input)[3] == "x" and "activation" not in _attrs(fused[1])
    _assert_equal(result, shapes={"x": [2, 4, 11, 13]})


DOWNSAMPLE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N,4,H,W] x) => (float[N,8,A,B] y) {
  c1 = Conv <pads=[1,1,1,1], strides=[2,2]> (x, W1, B1)
  r1 = Relu (c1)
  c2 = Conv <pads=[1,1,1,1]> (r1, W2, B2)
  sc = Conv <strides=[2,2]> (x, W3, B3)
  s = Add (c2, sc)
  y = Relu (s)
}"""


def test_downsampling_block_branches_meet_in_a_fused_conv():
    """3×3 stride 2 pad 1 and 1×1 stride 2 pad 0 both give floor((H − 1)/2) + 1."""
    model = build(DOWNSAMPLE, W1=rand(8, 4, 3, 3), B1=rand(8), W2=rand(8, 8, 3, 3, seed=3), B2=rand(8, seed=4),
                  W3=rand(8, 4, 1, 1, seed=5), B3=rand(8, seed=6))
    result = run_pipeline(model, ["fuse_conv_activation"])
    assert sorted(ops(result.final)) == ["Conv", "FusedConv", "FusedConv"]
    summed = next(n for n in _fused(result.final) if len(n.input) == 4)
    assert _attrs(summed)["activation"] == b"Relu"
    _assert_equal(result, shapes={"x": [1, 4, 15, 9]})


MUST_NOT = {
    # z is [1,4,1,1] from a graph input: the kernel would not broadcast it
    "sum_input_that_broadcasts": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x, float[1,4,1,1] z) => (float[1,4,8,8] y) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  s = Add (c, z)
  y = Relu (s)
}""", "condition"),
    # the Resize's output size is not known: nothing proves it equals the Conv's
    "sum_input_of_unprovable_shape": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,H,W] x, float[1,4,P,Q] z) => (float[1,4,H,W] y) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  s = Add (c, z)
  y = Relu (s)
}""", "condition"),
    # a per-channel constant is a bias: fuse_conv_add_bias folds it, FusedConv would need it full size
    "per_channel_constant_is_left_to_the_bias_pass": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  s = Add (c, T)
  y = Relu (s)
}""", "needs_pass"),
    "conv_output_with_another_consumer": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] c) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  s = Add (c, x)
  y = Relu (s)
}""", None),
}


@pytest.mark.parametrize("case", sorted(MUST_NOT))
def test_conv_add_must_not_fuse(case):
    text, kind = MUST_NOT[case]
    model = build(text, W=rand(4, 4, 3, 3), B=rand(4), T=rand(1, 4, 1, 1, seed=9))
    result = run_pipeline(model, ["fuse_conv_activation"])
    assert not any(len(n.input) == 4 for n in _fused(result.final)), case
    assert "Add" in ops(result.final)
    if kind is not None:
        report = result.reports[0]
        assert any(m.kind == kind and "sum input" in m.reason for m in report.near_misses), [
            m.describe() for m in report.near_misses]


def test_float16_conv_add_is_not_fused():
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float16[1,4,8,8] x) => (float16[1,4,8,8] y) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  s = Add (c, x)
  y = Relu (s)
}"""
    model = build(text, W=rand(4, 4, 3, 3).astype(np.float16), B=rand(4).astype(np.float16))
    result = run_pipeline(model, ["fuse_conv_activation"])
    assert "FusedConv" not in ops(result.final)


def test_near_miss_of_an_unprovable_shape_says_what_would_help():
    text, _ = MUST_NOT["sum_input_of_unprovable_shape"]
    result = run_pipeline(build(text, W=rand(4, 4, 3, 3), B=rand(4)), ["fuse_conv_activation"])
    (m,) = [m for m in result.reports[0].near_misses if "sum input" in m.reason]
    assert "--shape" in m.hint and m.blocker == next(n.name for n in result.original.graph.node if n.op_type == "Add")
    assert nearmiss.KINDS[m.kind]


# --------------------------------------------------------------------------- the dims prover


def _keys(text: str, **arrays):
    import onnx_ir as ir

    model = ir.serde.deserialize_model(build(text, **arrays))
    infer_shapes(model)
    values = {v.name: v for n in model.graph for v in n.outputs}
    values.update({v.name: v for v in model.graph.inputs})
    return DimKeys(model.graph), values


def test_dims_same_padding_keeps_symbolic_dims_and_strides_map_them_alike():
    keys, v = _keys(DOWNSAMPLE, W1=rand(8, 4, 3, 3), B1=rand(8), W2=rand(8, 8, 3, 3), B2=rand(8),
                    W3=rand(8, 4, 1, 1), B3=rand(8))
    assert keys.same_shape(v["c2"], v["sc"])
    assert keys.same_shape(v["c1"], v["r1"])
    assert not keys.same_shape(v["c1"], v["x"])  # channels 8 vs 4, and H halved
    assert "dimension 1" in keys.why_not_same(v["c1"], v["x"])


def test_dims_unknown_sizes_are_never_equal_to_each_other():
    text, _ = MUST_NOT["sum_input_of_unprovable_shape"]
    keys, v = _keys(text, W=rand(4, 4, 3, 3), B=rand(4))
    assert keys.same_shape(v["c"], v["x"])  # a "same" Conv keeps H and W
    assert "dimension 2" in keys.why_not_same(v["c"], v["z"])  # z's P and Q are other names


# --------------------------------------------------------------------------- rule 5: NCHWc


RESNET_STAGE_16 = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,12,12] x) => (float[1,16,12,12] y) {
  c0 = Conv <pads=[1,1,1,1]> (x, W0, B0)
  r0 = Relu (c0)
  c1 = Conv <pads=[1,1,1,1]> (r0, W1, B1)
  r1 = Relu (c1)
  c2 = Conv <pads=[1,1,1,1]> (r1, W2, B2)
  s = Add (c2, r0)
  r2 = Relu (s)
  y = Conv <pads=[1,1,1,1]> (r2, W3, B3)
}"""


def _resnet_stage_16() -> onnx.ModelProto:
    """A stem Conv, one basic block and a Conv after it, 16 channels: the residual Add sits
    between blocked Convs, as in a ResNet."""
    return build(RESNET_STAGE_16, **{f"W{i}": rand(16, 16, 3, 3, seed=i) for i in range(4)},
                 **{f"B{i}": rand(16, seed=10 + i) for i in range(4)})


def _absorbed_here(model: onnx.ModelProto) -> set[str]:
    from fusionviz.passes.pipeline import to_ir

    return fca.nchwc_absorbed(to_ir(model))


def test_rule5_a_residual_add_onnxruntime_takes_into_an_nchwc_conv_is_left_to_it():
    model = _resnet_stage_16()
    if "c2" not in _absorbed_here(model):
        pytest.skip("onnxruntime keeps this Add apart on this CPU (no NCHWc kernels): rule 5 has nothing to do")
    result = run_pipeline(model, ["fuse_conv_activation"])
    assert not any(len(n.input) == 4 for n in _fused(result.final))  # no sum input
    assert ops(result.final).count("Add") == 1 and ops(result.final).count("FusedConv") == 2  # rule 1 still applies
    (m,) = [m for m in result.reports[0].near_misses if "NCHWc" in m.reason]
    assert "runs slower" in m.reason and "nchwc_layout" in m.hint and m.kind == "condition"
    _assert_equal(result)


def test_rule5_nchwc_layout_then_holds_the_residual_add_in_its_blocked_conv():
    """What rule 5 leaves is what onnxruntime's layout takes: no Add and no FusedConv stay."""
    model = _resnet_stage_16()
    if "c2" not in _absorbed_here(model):
        pytest.skip("onnxruntime keeps this Add apart on this CPU (no NCHWc kernels)")
    result = run_pipeline(model, ["fuse_conv_activation", "nchwc_layout"])
    assert "Add" not in ops(result.final) and "FusedConv" not in ops(result.final)
    assert sum(1 for n in result.final.graph.node if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv") == 4
    _assert_equal(result)


def test_rule5_an_add_onnxruntime_keeps_apart_still_takes_rule_2():
    """A 1-D Conv has no NCHWc kernel: its residual Add still goes into FusedConv's sum input."""
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,20] x) => (float[1,16,20] y) {
  c = Conv <pads=[1,1]> (x, W, B)
  s = Add (c, x)
  y = Relu (s)
}"""
    model = build(text, W=rand(16, 16, 3), B=rand(16))
    assert "c" not in _absorbed_here(model)
    result = run_pipeline(model, ["fuse_conv_activation"])
    (fused,) = _fused(result.final)
    assert list(fused.input)[3] == "x" and ops(result.final) == ["FusedConv"]
    _assert_equal(result)


def test_rule5_the_blocked_conv_that_took_the_add_is_credited_with_it():
    """Paddle writes the shortcut first (``Add(x, conv(y))``): the Add is credited to the NCHWc
    Conv that took it in (it was the only reader of that Conv's output), not to the node that
    made the shortcut."""
    model = build(RESNET_STAGE_16.replace("s = Add (c2, r0)", "s = Add (r0, c2)"),
                  **{f"W{i}": rand(16, 16, 3, 3, seed=i) for i in range(4)}, **{f"B{i}": rand(16, seed=10 + i)
                                                                               for i in range(4)})
    if "c2" not in _absorbed_here(model):
        pytest.skip("onnxruntime keeps this Add apart on this CPU (no NCHWc kernels)")
    result = run_pipeline(model, ["fuse_conv_activation", "nchwc_layout"])
    add = next(n.name for n in result.original.graph.node if n.op_type == "Add")
    holders = {n.name: [n.input[i] for i in range(len(n.input))]
               for n in result.final.graph.node
               if add in next((p.value for p in n.metadata_props if p.key == "fusionviz.sources"), "").split(",")}
    (inputs,) = holders.values()
    assert len(inputs) == 4 and inputs[3]  # the Conv with the sum input
    _assert_equal(result)
