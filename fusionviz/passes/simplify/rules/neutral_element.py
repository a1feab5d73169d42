"""NeutralElement: ``x + 0``, ``x * 1``, ... with an exactly neutral constant are removed."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import broadcast_keeps_shape, const_value
from fusionviz.passes.simplify.rules.noop import NoOpRule


class NeutralElement(NoOpRule):
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` → ``x``.

    The constant may be any tensor filled with the neutral element, as long as broadcasting
    against it cannot enlarge ``x`` (rank not larger; every dim 1 or equal to ``x``'s).
    """

    def __init__(self, op_type: str, neutral: float, const_first: bool) -> None:
        side = "L" if const_first else "R"
        super().__init__(f"Neutral{op_type}{side}")
        self.op_type, self.neutral, self.const_first = op_type, neutral, const_first

    def pattern(self, op, x, c):
        f = getattr(op, self.op_type)
        return f(c, x) if self.const_first else f(x, c)

    def check(self, context, x: ir.Value, c: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        value = const_value(c)
        if value is None:
            return r.fail("The other operand is not a constant.")
        if value.size == 0 or not np.all(value == self.neutral):
            return r.fail(f"The constant is not all {self.neutral:g}.")
        if x.dtype is not None and c.dtype is not None and x.dtype != c.dtype:
            return r.fail("Operand dtypes differ.")
        why = broadcast_keeps_shape(list(value.shape), x.shape)
        return r.fail(f"Not a no-op: {why}.") if why else r
