"""CastLikeToCast: ``CastLike`` with a known target type becomes a ``Cast`` (or nothing)."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp


class CastLikeToCast(orp.RewriteRuleClassBase):
    """``CastLike(x, like)`` → ``Cast(x, to=dtype(like))``, or ``x`` when the dtypes already agree."""

    def __init__(self) -> None:
        super().__init__("CastLikeToCast", remove_nodes=False)

    def pattern(self, op, x, like):
        return op.CastLike(x, like)

    def check(self, context, x: ir.Value, like: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        if like.dtype is None:
            return r.fail("The target type (second input's dtype) is not known.")
        if "saturate" in context.root.attributes:
            return r.fail("CastLike has a saturate attribute; left alone.")
        return r

    def rewrite(self, op, x: ir.Value, like: ir.Value):
        if x.dtype == like.dtype:
            return op.Identity(x)
        return op.Cast(x, to=int(like.dtype))
