"""fuse_conv_affine: a per-channel scale (and shift) around a Conv folded into its weights."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import weight_value
from fusionviz.passes.fuse.conv_common import (
    ConvAffineBase,
    check_conv_weights,
    outside_uses,
    per_channel,
)
from fusionviz.passes.hygiene import Namer
from fusionviz.passes.rewrite import apply_rules


class _ConvScale(ConvAffineBase):
    """``Mul(Conv(x), s)`` or ``Div(Conv(x), d)`` → ``Conv(x, W·s, b·s)``."""

    def __init__(self, namer: Namer, divide: bool) -> None:
        super().__init__(namer, "ConvDivFold" if divide else "ConvMulFold")
        self._divide = divide

    def pattern(self, op, x, s):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Div(conv, s) if self._divide else op.Mul(conv, s)

    def check(self, context, x, s, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=True)
        if not r:
            return r
        vec, r = self._vector(conv, s, r, "scale")
        if vec is not None and self._divide and np.any(vec == 0):
            return r.fail("Division by zero in the scale.")
        return r

    def rewrite(self, op, x, s, conv_out):
        conv = conv_out.producer()
        w = weight_value(conv.inputs[1])
        vec = per_channel(weight_value(s), w.ndim, w.shape[0])
        if self._divide:
            vec = (1.0 / vec.astype(np.float64)).astype(vec.dtype)
        return self._new_conv(op, conv, vec, None)


class _ConvScaleShift(ConvAffineBase):
    """``Add(Mul(Conv(x), s), t)`` → ``Conv(x, W·s, b·s + t)``."""

    def __init__(self, namer: Namer) -> None:
        super().__init__(namer, "ConvMulAddFold")

    def pattern(self, op, x, s, t):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Add(op.Mul(conv, s), t)

    def check(self, context, x, s, t, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=True)
        if not r:
            return r
        _, r = self._vector(conv, s, r, "scale")
        if not r:
            return r
        _, r = self._vector(conv, t, r, "shift")
        return r

    def rewrite(self, op, x, s, t, conv_out):
        conv = conv_out.producer()
        w = weight_value(conv.inputs[1])
        return self._new_conv(op, conv, per_channel(weight_value(s), w.ndim, w.shape[0]),
                              per_channel(weight_value(t), w.ndim, w.shape[0]))


class _GuardedAffineConv(_compat.AffineConvFusion):
    """onnxscript's ``Conv(x·s + t)`` (scalar s, t; no padding) with extra guards, and with the
    Mul's operands in either order (Paddle2ONNX writes ``Mul(s, x)``; the pass commutes the rule).

    The library's math, with new weights named by the model-wide :class:`Namer` (the library
    names them ``<w>_scaled`` / ``<b>_offset``, and its rewriter overwrites an initializer that
    already has that name), and the weight's dtype kept.
    """

    def __init__(self, namer: Namer) -> None:
        super().__init__()
        self._namer = namer

    def check(self, context, x, w, b, scale, offset, conv_out) -> orp.MatchResult:
        r = super().check(context, x, w, b, scale, offset, conv_out)
        if not r:
            return r
        conv = conv_out.producer()
        w_np = weight_value(w)
        if w_np is None or w_np.ndim != 4:
            return r.fail("Only 2-D convolutions (4-D weights) are supported.")
        if conv.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return r.fail("Conv uses auto_pad; the input shift would reach padded zeros.")
        if outside_uses(w, {conv}) or outside_uses(b, {conv}):
            return r.fail("Conv weight or bias is shared with another node.")
        return r

    def rewrite(self, op, x, w, b, scale, offset, conv_out):
        w_np, b_np = weight_value(w), weight_value(b)
        s = float(weight_value(scale).reshape(()))
        t = float(weight_value(offset).reshape(()))
        w2 = (w_np.astype(np.float64) * s).astype(w_np.dtype)
        b2 = (b_np.astype(np.float64) + t * w_np.astype(np.float64).sum(axis=(1, 2, 3))).astype(b_np.dtype)
        return op.Conv(x, op.initializer(ir.tensor(w2), name=self._namer(f"{w.name}_scaled")),
                       op.initializer(ir.tensor(b2), name=self._namer(f"{b.name}_offset")),
                       **conv_out.producer().attributes)


class FuseConvAffine(Pass, name="fuse_conv_affine", category=Category.FUSE, order=215,
                     trigger_ops={"Conv"}):
    """Per-channel Mul (and following Add) after Conv folded into the Conv's weights and bias."""

    title = "Fold affine Mul/Add after Conv into its weights"
    explain = """\
**What:** `Conv → Mul(s)` (or `Div(d)`, i.e. `s = 1/d`), optionally followed by `Add(t)`,
where `s` and `t` are constants with one value per output channel (or one scalar), becomes
one `Conv` with new weights. Also folds a scalar affine *before* a 1×1-style unpadded 2-D
Conv (`Conv(x·s + t)`, onnxscript's rule).

**Math:** `s·(W∗x + b) + t = (s·W)∗x + (s·b + t)`, per output channel `c`:
`W'[c] = s[c]·W[c]`, `b'[c] = s[c]·b[c] + t[c]`.

**Why faster:** the Mul and Add each read and write the full activation tensor; folded,
they cost nothing at run time (weights are rescaled once, offline). Exporters produce this
from frozen affine layers, Caffe2 `Affine`, or a decomposed BatchNorm.

**Not folded:** constants that vary along other axes than the channel (that would change
the result per position), non-constant operands, a weight shared with another node, or a
Conv output used elsewhere.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Conv" for n in model.graph):
            return
        namer = Namer(model)
        # Mul→Add first (as one match), then a lone Mul or Div; then the input-side affine.
        apply_rules(model, [_ConvScaleShift.rule(namer)], commute=True)
        apply_rules(model, [_ConvScale.rule(namer, False), _ConvScale.rule(namer, True)], commute=True)
        apply_rules(model, [_GuardedAffineConv.rule(namer)], commute=True)
