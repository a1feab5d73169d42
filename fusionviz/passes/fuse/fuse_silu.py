"""fuse_silu: SiLU / Swish, ``x·sigmoid(α·x)``, into onnxruntime's ``QuickGelu``.

YOLOv5/v8, EfficientNet and most detectors since write SiLU after every Conv as a Sigmoid and a
Mul reading the same tensor. onnxruntime's ``QuickGeluFusion`` (level extended) turns it into
``com.microsoft.QuickGelu(x, alpha)``, ``x·sigmoid(α·x)``, one pass over the tensor instead of
two; this pass does that in the graph, where the user sees it. Rules:

1. ``Mul(x, Sigmoid(x))`` (α = 1) and ``Mul(x, Sigmoid(Mul(x, α)))`` with α a scalar constant,
   every operand order (``Swish`` with a β, as Keras and tf2onnx write it).
2. ``x`` is float32: onnxruntime's CPU ``QuickGelu`` kernel is float32 only (read from its
   kernel registry when this was written).
3. The Sigmoid's output (and the inner Mul's) is read by nothing else (the matcher's rule).
4. ONNX has no SiLU op onnxruntime runs on CPU (ONNX ``Swish`` is opset 24, without a CPU
   kernel in onnxruntime 1.32), so the node is the contrib op whatever the model's opset.

A Conv followed by SiLU stays two nodes: onnxruntime's FusedConv has no SiLU activation
(``fuse_conv_activation`` says so at each site); the SiLU itself becomes one.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import scalar
from fusionviz.passes.rewrite import apply_rules


def _float32(x: ir.Value, r: orp.MatchResult) -> orp.MatchResult:
    """Rule 2."""
    if x.dtype is not None and x.dtype != ir.DataType.FLOAT:
        return r.fail(f"x is {x.dtype}; onnxruntime's CPU QuickGelu kernel is float32 only")
    if x.dtype is None:
        return r.fail("x's element type is unknown; onnxruntime's CPU QuickGelu kernel is float32 only")
    return r


class _SiLU(orp.RewriteRuleClassBase):
    """Rule 1, α = 1: ``x·sigmoid(x)``."""

    def __init__(self) -> None:
        super().__init__(name="SiLU")

    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def check(self, context, x, **_) -> orp.MatchResult:
        return _float32(x, orp.MatchResult())

    def rewrite(self, op, x, **_):
        return op.QuickGelu(x, alpha=1.0, _domain=MS_DOMAIN)


class _Swish(orp.RewriteRuleClassBase):
    """Rule 1 with a β: ``x·sigmoid(β·x)``."""

    def __init__(self) -> None:
        super().__init__(name="Swish")

    def pattern(self, op, x, beta):
        return op.Mul(x, op.Sigmoid(op.Mul(x, beta)))

    def check(self, context, x, beta, **_) -> orp.MatchResult:
        r = _float32(x, orp.MatchResult())
        if not r:
            return r
        if scalar(beta) is None:
            return r.fail("the Sigmoid's scale is not a scalar constant")
        return r

    def rewrite(self, op, x, beta, **_):
        return op.QuickGelu(x, alpha=scalar(beta), _domain=MS_DOMAIN)


class FuseSilu(Pass, name="fuse_silu", category=Category.FUSE, order=265, trigger_ops=frozenset({"Sigmoid"})):
    """SiLU / Swish (``x·sigmoid(α·x)``) into one ``com.microsoft.QuickGelu``."""

    mirrors_ort = "extended"  # its QuickGeluFusion

    title = "Fuse SiLU / Swish (x·sigmoid(αx)) into QuickGelu"
    needs_shapes = True
    explain = """\
**What:** SiLU (Swish), `x·sigmoid(x)`, written as a `Sigmoid` and a `Mul` that both read `x`,
becomes one onnxruntime `QuickGelu(alpha=1)`; `x·sigmoid(β·x)` becomes `QuickGelu(alpha=β)`.
onnxruntime's own QuickGeluFusion does the same at its level extended; here it is in the graph.

**Why faster:** the unfused form writes `sigmoid(x)` to memory and reads it back with `x` for
the product; fused, `x` is read once and the result written once. YOLO-style detectors have
one after every Conv.

**Math:** `QuickGelu(x, α) = x·σ(α·x)`; SiLU is α = 1.

**Not fused:** other element types than float32 (onnxruntime's CPU kernel), a β that is not a
scalar constant, or a Sigmoid whose output something else reads. A Conv before the SiLU stays
its own node: onnxruntime's FusedConv has no SiLU activation.
"""

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Sigmoid" for n in model.graph):
            return
        if apply_rules(model, [_Swish.rule(), _SiLU.rule()], commute=True):
            ensure_ms_import(model)
