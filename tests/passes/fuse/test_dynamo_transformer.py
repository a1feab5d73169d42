"""Transformer fusions on the node patterns torch's dynamo exporter writes for ``transformers`` models.

Each fixture copies, at small dims, what ``torch.onnx.export(..., dynamo=True)`` writes for one
model family (read from ``benchmarks/transformer_exports.py``'s exports): GPT-2 (packed
``c_attn`` Gemm + Split, the key transposed through 3-D with Shape/Slice/Concat targets, a
``Where(keep, 0, finfo.min)`` causal mask, the IsNaN/Where guard after Softmax, the context
reshaped to (B·S, hidden) for a Gemm), ViT (head reshape to (1, S, -1, H), constant 3-D key
targets, a constant all-keep mask), BERT (a padding mask from the int attention_mask) and
Llama / Qwen2 (rotary on Q and K, grouped K/V heads repeated, RMSNorm). The fused model is run
in onnxruntime against the original (1e-3 relative for attention).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.registry import default_passes
from fusionviz.verify import verify
from tests.passes.fuse.test_transformer import _G as _Builder

S, HID, NH = 8, 32, 4
HS = HID // NH
FMIN = float(np.finfo(np.float32).min)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


class _G(_Builder):
    """The transformer tests' graph builder, naming nodes as the dynamo exporter does (``node_*``)."""

    def i64(self, *vals: int) -> str:
        return self.const(np.array(vals, np.int64), "shape")

    def op(self, op: str, inputs, n_out: int = 1, domain: str = "", **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(oh.make_node(op, list(inputs), outs, name=self.name(f"node_{op}"), domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs, outputs, opset: int = 20) -> onnx.ModelProto:
        graph = oh.make_graph(self.nodes, "dynamo", inputs, outputs, self.inits)
        return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _key_transposed_3d(g: _G, k: str, constant: tuple[list[int], list[int]] | None = None) -> str:
    """k.transpose(-2, -1) as the dynamo exporter writes it for a 4-D key: through 3-D."""
    if constant is not None:
        t1, t2 = g.i64(*constant[0]), g.i64(*constant[1])
    else:
        shape = g.op("Shape", [k], start=0)
        last = g.op("Slice", [shape, g.i64(-1), g.i64(I64_MAX)])
        second = g.op("Slice", [shape, g.i64(-2), g.i64(-1)])
        lead = g.op("Slice", [shape, g.i64(I64_MIN), g.i64(-2)])
        t1 = g.op("Concat", [g.i64(-1), second, last], axis=0)
        t2 = g.op("Concat", [lead, last, second], axis=0)
    r = g.op("Reshape", [k, t1])
    t = g.op("Transpose", [r], perm=[0, 2, 1])
    return g.op("Reshape", [t, t2])


def _sdpa(g: _G, q: str, k: str, v: str, mask: str | None, *, key_constant=None) -> str:
    """torch's decomposition of scaled_dot_product_attention: √scale on Q and Kᵀ, the mask added,
    Softmax guarded by Where(IsNaN(p), 0, p), ·V."""
    s = g.const(np.float32(1.0 / np.sqrt(np.sqrt(HS))), "scale")
    kt = _key_transposed_3d(g, k, key_constant)
    scores = g.op("MatMul", [g.op("Mul", [q, s]), g.op("Mul", [kt, s])])
    if mask is not None:
        scores = g.op("Add", [scores, mask])
    p = g.op("Softmax", [scores], axis=-1)
    guarded = g.op("Where", [g.op("IsNaN", [p]), g.const(np.float32(0.0), "zero"), p])
    return g.op("MatMul", [guarded, v])


def _heads(g: _G, x: str, target: str) -> str:
    return g.op("Transpose", [g.op("Reshape", [x, target], allowzero=1)], perm=[0, 2, 1, 3])


def _keep_mask(g: _G, keep: str, low: float = FMIN) -> str:
    return g.op("Where", [keep, g.const(np.float32(0.0), "zero"), g.const(np.float32(low), "low")])


def gpt2_model(layers: int = 2, low: float = FMIN) -> onnx.ModelProto:
    g = _G()
    x = "x"
    mask = _keep_mask(g, "keep", low)
    flat, to3, to4 = g.i64(-1, HID), g.i64(1, -1, HID), g.i64(1, -1, NH, HS)
    for _ in range(layers):
        ln = g.op("LayerNormalization", [x, g.w(HID), g.w(HID)], axis=-1, epsilon=1e-5)
        qkv = g.op("Gemm", [g.op("Reshape", [ln, flat], allowzero=1), g.w(HID, 3 * HID), g.w(3 * HID)])
        q, k, v = g.op("Split", [g.op("Reshape", [qkv, g.i64(1, -1, 3 * HID)], allowzero=1)], n_out=3, axis=2,
                       num_outputs=3)
        ctx = _sdpa(g, _heads(g, q, to4), _heads(g, k, to4), _heads(g, v, to4), mask)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), flat])
        out = g.op("Reshape", [g.op("Gemm", [ctx, g.w(HID, HID), g.w(HID)]), to3], allowzero=1)
        x = g.op("Add", [out, x])
    y = g.op("LayerNormalization", [x, g.w(HID), g.w(HID)], axis=-1, epsilon=1e-5)
    return g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, "seq", HID]),
                    oh.make_tensor_value_info("keep", onnx.TensorProto.BOOL, [1, 1, "seq", "seq"])],
                   [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, "seq", HID])])


def _linear(g: _G, x: str, n_in: int, n_out: int, bias: bool = True) -> str:
    y = g.op("MatMul", [x, g.w(n_in, n_out)])
    return g.op("Add", [y, g.w(n_out)]) if bias else y


def vit_model(layers: int = 2) -> onnx.ModelProto:
    g = _G(1)
    x = "x"
    mask = _keep_mask(g, g.const(np.ones((1, 1, S, S), bool), "keep"))
    to4 = g.i64(1, S, -1, HS)
    for _ in range(layers):
        ln = g.op("LayerNormalization", [x, g.w(HID), g.w(HID)], axis=-1, epsilon=1e-12)
        q, k, v = (_heads(g, _linear(g, ln, HID, HID), to4) for _ in range(3))
        ctx = _sdpa(g, q, k, v, mask, key_constant=([-1, S, HS], [1, NH, HS, S]))
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.i64(1, S, -1)], allowzero=1)
        x = g.op("Add", [_linear(g, ctx, HID, HID), x])
    return g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, S, HID])],
                   [oh.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, S, HID])])


def bert_model(layers: int = 2) -> onnx.ModelProto:
    g = _G(2)
    x = "x"
    pad = g.op("Cast", ["attention_mask"], to=onnx.TensorProto.BOOL)
    keep = g.op("Expand", [g.op("Unsqueeze", [pad, g.i64(1, 2)]), g.i64(1, 1, S, S)])
    mask = _keep_mask(g, keep)
    to4 = g.i64(1, -1, NH, HS)
    for _ in range(layers):
        q, k, v = (_heads(g, _linear(g, x, HID, HID), to4) for _ in range(3))
        ctx = _sdpa(g, q, k, v, mask)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.i64(1, -1, HID)], allowzero=1)
        x = g.op("LayerNormalization", [g.op("Add", [_linear(g, ctx, HID, HID), x]), g.w(HID), g.w(HID)],
                 axis=-1, epsilon=1e-12)
    return g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, S, HID]),
                    oh.make_tensor_value_info("attention_mask", onnx.TensorProto.INT64, [1, S])],
                   [oh.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, S, HID])])


NKV = 2


def _rms(g: _G, x: str, ones: bool = False) -> str:
    """An RMSNorm; ``ones``: its scale is the ones a freshly initialised model has."""
    ms = g.op("ReduceMean", [g.op("Pow", [x, g.const(np.float32(2.0), "two")]), g.i64(-1)], keepdims=1, noop_with_empty_axes=0)
    r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.const(np.float32(1e-6), "eps")])])])
    return g.op("Mul", [g.const(np.ones(HID, np.float32), "w") if ones else g.w(HID), g.op("Mul", [x, r])])


def _rotary(g: _G, t: str, cos: str, sin: str) -> str:
    half = HS // 2
    lo = g.op("Slice", [t, g.i64(0), g.i64(half), g.i64(3), g.i64(1)])
    hi = g.op("Slice", [t, g.i64(half), g.i64(I64_MAX), g.i64(3), g.i64(1)])
    rot = g.op("Concat", [g.op("Neg", [hi]), lo], axis=-1)
    return g.op("Add", [g.op("Mul", [t, cos]), g.op("Mul", [rot, sin])])


def _repeat_kv(g: _G, t: str, seq: str) -> str:
    target = g.op("Concat", [g.i64(1, NKV, NH // NKV), seq, g.i64(HS)], axis=0)
    e = g.op("Expand", [g.op("Unsqueeze", [t, g.i64(2)]), target])
    return g.op("Reshape", [e, g.i64(1, NH, -1, HS)], allowzero=1)


def llama_model(layers: int = 2, keep_shape: tuple = (1, 1, "seq", "seq"), ones: bool = False) -> onnx.ModelProto:
    g = _G(3)
    x = "x"
    # the sequence length is dynamic, as in the export: positions, cos/sin and the K/V repeat
    # target are computed from it
    seq = g.op("Shape", ["x"], start=1, end=2)
    pos = g.op("Cast", [g.op("Range", [g.const(np.int64(0)), g.op("Squeeze", [seq]), g.const(np.int64(1))])],
               to=onnx.TensorProto.FLOAT)
    inv = g.const((1.0 / 10000 ** (np.arange(0, HS, 2) / HS)).astype(np.float32), "inv_freq")
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, g.i64(1)]), inv])
    angles = g.op("Unsqueeze", [g.op("Concat", [freqs, freqs], axis=-1), g.i64(0, 1)])
    cos, sin = g.op("Cos", [angles]), g.op("Sin", [angles])
    mask = _keep_mask(g, "keep")
    for _ in range(layers):
        h = _rms(g, x, ones)
        q = _rotary(g, _heads(g, _linear(g, h, HID, HID, bias=False), g.i64(1, -1, NH, HS)), cos, sin)
        k = _rotary(g, _heads(g, _linear(g, h, HID, NKV * HS, bias=False), g.i64(1, -1, NKV, HS)), cos, sin)
        v = _heads(g, _linear(g, h, HID, NKV * HS, bias=False), g.i64(1, -1, NKV, HS))
        ctx = _sdpa(g, q, _repeat_kv(g, k, seq), _repeat_kv(g, v, seq), mask)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.i64(1, -1, HID)], allowzero=1)
        x = g.op("Add", [x, _linear(g, ctx, HID, HID, bias=False)])
    y = _rms(g, x, ones)
    return g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, "seq", HID]),
                    oh.make_tensor_value_info("keep", onnx.TensorProto.BOOL, list(keep_shape))],
                   [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, "seq", HID])])


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((1, S, HID)).astype(np.float32)}
    names = {i.name for i in model.graph.input}
    if "keep" in names:  # causal, with one row masked out entirely: the guard's case
        keep = np.tril(np.ones((S, S), bool))
        keep[2] = False
        dims = next(i for i in model.graph.input if i.name == "keep").type.tensor_type.shape.dim
        feeds["keep"] = keep[None, None] if dims[2].dim_value != 1 else keep[None, None, -1:]
    if "attention_mask" in names:
        m = np.ones((1, S), np.int64)
        m[0, -3:] = 0
        feeds["attention_mask"] = m
    return feeds


def _optimize(model: onnx.ModelProto, passes=None):
    result = run_pipeline(model, passes or default_passes())
    for r in result.reports:
        assert r.error is None, (r.name, r.error)
    onnx.checker.check_model(result.final)
    v = verify(result.original, result.final, feeds=_feeds(model), rtol=1e-3)
    assert v.ok, v.summary()
    return result, [n.op_type for n in result.final.graph.node]


def test_gpt2_packed_attention_fuses():
    result, ops = _optimize(gpt2_model())
    assert ops.count("Attention") == 2
    assert not {"Softmax", "IsNaN", "Split"} & set(ops)
    attn = [n for n in result.final.graph.node if n.op_type == "Attention"]
    assert all(len(n.input) == 6 and n.input[5] for n in attn)  # the causal mask as attention_bias


def test_gpt2_attention_keeps_guard_when_mask_may_be_minus_inf():
    model = gpt2_model(1, low=float("-inf"))
    result, ops = _optimize(model, ["fuse_attention"])
    assert "Attention" not in ops and "MultiHeadAttention" not in ops
    (rep,) = result.reports
    assert any("-inf" in nm.reason for nm in rep.near_misses)


def test_vit_attention_fuses_with_constant_key_targets():
    result, ops = _optimize(vit_model())
    assert ops.count("Attention") == 2
    assert "Softmax" not in ops and "Where" not in ops  # the all-keep constant mask is gone
    attn = [n for n in result.final.graph.node if n.op_type == "Attention"]
    assert all(len(n.input) == 3 for n in attn)
    assert {a.i for n in attn for a in n.attribute if a.name == "num_heads"} == {NH}


def test_vit_attention_refuses_key_targets_that_regroup_rows():
    model = vit_model(1)
    # (B·N, S, H) -> (B·N·2, S/2, H) and back to (B, N, H, S/2·...): same sizes, other rows
    for init in model.graph.initializer:
        arr = onh.to_array(init)
        if arr.dtype == np.int64 and arr.tolist() == [-1, S, HS]:
            init.CopyFrom(onh.from_array(np.array([-1, S // 2, HS], np.int64), init.name))
        elif arr.dtype == np.int64 and arr.tolist() == [1, NH, HS, S]:
            init.CopyFrom(onh.from_array(np.array([2, NH, HS, S // 2], np.int64), init.name))
    result = run_pipeline(model, ["fuse_attention"])
    assert "Attention" not in [n.op_type for n in result.final.graph.node]
    assert any("3-D transpose targets" in nm.reason for nm in result.reports[0].near_misses)


def test_bert_attention_fuses_with_padding_mask():
    result, ops = _optimize(bert_model())
    assert ops.count("Attention") == 2
    assert "Softmax" not in ops


def test_llama_attention_and_rmsnorm_fuse():
    result, ops = _optimize(llama_model())
    assert ops.count("MultiHeadAttention") == 2
    assert "Softmax" not in ops and "IsNaN" not in ops
    # the residual Add + RMSNorm before the second layer and the final norm; the first
    # layer's input norm has no Add before it and stays (opset 20 has no RMSNormalization)
    assert ops.count("SkipSimplifiedLayerNormalization") == 2
    assert ops.count("ReduceMean") == 1
    mha = [n for n in result.final.graph.node if n.op_type == "MultiHeadAttention"]
    assert all(n.domain == "com.microsoft" and n.input[5] for n in mha)
    # provenance: each MultiHeadAttention stands for its block; the query made 3-D is added work
    (rep,) = [r for r in result.reports if r.name == "fuse_attention"]
    fused = [c for c in rep.changes if c.out_ops == ("MultiHeadAttention",)]
    assert len(fused) == 2 and all(c.in_ops.count("Softmax") == 1 for c in fused)
    assert sorted(c.out_ops[0] for c in rep.changes if c.kind.value == "added") == ["Reshape", "Reshape",
                                                                                     "Transpose", "Transpose"]


def test_rmsnorm_with_a_scale_of_ones_fuses_after_noop_elimination():
    # a freshly initialised model's RMSNorm scale is all ones: eliminate_noop removes that Mul
    # first, and the norm without a scale still fuses (the kernel gets a scale of ones)
    result, ops = _optimize(llama_model(ones=True))
    noop = next(r for r in result.reports if r.name == "eliminate_noop")
    assert len(noop.changes) >= 3
    assert ops.count("SkipSimplifiedLayerNormalization") == 2
    assert ops.count("ReduceMean") == 1
    scales = {n.input[2] for n in result.final.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"}
    inits = {t.name: onh.to_array(t) for t in result.final.graph.initializer}
    assert all(np.array_equal(inits[s], np.ones(HID, np.float32)) for s in scales)


def test_rmsnorm_inner_node_is_not_fused_without_its_scale():
    # with its scale still there, the norm fuses whole at the scale's Mul (no Mul by γ left behind)
    model = llama_model()
    result, ops = _optimize(model, ["fuse_skip_rmsnorm"])
    assert ops.count("SkipSimplifiedLayerNormalization") == 2
    inits = {t.name: onh.to_array(t) for t in result.final.graph.initializer}
    scales = [inits[n.input[2]] for n in result.final.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"]
    assert not any(np.array_equal(s, np.ones(HID, np.float32)) for s in scales)  # the model's own γ
    # each fused norm took both of its Muls (x·r and γ·…): 2 norms × 2 Muls fewer
    before = [n.op_type for n in model.graph.node]
    assert before.count("Mul") - ops.count("Mul") == 4


def test_rmsnorm_fuses_into_rmsnormalization_at_opset_23():
    g = _G(4)
    y = _rms(g, "x")
    model = g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, S, HID])],
                    [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, S, HID])], opset=23)
    result, ops = _optimize(model, ["fuse_rmsnorm"])
    assert ops == ["RMSNormalization"]


@pytest.mark.parametrize("opset", [20, 22])
def test_rmsnorm_pass_skips_below_opset_23(opset):
    g = _G(5)
    y = _rms(g, "x")
    model = g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, S, HID])],
                    [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, S, HID])], opset=opset)
    result = run_pipeline(model, ["fuse_rmsnorm"])
    assert "RMSNormalization" not in [n.op_type for n in result.final.graph.node]
    assert result.reports[0].status == "skipped" and "opset" in result.reports[0].note


def test_attention_changes_credit_each_block_its_own_nodes():
    """bert_dynamo's blocks share their head-reshape targets (one Shape/Concat computation): each
    Attention's change still holds its own block (its Softmax, its Q·Kᵀ and context MatMuls),
    so its provenance says which nodes it replaced."""
    from fusionviz.passes.base import ChangeKind
    from fusionviz.samples import sample_path

    model = onnx.load(str(sample_path("bert_dynamo")))
    result = run_pipeline(model, default_passes())
    (rep,) = [r for r in result.reports if r.name == "fuse_attention"]
    fused = [c for c in rep.changes if c.kind == ChangeKind.FUSED]
    assert [c.out_ops for c in fused] == [("Attention",)] * 3
    for c in fused:
        assert c.in_ops.count("Softmax") == 1
        assert c.in_ops.count("MatMul") >= 2 + 3  # Q·Kᵀ, probs·V and the three projections


def test_heads_attention_leaves_a_key_padding_shaped_mask():
    """A (B, 1, 1, T) mask would have to be expanded to (B, 1, S, T); rule 7's query may be
    shorter than the key, so MultiHeadAttention is not built with a guessed S."""
    model = llama_model(1, keep_shape=(1, 1, 1, S))
    result = run_pipeline(model, default_passes())
    assert "MultiHeadAttention" not in [n.op_type for n in result.final.graph.node]
    (rep,) = [r for r in result.reports if r.name == "fuse_attention"]
    assert any("mask of shape (1, 1, 1, 8)" in nm.reason for nm in rep.near_misses)


def test_heads_attention_takes_a_key_transposed_in_one_step():
    """TorchScript's form (T5): the key transposed (0,2,3,1) from (B, S, N, H) in one step, over
    projections that are not MatMul + Add (a dequantizing scale after each, as a dynamically
    quantized model has): MultiHeadAttention gets the key as (B, N, S, H) through one added
    Transpose."""
    g = _G(6)
    to4 = g.i64(1, -1, NH, HS)

    def proj() -> str:
        return g.op("Mul", [g.op("MatMul", ["x", g.w(HID, HID)]), g.const(np.float32(0.5), "deq")])

    q = _heads(g, proj(), to4)
    k = g.op("Transpose", [g.op("Reshape", [proj(), to4], allowzero=1)], perm=[0, 2, 3, 1])
    v = _heads(g, proj(), to4)
    p = g.op("Softmax", [g.op("MatMul", [q, k])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    y = g.op("Reshape", [ctx, g.i64(1, -1, HID)], allowzero=1)
    model = g.model([oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, S, HID])],
                    [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, S, HID])])
    result, ops = _optimize(model)
    assert ops.count("MultiHeadAttention") == 1 and "Softmax" not in ops
    mha = next(n for n in result.final.graph.node if n.op_type == "MultiHeadAttention")
    assert next(a.f for a in mha.attribute if a.name == "scale") == 1.0


def test_llama_attention_fuses_with_the_sequence_length_fixed():
    # with a fixed length (the app's Model page fixes it) constant folding merges the grouped
    # key's repeat reshape into its 3-D transpose reshape: the key is (B, KV, G, S, H)
    model = llama_model(keep_shape=(1, 1, S, S))
    for i in model.graph.input:
        for d in i.type.tensor_type.shape.dim:
            if d.dim_param == "seq":
                d.dim_value = S
    result, ops = _optimize(model)
    assert ops.count("MultiHeadAttention") == 2
    assert "Softmax" not in ops
    keys = [n.input[1] for n in result.final.graph.node if n.op_type == "MultiHeadAttention"]
    producers = {o: n for n in result.final.graph.node for o in n.output}
    assert all(producers[k].op_type == "Reshape" for k in keys)  # the grouped key made 4-D


def _fixed(model: onnx.ModelProto) -> onnx.ModelProto:
    for i in model.graph.input:
        for d in i.type.tensor_type.shape.dim:
            if d.dim_param == "seq":
                d.dim_value = S
    return model


def test_rotary_embedding_fuses_with_the_sequence_length_fixed():
    result, ops = _optimize(_fixed(llama_model(keep_shape=(1, 1, S, S))))
    # the query and the key of each of the two layers
    assert ops.count("RotaryEmbedding") == 4
    assert "Neg" not in ops and ops.count("MultiHeadAttention") == 2
    rope = [n for n in result.final.graph.node if n.op_type == "RotaryEmbedding"]
    assert all(n.domain == "com.microsoft" for n in rope)
    # one cos and one sin cache of (S, H/2), shared by the four
    assert len({n.input[2] for n in rope}) == 1 and len({n.input[3] for n in rope}) == 1
    inits = {t.name: onh.to_array(t) for t in result.final.graph.initializer}
    cos = inits[rope[0].input[2]]
    assert cos.shape == (S, HS // 2)
    inv = 1.0 / 10000 ** (np.arange(0, HS, 2) / HS)
    np.testing.assert_allclose(cos, np.cos(np.arange(S)[:, None] * inv[None, :]), atol=1e-6)
    (rep,) = [r for r in result.reports if r.name == "fuse_rotary_embedding"]
    fused = [c for c in rep.changes if c.out_ops == ("RotaryEmbedding",)]
    assert len(fused) == 4
    assert all(sorted(c.in_ops) == ["Add", "Concat", "Mul", "Mul", "Neg", "Slice", "Slice"] for c in fused)


def test_rotary_embedding_is_a_near_miss_while_cos_and_sin_are_computed():
    result, ops = _optimize(llama_model())
    assert "RotaryEmbedding" not in ops
    (rep,) = [r for r in result.reports if r.name == "fuse_rotary_embedding"]
    assert rep.status == "unchanged"
    assert rep.near_misses and all("sequence length" in m.reason and "fix the input shapes" in m.reason
                                   for m in rep.near_misses)


def test_rotary_embedding_needs_equal_halves_of_cos_and_sin():
    """``x·c + rotate_half(x)·s`` with constants whose halves differ is no rotary embedding."""
    g = _G(4)
    half = HS // 2
    rng = np.random.default_rng(3)
    cos = g.const(rng.standard_normal((1, 1, S, HS)).astype(np.float32), "cos")
    sin_half = rng.standard_normal((1, 1, S, half)).astype(np.float32)
    sin = g.const(np.concatenate([sin_half, sin_half], -1), "sin")
    y = _rotary(g, "q", cos, sin)
    model = g.model([oh.make_tensor_value_info("q", onnx.TensorProto.FLOAT, [1, NH, S, HS])],
                    [oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, NH, S, HS])])
    result = run_pipeline(model, ["fuse_rotary_embedding"])
    assert "RotaryEmbedding" not in [n.op_type for n in result.final.graph.node]
    (rep,) = result.reports
    assert any("halves of cos differ" in m.reason for m in rep.near_misses)
