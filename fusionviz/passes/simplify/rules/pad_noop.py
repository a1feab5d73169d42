"""PadNoOp: a ``Pad`` whose amounts are all 0 is removed."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import const_value, ints_attr
from fusionviz.passes.simplify.rules.noop import NoOpRule


class PadNoOp(NoOpRule):
    """``Pad(x, pads)`` → ``x`` when every pad amount is a constant 0 (the pad value is then unused)."""

    def pattern(self, op, x):
        return op.Pad(x, _allow_other_inputs=True)

    def check(self, context, x: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        node = context.root
        if len(node.inputs) >= 2 and node.inputs[1] is not None:
            pads = const_value(node.inputs[1])
            if pads is None:
                return r.fail("The pads input is not constant.")
            pads = [int(p) for p in pads.reshape(-1)]
        else:
            pads = ints_attr(node, "pads")
            if pads is None:
                return r.fail("Pad has no pads.")
        if any(pads):
            return r.fail(f"Pads {pads} are not all zero.")
        return r
