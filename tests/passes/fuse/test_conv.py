"""Conv fusions: BatchNorm folding, affine/bias folding, Pad folding, Conv + activation."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz import samples
from fusionviz.passes import base, registry
from fusionviz.passes.base import ChangeKind
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify

RNG_SEED = 0


def build(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    """Parse ONNX text and add the given arrays as float32 (unless typed) initializers."""
    model = onnx.parser.parse_model(text)
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    return model


def rand(*shape: int, positive: bool = False, seed: int = RNG_SEED) -> np.ndarray:
    rng = np.random.default_rng(seed + sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def bn_params(c: int) -> dict[str, np.ndarray]:
    return {"gamma": rand(c, seed=1), "beta": rand(c, seed=2), "mean": rand(c, seed=3),
            "var": rand(c, positive=True, seed=4)}


def assert_equal_outputs(result) -> None:
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


CONV_BN_RELU = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,8,8] y) {
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  n = BatchNormalization <epsilon=1e-3> (c, gamma, beta, mean, var)
  y = Relu(n)
}"""


def conv_bn_relu() -> onnx.ModelProto:
    return build(CONV_BN_RELU, W=rand(4, 3, 3, 3), B=rand(4), **bn_params(4))


# --------------------------------------------------------------------------- textbook example


def test_conv_bn_relu_ends_as_one_fused_conv_with_provenance():
    model = conv_bn_relu()
    result = run_pipeline(model, ["fold_batchnorm", "fuse_conv_activation"])
    names = {n.op_type: n.name for n in result.original.graph.node}  # names given by the pipeline
    assert ops(result.final) == ["FusedConv"]
    (node,) = result.final.graph.node
    assert node.domain == "com.microsoft"
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["activation"] == b"Relu"
    meta = {p.key: p.value for p in node.metadata_props}
    sources = meta[base.SOURCES_KEY].split(",")
    assert sorted(sources) == sorted([names["Conv"], names["BatchNormalization"], names["Relu"]])
    assert meta[base.PASSES_KEY].split(",") == ["fold_batchnorm", "fuse_conv_activation"]
    assert [c.kind for r in result.reports for c in r.changes] == [ChangeKind.FUSED, ChangeKind.FUSED]
    assert any(o.domain == "com.microsoft" for o in result.final.opset_import)
    onnx.checker.check_model(result.final)
    # the folded weight and bias replace the old ones; BN parameters are dropped
    inits = {i.name for i in result.final.graph.initializer}
    assert len(inits) == 2 and not inits & {"W", "B", "gamma", "beta", "mean", "var"}
    assert_equal_outputs(result)


# --------------------------------------------------------------------------- fold_batchnorm

FOLD_CASES = {
    "conv_no_bias": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,6,6] x) => (float[2,4,4,4] y) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""", {"W": rand(4, 3, 3, 3)}, "Conv"),
    "conv_transpose": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,4,4] x) => (float[1,4,6,6] y) {
  c = ConvTranspose (x, W, B)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""", {"W": rand(3, 4, 3, 3), "B": rand(4)}, "ConvTranspose"),
    "gemm_transB": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[5,3] x) => (float[5,4] y) {
  c = Gemm <transB=1> (x, W, B)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""", {"W": rand(4, 3), "B": rand(4)}, "Gemm"),
    "matmul_2d": ("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[5,3] x) => (float[5,4] y) {
  c = MatMul (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""", {"W": rand(3, 4)}, "Gemm"),
}


@pytest.mark.parametrize("case", sorted(FOLD_CASES))
def test_fold_batchnorm_folds_into_the_producer(case):
    text, weights, out_op = FOLD_CASES[case]
    result = run_pipeline(build(text, **weights, **bn_params(4)), ["fold_batchnorm"])
    assert ops(result.final) == [out_op]
    (change,) = result.reports[0].changes
    assert change.kind == ChangeKind.FUSED and "BatchNormalization" in change.in_ops
    assert_equal_outputs(result)


NO_FOLD_CASES = {
    "shared_weight_initializers": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y, float[1,4,6,6] z) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
  z = Conv (x, W)
}""",
    "training_mode_batchnorm": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
  c = Conv (x, W)
  y = BatchNormalization <training_mode=1> (c, gamma, beta, mean, var)
}""",
    "conv_output_with_two_consumers": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y, float[1,4,6,6] z) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
  z = Relu (c)
}""",
    "conv_output_is_a_graph_output": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y, float[1,4,6,6] c) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""",
    "negative_variance": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, negvar)
}""",
    "non_constant_scale": """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x, float[4] gamma) => (float[1,4,6,6] y) {
  c = Conv (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
}""",
}


@pytest.mark.parametrize("case", sorted(NO_FOLD_CASES))
def test_fold_batchnorm_must_not_fold(case):
    params = bn_params(4)
    if "float[4] gamma" in NO_FOLD_CASES[case]:
        params.pop("gamma")
    if "negvar" in NO_FOLD_CASES[case]:  # found by the fuzzer: folding baked NaN into the weights
        params["negvar"] = -np.ones(4, np.float32)
    model = build(NO_FOLD_CASES[case], W=rand(4, 3, 3, 3), **params)
    result = run_pipeline(model, ["fold_batchnorm"])
    assert result.reports[0].error is None
    assert result.reports[0].changes == ()
    assert ops(result.final) == ops(model)


def test_fold_batchnorm_folds_when_only_the_bias_is_shared():
    """Exporters and initializer de-duplication share all-zero biases; the fold gets its own copy."""
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y, float[1,4,6,6] z) {
  c = Conv (x, W, B)
  y = BatchNormalization (c, gamma, beta, mean, var)
  z = Conv (x, W2, B)
}"""
    model = build(text, W=rand(4, 3, 3, 3), W2=rand(4, 3, 3, 3, seed=9), B=np.zeros(4, np.float32), **bn_params(4))
    result = run_pipeline(model, ["fold_batchnorm"])
    assert ops(result.final) == ["Conv", "Conv"]
    assert result.final.graph.node[1].input[2] == "B"  # the other Conv keeps the shared bias
    assert_equal_outputs(result)


def test_fold_batchnorm_skips_matmul_on_rank3_input():
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,4,3] x) => (float[2,4,5] y) {
  c = MatMul (x, W)
  y = BatchNormalization (c, gamma, beta, mean, var)
}"""
    result = run_pipeline(build(text, W=rand(3, 5), **bn_params(4)), ["fold_batchnorm"])
    assert result.reports[0].changes == ()


# --------------------------------------------------------------------------- fuse_conv_affine

AFFINE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
  c = Conv (x, W, B)
  m = Mul (S, c)
  y = Add (m, T)
}"""


@pytest.mark.parametrize("shapes", [((1, 4, 1, 1), (4, 1, 1)), ((), (1,)), ((4, 1, 1), ())],
                         ids=["per_channel", "scalars", "mixed"])
def test_fuse_conv_affine_folds_mul_add(shapes):
    s_shape, t_shape = shapes
    model = build(AFFINE, W=rand(4, 3, 3, 3), B=rand(4), S=rand(*s_shape, seed=5) if s_shape else np.float32(1.7),
                  T=rand(*t_shape, seed=6) if t_shape else np.float32(-0.3))
    result = run_pipeline(model, ["fuse_conv_affine"])
    assert ops(result.final) == ["Conv"]
    (change,) = result.reports[0].changes
    assert change.kind == ChangeKind.FUSED and sorted(change.in_ops) == ["Add", "Conv", "Mul"]
    assert_equal_outputs(result)


def test_fuse_conv_affine_folds_div():
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
  c = Conv (x, W)
  y = Div (c, D)
}"""
    result = run_pipeline(build(text, W=rand(4, 3, 3, 3), D=rand(4, 1, 1, positive=True)), ["fuse_conv_affine"])
    assert ops(result.final) == ["Conv"]
    assert_equal_outputs(result)


@pytest.mark.parametrize("case", ["spatially_varying_scale", "shared_weights", "non_constant_scale"])
def test_fuse_conv_affine_must_not_fold(case):
    if case == "spatially_varying_scale":
        model = build(AFFINE, W=rand(4, 3, 3, 3), B=rand(4), S=rand(1, 1, 6, 6), T=rand(4, 1, 1))
        expect = ["Add"]  # the Mul stays; fuse_conv_affine must not touch it
    elif case == "shared_weights":
        model = build(AFFINE.replace("=> (float[1,4,6,6] y)", "=> (float[1,4,6,6] y, float[1,4,6,6] z)")
                      .replace("y = Add (m, T)", "y = Add (m, T)\n  z = Conv (x, W)"),
                      W=rand(4, 3, 3, 3), B=rand(4), S=rand(4, 1, 1), T=rand(4, 1, 1))
        expect = None
    else:
        model = build(AFFINE.replace("(float[1,3,8,8] x)", "(float[1,3,8,8] x, float[4,1,1] S)"),
                      W=rand(4, 3, 3, 3), B=rand(4), T=rand(4, 1, 1))
        expect = None
    result = run_pipeline(model, ["fuse_conv_affine"])
    assert result.reports[0].error is None
    if expect is None:
        assert result.reports[0].changes == ()
    else:  # only the Add may fold in (bias); the Mul never does
        assert "Mul" in ops(result.final)
    assert_equal_outputs(result)


# --------------------------------------------------------------------------- fuse_conv_add_bias

ADD_BIAS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,6,6] y) {
  c = Conv (x, W)
  y = Add (T, c)
}"""


@pytest.mark.parametrize("t_shape", [(1, 4, 1, 1), (4, 1, 1), (1,)], ids=["nchw", "chw", "scalar"])
def test_fuse_conv_add_bias_merges_bias(t_shape):
    result = run_pipeline(build(ADD_BIAS, W=rand(4, 3, 3, 3), T=rand(*t_shape, seed=7)), ["fuse_conv_add_bias"])
    assert ops(result.final) == ["Conv"]
    assert len(result.final.graph.node[0].input) == 3
    (change,) = result.reports[0].changes
    assert change.kind == ChangeKind.FUSED
    assert_equal_outputs(result)


def test_fuse_conv_add_bias_merges_sub_into_existing_bias():
    text = ADD_BIAS.replace("c = Conv (x, W)", "c = Conv (x, W, B)").replace("y = Add (T, c)", "y = Sub (c, T)")
    result = run_pipeline(build(text, W=rand(4, 3, 3, 3), B=rand(4), T=rand(4, 1, 1)), ["fuse_conv_add_bias"])
    assert ops(result.final) == ["Conv"]
    assert_equal_outputs(result)


@pytest.mark.parametrize("case", ["bias_varies_over_space", "non_constant_bias", "conv_output_is_a_graph_output"])
def test_fuse_conv_add_bias_must_not_fold(case):
    text, arrays = ADD_BIAS, {"W": rand(4, 3, 3, 3), "T": rand(4, 1, 1)}
    if case == "bias_varies_over_space":
        arrays["T"] = rand(1, 4, 6, 6)
    elif case == "non_constant_bias":
        text = text.replace("(float[1,3,8,8] x)", "(float[1,3,8,8] x, float[4,1,1] T)")
        arrays.pop("T")
    else:
        text = text.replace("=> (float[1,4,6,6] y)", "=> (float[1,4,6,6] y, float[1,4,6,6] c)")
    result = run_pipeline(build(text, **arrays), ["fuse_conv_add_bias"])
    assert result.reports[0].error is None and result.reports[0].changes == ()


# --------------------------------------------------------------------------- fuse_pad_into_conv

PAD_CONV = """
<ir_version: 8, opset_import: ["" : 18]>
g (float[1,3,8,8] x) => (float[1,4,8,8] y) {
  pads = Constant <value = int64[8] {0,0,1,1,0,0,1,1}> ()
  p = Pad (x, pads)
  y = Conv (p, W, B)
}"""


def test_fuse_pad_into_conv_folds_zero_pad():
    result = run_pipeline(build(PAD_CONV, W=rand(4, 3, 3, 3), B=rand(4)), ["fuse_pad_into_conv"])
    assert ops(result.final) == ["Conv"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in result.final.graph.node[0].attribute}
    assert attrs["pads"] == [1, 1, 1, 1]
    (change,) = result.reports[0].changes
    assert change.kind == ChangeKind.FUSED and "Pad" in change.in_ops
    assert_equal_outputs(result)


def test_fuse_pad_into_conv_handles_pad2_attribute_form():
    text = """
<ir_version: 7, opset_import: ["" : 9]>
g (float[1,3,8,8] x) => (float[1,4,10,8] y) {
  p = Pad <pads=[0,0,2,0,0,0,2,0]> (x)
  y = Conv <pads=[0,1,0,1]> (p, W)
}"""
    result = run_pipeline(build(text, W=rand(4, 3, 3, 3)), ["fuse_pad_into_conv"])
    assert ops(result.final) == ["Conv"]
    assert_equal_outputs(result)


POOL_CASES = {
    "average_pool_zero_pad": ("AveragePool <kernel_shape=[3,3]>", "0.0", None, True),
    "max_pool_minus_inf_pad": ("MaxPool <kernel_shape=[3,3]>", "-inf", None, True),
    "max_pool_zero_pad_after_relu": ("MaxPool <kernel_shape=[3,3]>", "0.0", "Relu", True),
    "max_pool_zero_pad_of_signed_data": ("MaxPool <kernel_shape=[3,3]>", "0.0", None, False),
    "average_pool_non_zero_pad": ("AveragePool <kernel_shape=[3,3]>", "1.0", None, False),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_fuse_pad_into_pool(case):
    pool, value, pre, fuses = POOL_CASES[case]
    src = "r" if pre else "x"
    text = f"""
<ir_version: 8, opset_import: ["" : 18]>
g (float[1,3,8,8] x) => (float[1,3,8,8] y) {{
  {"r = Relu (x)" if pre else ""}
  pads = Constant <value = int64[8] {{0,0,1,1,0,0,1,1}}> ()
  v = Constant <value = float {{{value}}}> ()
  p = Pad ({src}, pads, v)
  y = {pool} (p)
}}"""
    model = onnx.parser.parse_model(text)
    result = run_pipeline(model, ["fuse_pad_into_conv"])
    assert ("Pad" not in ops(result.final)) == fuses
    assert_equal_outputs(result)


@pytest.mark.parametrize("case", ["non_zero_value", "non_constant_pads", "reflect_mode", "pads_the_channel_axis"])
def test_fuse_pad_into_conv_must_not_fold(case):
    text = PAD_CONV
    if case == "non_zero_value":
        text = text.replace("p = Pad (x, pads)", "v = Constant <value = float {0.5}> ()\n  p = Pad (x, pads, v)")
    elif case == "non_constant_pads":
        text = text.replace("(float[1,3,8,8] x)", "(float[1,3,8,8] x, int64[8] pads)").replace(
            "pads = Constant <value = int64[8] {0,0,1,1,0,0,1,1}> ()", "")
    elif case == "reflect_mode":
        text = text.replace("p = Pad (x, pads)", 'p = Pad <mode="reflect"> (x, pads)')
    else:
        text = text.replace("{0,0,1,1,0,0,1,1}", "{0,1,1,1,0,0,1,1}").replace("float[1,3,8,8] x)", "float[1,2,8,8] x)")
    model = build(text, W=rand(4, 3, 3, 3), B=rand(4))
    result = run_pipeline(model, ["fuse_pad_into_conv"])
    assert result.reports[0].error is None
    assert result.reports[0].changes == ()
    assert "Pad" in ops(result.final)


# --------------------------------------------------------------------------- fuse_conv_activation

ACTIVATIONS = {
    "relu": ("Relu (c)", "Relu"),
    "relu6_clip": ("Clip (c, lo, hi)", "Clip"),
    "sigmoid": ("Sigmoid (c)", "Sigmoid"),
    "hard_sigmoid": ("HardSigmoid <alpha=0.25, beta=0.4> (c)", "HardSigmoid"),
    "leaky_relu": ("LeakyRelu <alpha=0.2> (c)", "LeakyRelu"),
    "tanh": ("Tanh (c)", "Tanh"),
    "hard_swish": ("HardSwish (c)", "HardSwish"),
}


@pytest.mark.parametrize("case", sorted(ACTIVATIONS))
def test_fuse_conv_activation_makes_fused_conv(case):
    act, name = ACTIVATIONS[case]
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,8,8] y) {{
  lo = Constant <value = float {{0.0}}> ()
  hi = Constant <value = float {{0.5}}> ()
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  y = {act}
}}"""
    result = run_pipeline(build(text, W=rand(4, 3, 3, 3), B=rand(4)), ["fuse_conv_activation"])
    fused = [n for n in result.final.graph.node if n.op_type == "FusedConv"]
    assert len(fused) == 1 and ops(result.final).count("Conv") == 0
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in fused[0].attribute}
    assert attrs["activation"] == name.encode()
    if case == "relu6_clip":
        assert attrs["activation_params"] == [0.0, 0.5]
    assert_equal_outputs(result)


NO_ACTIVATION_CASES = {
    "silu_has_no_fused_kernel": ("s = Sigmoid (c)\n  y = Mul (c, s)", "=> (float[1,4,8,8] y)"),
    "conv_output_with_two_consumers": ("r = Relu (c)\n  y = Add (r, c)", "=> (float[1,4,8,8] y)"),
    "conv_output_is_a_graph_output": ("y = Relu (c)", "=> (float[1,4,8,8] y, float[1,4,8,8] c)"),
}


@pytest.mark.parametrize("case", sorted(NO_ACTIVATION_CASES))
def test_fuse_conv_activation_must_not_fuse(case):
    body, outputs = NO_ACTIVATION_CASES[case]
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) {outputs} {{
  c = Conv <pads=[1,1,1,1]> (x, W, B)
  {body}
}}"""
    result = run_pipeline(build(text, W=rand(4, 3, 3, 3), B=rand(4)), ["fuse_conv_activation"])
    assert result.reports[0].changes == ()
    assert "FusedConv" not in ops(result.final)


def test_standalone_batchnorm_relu_stays_and_explain_says_why():
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x) => (float[1,4,8,8] y) {
  n = BatchNormalization (x, gamma, beta, mean, var)
  y = Relu (n)
}"""
    result = run_pipeline(build(text, **bn_params(4)), ["fold_batchnorm", "fuse_conv_activation"])
    assert ops(result.final) == ["BatchNormalization", "Relu"]
    assert all(r.changes == () for r in result.reports)
    for name in ("fold_batchnorm", "fuse_conv_activation"):
        assert "BatchNorm+ReLU" in registry.get_pass(name).explain


def test_passes_on_a_model_without_convs_do_nothing():
    text = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,3] y) {
  y = Relu (x)
}"""
    names = ["fold_batchnorm", "fuse_conv_affine", "fuse_conv_add_bias", "fuse_pad_into_conv", "fuse_conv_activation"]
    result = run_pipeline(onnx.parser.parse_model(text), names)
    assert [r.name for r in result.reports] == names
    assert all(r.error is None and r.changes == () for r in result.reports)


# --------------------------------------------------------------------------- real models

BN_LIGHT_MODELS = ["light_resnet50.onnx", "light_shufflenet.onnx", "light_inception_v2.onnx"]


@pytest.mark.parametrize("file_name", BN_LIGHT_MODELS)
def test_light_models_fold_batchnorm_after_constant_folding(file_name):
    if "fold_constants" not in registry.pass_names():
        pytest.skip("the fold_constants pass does not exist yet (light models keep weights in ConstantOfShape)")
    path = next((p for p in samples.light_models() if p.name == file_name), None)
    if path is None:
        pytest.skip(f"{file_name} is not shipped with this onnx wheel")
    model = onnx.load(str(path))
    n_bn = ops(model).count("BatchNormalization")
    result = run_pipeline(model, ["fold_constants", "fold_batchnorm", "fuse_conv_affine", "fuse_conv_activation"])
    assert all(r.error is None for r in result.reports)
    assert ops(result.final).count("BatchNormalization") == 0
    fold = next(r for r in result.reports if r.name == "fold_batchnorm")
    assert sum(c.in_ops.count("BatchNormalization") for c in fold.changes) == n_bn
    assert ops(result.final).count("FusedConv") > 0
    assert_equal_outputs(result)


@pytest.mark.parametrize("file_name", ["light_shufflenet.onnx", "light_resnet50.onnx"])
def test_all_passes_fold_every_batchnorm_of_light_models(file_name):
    """Their weights are ConstantOfShape fills, so many are equal after folding. When
    eliminate_duplicate_initializers ran before the fusions it merged them into shared weights, and
    fold_batchnorm (which never folds into a shared weight) left 45 of ShuffleNet's 49 BN."""
    path = next((p for p in samples.light_models() if p.name == file_name), None)
    if path is None:
        pytest.skip(f"{file_name} is not shipped with this onnx wheel")
    # without nchwc_layout: onnxruntime's capture would fold the BatchNorms itself and hide it
    names = [n for n in registry.default_passes() if n != "nchwc_layout"]
    result = run_pipeline(onnx.load(str(path)), names, keep_snapshots=False)
    assert all(r.error is None for r in result.reports)
    assert ops(result.final).count("BatchNormalization") == 0
    assert_equal_outputs(result)


def test_resnet_sample_fuses_every_conv_bn():
    if "resnet_ts" not in samples.sample_names():
        pytest.skip("sample_models/resnet_ts.onnx has not been generated")
    model = samples.load_sample("resnet_ts").proto
    result = run_pipeline(model, ["fold_batchnorm", "fuse_conv_activation"])
    final = ops(result.final)
    assert final.count("BatchNormalization") == 0 and final.count("Conv") + final.count("FusedConv") == 20
    assert final.count("Relu") < ops(model).count("Relu")
    assert_equal_outputs(result)
