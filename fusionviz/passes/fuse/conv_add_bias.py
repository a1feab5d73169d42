"""fuse_conv_add_bias: a per-channel Add / Sub after a Conv merged into its bias."""

from __future__ import annotations

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


class FuseConvAddBias(Pass, name="fuse_conv_add_bias", category=Category.FUSE, order=220,
                      trigger_ops={"Conv"}):
    """Conv followed by Add/Sub of a per-channel constant: merged into the Conv bias."""

    title = "Fold Add(bias) after Conv into the Conv bias"
    explain = """\
**What:** `Conv(x, W[, b]) → Add(t)` (or `Sub(t)`) with a constant `t` that has one value per
output channel (shape `(C,1,1)`, `(1,C,1,1)`, or a scalar) becomes `Conv(x, W, b + t)`.

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
        if not any(n.op_type == "Conv" for n in model.graph):
            return
        namer = Namer(model)
        apply_rules(model, [_ConvShift.rule(namer, False)], commute=True)
        apply_rules(model, [_ConvShift.rule(namer, True)])
