"""Matching a self-attention block written out op by op (attention_fusion's rules).

Kernel choice (measured, onnxruntime 1.32 CPU, BERT sample, 1 thread, interleaved):
``Attention`` with packed QKV weights 0.90-0.95x of the original under ORT_ENABLE_ALL;
``MultiHeadAttention`` fed by three separate projections 0.98x; MHA's packed-QKV input
``(B, S, N, 3, H)`` is not implemented on CPU. So attention becomes ``Attention``.

Why onnxscript's ``ort_fusions`` do not fire on PyTorch BERT exports (measured on the samples):
its MHA rules expect the key transpose as one ``Transpose(perm=[0,2,3,1])`` or an SDPA node, the
scale as a ``Mul`` by ``sqrt(scale)`` on both Q and K (dynamo SDPA) and the mask already float;
TorchScript exports scale with ``Div(scores, sqrt(d))`` after QK^T and build the mask through
``Unsqueeze/Cast/Sub/Mul``, and both exporters compute the head-reshape targets with
``Shape/Gather/Concat`` unless shapes are fixed. The rules here accept all of these:

1. ``Softmax(scale * (Q K^T) [+ mask]) V`` with Q/K/V = ``x W + b`` per head
   (:func:`match_attention`). The scale may be applied to Q, K or the scores, by Mul or Div, by
   any scalar constant; it becomes the ``scale`` attribute.
2. A mask ``(1 - float(m[:, None, None, :])) * c`` becomes the raw int32 mask ``m`` with
   ``mask_filter_value = c`` (:func:`raw_mask`); another float mask of shape (B|1, 1|N, S, T)
   is passed as ``attention_bias`` (:func:`bias_mask`); anything else is refused.
3. torch's exporter guards every Softmax with ``Where(IsNaN(p), 0, p)`` (:func:`nan_guard`):
   a row whose scores are all -inf gives NaN, which the guard turns into 0. The fused kernel
   gives NaN there (measured: onnxruntime 1.32's CPU Attention with an ``attention_bias`` row of
   -inf), so the guard goes into the fusion only when no row can be all -inf: no mask, the
   attention_mask form with its finite filter value, or a constant mask of finite values
   (:func:`_finite_mask`). Then it is a no-op. Otherwise the block stays, a near miss at the
   IsNaN.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from fusionviz.passes.facts import const_value
from fusionviz.passes.fuse.transformer_common import (
    Reject,
    float32_or_unknown,
    insert_early,
    need,
    new_initializer,
    other_uses,
    peel_scale,
    perm_of,
    produced_by,
    scalar,
    single_use,
)
from fusionviz.passes.hygiene import Namer


def _reshape_heads(node: ir.Node) -> tuple[int, int]:
    """(num_heads, head_size) from a Reshape to (B, S, N, H): constant or Concat(..., N, H)."""
    shape = const_value(node.inputs[1])
    if shape is not None:
        shape = shape.reshape(-1)
        if shape.size == 4 and shape[2] > 0 and shape[3] > 0:
            return int(shape[2]), int(shape[3])
        raise Reject(f"head reshape target {shape.tolist()} is not (B, S, N, H)")
    cat = produced_by(node.inputs[1], "Concat")
    if cat is not None:
        tail: list[int] = []
        for inp in reversed(cat.inputs):
            c = const_value(inp)
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
    raise Reject("head reshape target is not constant in its last two dims")


class Projection:
    """``x @ W (+ b)`` for one of Q, K, V."""

    def __init__(self, v: ir.Value, what: str) -> None:
        self.nodes: list[ir.Node] = []
        add = produced_by(v, "Add")
        self.bias: np.ndarray | None = None
        mm_out = v
        if add is not None:
            b0, b1 = const_value(add.inputs[0]), const_value(add.inputs[1])
            if b1 is not None and b1.ndim == 1:
                self.bias, mm_out = b1, add.inputs[0]
            elif b0 is not None and b0.ndim == 1:
                self.bias, mm_out = b0, add.inputs[1]
            else:
                raise Reject(f"{what} projection bias is not a 1-D constant")
            self.nodes.append(add)
            if not single_use(mm_out):
                raise other_uses(mm_out, f"{what} projection MatMul output", add)
        mm = need(mm_out, "MatMul", f"{what} projection")
        w = const_value(mm.inputs[1])
        if w is None or w.ndim != 2:
            raise Reject(f"{what} projection weight is not a 2-D constant")
        if w.dtype != np.float32:
            raise Reject(f"{what} projection weight is {w.dtype}, the CPU Attention kernel takes float32")
        self.nodes.append(mm)
        self.x = mm.inputs[0]
        self.w = w
        self.weight_values = [mm.inputs[1]] + ([a for a in add.inputs if const_value(a) is not None] if add else [])
        if self.bias is not None and self.bias.shape[0] != w.shape[1]:
            raise Reject(f"{what} bias length {self.bias.shape[0]} != weight columns {w.shape[1]}")


def _heads(v: ir.Value, perm: list[int], what: str) -> tuple[ir.Node, ir.Node]:
    """Transpose(perm)(Reshape(proj, (B,S,N,H))) -> (transpose, reshape)."""
    t = need(v, "Transpose", what)
    if perm_of(t) != perm:
        raise Reject(f"{what}: transpose perm {perm_of(t)} != {perm}")
    if not single_use(t.inputs[0]):
        raise other_uses(t.inputs[0], f"{what}: reshaped heads", t)
    r = need(t.inputs[0], "Reshape", what)
    if not _only_shape_uses(r.inputs[0], r):
        raise other_uses(r.inputs[0], f"{what}: projection output", r)
    return t, r


def _only_shape_uses(v: ir.Value, user: ir.Node) -> bool:
    """``v`` feeds ``user`` and otherwise only ``Shape`` nodes (dynamic reshape targets)."""
    if v.is_graph_output():
        return False
    users = [u.node for u in v.uses()]
    return users.count(user) == 1 and all(n is user or n.op_type == "Shape" for n in users)


class AttentionMatch:
    def __init__(self) -> None:
        self.nodes: list[ir.Node] = []
        self.scale = 1.0
        self.mask: ir.Value | None = None


def _match_key(kt: ir.Value, m: AttentionMatch) -> tuple[ir.Node, ir.Node, float]:
    """K^T as (B, N, H, S): one Transpose(0,2,3,1) or Transpose(0,1,3,2)∘Transpose(0,2,1,3)."""
    kt, f1, n1 = peel_scale(kt)
    m.nodes += n1
    t = need(kt, "Transpose", "key transpose")
    perm = perm_of(t)
    if perm == [0, 2, 3, 1]:
        t2, r = _heads(kt, [0, 2, 3, 1], "key heads")
        return t2, r, f1
    if perm == [0, 1, 3, 2]:
        if not single_use(t.inputs[0]):
            raise other_uses(t.inputs[0], "key heads", t)
        m.nodes.append(t)
        inner, f2, n2 = peel_scale(t.inputs[0])
        m.nodes += n2
        t2, r = _heads(inner, [0, 2, 1, 3], "key heads")
        return t2, r, f1 * f2
    raise Reject(f"key transpose perm {perm} is not a key transpose")


def match_attention(softmax: ir.Node, opset: int, m: AttentionMatch | None = None) -> tuple[AttentionMatch, dict]:
    """Match the block around ``softmax`` (rule 1); ``m`` collects the nodes matched so far,
    which a :class:`Reject` leaves there for the near-miss report."""
    m = AttentionMatch() if m is None else m
    axis = softmax.attributes.get("axis")
    axis_v = axis.value if axis is not None else (-1 if opset >= 13 else 1)
    if axis_v not in (-1, 3):
        raise Reject(f"Softmax axis {axis_v} is not the last axis")
    m.nodes.append(softmax)
    # softmax [-> Where(IsNaN(p), 0, p)] -> MatMul(probs, V) -> Transpose(0,2,1,3) -> Reshape(B,S,hidden)
    probs = softmax.outputs[0]
    guard = nan_guard(probs)
    if guard is not None:
        m.nodes += guard
        probs = guard[1].outputs[0]
    readers = [u.node for u in probs.uses()]
    mms = [n for n in readers if n.op_type == "MatMul" and n.domain == "" and n.inputs[0] is probs]
    if not single_use(probs):
        raise other_uses(probs, "attention probabilities", *mms[:1])
    ctx_mm = readers[0]
    if not mms:
        kind = "qdq" if ctx_mm.op_type in ("QuantizeLinear", "DequantizeLinear") else "form"
        raise Reject(f"Softmax is followed by {ctx_mm.op_type}, not MatMul(probs, V)", ctx_mm, kind=kind)
    m.nodes.append(ctx_mm)
    if not single_use(ctx_mm.outputs[0]):
        raise other_uses(ctx_mm.outputs[0], "context", *[u.node for u in ctx_mm.outputs[0].uses()][:1])
    ctx_t = ctx_mm.outputs[0].uses()[0].node
    if ctx_t.op_type != "Transpose" or perm_of(ctx_t) != [0, 2, 1, 3] or ctx_t.outputs[0].is_graph_output():
        raise Reject("context is not transposed back with perm (0,2,1,3)", ctx_t, kind="form")
    m.nodes.append(ctx_t)
    # TorchScript computes the output reshape target from Shape(context): such uses die with it.
    users = [u.node for u in ctx_t.outputs[0].uses()]
    reshapes = [n for n in users if n.op_type == "Reshape"]
    if len(reshapes) != 1 or any(n.op_type not in ("Reshape", "Shape") for n in users):
        if not reshapes:
            raise Reject(f"the transposed context is read by {users[0].op_type if users else 'no node'}, not "
                         "reshaped back to (B, S, hidden)", users[0] if users else ctx_t, kind="form")
        raise other_uses(ctx_t.outputs[0], "transposed context", *reshapes[:1],
                         *[n for n in users if n.op_type == "Shape"])
    ctx_r = reshapes[0]
    if ctx_r.inputs[0] is not ctx_t.outputs[0]:
        raise Reject("context is not reshaped back to (B, S, hidden)", ctx_r, kind="form")
    tgt = const_value(ctx_r.inputs[1])
    cat = produced_by(ctx_r.inputs[1], "Concat")
    rank = tgt.size if tgt is not None else (len(cat.inputs) if cat is not None else None)
    out_shape = ctx_r.outputs[0].shape
    if rank is None and out_shape is not None:
        rank = len(out_shape)
    if rank != 3:
        raise Reject("context reshape target is not 3-D (B, S, hidden)")
    m.nodes.append(ctx_r)
    # scores [+ mask]
    s = softmax.inputs[0]
    add = produced_by(s, "Add")
    if add is not None:
        a, b = add.inputs[0], add.inputs[1]
        base_a, _, _ = peel_scale(a)
        if produced_by(base_a, "MatMul") is not None and single_use(a):
            s, m.mask = a, b
        else:
            s, m.mask = b, a
        if not single_use(s):
            raise other_uses(s, "scores", add)
        m.nodes.append(add)
    s, post, n_post = peel_scale(s)
    m.nodes += n_post
    qk = need(s, "MatMul", "scores")
    m.nodes.append(qk)
    if not single_use(qk.outputs[0]):
        raise other_uses(qk.outputs[0], "QK^T", *[u.node for u in qk.outputs[0].uses()][:1])
    q, fq, nq = peel_scale(qk.inputs[0])
    m.nodes += nq
    qt, qr = _heads(q, [0, 2, 1, 3], "query heads")
    kt, kr, fk = _match_key(qk.inputs[1], m)
    vt, vr = _heads(ctx_mm.inputs[1], [0, 2, 1, 3], "value heads")
    m.nodes += [qt, qr, kt, kr, vt, vr]
    m.scale = post * fq * fk
    heads = [_reshape_heads(r) for r in (qr, kr, vr)]
    if len(set(heads)) != 1:
        raise Reject(f"Q/K/V head shapes differ: {heads}")
    n_heads, head_size = heads[0]
    projs = [Projection(r.inputs[0], w) for r, w in ((qr, "query"), (kr, "key"), (vr, "value"))]
    if not (projs[0].x is projs[1].x is projs[2].x):
        raise Reject("Q, K and V are not projected from the same input (not self-attention)")
    for p in projs:
        if p.w.shape[1] != n_heads * head_size:
            raise Reject(f"projection width {p.w.shape[1]} != heads {n_heads} x {head_size}")
        m.nodes += p.nodes
    if not float32_or_unknown(projs[0].x):
        raise Reject("attention input is not float32")
    if guard is not None and not _finite_mask(m.mask):
        raise Reject("torch's IsNaN/Where guard after Softmax makes a fully masked row's probabilities 0, and the "
                     "mask may hold -inf there, where the fused Attention kernel gives NaN",
                     guard[0], kind="other_uses",
                     hint="a mask built from finite values (such as the dtype's minimum instead of -inf) "
                          "lets the guard go: it is then a no-op")
    return m, {"projs": projs, "num_heads": n_heads, "head_size": head_size, "out": ctx_r.outputs[0]}


def nan_guard(probs: ir.Value) -> tuple[ir.Node, ir.Node] | None:
    """Rule 3: torch's ``Where(IsNaN(p), 0, p)`` after a Softmax, as (IsNaN, Where), when ``p``
    feeds exactly those two nodes."""
    if probs.is_graph_output():
        return None
    readers = [u.node for u in probs.uses()]
    isnan = next((n for n in readers if n.op_type == "IsNaN" and n.domain == ""), None)
    where = next((n for n in readers if n.op_type == "Where" and n.domain == ""), None)
    if isnan is None or where is None or len(readers) != 2 or not single_use(isnan.outputs[0]):
        return None
    if (where.inputs[0] is not isnan.outputs[0] or where.inputs[2] is not probs
            or scalar(where.inputs[1]) != 0.0):
        return None
    return isnan, where


def _finite_mask(mask: ir.Value | None) -> bool:
    """Rule 3: whether no score row can be all -inf: no mask, an attention_mask with a finite
    filter value, or a constant mask of finite values."""
    if mask is None or raw_mask(mask) is not None:
        return True
    c = const_value(mask)
    return c is not None and bool(np.all(np.isfinite(c)))


def raw_mask(mask: ir.Value) -> tuple[ir.Value, float] | None:
    """Rule 1: ``(1 - float(m[:, None, None, :])) * c`` -> (m, c), else None."""
    mul = produced_by(mask, "Mul")
    if mul is None:
        return None
    c = scalar(mul.inputs[1])
    other = mul.inputs[0]
    if c is None:
        c, other = scalar(mul.inputs[0]), mul.inputs[1]
    if c is None or not math.isfinite(c):
        return None
    sub = produced_by(other, "Sub")
    if sub is None or scalar(sub.inputs[0]) != 1.0:
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
                ax = const_value(p.inputs[1])
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


def bias_mask(mask: ir.Value, model: ir.Model, namer: Namer, n_heads: int) -> ir.Value | None:
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
        target = new_initializer(model, namer, f"{mask.name}_bias_shape",
                       np.array([dims[0], dims[1], dims[3], dims[3]], np.int64))
        exp = ir.node("Expand", [mask, target], name="")
        insert_early(model, exp, mask)
        exp.outputs[0].name = namer(f"{mask.name}_expanded")
        return exp.outputs[0]
    return mask
