"""fuse_hardswish: HardSwish and HardSigmoid written as Add / Clip / Div / Mul chains into one op.

Paddle2ONNX (PP-OCR, PP-LCNet), Keras and older MobileNetV3 exports write the activations out:
``x·clip(x + 3, 0, 6)/6`` for HardSwish, ``clip(x + 3, 0, 6)/6`` or ``clip(x/6 + 0.5, 0, 1)`` for
HardSigmoid. onnxscript's ``_fuse_hardswish`` rules take the first two with exactly 3 and 6; the
rules here take the same math with any offset ``b`` and width ``d``. Rules (the code points
back to them):

1. ``clip(x + b, 0, d) / d`` (or ``· k`` with ``k = 1/d``) → ``HardSigmoid(x, α = 1/d, β = b/d)``.
2. ``clip(a·x + b, 0, 1)`` (or ``x/d`` for ``a·x``) → ``HardSigmoid(x, α = a, β = b)``.
3. ``x·clip(x + b, 0, d) / d`` (the Div or a ``· 1/d`` after the product) →
   ``HardSwish(x)`` when ``b = 3, d = 6`` and the model's opset is 14 or newer; otherwise
   ``x·HardSigmoid(x, 1/d, b/d)``: two nodes for four, in any opset (HardSigmoid is opset 6),
   and the form ``fuse_conv_activation`` makes a FusedConv with ``activation="HardSwish"`` of.
4. ``x·HardSigmoid(x, 1/6, 0.5)`` → ``HardSwish(x)`` (opset ≥ 14).
5. Only float32 inputs (onnxruntime's CPU HardSigmoid and HardSwish kernels), constants that are
   scalars within 1e-4 relative of what the form needs, a Clip whose bounds are inputs (opset
   ≥ 11). The opset is never raised: HardSwish needs 14, and a model below keeps rule 3's
   two-node form.

Rule 3 runs before rule 1 (its Clip chain holds rule 1's), rule 4 last.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.fuse.transformer_common import scalar
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed

#: rule 5: relative tolerance of a constant against the value the form needs
RTOL = 1e-4


def _close(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= RTOL * max(abs(want), 1e-6)


def _float_input(x: ir.Value, r: orp.MatchResult) -> orp.MatchResult:
    if x.dtype != ir.DataType.FLOAT:
        return r.fail(f"The input dtype {x.dtype} is not float32 (onnxruntime's CPU HardSigmoid/HardSwish "
                      "kernels are float32).")
    return r


def _clip_box(lo: ir.Value, hi: ir.Value, width: float, r: orp.MatchResult) -> orp.MatchResult:
    """The Clip bounds must be 0 and ``width``."""
    low, high = scalar(lo), scalar(hi)
    if not _close(low, 0.0) or not _close(high, width):
        return r.fail(f"Clip bounds are {low}, {high}; the form needs 0 and {width:g}.")
    return r


class _ClipShift(orp.RewriteRuleClassBase):
    """What rules 1 and 3 share: ``clip(x + b, 0, d)`` then a division by ``d`` (``divide``) or a
    multiplication by ``1/d``; the width ``d`` and the offset ``b`` must be constant scalars."""

    def __init__(self, name: str, divide: bool) -> None:
        super().__init__(name=f"{name}{'Div' if divide else 'Mul'}")
        self._divide = divide

    def _width(self, d: ir.Value) -> float | None:
        v = scalar(d)
        if v is None or v <= 0:
            return None
        return v if self._divide else 1.0 / v

    def check(self, context, x, b, lo, hi, d) -> orp.MatchResult:
        r = _float_input(x, orp.MatchResult())
        if not r:
            return r
        width = self._width(d)
        if width is None or scalar(b) is None:
            return r.fail("The offset or the divisor is not a positive constant scalar.")
        return _clip_box(lo, hi, width, r)


class _HardSigmoidOfShift(_ClipShift):
    """Rule 1: ``clip(x + b, 0, d) / d`` (``divide``) or ``clip(x + b, 0, d) · k``."""

    def __init__(self, divide: bool) -> None:
        super().__init__("HardSigmoidShift", divide)

    def pattern(self, op, x, b, lo, hi, d):
        clipped = op.Clip(op.Add(x, b), lo, hi)
        return op.Div(clipped, d) if self._divide else op.Mul(clipped, d)

    def rewrite(self, op, x, b, lo, hi, d):
        width = self._width(d)
        return op.HardSigmoid(x, alpha=1.0 / width, beta=scalar(b) / width)


class _HardSigmoidOfAffine(orp.RewriteRuleClassBase):
    """Rule 2: ``clip(a·x + b, 0, 1)`` (``divide``: ``clip(x/d + b, 0, 1)``)."""

    def __init__(self, divide: bool) -> None:
        super().__init__(name=f"HardSigmoidAffine{'Div' if divide else 'Mul'}")
        self._divide = divide

    def pattern(self, op, x, a, b, lo, hi):
        scaled = op.Div(x, a) if self._divide else op.Mul(x, a)
        return op.Clip(op.Add(scaled, b), lo, hi)

    def _slope(self, a: ir.Value) -> float | None:
        v = scalar(a)
        if v is None or (self._divide and v == 0):
            return None
        return 1.0 / v if self._divide else v

    def check(self, context, x, a, b, lo, hi) -> orp.MatchResult:
        r = _float_input(x, orp.MatchResult())
        if not r:
            return r
        if self._slope(a) is None or scalar(b) is None:
            return r.fail("The slope or the offset is not a constant scalar.")
        return _clip_box(lo, hi, 1.0, r)

    def rewrite(self, op, x, a, b, lo, hi):
        return op.HardSigmoid(x, alpha=self._slope(a), beta=scalar(b))


class _HardSwishChain(_ClipShift):
    """Rule 3: ``x·clip(x + b, 0, d) / d`` (``divide``) or ``x·clip(x + b, 0, d) · (1/d)``."""

    def __init__(self, divide: bool, native: bool) -> None:
        super().__init__("HardSwishChain", divide)
        self._native = native

    def pattern(self, op, x, b, lo, hi, d):
        product = op.Mul(x, op.Clip(op.Add(x, b), lo, hi))
        return op.Div(product, d) if self._divide else op.Mul(product, d)

    def rewrite(self, op, x, b, lo, hi, d):
        width, shift = self._width(d), scalar(b)
        if self._native and _close(width, 6.0) and _close(shift, 3.0):
            return op.HardSwish(x)
        return op.Mul(x, op.HardSigmoid(x, alpha=1.0 / width, beta=shift / width))


class _HardSwishOfHardSigmoid(orp.RewriteRuleClassBase):
    """Rule 4: ``x·HardSigmoid(x, 1/6, 0.5)`` → ``HardSwish(x)``."""

    def pattern(self, op, x):
        return op.Mul(x, op.HardSigmoid(x, _allow_other_attributes=True, _outputs=["gate"]))

    def check(self, context, x, gate) -> orp.MatchResult:
        r = _float_input(x, orp.MatchResult())
        if not r:
            return r
        node = gate.producer()
        alpha, beta = node.attributes.get_float("alpha", 0.2), node.attributes.get_float("beta", 0.5)
        if not _close(alpha, 1.0 / 6.0) or not _close(beta, 0.5):
            return r.fail(f"HardSigmoid has alpha {alpha:g}, beta {beta:g}; HardSwish is alpha 1/6, beta 0.5.")
        return r

    def rewrite(self, op, x, gate):
        return op.HardSwish(x)


class FuseHardSwish(Pass, name="fuse_hardswish", category=Category.FUSE, order=250,
                    trigger_ops=frozenset({"Clip", "HardSigmoid"})):
    """Add / Clip / Div / Mul chains into HardSigmoid and HardSwish."""

    title = "Fuse HardSwish / HardSigmoid chains"
    explain = """\
**What:** the element-wise chains exporters write for MobileNetV3's activations become one op:

- `x·clip(x + 3, 0, 6) / 6` → `HardSwish(x)` (4 nodes: Add, Clip, Mul, Div)
- `clip(x + 3, 0, 6) / 6` and `clip(x/6 + 0.5, 0, 1)`, `clip(0.2·x + 0.5, 0, 1)` →
  `HardSigmoid(x, α, β)` with the chain's own slope and offset
- `x·HardSigmoid(x, 1/6, 0.5)` → `HardSwish(x)`

HardSwish exists from opset 14; the opset is never raised, so in an older model (Paddle2ONNX
writes opset 11) HardSwish becomes `x·HardSigmoid(x, 1/6, 0.5)`, two nodes for four, which
*Fuse Conv + activation* turns into one `FusedConv(activation="HardSwish")` when a Conv feeds it.

**Why faster:** each node of the chain reads and writes the whole activation tensor; the
fused op does it once. After a Conv it then disappears into the convolution kernel.

**Math:** `clip(x + b, 0, d)/d = clip(x/d + b/d, 0, 1) = HardSigmoid(x, 1/d, b/d)`;
HardSwish is `x·HardSigmoid(x, 1/6, 1/2)`.

**Not fused:** non-float32 inputs (onnxruntime's CPU kernels are float32), constants that are
not scalars or differ from what the form needs by more than 1e-4 relative, a Clip with
attribute bounds (opset < 11), an intermediate another node also reads.
"""
    needs_shapes = False  # infers shapes itself, only when there is a Clip or HardSigmoid

    def transform(self, model: ir.Model) -> None:
        ops = {n.op_type for n in model.graph}
        if not ops & {"Clip", "HardSigmoid"}:
            return
        infer_shapes_if_needed(model, [n.inputs[0] for n in model.graph
                                       if n.op_type in ("Clip", "HardSigmoid") and n.inputs])
        native = onnx_opset(model) >= 14
        apply_rules(model, [_HardSwishChain.rule(True, native), _HardSwishChain.rule(False, native)], commute=True)
        apply_rules(model, [_HardSigmoidOfShift.rule(True), _HardSigmoidOfShift.rule(False),
                            _HardSigmoidOfAffine.rule(True), _HardSigmoidOfAffine.rule(False)], commute=True)
        if native:
            apply_rules(model, [_HardSwishOfHardSigmoid.rule()], commute=True)
