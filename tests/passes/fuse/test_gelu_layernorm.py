"""GELU and LayerNorm fusions."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz import samples
from fusionviz.passes import base
from fusionviz.passes.base import ChangeKind
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify

SQRT2 = math.sqrt(2.0)
INV_SQRT2 = 1.0 / SQRT2
K = math.sqrt(2.0 / math.pi)


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def compute_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes other than the test text's pool of (possibly unused) Constants."""
    return [n for n in model.graph.node if n.op_type != "Constant"]


def model_text(body: str, opset: int = 17, dtype: str = "float", outputs: str = "") -> str:
    return f"""
<ir_version: 8, opset_import: ["" : {opset}]>
g ({dtype}[2,8] x) => ({dtype}[2,8] y{outputs}) {{
  half = Constant <value = {dtype} {{0.5}}> ()
  one = Constant <value = {dtype} {{1.0}}> ()
  sqrt2 = Constant <value = {dtype} {{{SQRT2}}}> ()
  isqrt2 = Constant <value = {dtype} {{{INV_SQRT2}}}> ()
  three = Constant <value = {dtype} {{3.0}}> ()
  c = Constant <value = {dtype} {{0.044715}}> ()
  k = Constant <value = {dtype} {{{K}}}> ()
  {body}
}}"""


ERF_FORMS = {
    "torchscript_order": "d = Div (x, sqrt2)\n  e = Erf (d)\n  a = Add (e, one)\n  m = Mul (x, a)\n  y = Mul (m, half)",
    "half_first": "d = Div (x, sqrt2)\n  e = Erf (d)\n  a = Add (one, e)\n  h = Mul (half, a)\n  y = Mul (x, h)",
    "huggingface_order": "d = Div (x, sqrt2)\n  e = Erf (d)\n  a = Add (one, e)\n  h = Mul (x, half)\n  y = Mul (h, a)",
    "mul_by_inverse_sqrt2": "d = Mul (isqrt2, x)\n  e = Erf (d)\n  a = Add (e, one)\n  h = Mul (half, x)\n  y = Mul (a, h)",
}
TANH_FORMS = {
    "pow_half_last": "p = Pow (x, three)\n  q = Mul (c, p)\n  s = Add (x, q)\n  u = Mul (k, s)\n  t = Tanh (u)\n"
                     "  a = Add (t, one)\n  h = Mul (half, a)\n  y = Mul (x, h)",
    "newgelu_half_first": "p = Pow (x, three)\n  q = Mul (p, c)\n  s = Add (q, x)\n  u = Mul (s, k)\n  t = Tanh (u)\n"
                          "  a = Add (one, t)\n  h = Mul (half, x)\n  y = Mul (h, a)",
    "cube_as_products": "x2 = Mul (x, x)\n  p = Mul (x2, x)\n  q = Mul (c, p)\n  s = Add (x, q)\n  u = Mul (k, s)\n"
                        "  t = Tanh (u)\n  a = Add (t, one)\n  h = Mul (half, x)\n  y = Mul (h, a)",
    "textbook_half_last_cube_as_products": "x2 = Mul (x, x)\n  p = Mul (x, x2)\n  q = Mul (p, c)\n  s = Add (q, x)\n"
                                           "  u = Mul (k, s)\n  t = Tanh (u)\n  a = Add (t, one)\n  h = Mul (half, a)\n"
                                           "  y = Mul (x, h)",
    "jax2tf_chain_of_muls": "q1 = Mul (c, x)\n  q2 = Mul (x, q1)\n  q = Mul (x, q2)\n  s = Add (x, q)\n  u = Mul (k, s)\n"
                            "  t = Tanh (u)\n  a = Add (one, t)\n  h = Mul (half, a)\n  y = Mul (x, h)",
    "jax_chain_left_leaning_half_first": "q1 = Mul (x, c)\n  q2 = Mul (q1, x)\n  q = Mul (q2, x)\n  s = Add (q, x)\n"
                                         "  u = Mul (s, k)\n  t = Tanh (u)\n  a = Add (t, one)\n  h = Mul (x, half)\n"
                                         "  y = Mul (h, a)",
}


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("form", sorted(ERF_FORMS))
def test_erf_gelu_is_fused(form, opset):
    result = run_pipeline(onnx.parser.parse_model(model_text(ERF_FORMS[form], opset)), ["fuse_gelu"])
    (node,) = compute_nodes(result.final)
    assert node.op_type == "Gelu"
    assert node.domain == ("" if opset >= 20 else "com.microsoft")
    (change,) = result.reports[0].changes
    assert change.kind == ChangeKind.FUSED and "Erf" in change.in_ops
    meta = {p.key: p.value for p in node.metadata_props}
    assert "Erf" in "".join(n.op_type for n in result.original.graph.node if n.name in meta[base.SOURCES_KEY].split(","))
    onnx.checker.check_model(result.final)
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("form", sorted(TANH_FORMS))
def test_tanh_gelu_is_fused(form, opset):
    result = run_pipeline(onnx.parser.parse_model(model_text(TANH_FORMS[form], opset)), ["fuse_gelu"])
    (node,) = compute_nodes(result.final)
    if opset >= 20:
        assert (node.op_type, node.domain) == ("Gelu", "")
        assert {a.name: a.s for a in node.attribute}["approximate"] == b"tanh"
    else:
        assert (node.op_type, node.domain) == ("FastGelu", "com.microsoft")
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


NO_GELU_CASES = {
    "wrong_constant": (ERF_FORMS["torchscript_order"].replace("Mul (m, half)", "Mul (m, one)"), "float", ""),
    "intermediate_is_a_graph_output": (ERF_FORMS["torchscript_order"], "float", ", float[2,8] e"),
    "double_precision": (ERF_FORMS["torchscript_order"], "double", ""),
}


@pytest.mark.parametrize("case", sorted(NO_GELU_CASES))
def test_gelu_must_not_fuse(case):
    body, dtype, outputs = NO_GELU_CASES[case]
    model = onnx.parser.parse_model(model_text(body, 17, dtype, outputs))
    result = run_pipeline(model, ["fuse_gelu"])
    assert result.reports[0].error is None and result.reports[0].changes == ()
    assert "Erf" in ops(result.final)


@pytest.mark.parametrize("name", ["bert_ts", "bert_dynamo"])
def test_gelu_fires_on_bert_samples(name):
    if name not in samples.sample_names():
        pytest.skip(f"sample_models/{name}.onnx has not been generated")
    model = samples.load_sample(name).proto
    n_erf = ops(model).count("Erf")
    assert n_erf > 0
    result = run_pipeline(model, ["fuse_gelu"])
    assert ops(result.final).count("Erf") == 0
    assert ops(result.final).count("Gelu") == n_erf
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


# --------------------------------------------------------------------------- LayerNorm

def ln_text(opset: int, *, square: str = "Pow", divide: bool = True, axes: str = "-1", bias: bool = True,
            outputs: str = "") -> str:
    if opset >= 18:
        rm = f"ax = Constant <value = int64[1] {{{axes}}}> ()\n  mean = ReduceMean (x, ax)"
        rm2 = "var = ReduceMean (sq, ax)"
    else:
        rm = f"mean = ReduceMean <axes=[{axes}]> (x)"
        rm2 = f"var = ReduceMean <axes=[{axes}]> (sq)"
    sq = "sq = Pow (d, two)" if square == "Pow" else "sq = Mul (d, d)"
    norm = "n = Div (d, sd)" if divide else "r = Reciprocal (sd)\n  n = Mul (d, r)"
    tail = "g = Mul (n, gamma)\n  y = Add (g, beta)" if bias else "y = Mul (n, gamma)"
    return f"""
<ir_version: 8, opset_import: ["" : {opset}]>
g (float[2,5,8] x) => (float[2,5,8] y{outputs}) {{
  two = Constant <value = float {{2.0}}> ()
  eps = Constant <value = float {{1e-5}}> ()
  {rm}
  d = Sub (x, mean)
  {sq}
  {rm2}
  ve = Add (var, eps)
  sd = Sqrt (ve)
  {norm}
  {tail}
}}"""


def ln_model(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    rng = np.random.default_rng(0)
    for name in ("gamma", "beta"):
        model.graph.initializer.append(onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), name))
    return model


LN_CASES = {
    "opset17_pow_div_bias": dict(opset=17),
    "opset18_mul_reciprocal_bias": dict(opset=18, square="Mul", divide=False),
    "opset18_no_bias": dict(opset=18, bias=False),
}


@pytest.mark.parametrize("case", sorted(LN_CASES))
def test_decomposed_layernorm_is_fused(case):
    kw = LN_CASES[case]
    result = run_pipeline(ln_model(ln_text(**kw)), ["fuse_layernorm"])
    (node,) = compute_nodes(result.final)
    assert node.op_type == "LayerNormalization"
    assert len(node.input) == (3 if kw.get("bias", True) else 2)
    assert any(c.kind == ChangeKind.FUSED for c in result.reports[0].changes)
    onnx.checker.check_model(result.final)
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


NO_LN_CASES = {
    "opset_without_layernormalization": dict(opset=16),
    "normalises_a_middle_axis": dict(opset=17, axes="1"),
    "mean_is_a_graph_output": dict(opset=17, outputs=", float[2,5,1] mean"),
}


@pytest.mark.parametrize("case", sorted(NO_LN_CASES))
def test_layernorm_must_not_fuse(case):
    result = run_pipeline(ln_model(ln_text(**NO_LN_CASES[case])), ["fuse_layernorm"])
    assert result.reports[0].error is None and result.reports[0].changes == ()
    assert "LayerNormalization" not in ops(result.final)
