"""fuse_conv_add_bias: a per-channel Add / Sub after a Conv or ConvTranspose merged into its bias.

1. ``Conv(x, W[, b]) ± t`` → ``Conv(x, W, b ± t)``, ``t`` one value per output channel (``W``'s
   axis 0) or a scalar.
2. The same after a ``ConvTranspose``, whose output channels are ``W.shape[1]·group``
   (a PP-OCR detector's upsampling head: ``ConvTranspose → Add(bias)``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import weight_value
from fusionviz.passes.fuse.conv_common import ConvAffineBase, check_conv_weights, per_channel
from fusionviz.passes.hygiene import Namer
from fusionviz.passes.rewrite import apply_rules


class _ConvShift(ConvAffineBase):
    """``Add(Conv(x), t)`` / ``Sub(Conv(x), t)`` → ``Conv(x, W, b ± t)``."""

    def __init__(self, namer: Namer, subtract: bool) -> None:
        super().__init__(namer, "ConvSubBias" if subtract else "ConvAddBias")
        self._subtract = subtract

    def pattern(self, op, x, t):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Sub(conv, t) if self._subtract else op.Add(conv, t)

    def check(self, context, x, t, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=False)
        if not r:
            return r
        _, r = self._vector(conv, t, r, "bias")
        return r

    def rewrite(self, op, x, t, conv_out):
        conv = conv_out.producer()
        w = weight_value(conv.inputs[1])
        vec = per_channel(weight_value(t), w.ndim, w.shape[0])
        return self._new_conv(op, conv, None, -vec if self._subtract else vec)


def convtranspose_channels(node: ir.Node, w: np.ndarray) -> int:
    """Output channels of a ConvTranspose with weight ``w`` (``(C_in, C_out/group, k...)``)."""
    return int(w.shape[1]) * node.attributes.get_int("group", 1)


class _ConvTransposeShift(orp.RewriteRuleClassBase):
    """Rule 2: ``Add(ConvTranspose(x), t)`` / ``Sub(...)`` → ``ConvTranspose(x, W, b ± t)``."""

    def __init__(self, namer: Namer, subtract: bool) -> None:
        super().__init__(name="ConvTransposeSubBias" if subtract else "ConvTransposeAddBias")
        self._namer = namer
        self._subtract = subtract

    def pattern(self, op, x, t):
        ct = op.ConvTranspose(x, _allow_other_inputs=True, _outputs=["ct_out"])
        return op.Sub(ct, t) if self._subtract else op.Add(ct, t)

    def _shift(self, node: ir.Node, t: ir.Value) -> np.ndarray | None:
        w, arr = weight_value(node.inputs[1]), weight_value(t)
        if w is None or arr is None or arr.dtype != w.dtype:
            return None
        return per_channel(arr, w.ndim, convtranspose_channels(node, w))

    def check(self, context, x, t, ct_out) -> orp.MatchResult:
        node = ct_out.producer()
        r = check_conv_weights(node, {node}, orp.MatchResult(), weight_changes=False)
        if not r:
            return r
        arr = weight_value(t)
        if arr is None:
            return r.fail(f"The bias operand '{t.name}' is not a constant.")
        if self._shift(node, t) is None:
            return r.fail(f"The bias operand '{t.name}' {arr.shape} is not per-channel (or its dtype differs).")
        return r

    def rewrite(self, op, x, t, ct_out):
        node = ct_out.producer()
        w = node.inputs[1]
        w_np = weight_value(w)
        b = node.inputs[2] if len(node.inputs) > 2 else None
        b_np = weight_value(b) if b is not None else np.zeros((convtranspose_channels(node, w_np),), w_np.dtype)
        shift = self._shift(node, t)
        bias = (b_np - shift if self._subtract else b_np + shift).astype(w_np.dtype)
        new_b = op.initializer(ir.tensor(bias),
                               name=self._namer(f"{(b.name if b is not None else w.name)}_fused_bias"))
        return op.ConvTranspose(node.inputs[0], w, new_b, _name=node.name, **node.attributes)


class FuseConvAddBias(Pass, name="fuse_conv_add_bias", category=Category.FUSE, order=220,
                      trigger_ops={"Conv", "ConvTranspose"}):
    """Conv / ConvTranspose followed by Add/Sub of a per-channel constant: merged into its bias."""

    mirrors_ort = "basic"

    title = "Fold Add(bias) after Conv into the Conv bias"
    explain = """\
**What:** `Conv(x, W[, b]) → Add(t)` (or `Sub(t)`) with a constant `t` that has one value per
output channel (shape `(C,1,1)`, `(1,C,1,1)`, or a scalar) becomes `Conv(x, W, b + t)`. The
same after a `ConvTranspose` (an upsampling head's separate bias Add).

**Why faster:** the convolution kernel already adds a bias while it writes its output; a
separate Add is one more pass over the whole activation tensor and one more intermediate
tensor. Exporters emit it when a layer's bias was kept apart (e.g. `bias=False` convs
followed by a learned shift, or folded normalisations).

**Not folded:** a `t` that varies along spatial axes or the batch axis (its shape would
broadcast the output), a non-constant `t`, a Conv output that is used elsewhere or is a
graph output.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        ops = {n.op_type for n in model.graph}
        if not ops & {"Conv", "ConvTranspose"}:
            return
        namer = Namer(model)
        if "Conv" in ops:
            apply_rules(model, [_ConvShift.rule(namer, False)], commute=True)
            apply_rules(model, [_ConvShift.rule(namer, True)])
        if "ConvTranspose" in ops:
            apply_rules(model, [_ConvTransposeShift.rule(namer, False)], commute=True)
            apply_rules(model, [_ConvTransposeShift.rule(namer, True)])
