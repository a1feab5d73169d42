"""Transformer fusions into onnxruntime's contrib kernels (domain ``com.microsoft``).

Each pass is written imperatively on onnx-ir (match, check, rewrite): exported attention blocks
come in many shapes (scale before or after QK^T, Div or Mul, one or two key transposes, head
reshapes with constant or ``Shape``-computed targets, masks built from an int64
``attention_mask``), which is awkward to cover with fixed patterns. Every check that fails
records a reason (``_Reject``) that ``-v`` logging shows, so a user can see why a block did not
fuse.

Why onnxscript's ``ort_fusions`` do not fire on PyTorch BERT exports (measured on the samples):
its MHA rules expect the key transpose as one ``Transpose(perm=[0,2,3,1])`` or an SDPA node, the
scale as a ``Mul`` by ``sqrt(scale)`` on both Q and K (dynamo SDPA) and the mask already float;
TorchScript exports scale with ``Div(scores, sqrt(d))`` after QK^T and build the mask through
``Unsqueeze/Cast/Sub/Mul``, and both exporters compute the head-reshape targets with
``Shape/Gather/Concat`` unless shapes are fixed. The rules here accept all of these.

Numbered rules (the code comments point back to them):

Kernel choice (measured, onnxruntime 1.32 CPU, BERT sample, 1 thread, interleaved):
``Attention`` with packed QKV weights 0.90-0.95x of the original under ORT_ENABLE_ALL;
``MultiHeadAttention`` fed by three separate projections 0.98x; MHA's packed-QKV input
``(B, S, N, 3, H)`` is not implemented on CPU. So attention becomes ``Attention``.

1. attention_fusion: ``Softmax(scale * (Q K^T) [+ mask]) V`` with Q/K/V = ``x W + b`` per head
   becomes one ``com.microsoft.Attention(x, [Wq|Wk|Wv], [bq|bk|bv], mask_index)``. The scale
   may be applied to Q, K or the scores, by Mul or Div, by any scalar constant; it becomes the
   ``scale`` attribute. A mask ``(1 - float(m[:, None, None, :])) * c`` becomes the raw int32
   mask ``m`` with ``mask_filter_value = c``; another float mask of shape (B|1, 1|N, S, T) is
   passed as ``attention_bias``; anything else is refused.
2. skip_layernorm_fusion: ``LayerNormalization(a + b [+ bias])`` on 3-D tensors becomes
   ``com.microsoft.SkipLayerNormalization``; when the sum is also used elsewhere, the kernel's
   fourth output (``input_skip_bias_sum``) provides it.
3. bias_gelu_fusion: ``Gelu(x + b)`` (ONNX Gelu, contrib Gelu or the Erf form
   ``0.5 x (1 + erf(x / sqrt 2))``) with a 1-D constant bias becomes ``BiasGelu(x, b)``; the
   tanh form becomes ``FastGelu(x, b)``.
4. fused_matmul: ``MatMul`` whose input is a Transpose of the last two axes and/or whose output
   (or an input) is scaled by a scalar constant becomes ``FusedMatMul(transA, transB, alpha)``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.hygiene import Namer

logger = logging.getLogger(__name__)

MS = "com.microsoft"


class _Reject(Exception):
    """A check failed; the message says which one."""


# --------------------------------------------------------------------------- helpers


def _const(v: ir.Value | None) -> np.ndarray | None:
    """The value's constant data (initializer or Constant node), else None."""
    if v is None:
        return None
    if v.const_value is not None:
        try:
            return v.const_value.numpy()
        except Exception:  # noqa: BLE001 - external/odd tensors are simply not constants to us
            return None
    p = v.producer()
    if p is not None and p.op_type == "Constant" and p.domain == "" and "value" in p.attributes:
        try:
            return p.attributes["value"].value.numpy()
        except Exception:  # noqa: BLE001
            return None
    return None


def _scalar(v: ir.Value | None) -> float | None:
    c = _const(v)
    if c is None or c.size != 1 or not np.issubdtype(c.dtype, np.number):
        return None
    return float(c.reshape(()))


def _prod(v: ir.Value | None, op: str, domain: str = "") -> ir.Node | None:
    if v is None:
        return None
    p = v.producer()
    if p is not None and p.op_type == op and p.domain == domain:
        return p
    return None


def _need(v: ir.Value | None, op: str, what: str) -> ir.Node:
    p = _prod(v, op)
    if p is None:
        got = v.producer().op_type if v is not None and v.producer() is not None else "no node"
        raise _Reject(f"{what}: expected {op}, found {got}")
    return p


def _single_use(v: ir.Value) -> bool:
    return len(v.uses()) == 1 and not v.is_graph_output()


def _perm(node: ir.Node) -> list[int] | None:
    a = node.attributes.get("perm")
    return list(a.value) if a is not None else None


def _opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", 1))


def _ensure_ms(model: ir.Model) -> None:
    if MS not in model.opset_imports:
        model.opset_imports[MS] = 1
    if model.graph.opset_imports.get(MS) is None:
        model.graph.opset_imports[MS] = 1


def _init(model: ir.Model, namer: Namer, name: str, array: np.ndarray) -> ir.Value:
    """Register a new initializer with a name no graph of the model uses."""
    name = namer(name)
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape = ir.Shape(list(array.shape))
    value.type = ir.TensorType(ir.DataType.from_numpy(array.dtype))
    model.graph.register_initializer(value)
    return value


def _cleanup(model: ir.Model, consumed: Sequence[ir.Value] = ()) -> None:
    """Drop nodes left without consumers and initializers this pass made unused."""
    RemoveUnusedNodesPass()(model)
    for v in consumed:
        if v.name in model.graph.initializers and not v.uses() and not v.is_graph_output():
            del model.graph.initializers[v.name]


def _replace(old: ir.Value, new: ir.Value, namer: Namer) -> None:
    """Rewire every use of ``old`` to ``new`` (uses inside subgraphs included); a graph output
    keeps its name."""
    was_output = old.is_graph_output()
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    if was_output:
        name = old.name
        old.name = namer(f"{name}_replaced")
        new.name = name


def _dtype_ok(v: ir.Value) -> bool:
    return v.dtype in (None, ir.DataType.FLOAT)


def _peel_scale(v: ir.Value) -> tuple[ir.Value, float, list[ir.Node]]:
    """Strip Mul/Div by scalar constants (single-use) above ``v``; return base, factor, nodes."""
    factor = 1.0
    nodes: list[ir.Node] = []
    while True:
        p = v.producer()
        if p is None or p.domain != "" or p.op_type not in ("Mul", "Div") or (nodes and not _single_use(v)):
            return v, factor, nodes
        a, b = p.inputs[0], p.inputs[1]
        if p.op_type == "Div":
            s = _scalar(b)
            if s is None or s == 0:
                return v, factor, nodes
            factor /= s
            v = a
        else:
            sa, sb = _scalar(a), _scalar(b)
            if sb is not None:
                factor *= sb
                v = a
            elif sa is not None:
                factor *= sa
                v = b
            else:
                return v, factor, nodes
        nodes.append(p)


def _reshape_heads(node: ir.Node) -> tuple[int, int]:
    """(num_heads, head_size) from a Reshape to (B, S, N, H): constant or Concat(..., N, H)."""
    shape = _const(node.inputs[1])
    if shape is not None:
        shape = shape.reshape(-1)
        if shape.size == 4 and shape[2] > 0 and shape[3] > 0:
            return int(shape[2]), int(shape[3])
        raise _Reject(f"head reshape target {shape.tolist()} is not (B, S, N, H)")
    cat = _prod(node.inputs[1], "Concat")
    if cat is not None:
        tail: list[int] = []
        for inp in reversed(cat.inputs):
            c = _const(inp)
            if c is None:
                break
            tail = [int(x) for x in c.reshape(-1)] + tail
            if len(tail) >= 2:
                break
        if len(tail) >= 2 and tail[-2] > 0 and tail[-1] > 0:
            return tail[-2], tail[-1]
    out_shape = node.outputs[0].shape
    if out_shape is not None and len(out_shape) == 4 and all(isinstance(d, int) for d in out_shape.dims[2:]):
        return int(out_shape[2]), int(out_shape[3])
    raise _Reject("head reshape target is not constant in its last two dims")


# --------------------------------------------------------------------------- 1. attention


class _Proj:
    """``x @ W (+ b)`` for one of Q, K, V."""

    def __init__(self, v: ir.Value, what: str) -> None:
        self.nodes: list[ir.Node] = []
        add = _prod(v, "Add")
        self.bias: np.ndarray | None = None
        mm_out = v
        if add is not None:
            b0, b1 = _const(add.inputs[0]), _const(add.inputs[1])
            if b1 is not None and b1.ndim == 1:
                self.bias, mm_out = b1, add.inputs[0]
            elif b0 is not None and b0.ndim == 1:
                self.bias, mm_out = b0, add.inputs[1]
            else:
                raise _Reject(f"{what} projection bias is not a 1-D constant")
            self.nodes.append(add)
            if not _single_use(mm_out):
                raise _Reject(f"{what} projection MatMul output has other uses")
        mm = _need(mm_out, "MatMul", f"{what} projection")
        w = _const(mm.inputs[1])
        if w is None or w.ndim != 2:
            raise _Reject(f"{what} projection weight is not a 2-D constant")
        if w.dtype != np.float32:
            raise _Reject(f"{what} projection weight is {w.dtype}, the CPU Attention kernel takes float32")
        self.nodes.append(mm)
        self.x = mm.inputs[0]
        self.w = w
        self.weight_values = [mm.inputs[1]] + ([a for a in add.inputs if _const(a) is not None] if add else [])
        if self.bias is not None and self.bias.shape[0] != w.shape[1]:
            raise _Reject(f"{what} bias length {self.bias.shape[0]} != weight columns {w.shape[1]}")


def _heads(v: ir.Value, perm: list[int], what: str) -> tuple[ir.Node, ir.Node]:
    """Transpose(perm)(Reshape(proj, (B,S,N,H))) -> (transpose, reshape)."""
    t = _need(v, "Transpose", what)
    if _perm(t) != perm:
        raise _Reject(f"{what}: transpose perm {_perm(t)} != {perm}")
    if not _single_use(t.inputs[0]):
        raise _Reject(f"{what}: reshaped heads have other uses")
    r = _need(t.inputs[0], "Reshape", what)
    if not _only_shape_uses(r.inputs[0], r):
        raise _Reject(f"{what}: projection output has other uses")
    return t, r


def _only_shape_uses(v: ir.Value, user: ir.Node) -> bool:
    """``v`` feeds ``user`` and otherwise only ``Shape`` nodes (dynamic reshape targets)."""
    if v.is_graph_output():
        return False
    users = [u.node for u in v.uses()]
    return users.count(user) == 1 and all(n is user or n.op_type == "Shape" for n in users)


class _Match:
    def __init__(self) -> None:
        self.nodes: list[ir.Node] = []
        self.scale = 1.0
        self.mask: ir.Value | None = None


def _match_key(kt: ir.Value, m: _Match) -> tuple[ir.Node, ir.Node, float]:
    """K^T as (B, N, H, S): one Transpose(0,2,3,1) or Transpose(0,1,3,2)∘Transpose(0,2,1,3)."""
    kt, f1, n1 = _peel_scale(kt)
    m.nodes += n1
    t = _need(kt, "Transpose", "key transpose")
    perm = _perm(t)
    if perm == [0, 2, 3, 1]:
        t2, r = _heads(kt, [0, 2, 3, 1], "key heads")
        return t2, r, f1
    if perm == [0, 1, 3, 2]:
        if not _single_use(t.inputs[0]):
            raise _Reject("key heads have other uses")
        m.nodes.append(t)
        inner, f2, n2 = _peel_scale(t.inputs[0])
        m.nodes += n2
        t2, r = _heads(inner, [0, 2, 1, 3], "key heads")
        return t2, r, f1 * f2
    raise _Reject(f"key transpose perm {perm} is not a key transpose")


def _match_attention(softmax: ir.Node, opset: int) -> tuple[_Match, dict]:
    m = _Match()
    axis = softmax.attributes.get("axis")
    axis_v = axis.value if axis is not None else (-1 if opset >= 13 else 1)
    if axis_v not in (-1, 3):
        raise _Reject(f"Softmax axis {axis_v} is not the last axis")
    m.nodes.append(softmax)
    # softmax -> MatMul(probs, V) -> Transpose(0,2,1,3) -> Reshape(B,S,hidden)
    probs = softmax.outputs[0]
    if not _single_use(probs):
        raise _Reject("attention probabilities have other uses")
    ctx_mm = probs.uses()[0].node
    if ctx_mm.op_type != "MatMul" or ctx_mm.domain != "" or ctx_mm.inputs[0] is not probs:
        raise _Reject("Softmax is not followed by MatMul(probs, V)")
    if not _single_use(ctx_mm.outputs[0]):
        raise _Reject("context has other uses")
    ctx_t = ctx_mm.outputs[0].uses()[0].node
    if ctx_t.op_type != "Transpose" or _perm(ctx_t) != [0, 2, 1, 3] or ctx_t.outputs[0].is_graph_output():
        raise _Reject("context is not transposed back with perm (0,2,1,3)")
    # TorchScript computes the output reshape target from Shape(context): such uses die with it.
    users = [u.node for u in ctx_t.outputs[0].uses()]
    reshapes = [n for n in users if n.op_type == "Reshape"]
    if len(reshapes) != 1 or any(n.op_type not in ("Reshape", "Shape") for n in users):
        raise _Reject("transposed context has uses other than its reshape")
    ctx_r = reshapes[0]
    if ctx_r.inputs[0] is not ctx_t.outputs[0]:
        raise _Reject("context is not reshaped back to (B, S, hidden)")
    tgt = _const(ctx_r.inputs[1])
    cat = _prod(ctx_r.inputs[1], "Concat")
    rank = tgt.size if tgt is not None else (len(cat.inputs) if cat is not None else None)
    out_shape = ctx_r.outputs[0].shape
    if rank is None and out_shape is not None:
        rank = len(out_shape)
    if rank != 3:
        raise _Reject("context reshape target is not 3-D (B, S, hidden)")
    m.nodes += [ctx_mm, ctx_t, ctx_r]
    # scores [+ mask]
    s = softmax.inputs[0]
    add = _prod(s, "Add")
    if add is not None:
        a, b = add.inputs[0], add.inputs[1]
        base_a, _, _ = _peel_scale(a)
        if _prod(base_a, "MatMul") is not None and _single_use(a):
            s, m.mask = a, b
        else:
            s, m.mask = b, a
        if not _single_use(s):
            raise _Reject("scores have other uses")
        m.nodes.append(add)
    s, post, n_post = _peel_scale(s)
    m.nodes += n_post
    qk = _need(s, "MatMul", "scores")
    m.nodes.append(qk)
    if not _single_use(qk.outputs[0]):
        raise _Reject("QK^T has other uses")
    q, fq, nq = _peel_scale(qk.inputs[0])
    m.nodes += nq
    qt, qr = _heads(q, [0, 2, 1, 3], "query heads")
    kt, kr, fk = _match_key(qk.inputs[1], m)
    vt, vr = _heads(ctx_mm.inputs[1], [0, 2, 1, 3], "value heads")
    m.nodes += [qt, qr, kt, kr, vt, vr]
    m.scale = post * fq * fk
    heads = [_reshape_heads(r) for r in (qr, kr, vr)]
    if len(set(heads)) != 1:
        raise _Reject(f"Q/K/V head shapes differ: {heads}")
    n_heads, head_size = heads[0]
    projs = [_Proj(r.inputs[0], w) for r, w in ((qr, "query"), (kr, "key"), (vr, "value"))]
    if not (projs[0].x is projs[1].x is projs[2].x):
        raise _Reject("Q, K and V are not projected from the same input (not self-attention)")
    for p in projs:
        if p.w.shape[1] != n_heads * head_size:
            raise _Reject(f"projection width {p.w.shape[1]} != heads {n_heads} x {head_size}")
        m.nodes += p.nodes
    if not _dtype_ok(projs[0].x):
        raise _Reject("attention input is not float32")
    return m, {"projs": projs, "num_heads": n_heads, "head_size": head_size, "out": ctx_r.outputs[0]}


def _raw_mask(mask: ir.Value) -> tuple[ir.Value, float] | None:
    """Rule 1: ``(1 - float(m[:, None, None, :])) * c`` -> (m, c), else None."""
    mul = _prod(mask, "Mul")
    if mul is None:
        return None
    c = _scalar(mul.inputs[1])
    other = mul.inputs[0]
    if c is None:
        c, other = _scalar(mul.inputs[0]), mul.inputs[1]
    if c is None or not math.isfinite(c):
        return None
    sub = _prod(other, "Sub")
    if sub is None or _scalar(sub.inputs[0]) != 1.0:
        return None
    v = sub.inputs[1]
    cast_seen = False
    unsq_axes: list[int] = []
    while True:
        p = v.producer()
        if p is None or p.domain != "":
            break
        if p.op_type == "Cast" and not cast_seen:
            cast_seen = True
            v = p.inputs[0]
        elif p.op_type == "Unsqueeze":
            if len(p.inputs) > 1:
                ax = _const(p.inputs[1])
                if ax is None:
                    return None
                axes = [int(a) for a in ax.reshape(-1)]
            else:
                axes = list(p.attributes["axes"].value) if "axes" in p.attributes else []
            unsq_axes = axes + unsq_axes
            v = p.inputs[0]
        else:
            break
    if not cast_seen or sorted(unsq_axes) != [1, 2]:
        return None
    if v.shape is not None and len(v.shape) != 2:
        return None
    if v.dtype is not None and v.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE):
        # a float 0/1 mask also works, but only when it really holds 0/1: we cannot know; refuse.
        return None
    return v, c


def _bias_mask(mask: ir.Value, model: ir.Model, namer: Namer, n_heads: int) -> ir.Value | None:
    """A float mask of shape (B|1, 1|N, S|1, T) as Attention's attention_bias (expanded if needed)."""
    if mask.dtype not in (None, ir.DataType.FLOAT) or mask.shape is None or len(mask.shape) != 4:
        return None
    dims = list(mask.shape.dims)
    if dims[1] not in (1, n_heads):
        return None
    if dims[2] == 1:
        # (B, 1, 1, T): Attention wants (B, 1, S, T); S == T for self-attention.
        if not all(isinstance(d, int) for d in dims):
            return None
        target = _init(model, namer, f"{mask.name}_bias_shape",
                       np.array([dims[0], dims[1], dims[3], dims[3]], np.int64))
        exp = ir.node("Expand", [mask, target], name="")
        _insert_early(model, exp, mask)
        exp.outputs[0].name = namer(f"{mask.name}_expanded")
        return exp.outputs[0]
    return mask


#: an Attention output's name: ``<context>_attn``, or ``<context>_attn_<n>`` when that was taken
_ATTN_NAME = re.compile(r"(.+)_attn(?:_\d+)?")


class AttentionFusion(Pass):
    name = "attention_fusion"
    title = "Attention → com.microsoft.Attention"
    category = Category.FUSE
    order = 300
    trigger_ops = frozenset({"Softmax"})
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
"""

    uses_origin_hints = True

    def origin_tensor(self, node: ir.Node) -> str | None:
        """Each Attention stands for its block's context tensor (its output is named
        ``<context>_attn``); the shared mask Cast is new. Blocks that share one mask computation
        are thus credited per block instead of as one change."""
        out = node.outputs[0].name if node.outputs else ""
        m = _ATTN_NAME.fullmatch(out or "")
        return m.group(1) if node.op_type == "Attention" and m else None

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        opset = _opset(model)
        consumed: list[ir.Value] = []
        mask_cache: dict[int, ir.Value] = {}
        fused = 0
        for node in list(model.graph):
            if node.op_type != "Softmax" or node.domain != "" or node.graph is None:
                continue
            try:
                m, info = _match_attention(node, opset)
                mask_input: ir.Value | None = None
                bias_input: ir.Value | None = None
                filter_value = -10000.0
                if m.mask is not None:
                    raw = _raw_mask(m.mask)
                    if raw is not None:
                        src, filter_value = raw
                        mask_input = mask_cache.get(id(src))
                        if mask_input is None:
                            cast = ir.node("Cast", [src], {"to": ir.DataType.INT32}, name="")
                            _insert_early(model, cast, src)
                            cast.outputs[0].name = namer(f"{src.name}_int32")
                            mask_input = mask_cache[id(src)] = cast.outputs[0]
                    else:
                        bias_input = mask_cache.get(id(m.mask))
                        if bias_input is None:
                            bias_input = _bias_mask(m.mask, model, namer, info["num_heads"])
                            if bias_input is not None:
                                mask_cache[id(m.mask)] = bias_input
                        if bias_input is None:
                            shp = list(m.mask.shape.dims) if m.mask.shape is not None else "unknown"
                            raise _Reject(f"mask of shape {shp} is neither an attention_mask nor (B,1|N,S,T)")
            except _Reject as why:
                logger.info("attention_fusion: Softmax %s not fused: %s", node.name, why)
                continue
            projs = info["projs"]
            w = np.concatenate([p.w for p in projs], axis=1).astype(np.float32)
            b = np.concatenate(
                [p.bias if p.bias is not None else np.zeros(p.w.shape[1], np.float32) for p in projs]
            ).astype(np.float32)
            stem = node.name or f"attn{fused}"
            wv = _init(model, namer, f"{stem}_qkv_weight", w)
            bv = _init(model, namer, f"{stem}_qkv_bias", b)
            attrs: dict = {"num_heads": info["num_heads"], "scale": float(m.scale)}
            if mask_input is not None:
                attrs["mask_filter_value"] = float(filter_value)
            inputs: list[ir.Value | None] = [projs[0].x, wv, bv, mask_input]
            if bias_input is not None:
                inputs += [None, bias_input]
            attn = ir.node("Attention", inputs, attrs, domain=MS, name="")
            out = info["out"]
            model.graph.insert_before(_latest(model, m.nodes), attn)
            attn.outputs[0].name = namer(f"{out.name}_attn")
            attn.outputs[0].shape = out.shape
            attn.outputs[0].type = out.type
            _replace(out, attn.outputs[0], namer)
            for p in projs:
                consumed.extend(p.weight_values)
            for n in reversed(_topo(model, m.nodes)):
                if all(not o.uses() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            _ensure_ms(model)
            _cleanup(model, consumed)


def _topo(model: ir.Model, nodes: Sequence[ir.Node]) -> list[ir.Node]:
    order = {id(n): i for i, n in enumerate(model.graph)}
    return sorted(set(nodes), key=lambda n: order.get(id(n), -1))


def _latest(model: ir.Model, nodes: Sequence[ir.Node]) -> ir.Node:
    """The matched node that comes last: inserting the fused node before it keeps inputs defined."""
    return _topo(model, nodes)[-1]


def _insert_early(model: ir.Model, new: ir.Node, src: ir.Value) -> None:
    p = src.producer()
    if p is not None and p.graph is model.graph:
        model.graph.insert_after(p, new)
    else:
        nodes = list(model.graph)
        if nodes:
            model.graph.insert_before(nodes[0], new)
        else:
            model.graph.append(new)


# --------------------------------------------------------------------------- 2. skip layernorm


def _is_3d_same(a: ir.Value, b: ir.Value) -> str | None:
    """None when SkipLayerNormalization accepts (a, b) as (input, skip); else the reason."""
    sa, sb = a.shape, b.shape
    if sa is None or sb is None:
        return "operand shapes unknown"
    if len(sa) != 3:
        return f"input rank {len(sa)} is not 3"
    if len(sb) == 3 and list(sa.dims) == list(sb.dims):
        return None
    if len(sb) == 3 and sa.dims[2] == sb.dims[2] and all(
        not isinstance(x, int) and not isinstance(y, int) for x, y in zip(sa.dims[:2], sb.dims[:2], strict=True)
    ):
        # Symbolic (B, S) on both sides that shape inference could not unify; the kernel checks
        # the shapes at run time and fails loudly (never silently) if they differ.
        return None
    if len(sb) == 3 and sb.dims[0] == 1 and list(sb.dims[1:]) == list(sa.dims[1:]):
        return None
    if len(sb) == 2 and list(sb.dims) == list(sa.dims[1:]):
        return None
    return f"shapes {list(sa.dims)} and {list(sb.dims)} are not (B,S,H) + (B|1,S,H)"


class SkipLayerNormFusion(Pass):
    name = "skip_layernorm_fusion"
    title = "Add + LayerNormalization → SkipLayerNormalization"
    category = Category.FUSE
    order = 310
    trigger_ops = frozenset({"LayerNormalization"})
    needs_shapes = True
    explain = """\
**What:** `LayerNormalization(a + b [+ bias])` — the residual connection of every transformer
block — becomes `com.microsoft.SkipLayerNormalization(a, b, γ, β, bias)`. When the sum itself is
still needed (the next residual branch), the kernel's fourth output `input_skip_bias_sum`
provides it, so nothing is computed twice.

**Why faster:** the sum is computed, reduced (mean, variance) and normalised in one pass over
each row while it sits in cache, instead of writing `a + b` to memory and reading it back;
one kernel instead of two or three.

**Math:** `s = a + b + bias`; `y = (s − mean(s)) / √(var(s) + ε) · γ + β` over the last axis.
Requires 3-D `(B, S, H)` operands (skip may be `(1, S, H)` or `(S, H)`) and normalisation over
the last axis only.

**Measured caveat:** with onnxruntime 1.32 on an AVX-512 CPU, 1 thread, the BERT sample
(hidden 128, seq 128) ran ~15% *slower* with this kernel than with `LayerNormalization` + `Add`
(its CPU kernel is slower per row at small hidden sizes). onnxruntime's own level "all" makes
the same fusion once shapes are static; `tune` finds this and drops the pass and/or switches off
onnxruntime's `SkipLayerNormFusion`. Fewer nodes is not always faster: measure.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for ln in list(model.graph):
            if ln.op_type != "LayerNormalization" or ln.domain != "" or ln.graph is None:
                continue
            axis = ln.attributes.get("axis")
            if axis is not None and axis.value not in (-1, 2):
                continue
            if any(o.uses() or o.is_graph_output() for o in ln.outputs[1:]):
                continue
            add = _prod(ln.inputs[0], "Add")
            if add is None:
                continue
            gamma = ln.inputs[1]
            beta = ln.inputs[2] if len(ln.inputs) > 2 else None
            why = _skln_params(ln.inputs[0], gamma, beta)
            if why is not None:
                logger.info("skip_layernorm_fusion: %s not fused: %s", ln.name, why)
                continue
            if not _dtype_ok(ln.inputs[0]):
                continue
            a, b = add.inputs[0], add.inputs[1]
            if _const(a) is not None or _const(b) is not None:
                continue  # x + constant is a bias add, not a skip connection
            why = _is_3d_same(a, b)
            if why is not None:
                a, b = b, a
                if _is_3d_same(a, b) is not None:
                    logger.info("skip_layernorm_fusion: %s not fused: %s", ln.name, why)
                    continue
            # Fold a 1-D bias add feeding the input: a = a0 + bias.
            bias = None
            removed = [ln, add]
            for first, second in ((a, b), (b, a)):
                badd = _prod(first, "Add")
                if badd is None or not _single_use(first):
                    continue
                for i in (0, 1):
                    c = _const(badd.inputs[1 - i])
                    if (c is not None and c.ndim == 1 and c.shape[0] == _hidden(gamma)
                            and _is_3d_same(badd.inputs[i], second) is None):
                        bias = badd.inputs[1 - i]
                        a, b = badd.inputs[i], second
                        removed.append(badd)
                        break
                if bias is not None:
                    break
            sum_used = [u for u in add.outputs[0].uses() if u.node is not ln] or add.outputs[0].is_graph_output()
            eps = ln.attributes.get("epsilon")
            inputs = [a, b, gamma, beta if beta is not None else None, bias]
            while inputs and inputs[-1] is None:
                inputs.pop()
            skln = ir.node(
                "SkipLayerNormalization",
                inputs,
                {"epsilon": float(eps.value) if eps is not None else 1e-5},
                domain=MS,
                num_outputs=4 if sum_used else 1,
                name="",
            )
            model.graph.insert_before(ln, skln)
            y = ln.outputs[0]
            skln.outputs[0].name = namer(f"{y.name}_skln")
            skln.outputs[0].shape, skln.outputs[0].type = y.shape, y.type
            _replace(y, skln.outputs[0], namer)
            if sum_used:
                s = add.outputs[0]
                skln.outputs[3].name = namer(f"{s.name}_sum")
                skln.outputs[3].shape, skln.outputs[3].type = s.shape, s.type
                for o in skln.outputs[1:3]:
                    o.name = ""  # mean and inv_std_var are not requested: ONNX's empty name
                _replace(s, skln.outputs[3], namer)
            for n in removed:
                if all(not o.uses() and not o.is_graph_output() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            _ensure_ms(model)


def _hidden(gamma: ir.Value) -> int | None:
    """The normalised size: the length of LayerNormalization's 1-D scale."""
    c = _const(gamma)
    return int(c.shape[0]) if c is not None and c.ndim == 1 else None


def _skln_params(x: ir.Value, gamma: ir.Value, beta: ir.Value | None) -> str | None:
    """Why SkipLayerNormalization cannot take this LayerNormalization's γ/β, or None.

    The kernel wants both as constant 1-D vectors of the hidden size (LayerNormalization also
    accepts other broadcastable shapes).
    """
    hidden = _hidden(gamma)
    if hidden is None:
        return "the scale is not a constant 1-D vector"
    if beta is not None:
        b = _const(beta)
        if b is None or b.shape != (hidden,):
            return "the bias is not a constant vector of the scale's length"
    if x.shape is not None and len(x.shape) >= 1 and isinstance(x.shape[-1], int) and x.shape[-1] != hidden:
        return f"the scale has {hidden} values for a last dim of {x.shape[-1]}"
    return None


# --------------------------------------------------------------------------- 3. bias gelu


def _bias_add(v: ir.Value) -> tuple[ir.Value, ir.Value, ir.Node] | None:
    """v = x + b with b a 1-D constant matching x's last dim -> (x, b, add)."""
    add = _prod(v, "Add")
    if add is None:
        return None
    for i in (0, 1):
        c = _const(add.inputs[1 - i])
        x = add.inputs[i]
        if c is None or c.ndim != 1 or _const(x) is not None:
            continue
        if x.shape is not None and len(x.shape) >= 1 and isinstance(x.shape[-1], int) and x.shape[-1] != c.shape[0]:
            continue
        if x.shape is None or len(x.shape) < 1 or not isinstance(x.shape[-1], int):
            continue  # the bias length must be checked against x
        return x, add.inputs[1 - i], add
    return None


def _erf_gelu(erf: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Value] | None:
    """0.5·x·(1 + erf(x/√2)) around ``erf`` -> (x, nodes, y); the three factors in any order."""
    x, f, scale_nodes = _peel_scale(erf.inputs[0])
    if len(scale_nodes) != 1 or abs(f - 1 / math.sqrt(2)) > 1e-4:
        return None
    if not _single_use(erf.outputs[0]):
        return None
    add1 = erf.outputs[0].uses()[0].node
    if add1.op_type != "Add" or 1.0 not in (_scalar(add1.inputs[0]), _scalar(add1.inputs[1])):
        return None
    nodes = [*scale_nodes, erf, add1]
    v = add1.outputs[0]
    half = has_x = False
    for _ in range(2):  # (1+erf) is multiplied by x and by 0.5, or by (0.5·x)
        if not _single_use(v):
            return None
        mul = v.uses()[0].node
        if mul.op_type != "Mul" or mul.domain != "":
            return None
        other = mul.inputs[0] if mul.inputs[1] is v else mul.inputs[1]
        nodes.append(mul)
        v = mul.outputs[0]
        if other is x and not has_x:
            has_x = True
        elif _scalar(other) is not None and abs(_scalar(other) - 0.5) < 1e-7 and not half:
            half = True
        else:
            base, f2, n2 = _peel_scale(other)
            if base is not x or has_x or half or len(n2) != 1 or abs(f2 - 0.5) > 1e-7:
                return None
            if not _single_use(other):
                return None
            nodes += n2
            has_x = half = True
        if has_x and half:
            return x, nodes, v
    return None


class BiasGeluFusion(Pass):
    name = "bias_gelu_fusion"
    title = "Bias + GELU → BiasGelu / FastGelu"
    category = Category.FUSE
    order = 320
    trigger_ops = frozenset({"Gelu", "FastGelu", "Erf"})
    needs_shapes = True
    explain = """\
**What:** `Gelu(x + b)` with a 1-D constant bias `b` (the feed-forward layer's first bias)
becomes `com.microsoft.BiasGelu(x, b)`; the tanh approximation becomes `FastGelu(x, b)`. The
Erf form `0.5·x·(1 + erf(x/√2))` is recognised directly, so this works whether or not the GELU
was fused first.

**Why faster:** the bias add and the activation are both element-wise; doing them in one loop
reads and writes the `(B, S, 4H)` activation once instead of twice (or six times for the
unfused Erf form).

**Math:** `BiasGelu(x, b) = g(x + b)`, `g(z) = 0.5·z·(1 + erf(z/√2))`;
`FastGelu(x, b) = 0.5·z·(1 + tanh(√(2/π)·(z + 0.044715·z³)))`.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for node in list(model.graph):
            if node.graph is None:
                continue
            kind = None
            inp = y = None
            nodes: list[ir.Node] = []
            if node.op_type == "Gelu" and node.domain in ("", MS):
                approx = node.attributes.get("approximate")
                kind = "FastGelu" if approx is not None and approx.value == "tanh" else "BiasGelu"
                inp, y, nodes = node.inputs[0], node.outputs[0], [node]
            elif node.op_type == "FastGelu" and node.domain == MS and len(node.inputs) == 1:
                kind, inp, y, nodes = "FastGelu", node.inputs[0], node.outputs[0], [node]
            elif node.op_type == "Erf" and node.domain == "":
                found = _erf_gelu(node)
                if found is None:
                    continue
                inp, nodes, y = found
                kind = "BiasGelu"
            else:
                continue
            if not _dtype_ok(inp):
                continue
            ba = _bias_add(inp)
            if ba is None or inp.is_graph_output() or len(inp.uses()) != sum(1 for n in nodes for i in n.inputs if i is inp):
                continue
            x, b, add = ba
            new = ir.node(kind, [x, b], domain=MS, name="")
            model.graph.insert_before(_latest(model, nodes), new)
            new.outputs[0].name = namer(f"{y.name}_{kind.lower()}")
            new.outputs[0].shape, new.outputs[0].type = y.shape, y.type
            _replace(y, new.outputs[0], namer)
            for n in reversed(_topo(model, [add, *nodes])):
                if all(not o.uses() and not o.is_graph_output() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            _ensure_ms(model)


# --------------------------------------------------------------------------- 4. fused matmul


def _swap_last2(node: ir.Node, rank: int | None) -> bool:
    perm = _perm(node)
    if perm is None:
        return rank == 2
    n = len(perm)
    return n >= 2 and perm[:-2] == list(range(n - 2)) and perm[-2:] == [n - 1, n - 2]


class FusedMatMulFusion(Pass):
    name = "fused_matmul"
    title = "MatMul + Transpose/scale → FusedMatMul"
    category = Category.FUSE
    order = 330
    trigger_ops = frozenset({"MatMul"})
    needs_shapes = True
    explain = """\
**What:** a `MatMul` whose operand is a `Transpose` of its last two axes, and/or whose output or
operand is multiplied or divided by a scalar constant, becomes
`com.microsoft.FusedMatMul(A, B, transA, transB, alpha)`.

**Why faster:** GEMM kernels read a transposed operand for free (they just walk it by columns),
and scale the result while writing it; a separate Transpose copies the whole matrix and a
separate Mul reads and writes the product again.

**Math:** `FusedMatMul(A, B) = α · op(A) · op(B)`, `op(X) = Xᵀ` (last two axes) when the flag
is set. Only single-use intermediates are absorbed, so nothing else sees a changed tensor.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for mm in list(model.graph):
            if mm.op_type != "MatMul" or mm.domain != "" or mm.graph is None:
                continue
            a, b = mm.inputs[0], mm.inputs[1]
            if not (_dtype_ok(a) and a.dtype is not None):
                continue
            ra = len(a.shape) if a.shape is not None else None
            rb = len(b.shape) if b.shape is not None else None
            if ra is None or rb is None or ra < 2 or rb < 2 or ra != rb:
                continue  # batch-transpose semantics need equal known ranks
            removed: list[ir.Node] = []
            alpha = 1.0
            trans = {"transA": 0, "transB": 0}
            new_in = []
            for key, v in (("transA", a), ("transB", b)):
                base, f, sn = _peel_scale(v) if _single_use(v) else (v, 1.0, [])
                if sn and not all(_single_use(n.outputs[0]) for n in sn):
                    base, f, sn = v, 1.0, []
                alpha *= f
                removed += sn
                t = _prod(base, "Transpose")
                if t is not None and _single_use(base) and _swap_last2(t, len(base.shape) if base.shape else None):
                    trans[key] = 1
                    removed.append(t)
                    base = t.inputs[0]
                new_in.append(base)
            out = mm.outputs[0]
            final = out
            if _single_use(out):
                user = out.uses()[0].node
                if user.op_type in ("Mul", "Div") and user.domain == "":
                    base, f, sn = _peel_scale(user.outputs[0])
                    if base is out and sn == [user]:
                        alpha *= f
                        removed.append(user)
                        final = user.outputs[0]
            if not removed:
                continue
            new = ir.node("FusedMatMul", new_in, {"alpha": float(alpha), **trans}, domain=MS, name="")
            model.graph.insert_before(_latest(model, [mm, *removed]), new)
            new.outputs[0].name = namer(f"{final.name}_fmm")
            new.outputs[0].shape, new.outputs[0].type = final.shape, final.type
            _replace(final, new.outputs[0], namer)
            for n in reversed(_topo(model, [mm, *removed])):
                if all(not o.uses() and not o.is_graph_output() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            _ensure_ms(model)


PASSES: list[type[Pass]] = [AttentionFusion, SkipLayerNormFusion, BiasGeluFusion, FusedMatMulFusion]
