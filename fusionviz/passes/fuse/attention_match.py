"""Matching a self-attention block written out op by op (fuse_attention's rules).

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
   IsNaN. torch's dynamo export of ``transformers``' causal and padding masks is
   ``Where(keep, 0, finfo.min)``: finite constants on both branches, so finite.
4. GPT-2's packed ``c_attn`` (:func:`packed_projections`): ``Split`` into Q, K, V of
   ``Reshape(Gemm(Reshape(x, (-1, hidden)), W, b), (B, S, 3·hidden))``; W is the packed weight.
5. The key transposed through 3-D (:func:`_swap_last_two`), as the dynamo exporter writes
   ``k.transpose(-2, -1)``: ``Reshape(Transpose(Reshape(k, T1), (0, 2, 1)), T2)`` with T1, T2
   either Shape/Slice/Concat expressions that swap k's last two dims whatever its shape, or
   constants checked against the head shape and k's inferred batch and length (a wrong pair
   could regroup rows with the same sizes).
6. A context reshaped to (-1, hidden) for a Gemm (GPT-2): that Reshape stays and reads the
   fused (B, S, hidden) output. A head reshape to (B, S, -1, H) (ViT) takes the head count
   from the projection width; a constant all-zero mask (ViT's, folded) is dropped.
7. When Q, K, V are not plain projections of one input (rotary embeddings on Q and K, K and V
   repeated over grouped heads: Llama, Qwen2) the core alone becomes ``MultiHeadAttention``
   (:func:`match_heads_attention`): the (B, N, S, H) query made (B, S, N·H), key and value in
   the kernel's 4-D form, the mask as ``attention_bias`` (a (B, 1, 1, T) mask is not expanded:
   the query may be shorter than the key). With static shapes the grouped key's repeat and its
   3-D transpose reshape fold into one, leaving a (B, KV, G, S, H) key: it goes in through a
   Reshape to (B, KV·G, S, H), the same bytes.
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
    """(num_heads, head_size) from a Reshape to (B, S, N, H): constant or Concat(..., N, H).
    ``num_heads`` is -1 for a target that leaves it to the reshape (``(1, 197, -1, 64)``, as
    torch writes ViT's); the projection width then gives it."""
    shape = const_value(node.inputs[1])
    if shape is not None:
        shape = shape.reshape(-1)
        if shape.size == 4 and shape[3] > 0 and (shape[2] > 0 or (shape[2] == -1 and -1 not in shape[:2])):
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


class SplitProjection:
    """One of Q, K, V cut from a packed projection (rule 4): its columns of the packed weight."""

    def __init__(self, x: ir.Value, w: np.ndarray, bias: np.ndarray | None, nodes: list[ir.Node],
                 weight_values: list[ir.Value]) -> None:
        self.x, self.w, self.bias, self.nodes, self.weight_values = x, w, bias, nodes, weight_values


def _split_sizes(split: ir.Node) -> list[int] | None:
    """The output sizes of a Split with constant sizes or ``num_outputs`` (None: unknown)."""
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        c = const_value(split.inputs[1])
        return None if c is None else [int(x) for x in c.reshape(-1)]
    width = split.inputs[0].shape[-1] if split.inputs[0].shape is not None else None
    n = len(split.outputs)
    if isinstance(width, int) and width % n == 0:
        return [width // n] * n
    return None


def packed_projections(values: list[ir.Value]) -> list[SplitProjection] | None:
    """Rule 4: Q, K, V as the three outputs (in that order) of
    ``Split(Reshape(Gemm(Reshape(x, (-1, hidden)), W, b), (B, S, 3·hidden)), axis=-1)`` — GPT-2's
    ``c_attn`` as torch's dynamo exporter writes it. None when the values are not a Split's."""
    split = values[0].producer()
    if split is None or split.op_type != "Split" or split.domain != "":
        return None
    if [v.producer() for v in values] != [split] * 3 or list(split.outputs) != values:
        raise Reject("Q, K and V are not the outputs 0, 1, 2 of one Split", split)
    axis = split.attributes.get("axis")
    rank = len(split.inputs[0].shape) if split.inputs[0].shape is not None else 3
    if (axis.value if axis is not None else 0) not in (-1, rank - 1):
        raise Reject("the packed projection is not split along its last axis", split)
    if any(not single_use(v) for v in values):
        raise Reject("a Split output of the packed projection is read outside the pattern", split, kind="other_uses")
    sizes = _split_sizes(split)
    if sizes is None or len(set(sizes)) != 1:
        raise Reject(f"the packed projection's split sizes {sizes} are not three equal parts", split)
    r_out = need(split.inputs[0], "Reshape", "packed projection (back to (B, S, 3·hidden))")
    gemm = need(r_out.inputs[0], "Gemm", "packed projection")
    r_in = need(gemm.inputs[0], "Reshape", "packed projection input (to (B·S, hidden))")
    for v, n in ((split.inputs[0], split), (r_out.inputs[0], r_out), (gemm.inputs[0], gemm)):
        if not single_use(v):
            raise other_uses(v, "packed projection", n)
    attrs = {k: a.value for k, a in gemm.attributes.items()}
    if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        raise Reject("the packed projection's Gemm transposes A or scales (alpha/beta)", gemm)
    w = const_value(gemm.inputs[1])
    if w is None or w.ndim != 2 or w.dtype != np.float32:
        raise Reject("the packed projection weight is not a 2-D float32 constant", gemm)
    if attrs.get("transB", 0):
        w = w.T
    bias = None
    if len(gemm.inputs) > 2 and gemm.inputs[2] is not None:
        bias = const_value(gemm.inputs[2])
        if bias is None or bias.ndim != 1 or bias.shape[0] != w.shape[1]:
            raise Reject("the packed projection bias is not a 1-D constant over its columns", gemm)
    x = r_in.inputs[0]
    hidden, width = w.shape
    xs = x.shape
    t_in, t_out = const_value(r_in.inputs[1]), const_value(r_out.inputs[1])
    if xs is None or len(xs) != 3 or xs[2] != hidden:
        raise Reject(f"the packed projection's input is not (B, S, {hidden})", r_in)
    if t_in is None or t_in.reshape(-1).tolist() != [-1, hidden]:
        raise Reject("the packed projection's input reshape is not to (-1, hidden)", r_in)
    if t_out is None or not _restores(t_out.reshape(-1).tolist(), list(xs.dims), width):
        raise Reject("the packed projection's output reshape does not restore (B, S, 3·hidden)", r_out)
    if sum(sizes) != width:
        raise Reject(f"split sizes {sizes} do not cover the packed width {width}", split)
    part = sizes[0]
    used = [gemm.inputs[1]] + ([gemm.inputs[2]] if bias is not None else [])
    nodes = [split, r_out, gemm, r_in]
    return [SplitProjection(x, w[:, i * part:(i + 1) * part],
                            None if bias is None else bias[i * part:(i + 1) * part],
                            nodes if i == 0 else [], used if i == 0 else [])
            for i in range(3)]


def _restores(target: list[int], dims: list, width: int) -> bool:
    """Whether reshaping (B·S, width) to ``target`` gives (B, S, width) for input dims ``dims``."""
    if len(target) != 3 or target[2] != width or target.count(-1) > 1:
        return False
    # a 0 would copy a dim of the 2-D (B·S, width) input, not B or S: refused with the rest
    return all(t == -1 or (isinstance(d, int) and t == d) for t, d in zip(target[:2], dims[:2], strict=True))


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
        #: rule 5's key and constant reshape targets (k, T1, T2), checked against the head shape
        self.key_targets: tuple[ir.Value, list[int], list[int]] | None = None


def _shape_slice(v: ir.Value, src: ir.Value) -> list[tuple[str, int]] | None:
    """What ``v`` holds, as ``("dim", i)`` for dim i of the 4-D ``src`` when ``v`` is
    ``Slice(Shape(src), a, b)`` (constant a, b; axes 0, step 1) and ``("const", c)`` for a
    constant. None otherwise."""
    c = const_value(v)
    if c is not None:
        return [("const", int(x)) for x in c.reshape(-1)]
    sl = produced_by(v, "Slice")
    if sl is None or len(sl.inputs) < 3:
        return None
    shape = produced_by(sl.inputs[0], "Shape")
    if shape is None or shape.inputs[0] is not src or shape.attributes.get("end") is not None:
        return None
    start_a = shape.attributes.get("start")
    if start_a is not None and start_a.value != 0:
        return None
    parts = [const_value(x) if x is not None else None for x in sl.inputs[1:]]
    if parts[0] is None or parts[1] is None or parts[0].size != 1 or parts[1].size != 1:
        return None
    if len(parts) > 2 and parts[2] is not None and parts[2].reshape(-1).tolist() not in ([0], [-1]):
        return None
    if len(parts) > 3 and parts[3] is not None and parts[3].reshape(-1).tolist() != [1]:
        return None
    a, b = int(parts[0].reshape(())), int(parts[1].reshape(()))
    return [("dim", i) for i in list(range(4))[a:b]]


def _swap_last_two(kt: ir.Value, m: AttentionMatch) -> tuple[ir.Value, tuple[list[int], list[int]] | None]:
    """Rule 5: ``Reshape(Transpose(Reshape(k, T1), (0,2,1)), T2)`` — how torch's dynamo exporter
    writes ``k.transpose(-2, -1)`` of a 4-D key — as (k, (T1, T2) when the targets are constants
    that :func:`match_attention` checks against the head shape, else None when they are the
    Shape/Slice/Concat expressions that swap k's last two dims whatever its shape)."""
    r2 = need(kt, "Reshape", "key transpose")
    tr = need(r2.inputs[0], "Transpose", "key transpose (3-D)")
    if perm_of(tr) != [0, 2, 1]:
        raise Reject(f"key transpose (3-D) perm {perm_of(tr)} is not (0, 2, 1)", tr)
    r1 = need(tr.inputs[0], "Reshape", "key transpose (to 3-D)")
    for v, n in ((r2.inputs[0], r2), (tr.inputs[0], tr)):
        if not single_use(v):
            raise other_uses(v, "key transpose", n)
    k = r1.inputs[0]
    if not _only_shape_uses(k, r1):
        raise other_uses(k, "key heads", r1)
    m.nodes += [r2, tr, r1]
    t1, t2 = const_value(r1.inputs[1]), const_value(r2.inputs[1])
    if t1 is not None and t2 is not None:
        return k, (t1.reshape(-1).tolist(), t2.reshape(-1).tolist())
    c1, c2 = produced_by(r1.inputs[1], "Concat"), produced_by(r2.inputs[1], "Concat")
    if c1 is not None and c2 is not None:
        d1 = [_shape_slice(x, k) for x in c1.inputs]
        d2 = [_shape_slice(x, k) for x in c2.inputs]
        if None not in d1 and None not in d2:
            flat1 = [d for part in d1 for d in part]
            flat2 = [d for part in d2 for d in part]
            if flat1 == [("const", -1), ("dim", 2), ("dim", 3)] and flat2 == [("dim", i) for i in (0, 1, 3, 2)]:
                return k, None
    raise Reject("the key's 3-D transpose reshapes are neither constants nor the swap of its last two dims", r1)


def _match_key(kt: ir.Value, m: AttentionMatch) -> tuple[ir.Value, str, float]:
    """K^T as (B, N, H, S) from the key: ``(k, "BNSH", f)`` for Transpose(0,1,3,2) or rule 5's
    3-D form over a (B, N, S, H) key ``k``; ``(kt, "BSNH", f)`` when ``kt`` is one
    Transpose(0,2,3,1) of a (B, S, N, H) key. ``f``: the scalar scales peeled on the way."""
    kt, f1, n1 = peel_scale(kt)
    m.nodes += n1
    if produced_by(kt, "Reshape") is not None:
        k, targets = _swap_last_two(kt, m)
        m.key_targets = None if targets is None else (k, *targets)
        inner, f2, n2 = peel_scale(k)
        m.nodes += n2
        return inner, "BNSH", f1 * f2
    t = need(kt, "Transpose", "key transpose")
    perm = perm_of(t)
    if perm == [0, 2, 3, 1]:
        return kt, "BSNH", f1
    if perm == [0, 1, 3, 2]:
        if not single_use(t.inputs[0]):
            raise other_uses(t.inputs[0], "key heads", t)
        m.nodes.append(t)
        inner, f2, n2 = peel_scale(t.inputs[0])
        m.nodes += n2
        return inner, "BNSH", f1 * f2
    raise Reject(f"key transpose perm {perm} is not a key transpose")


class Core:
    """The part every attention form shares: ``Softmax(α·Q·Kᵀ [+ mask]) [guard] · V``, its
    context transposed back and reshaped to (B, S, hidden) or (B·S, hidden)."""

    def __init__(self) -> None:
        self.guard: tuple[ir.Node, ir.Node] | None = None
        self.ctx_mm: ir.Node
        self.ctx_r: ir.Node
        self.flat: list[int] | None = None
        self.q: ir.Value
        self.k: ir.Value
        self.key_layout = "BNSH"
        self.v: ir.Value


def _match_core(softmax: ir.Node, opset: int, m: AttentionMatch) -> Core:
    c = Core()
    axis = softmax.attributes.get("axis")
    axis_v = axis.value if axis is not None else (-1 if opset >= 13 else 1)
    if axis_v not in (-1, 3):
        raise Reject(f"Softmax axis {axis_v} is not the last axis")
    m.nodes.append(softmax)
    # softmax [-> Where(IsNaN(p), 0, p)] -> MatMul(probs, V) -> Transpose(0,2,1,3) -> Reshape(B,S,hidden)
    probs = softmax.outputs[0]
    c.guard = guard = nan_guard(probs)
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
    c.ctx_mm = ctx_mm
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
    ctx_r = c.ctx_r = reshapes[0]
    if ctx_r.inputs[0] is not ctx_t.outputs[0]:
        raise Reject("context is not reshaped back to (B, S, hidden)", ctx_r, kind="form")
    tgt = const_value(ctx_r.inputs[1])
    cat = produced_by(ctx_r.inputs[1], "Concat")
    rank = tgt.size if tgt is not None else (len(cat.inputs) if cat is not None else None)
    out_shape = ctx_r.outputs[0].shape
    if rank is None and out_shape is not None:
        rank = len(out_shape)
    if rank == 2:
        # torch writes GPT-2's context straight to (B·S, hidden) for its Gemm (rule 6): the
        # Reshape stays and reads the fused (B, S, hidden) output instead
        c.flat = tgt.reshape(-1).tolist() if tgt is not None else None
        if c.flat is None or c.flat[0] != -1:
            raise Reject("context reshape target is 2-D but not (-1, hidden)", ctx_r)
    elif rank != 3:
        raise Reject("context reshape target is not 3-D (B, S, hidden)")
    else:
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
    c.q, fq, nq = peel_scale(qk.inputs[0])
    m.nodes += nq
    c.k, c.key_layout, fk = _match_key(qk.inputs[1], m)
    c.v = ctx_mm.inputs[1]
    m.scale = post * fq * fk
    return c


def _check_guard(c: Core, m: AttentionMatch, kernel: str) -> None:
    """Rule 3, then a constant all-zero mask dropped (ViT's, once folded)."""
    if c.guard is not None and not _finite_mask(m.mask):
        raise Reject("torch's IsNaN/Where guard after Softmax makes a fully masked row's probabilities 0, and the "
                     f"mask may hold -inf there, where the fused {kernel} kernel gives NaN",
                     c.guard[0], kind="other_uses",
                     hint="a mask built from finite values (such as the dtype's minimum instead of -inf) "
                          "lets the guard go: it is then a no-op")
    if m.mask is not None and _zero_mask(m.mask):
        m.mask = None


def _check_key_targets(m: AttentionMatch, n_heads: int, head_size: int) -> None:
    """Rule 5 with constant targets: (B·N | -1, S, H) and (B, N, H, S) for the key's own (B, N, S, H)."""
    if m.key_targets is None:
        return
    k, t1, t2 = m.key_targets
    ok = (len(t1) == 3 and len(t2) == 4 and t1[2] == head_size and t2[1:3] == [n_heads, head_size]
          and t2[3] == t1[1] and t2[0] > 0 and t1[0] in (-1, t2[0] * n_heads))
    dims = list(k.shape.dims) if k.shape is not None else []
    if ok and not (len(dims) == 4 and dims[0] == t2[0] and dims[2] == t1[1]) and not _grouped_key(dims, n_heads, head_size):
        ok = False  # without the key's batch and length the targets could regroup rows
    if not ok:
        raise Reject(f"the key's 3-D transpose targets {t1}, {t2} are not (B·N, S, H) and (B, N, H, S) of "
                     f"its shape {dims or 'unknown'}")


def _grouped_key(dims: list, n_heads: int, head_size: int) -> bool:
    """A static 5-D key (B, KV, G, S, H) with KV·G = N heads: grouped K/V heads repeated
    (Expand) and merged into the key's 3-D transpose reshape, as constant folding leaves
    Llama's / Qwen2's ``repeat_kv`` once the shapes are fixed. Its row-major layout is the
    (B, N, S, H) key's."""
    return (len(dims) == 5 and all(isinstance(d, int) for d in dims)
            and dims[1] * dims[2] == n_heads and dims[4] == head_size)


def match_attention(softmax: ir.Node, opset: int, m: AttentionMatch | None = None) -> tuple[AttentionMatch, dict]:
    """Match the block around ``softmax`` (rule 1); ``m`` collects the nodes matched so far,
    which a :class:`Reject` leaves there for the near-miss report."""
    m = AttentionMatch() if m is None else m
    c = _match_core(softmax, opset, m)
    qt, qr = _heads(c.q, [0, 2, 1, 3], "query heads")
    if c.key_layout == "BNSH":
        kt, kr = _heads(c.k, [0, 2, 1, 3], "key heads")
    else:
        kt, kr = _heads(c.k, [0, 2, 3, 1], "key heads")
    vt, vr = _heads(c.v, [0, 2, 1, 3], "value heads")
    m.nodes += [qt, qr, kt, kr, vt, vr]
    heads = [_reshape_heads(r) for r in (qr, kr, vr)]
    projs = packed_projections([qr.inputs[0], kr.inputs[0], vr.inputs[0]])
    if projs is None:
        projs = [Projection(r.inputs[0], w) for r, w in ((qr, "query"), (kr, "key"), (vr, "value"))]
    if not (projs[0].x is projs[1].x is projs[2].x):
        raise Reject("Q, K and V are not projected from the same input (not self-attention)")
    width = projs[0].w.shape[1]
    # a head reshape to (B, S, -1, H) leaves the head count to the projection width
    heads = [(width // h if n == -1 and width % h == 0 else n, h) for n, h in heads]
    if len(set(heads)) != 1:
        raise Reject(f"Q/K/V head shapes differ: {heads}")
    n_heads, head_size = heads[0]
    for p in projs:
        if p.w.shape[1] != n_heads * head_size:
            raise Reject(f"projection width {p.w.shape[1]} != heads {n_heads} x {head_size}")
        m.nodes += p.nodes
    _check_key_targets(m, n_heads, head_size)
    if c.flat is not None and c.flat[1] != n_heads * head_size:
        raise Reject(f"context reshape target {c.flat} is not (-1, {n_heads * head_size})", c.ctx_r)
    if not float32_or_unknown(projs[0].x):
        raise Reject("attention input is not float32")
    _check_guard(c, m, "Attention")
    return m, {"projs": projs, "num_heads": n_heads, "head_size": head_size,
               "out": c.ctx_r.outputs[0] if c.flat is None else None,
               "flat_reshape": c.ctx_r if c.flat is not None else None}


def match_heads_attention(softmax: ir.Node, opset: int, m: AttentionMatch | None = None) -> tuple[AttentionMatch, dict]:
    """Rule 7: the core alone, over Q, K, V that are any (B, N, S, H) tensors — rotary
    embeddings applied to Q and K, K and V repeated over grouped query heads (Llama, Qwen2) —
    for ``com.microsoft.MultiHeadAttention``: the query goes in as (B, S, N·H) (a Transpose and
    a Reshape are added), the key and value as they are (the kernel's BNSH key/value form)."""
    m = AttentionMatch() if m is None else m
    c = _match_core(softmax, opset, m)
    k, key_bsnh = c.k, c.key_layout == "BSNH"
    if key_bsnh:
        # Transpose(k, (0,2,3,1)) of a (B, S, N, H) key (TorchScript's T5): the key goes in as
        # Transpose(k, (0,2,1,3)), the kernel's (B, N, S, H) (rule 7)
        t = k.producer()
        if not single_use(t.outputs[0]):
            raise other_uses(t.outputs[0], "transposed key", t)
        m.nodes.append(t)
        k = t.inputs[0]
    shapes = [list(v.shape.dims) if v.shape is not None else None for v in (c.q, k, c.v)]
    grouped = (not key_bsnh and shapes[0] is not None and len(shapes[0]) == 4 and shapes[1] is not None
               and isinstance(shapes[0][1], int) and isinstance(shapes[0][3], int)
               and _grouped_key(shapes[1], shapes[0][1], shapes[0][3]))
    if grouped:  # the kernel's 4-D key: a Reshape to (B, N, S, H) is added (rule 7)
        b, kv, g, t, h = shapes[1]
        shapes[1] = [b, kv * g, t, h]
    if any(sh is None or len(sh) != 4 for sh in shapes):
        raise Reject(f"Q, K, V shapes {shapes} are not all known 4-D (B, N, S, H)")
    qs, ks, vs = shapes
    if key_bsnh:
        ks = [ks[0], ks[2], ks[1], ks[3]]
    n_heads, head_size = qs[1], qs[3]
    if not (isinstance(n_heads, int) and isinstance(head_size, int)):
        raise Reject(f"query shape {qs} does not give the head count and size")
    if ks[1] != n_heads or vs[1] != n_heads or ks[3] != head_size or vs[3] != head_size:
        raise Reject(f"Q, K, V shapes {shapes} do not share heads and head size")
    if any(not float32_or_unknown(v) for v in (c.q, c.k, c.v)):
        raise Reject("attention inputs are not float32")
    _check_key_targets(m, n_heads, head_size)
    if c.flat is not None and c.flat[1] != n_heads * head_size:
        raise Reject(f"context reshape target {c.flat} is not (-1, {n_heads * head_size})", c.ctx_r)
    _check_guard(c, m, "MultiHeadAttention")
    return m, {"q": c.q, "k": k, "key_bsnh": key_bsnh, "key_grouped": grouped, "v": c.v, "num_heads": n_heads, "head_size": head_size,
               "out": c.ctx_r.outputs[0] if c.flat is None else None,
               "flat_reshape": c.ctx_r if c.flat is not None else None}


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
    filter value, a constant mask of finite values, or ``Where(cond, a, b)`` with finite
    constants a and b (torch's dynamo export of transformers' causal and padding masks:
    ``Where(keep, 0, finfo.min)``)."""
    if mask is None or raw_mask(mask) is not None:
        return True
    c = const_value(mask)
    if c is not None:
        return bool(np.all(np.isfinite(c)))
    where = produced_by(mask, "Where")
    if where is None:
        return False
    branches = [const_value(x) for x in where.inputs[1:]]
    return all(b is not None and np.issubdtype(b.dtype, np.floating) and bool(np.all(np.isfinite(b)))
               for b in branches)


def _zero_mask(mask: ir.Value) -> bool:
    """A constant all-zero mask that broadcasts over batch and heads (dims 1 there): adding it
    changes nothing."""
    c = const_value(mask)
    return c is not None and c.size > 0 and not np.any(c) and (c.ndim < 2 or c.shape[-4:-2] == (1,) * len(
        c.shape[-4:-2]))


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


def bias_mask(mask: ir.Value, model: ir.Model, namer: Namer, n_heads: int, *, expand: bool = True) -> ir.Value | None:
    """A float mask of shape (B|1, 1|N, S|1, T) as the kernel's attention_bias; a (B, 1, 1, T)
    one is expanded to (B, 1, T, T) when ``expand`` (self-attention: S == T), else refused."""
    if mask.dtype not in (None, ir.DataType.FLOAT) or mask.shape is None or len(mask.shape) != 4:
        return None
    dims = list(mask.shape.dims)
    if dims[1] not in (1, n_heads):
        return None
    if dims[2] == 1:
        # (B, 1, 1, T): Attention wants (B, 1, S, T); S == T for self-attention.
        if not expand or not all(isinstance(d, int) for d in dims):
            return None
        target = new_initializer(model, namer, f"{mask.name}_bias_shape",
                       np.array([dims[0], dims[1], dims[3], dims[3]], np.int64))
        exp = ir.node("Expand", [mask, target], name="")
        insert_early(model, exp, mask)
        exp.outputs[0].name = namer(f"{mask.name}_expanded")
        return exp.outputs[0]
    return mask
