"""fuse_rotary_embedding: rotary position embeddings (RoPE) into onnxruntime's ``RotaryEmbedding``.

Llama, Qwen2, Mistral, Phi and most decoders since rotate each query and key head by its
position: ``x·cos + rotate_half(x)·sin``, with ``rotate_half(x) = Concat(−x₂, x₁)`` of the two
halves of the head (transformers' ``apply_rotary_pos_emb``). Exported, that is two Slices, a
Neg, a Concat, two Muls and an Add per query and per key (7 nodes, 14 per layer), each reading
and writing the whole ``(B, N, S, H)`` tensor.

Wraps onnxscript's ``ort_fusions`` ``RotaryEmbeddingFusion`` pattern (every operand order) and
its half-split check, with another replacement: the library writes an internal op that needs its
``cos_sin_cache`` step, whose rule wants the cos/sin computation still in the graph (from
``position_ids``) and writes no position input when they are constants. Here:

1. ``x`` is 4-D ``(B, N, S, H)`` with ``N``, ``S`` and ``H`` known, float32 or float16 (the
   element types of onnxruntime's CPU kernel, read from its registry when this was written).
2. ``cos`` and ``sin`` are constants (the app fixes the sequence length; constant folding then
   computes them): shape ``(…, S, H)`` with every leading dim 1, and each the same in its two
   halves (``Concat(freqs, freqs)`` before ``Cos``/``Sin``), exactly. Computed at run time they
   are a near miss that says so (fix the input shapes).
3. The node is ``com.microsoft.RotaryEmbedding(x, position_ids=[0], cos_cache, sin_cache)``:
   ``cos_cache`` / ``sin_cache`` are the constants' first halves, ``(S, H/2)``; position ids
   ``[0]`` (shape ``(1,)``: positions 0…S−1 for every batch row) read row ``s`` for position
   ``s``, which is the row the original multiplied by. Equal constants share one cache.
4. Nothing else changes: the original's products and sums are the kernel's
   (``x₁·cos − x₂·sin``, ``x₂·cos + x₁·sin``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.ort_fusions.rotary_embedding import RotaryEmbeddingFusion

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.hygiene import Namer
from fusionviz.passes.rewrite import apply_rules

#: Rule 1: onnxruntime's CPU RotaryEmbedding kernel types
_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})


def _constant(v: ir.Value) -> np.ndarray | None:
    """A value's constant array (initializer or Constant node), else None."""
    if v.const_value is not None:
        return v.const_value.numpy()
    p = v.producer()
    if p is not None and p.op_type == "Constant" and p.domain in ("", "ai.onnx"):
        attr = p.attributes.get("value")
        if attr is not None and attr.type is ir.AttributeType.TENSOR:
            return attr.as_tensor().numpy()
    return None


def _cache(arr: np.ndarray | None, seq: int, head: int, what: str, r: orp.MatchResult) -> np.ndarray | None:
    """Rule 2: the (S, H/2) cache of a (…, S, H) constant equal in its halves, else None (``r`` says why)."""
    if arr is None:
        r.fail(f"{what} is computed at run time, not a constant (fix the sequence length; constant folding "
               "then computes it)")
        return None
    if arr.ndim < 2 or tuple(arr.shape[-2:]) != (seq, head) or any(d != 1 for d in arr.shape[:-2]):
        r.fail(f"{what} has shape {tuple(arr.shape)}, not (…, {seq}, {head}) with leading dims 1: "
               "a cache per position is what the kernel reads")
        return None
    two = arr.reshape(seq, head)
    half = head // 2
    if not np.array_equal(two[:, :half], two[:, half:]):
        r.fail(f"the two halves of {what} differ: not the Concat(freqs, freqs) of a rotary embedding")
        return None
    return np.ascontiguousarray(two[:, :half])


class _Rotary(RotaryEmbeddingFusion):
    """onnxscript's pattern and half-split check; rules 1–3 and the contrib op here."""

    def __init__(self, namer: Namer) -> None:
        # not the library's __init__: it asks for the rewrite as a function (its internal op)
        orp.RewriteRuleClassBase.__init__(self, name="RotaryEmbedding")
        self._namer = namer
        self._caches: dict[tuple[bytes, bytes, str], tuple[ir.Value, ir.Value]] = {}

    def check(self, context, x, cos, sin, start1, end1, start2, end2, **kw) -> orp.MatchResult:
        r = super().check(context, x, start1, end1, start2, end2, **kw)
        if not r:
            return r
        if x.dtype not in _TYPES:
            return r.fail(f"x is {x.dtype}; onnxruntime's CPU RotaryEmbedding takes float32 and float16")
        seq, head = x.shape[2], x.shape[3]
        if not isinstance(seq, int):
            return r.fail(f"the sequence length of x {x.shape} is not known, so cos and sin are computed at run "
                          "time: fix the input shapes (constant folding then computes them)")
        if head % 2:
            return r.fail(f"x has shape {x.shape}: an odd head size has no two halves to rotate")
        cos_c = _cache(_constant(cos), seq, head, "cos", r)
        if cos_c is None:
            return r
        sin_c = _cache(_constant(sin), seq, head, "sin", r)
        if sin_c is None:
            return r
        if cos_c.dtype != x.dtype.numpy() or sin_c.dtype != x.dtype.numpy():
            return r.fail("cos/sin are of another element type than x")
        self._found = (cos_c, sin_c)
        return r

    def rewrite(self, op, x, cos, sin, **_):
        cos_c, sin_c = self._found
        key = (cos_c.tobytes(), sin_c.tobytes(), str(cos_c.dtype))
        if key not in self._caches:
            self._caches[key] = (
                op.initializer(ir.tensor(cos_c), name=self._namer("rotary_cos_cache")),
                op.initializer(ir.tensor(sin_c), name=self._namer("rotary_sin_cache")))
        cos_cache, sin_cache = self._caches[key]
        positions = op.initializer(ir.tensor(np.zeros(1, np.int64)), name=self._namer("rotary_position_start"))
        return op.RotaryEmbedding(x, positions, cos_cache, sin_cache, interleaved=0, num_heads=x.shape[1],
                                  _domain=MS_DOMAIN)


class FuseRotaryEmbedding(Pass, name="fuse_rotary_embedding", category=Category.FUSE, order=305,
                          trigger_ops=frozenset({"Neg"})):
    """``x·cos + rotate_half(x)·sin`` into one ``com.microsoft.RotaryEmbedding``."""

    title = "Fuse rotary position embedding (RoPE)"
    needs_shapes = True
    explain = """\
**What:** the rotary position embedding of Llama-style models — `x·cos + rotate_half(x)·sin`,
exported as Slice, Slice, Neg, Concat, Mul, Mul, Add for each query and key — becomes one
onnxruntime `RotaryEmbedding` node reading a `(S, H/2)` cos and sin cache (12 nodes fewer per
layer).

**Why faster:** the seven nodes each read and write the whole `(batch, heads, seq, head)`
tensor; the kernel reads it once, rotates each pair of halves in registers and writes once.

**Math:** for the halves `x₁`, `x₂` of a head at position `s`:
`y₁ = x₁·cos[s] − x₂·sin[s]`, `y₂ = x₂·cos[s] + x₁·sin[s]` — what the seven nodes compute.

**Not fused:** cos/sin computed at run time (a dynamic sequence length: fix the input shapes
and constant folding computes them), halves of cos/sin that differ (not a rotary embedding),
a head size or sequence length shape inference does not know, other element types than
float32/float16 (onnxruntime's CPU kernel), or an intermediate used elsewhere.
"""

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Neg" for n in model.graph):
            return
        if apply_rules(model, [_Rotary.rule(Namer(model))], commute=True):
            ensure_ms_import(model)
