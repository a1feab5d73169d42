"""fuse_attention: a self-attention block into ``com.microsoft.Attention``."""

from __future__ import annotations

import logging
import re

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.fuse.attention_match import (
    AttentionMatch,
    bias_mask,
    match_attention,
    match_heads_attention,
    raw_mask,
)
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import (
    Reject,
    in_graph_order,
    insert_early,
    latest,
    new_initializer,
    remove_unused,
    replace_value,
)
from fusionviz.passes.hygiene import Namer

logger = logging.getLogger(__name__)


_ATTN_NAME = re.compile(r"(.+)_attn(?:_\d+)?")


class AttentionFusion(Pass, name="fuse_attention", aliases=("attention_fusion",), category=Category.FUSE, order=300,
                      trigger_ops={"Softmax"}):
    title = "Attention → com.microsoft.Attention"
    needs_shapes = True
    explain = """\
**What:** finds self-attention written out op by op — three projections `x·W+b`, reshape to
heads, transpose, `Q·Kᵀ`, scale, optional additive mask, `Softmax`, `·V`, transpose back,
reshape — and replaces it with onnxruntime's `com.microsoft.Attention` kernel, whose Q/K/V
weights are packed into one `[hidden, 3·hidden]` matrix.

**Why faster:** about 12–15 kernels and five `[B, N, S, S]`/`[B, S, N, H]` intermediates become
one kernel: one packed GEMM for Q, K and V, then a per-head loop that keeps the score tile in
cache while it scales, masks and normalises it. The head reshapes/transposes (pure data movement)
disappear. onnxruntime's own optimizer does not recognise these blocks in PyTorch exports.

**Math:** `Attention(x) = softmax(α·(xW_q+b_q)(xW_k+b_k)ᵀ + M)(xW_v+b_v)` per head; the scale
`α` may be written as `Div(·, √d)` or `Mul(·, 1/√d)` after `Q·Kᵀ`, or split over Q and K
(`√α` each) — any scalar constant is folded into the kernel's `scale` attribute. A mask built as
`(1 − float(m[:, None, None, :]))·c` from the integer `attention_mask` becomes the raw int32
mask with `mask_filter_value = c` (the kernel computes exactly `(1 − m)·c`); a float mask of
shape `(B|1, 1|N, S, T)` is passed as `attention_bias`. Masks of other shapes are left alone.
Float32 only (the CPU kernel); tolerance 1e-3 relative (the kernel sums in a different order).

torch's exporter writes `Where(IsNaN(p), 0, p)` after every Softmax (a row whose scores are all
−inf is NaN, the guard makes it 0). The kernel gives NaN for such a row, so the guard goes into
the fusion only when no row can be all −inf (no mask, the attention_mask form, a constant finite
mask): then it never fires. With a float mask that may hold −inf the block is left alone.
"""

    uses_origin_hints = True

    def origin_tensor(self, node: ir.Node) -> str | None:
        """Each Attention (MultiHeadAttention) stands for its block's context tensor (its output
        is named ``<context>_attn``); the shared mask Cast and rule 7's query Transpose + Reshape
        are new layout work, holding none of the original nodes. Blocks that share one mask
        computation are thus credited per block instead of as one change."""
        out = node.outputs[0].name if node.outputs else ""
        m = _ATTN_NAME.fullmatch(out or "")
        return m.group(1) if node.op_type in ("Attention", "MultiHeadAttention") and m else None

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        opset = onnx_opset(model)
        consumed: list[ir.Value] = []
        mask_cache: dict[object, ir.Value] = {}
        fused = 0
        for node in list(model.graph):
            if node.op_type != "Softmax" or node.domain != "" or node.graph is None:
                continue
            m = AttentionMatch()
            try:
                try:
                    m, info = match_attention(node, opset, m)
                except Reject as first:
                    # Q, K, V that are not plain projections (rotary, grouped heads): the core
                    # alone into MultiHeadAttention; when that fails too, the deeper match says why
                    m2 = AttentionMatch()
                    try:
                        m, info = match_heads_attention(node, opset, m2)
                    except Reject as second:
                        if len(m2.nodes) > len(m.nodes):
                            m = m2
                            raise second from None
                        raise first from None
                mask_input: ir.Value | None = None
                bias_input: ir.Value | None = None
                filter_value = -10000.0
                if m.mask is not None:
                    raw = raw_mask(m.mask) if "projs" in info else None
                    if raw is not None:
                        src, filter_value = raw
                        mask_input = mask_cache.get(id(src))
                        if mask_input is None:
                            cast = ir.node("Cast", [src], {"to": ir.DataType.INT32}, name="")
                            insert_early(model, cast, src)
                            cast.outputs[0].name = namer(f"{src.name}_int32")
                            mask_input = mask_cache[id(src)] = cast.outputs[0]
                    else:
                        # a (B, 1, 1, T) mask is expanded to (B, 1, T, T) for self-attention only:
                        # rule 7's query may have another length than the key
                        self_attention = "projs" in info
                        bias_input = mask_cache.get((id(m.mask), self_attention))
                        if bias_input is None:
                            bias_input = bias_mask(m.mask, model, namer, info["num_heads"], expand=self_attention)
                            if bias_input is not None:
                                mask_cache[(id(m.mask), self_attention)] = bias_input
                        if bias_input is None:
                            shp = _shape_text(m.mask.shape)
                            unknown = m.mask.shape is None or any(not isinstance(d, int) for d in m.mask.shape.dims)
                            raise Reject(f"mask of shape {shp} is neither an attention_mask nor (B,1|N,S,T)"
                                         + (" as far as shape inference can tell" if unknown else ""),
                                         m.mask.producer(),
                                         hint="fix the input shapes (--shape, or the app's Model page): shape "
                                              "inference then knows the mask's" if unknown else "")
            except Reject as why:
                logger.info("fuse_attention: Softmax %s not fused: %s", node.name, why)
                nearmiss.note(m.nodes or [node], why.at or node, str(why), rule="attention",
                              **nearmiss.fixable(why.at, why.hint, why.kind))
                continue
            stem = node.name or f"attn{fused}"
            if "projs" in info:
                projs = info["projs"]
                w = np.concatenate([p.w for p in projs], axis=1).astype(np.float32)
                b = np.concatenate(
                    [p.bias if p.bias is not None else np.zeros(p.w.shape[1], np.float32) for p in projs]
                ).astype(np.float32)
                wv = new_initializer(model, namer, f"{stem}_qkv_weight", w)
                bv = new_initializer(model, namer, f"{stem}_qkv_bias", b)
                attrs: dict = {"num_heads": info["num_heads"], "scale": float(m.scale)}
                if mask_input is not None:
                    attrs["mask_filter_value"] = float(filter_value)
                inputs: list[ir.Value | None] = [projs[0].x, wv, bv, mask_input]
                if bias_input is not None:
                    inputs += [None, bias_input]
                attn = ir.node("Attention", inputs, attrs, domain=MS_DOMAIN, name="")
                for p in projs:
                    consumed.extend(p.weight_values)
            else:
                attn = self._heads_attention(model, namer, m, info, bias_input, stem)
            out, flat = info["out"], info["flat_reshape"]
            model.graph.insert_before(latest(model, m.nodes), attn)
            if out is not None:
                attn.outputs[0].name = namer(f"{out.name}_attn")
                attn.outputs[0].shape = out.shape
                attn.outputs[0].type = out.type
                replace_value(out, attn.outputs[0], namer)
            else:  # the context's own Reshape to (B·S, hidden) now reads the (B, S, hidden) output
                attn.outputs[0].name = namer(f"{flat.inputs[0].name}_attn")
                attn.outputs[0].type = flat.inputs[0].type
                flat.replace_input_with(0, attn.outputs[0])
            for n in reversed(in_graph_order(model, m.nodes)):
                if all(not o.uses() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            ensure_ms_import(model)
            remove_unused(model, consumed)

    @staticmethod
    def _heads_attention(model: ir.Model, namer: Namer, m: AttentionMatch, info: dict,
                         bias_input: ir.Value | None, stem: str) -> ir.Node:
        """Rule 7's MultiHeadAttention: the (B, N, S, H) query to (B, S, N·H) first (inserted
        after the query's producer), key and value in their (B, N, S, H) form."""
        q = info["q"]
        tq = ir.node("Transpose", [q], {"perm": [0, 2, 1, 3]}, name="")
        to3 = new_initializer(model, namer, f"{stem}_query_3d_shape", np.array([0, 0, -1], np.int64))
        rq = ir.node("Reshape", [tq.outputs[0], to3], name="")
        insert_early(model, rq, q)
        insert_early(model, tq, q)
        ctx = info["out"].name if info["out"] is not None else info["flat_reshape"].inputs[0].name
        tq.outputs[0].name = namer(f"{ctx}_query_bsnh")
        rq.outputs[0].name = namer(f"{ctx}_query_bsd")
        key = info["k"]
        if info["key_bsnh"]:  # (B, S, N, H) -> the kernel's (B, N, S, H)
            tk = ir.node("Transpose", [key], {"perm": [0, 2, 1, 3]}, name="")
            insert_early(model, tk, key)
            tk.outputs[0].name = namer(f"{ctx}_key_bnsh")
            key = tk.outputs[0]
        elif info["key_grouped"]:  # (B, KV, G, S, H) -> (B, KV·G, S, H): the same bytes
            to4 = new_initializer(model, namer, f"{stem}_key_4d_shape",
                                  np.array([0, info["num_heads"], -1, info["head_size"]], np.int64))
            rk = ir.node("Reshape", [key, to4], name="")
            insert_early(model, rk, key)
            rk.outputs[0].name = namer(f"{ctx}_key_bnsh")
            key = rk.outputs[0]
        attrs = {"num_heads": info["num_heads"], "scale": float(m.scale)}
        inputs: list[ir.Value | None] = [rq.outputs[0], key, info["v"]]
        if bias_input is not None:
            inputs += [None, None, bias_input]
        return ir.node("MultiHeadAttention", inputs, attrs, domain=MS_DOMAIN, name="")


def _shape_text(shape: ir.Shape | None) -> str:
    """A shape for a near miss: ints, the model's own dim names, ``?`` for what shape inference
    made up or could not tell."""
    if shape is None:
        return "unknown"
    dims = [str(d) if isinstance(d, int) else (d.value if d.value and not d.value.startswith("unk__") else "?")
            for d in shape.dims]
    return f"({', '.join(dims)})"
