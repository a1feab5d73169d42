"""Transformer fusions: attention, SkipLayerNorm, BiasGelu, FusedMatMul.

Models are built op by op in the styles different exporters write (scale before/after Q·Kᵀ,
Div or Mul, one or two key transposes, constant or Shape-computed head reshapes, masks from an
int64 attention_mask or precomputed float masks). Tolerance: 1e-4 relative for the element-wise
fusions, 1e-3 for attention (the kernel accumulates in another order).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz.passes.base import ChangeKind
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify

B, S, HID, NH = 2, 8, 32, 4
HS = HID // NH


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


class _G:
    """Tiny graph builder: nodes, initializers, unique names."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base: str = "c") -> str:
        nm = self.name(base)
        self.inits.append(onh.from_array(np.asarray(arr), nm))
        return nm

    def w(self, *shape: int, scale: float = 0.2) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op: str, inputs, n_out: int = 1, domain: str = "", **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(oh.make_node(op, list(inputs), outs, name=self.name(op), domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs


def _reshape_target(g: _G, x: str, tail: list[int], dynamic: bool) -> str:
    if not dynamic:
        return g.const(np.array([0, 0, *tail], np.int64), "shape")
    shp = g.op("Shape", [x])
    b = g.op("Unsqueeze", [g.op("Gather", [shp, g.const(np.array(0, np.int64))], axis=0), g.const(np.array([0], np.int64))])
    s = g.op("Unsqueeze", [g.op("Gather", [shp, g.const(np.array(1, np.int64))], axis=0), g.const(np.array([0], np.int64))])
    return g.op("Concat", [b, s, g.const(np.array(tail, np.int64))], axis=0)


def attention_block(g: _G, x: str, mask: str | None, *, scale_style: str = "div_after", key_style: str = "two",
                    dynamic: bool = False) -> str:
    """Self-attention written out op by op; returns the (B, S, HID) context."""
    d = math.sqrt(HS)

    def proj():
        return g.op("Add", [g.op("MatMul", [x, g.w(HID, HID)]), g.w(HID, scale=0.05)])

    def heads(v, perm):
        r = g.op("Reshape", [v, _reshape_target(g, x, [NH, HS], dynamic)])
        return g.op("Transpose", [r], perm=perm)

    q = heads(proj(), [0, 2, 1, 3])
    if key_style == "two":
        k = g.op("Transpose", [heads(proj(), [0, 2, 1, 3])], perm=[0, 1, 3, 2])
    else:
        k = heads(proj(), [0, 2, 3, 1])
    v = heads(proj(), [0, 2, 1, 3])
    if scale_style == "mul_q":
        q = g.op("Mul", [q, g.const(np.array(1 / d, np.float32))])
    elif scale_style == "sqrt_both":
        q = g.op("Mul", [q, g.const(np.array(1 / math.sqrt(d), np.float32))])
        k = g.op("Mul", [k, g.const(np.array(1 / math.sqrt(d), np.float32))])
    scores = g.op("MatMul", [q, k])
    if scale_style == "div_after":
        scores = g.op("Div", [scores, g.const(np.array(d, np.float32))])
    elif scale_style == "mul_after":
        scores = g.op("Mul", [g.const(np.array(1 / d, np.float32)), scores])
    if mask is not None:
        scores = g.op("Add", [scores, mask])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, _reshape_target(g, x, [HID], dynamic) if dynamic else g.const(np.array([0, 0, HID], np.int64))])


def int_mask(g: _G, m: str) -> str:
    """HF style: (1 - float(m[:, None, None, :])) * finfo.min."""
    u = g.op("Unsqueeze", [g.op("Unsqueeze", [m, g.const(np.array([1], np.int64))]), g.const(np.array([2], np.int64))])
    c = g.op("Cast", [u], to=onnx.TensorProto.FLOAT)
    sub = g.op("Sub", [g.const(np.array(1.0, np.float32)), c])
    return g.op("Mul", [sub, g.const(np.array(np.finfo(np.float32).min, np.float32))])


def layer(g: _G, x: str, mask: str | None, **kw) -> str:
    """One BERT encoder layer: attention, dense, Add+LN, FFN with Erf GELU, Add+LN."""
    a = attention_block(g, x, mask, **kw)
    dense = g.op("Add", [g.op("MatMul", [a, g.w(HID, HID)]), g.w(HID, scale=0.05)])
    gamma = lambda: g.const((1 + 0.1 * g.rng.standard_normal(HID)).astype(np.float32))  # noqa: E731
    beta = lambda: g.const((0.1 * g.rng.standard_normal(HID)).astype(np.float32))  # noqa: E731
    h = g.op("LayerNormalization", [g.op("Add", [dense, x]), gamma(), beta()], axis=-1, epsilon=1e-12)
    f = g.op("Add", [g.op("MatMul", [h, g.w(HID, 4 * HID)]), g.w(4 * HID, scale=0.05)])
    e = g.op("Erf", [g.op("Div", [f, g.const(np.array(math.sqrt(2), np.float32))])])
    gelu = g.op("Mul", [g.op("Mul", [f, g.op("Add", [e, g.const(np.array(1.0, np.float32))])]),
                        g.const(np.array(0.5, np.float32))])
    out = g.op("Add", [g.op("MatMul", [gelu, g.w(4 * HID, HID)]), g.w(HID, scale=0.05)])
    return g.op("LayerNormalization", [g.op("Add", [out, h]), gamma(), beta()], axis=-1, epsilon=1e-12)


def bert_model(layers: int = 2, *, mask: str = "int", dynamic: bool = False, **kw) -> onnx.ModelProto:
    """A BERT-like encoder on a float input x (B,S,HID); mask styles: int, float_b11s, float_b1ss, none."""
    g = _G()
    dims_b = "batch" if dynamic else B
    dims_s = "seq" if dynamic else S
    inputs = [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [dims_b, dims_s, HID])]
    m = None
    if mask == "int":
        inputs.append(oh.make_tensor_value_info("attention_mask", onnx.TensorProto.INT64, [dims_b, dims_s]))
        m = int_mask(g, "attention_mask")
    elif mask == "float_b11s":
        inputs.append(oh.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, [dims_b, 1, 1, dims_s]))
        m = "mask"
    elif mask == "float_b1ss":
        inputs.append(oh.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, [dims_b, 1, dims_s, dims_s]))
        m = "mask"
    h = "x"
    for _ in range(layers):
        h = layer(g, h, m, dynamic=dynamic, **kw)
    out = g.op("Identity", [h])
    graph = oh.make_graph(g.nodes, "bert", inputs,
                          [oh.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [dims_b, dims_s, HID])], g.inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _mask_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((B, S, HID)).astype(np.float32)}
    names = {i.name for i in model.graph.input}
    if "attention_mask" in names:
        m = np.ones((B, S), np.int64)
        m[1, -3:] = 0  # padding in the second sequence: the mask must really mask
        feeds["attention_mask"] = m
    if "mask" in names:
        shape = [d.dim_value or (S if j >= 2 else B) for j, d in enumerate(
            next(i for i in model.graph.input if i.name == "mask").type.tensor_type.shape.dim)]
        feeds["mask"] = np.where(rng.random(shape) < 0.2, -10000.0, 0.0).astype(np.float32)
    return feeds


def _run(model, passes, shapes=None):
    result = run_pipeline(model, passes, shapes=shapes)
    for r in result.reports:
        assert r.error is None, r.error
    return result


# --------------------------------------------------------------------------- attention


@pytest.mark.parametrize(
    "scale_style,key_style,mask",
    [
        ("div_after", "two", "int"),  # TorchScript HF BERT
        ("mul_after", "one", "int"),
        ("mul_q", "two", "float_b1ss"),  # scale on Q, precomputed float mask
        ("sqrt_both", "two", "none"),  # dynamo SDPA decomposition style
        ("div_after", "one", "float_b11s"),
    ],
    ids=["ts_div_intmask", "mul_after_onekey", "mul_q_floatmask", "sqrt_both_nomask", "float_b11s_expand"],
)
def test_attention_fuses_exporter_styles(scale_style, key_style, mask):
    model = bert_model(2, mask=mask, scale_style=scale_style, key_style=key_style)
    result = _run(model, ["fuse_attention"])
    ops = _ops(result.final)
    assert ops.count("Attention") == 2
    assert "Softmax" not in ops and "Transpose" not in ops
    (rep,) = result.reports
    # one fused Change per block (origin hints), even when blocks share one mask computation;
    # the mask preparation the Attention kernel needs (Cast / Expand) is a separate "added" change
    fused = [c for c in rep.changes if c.kind == ChangeKind.FUSED]
    assert [c.out_ops for c in fused] == [("Attention",), ("Attention",)]
    assert all(c.in_ops.count("Softmax") == 1 for c in fused)
    others = [c for c in rep.changes if c.kind != ChangeKind.FUSED]
    assert all(c.kind == ChangeKind.ADDED and c.out_ops[0] in ("Cast", "Expand") for c in others)
    if mask in ("none", "float_b1ss"):
        assert len(rep.changes) == 2
    assert any(o.domain == "com.microsoft" for o in result.final.opset_import)
    onnx.checker.check_model(result.final)
    v = verify(result.original, result.final, feeds=_mask_feeds(model), rtol=1e-3)
    assert v.ok, v.summary()


def test_attention_fuses_dynamic_head_reshapes():
    model = bert_model(1, mask="int", dynamic=True)
    result = _run(model, ["fuse_attention"])
    ops = _ops(result.final)
    assert ops.count("Attention") == 1
    assert "Shape" not in ops or ops.count("Shape") < _ops(model).count("Shape")
    feeds = _mask_feeds(model)
    v = verify(result.original, result.final, feeds=feeds, rtol=1e-3)
    assert v.ok, v.summary()


def test_attention_skips_non_constant_scale():
    model = bert_model(1, mask="none", scale_style="div_after")
    # make the Div's divisor a graph input: the scale is no longer a known constant
    div = next(n for n in model.graph.node if n.op_type == "Div" and n.input[0].startswith("matmul"))
    div.input[1] = "scale_in"
    model.graph.input.append(oh.make_tensor_value_info("scale_in", onnx.TensorProto.FLOAT, []))
    result = _run(model, ["fuse_attention"])
    assert "Attention" not in _ops(result.final)
    assert result.reports[0].changes == ()


def test_attention_skips_mask_of_unsupported_shape():
    model = bert_model(1, mask="none")
    # a (S, S) float mask broadcast over batch and heads: not a shape the kernel takes
    add_in = next(n for n in model.graph.node if n.op_type == "Softmax").input[0]
    model.graph.input.append(oh.make_tensor_value_info("m2", onnx.TensorProto.FLOAT, [S, S]))
    model.graph.node.insert(
        [i for i, n in enumerate(model.graph.node) if n.op_type == "Softmax"][0],
        oh.make_node("Add", [add_in, "m2"], ["masked"], name="mask_add"),
    )
    next(n for n in model.graph.node if n.op_type == "Softmax").input[0] = "masked"
    result = _run(model, ["fuse_attention"])
    assert "Attention" not in _ops(result.final)


def test_attention_skips_when_probabilities_are_an_output():
    model = bert_model(1, mask="none")
    sm = next(n for n in model.graph.node if n.op_type == "Softmax")
    model.graph.output.append(oh.make_tensor_value_info(sm.output[0], onnx.TensorProto.FLOAT, None))
    result = _run(model, ["fuse_attention"])
    assert "Attention" not in _ops(result.final)
    assert verify(result.original, result.final).ok


# --------------------------------------------------------------------------- skip layernorm / gelu / fused matmul


def test_skip_layernorm_fuses_residual_and_bias():
    model = bert_model(2, mask="none")
    result = _run(model, ["fuse_skip_layernorm"])
    ops = _ops(result.final)
    assert ops.count("SkipLayerNormalization") == 4 and "LayerNormalization" not in ops
    # the dense bias Add folded into the kernel's bias input
    assert all(len(n.input) == 5 for n in result.final.graph.node if n.op_type == "SkipLayerNormalization")
    v = verify(result.original, result.final, rtol=1e-4)
    assert v.ok, v.summary()


def test_skip_layernorm_keeps_sum_used_elsewhere():
    model = bert_model(1, mask="none")
    ln = next(n for n in model.graph.node if n.op_type == "LayerNormalization")
    model.graph.output.append(oh.make_tensor_value_info(ln.input[0], onnx.TensorProto.FLOAT, None))
    result = _run(model, ["fuse_skip_layernorm"])
    outs = [o.name for o in result.final.graph.output]
    assert ln.input[0] in outs  # the sum is still produced, by the kernel's 4th output
    skl = [n for n in result.final.graph.node if n.op_type == "SkipLayerNormalization"]
    assert any(len(n.output) == 4 and n.output[3] == ln.input[0] for n in skl)
    v = verify(result.original, result.final, rtol=1e-4)
    assert v.ok, v.summary()


def test_skip_layernorm_skips_constant_addend():
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (float[2,4,8] x) => (float[2,4,8] y) {
      c = Constant <value = float[8] {1,2,3,4,5,6,7,8}> ()
      g1 = Constant <value = float[8] {1,1,1,1,1,1,1,1}> ()
      s = Add(x, c)
      y = LayerNormalization <axis = -1> (s, g1)
    }"""
    model = onnx.parser.parse_model(text)
    result = _run(model, ["fuse_skip_layernorm"])
    assert "SkipLayerNormalization" not in _ops(result.final)


def test_bias_gelu_fuses_erf_form_and_onnx_gelu():
    model = bert_model(1, mask="none")
    result = _run(model, ["fuse_bias_gelu"])
    ops = _ops(result.final)
    assert ops.count("BiasGelu") == 1 and "Erf" not in ops
    v = verify(result.original, result.final, rtol=1e-4)
    assert v.ok, v.summary()
    text = """
    <ir_version: 9, opset_import: ["" : 20]>
    g (float[2,4,8] x) => (float[2,4,8] y, float[2,4,8] z) {
      b = Constant <value = float[8] {0.1,0.2,0.3,-0.4,0.5,0.6,0.7,0.8}> ()
      s = Add(x, b)
      y = Gelu(s)
      t = Add(b, x)
      z = Gelu <approximate = "tanh"> (t)
    }"""
    m2 = onnx.parser.parse_model(text)
    r2 = _run(m2, ["fuse_bias_gelu"])
    assert sorted(_ops(r2.final)) == ["BiasGelu", "Constant", "FastGelu"]
    assert verify(r2.original, r2.final, rtol=1e-4).ok


def test_bias_gelu_skips_when_sum_is_used_elsewhere():
    text = """
    <ir_version: 9, opset_import: ["" : 20]>
    g (float[2,4,8] x) => (float[2,4,8] y, float[2,4,8] s) {
      b = Constant <value = float[8] {0.1,0.2,0.3,-0.4,0.5,0.6,0.7,0.8}> ()
      s = Add(x, b)
      y = Gelu(s)
    }"""
    r = _run(onnx.parser.parse_model(text), ["fuse_bias_gelu"])
    assert "BiasGelu" not in _ops(r.final)


def test_fused_matmul_absorbs_transpose_and_scale():
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (float[2,3,5,4] a, float[2,3,6,4] b) => (float[2,3,5,6] y) {
      bt = Transpose <perm = [0,1,3,2]> (b)
      m = MatMul(a, bt)
      c = Constant <value = float {0.125}> ()
      y = Mul(m, c)
    }"""
    model = onnx.parser.parse_model(text)
    result = _run(model, ["fuse_matmul_transpose"])
    (node,) = [n for n in result.final.graph.node if n.op_type == "FusedMatMul"]
    attrs = {a.name: oh.get_attribute_value(a) for a in node.attribute}
    assert attrs["transB"] == 1 and attrs["transA"] == 0 and abs(attrs["alpha"] - 0.125) < 1e-7
    assert "Transpose" not in _ops(result.final)
    assert verify(result.original, result.final, rtol=1e-4).ok


def test_fused_matmul_skips_transpose_used_elsewhere_and_batch_permutes():
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (float[2,3,5,4] a, float[2,3,6,4] b) => (float[2,3,5,6] y, float[2,3,4,6] bt, float[3,2,5,5] z) {
      bt = Transpose <perm = [0,1,3,2]> (b)
      y = MatMul(a, bt)
      at = Transpose <perm = [1,0,2,3]> (a)
      a2 = Transpose <perm = [1,0,3,2]> (a)
      z = MatMul(at, a2)
    }"""
    result = _run(onnx.parser.parse_model(text), ["fuse_matmul_transpose"])
    assert "FusedMatMul" not in _ops(result.final)


def test_all_transformer_fusions_together_on_bert():
    model = bert_model(2, mask="int")
    names = ["fuse_attention", "fuse_skip_layernorm", "fuse_bias_gelu", "fuse_matmul_transpose"]
    result = _run(model, names)
    ops = _ops(result.final)
    assert ops.count("Attention") == 2 and ops.count("SkipLayerNormalization") == 4 and ops.count("BiasGelu") == 2
    assert len(ops) < len(_ops(model)) / 3
    v = verify(result.original, result.final, feeds=_mask_feeds(model), rtol=1e-3)
    assert v.ok, v.summary()
