"""ExpandNoOp: an ``Expand`` that cannot enlarge its input is removed."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import broadcast_keeps_shape, const_value, static_dims
from fusionviz.passes.simplify.rules.noop import NoOpRule


class ExpandNoOp(NoOpRule):
    """``Expand(x, shape)`` → ``x`` when broadcasting ``x`` to ``shape`` leaves its shape unchanged.

    More general than onnxscript's ``no_op_expand_rule`` (which needs ``shape == x.shape``
    exactly): ``shape`` may be shorter than ``x``'s rank and may hold 1s.
    """


    def pattern(self, op, x, shape):
        return op.Expand(x, shape)

    def check(self, context, x: ir.Value, shape: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        target = const_value(shape)
        if target is not None:
            if target.ndim != 1:
                return r.fail("The shape input is not 1-D.")
            why = broadcast_keeps_shape([int(t) for t in target], x.shape)
            return r.fail(f"Expand is not a no-op: {why}.") if why else r
        x_dims, y_dims = static_dims(x.shape), static_dims(context.output_values[0].shape)
        if x_dims is not None and x_dims == y_dims:
            return r
        return r.fail("The target shape is not constant and the output shape is not statically equal.")
