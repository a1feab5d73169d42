"""SliceSlice: two Slices on different axes become one."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import slice_params


class SliceSlice(orp.RewriteRuleClassBase):
    """``Slice(Slice(x, ...), ...)`` on disjoint, constant axes → one ``Slice`` (opset >= 10)."""

    def __init__(self) -> None:
        super().__init__("SliceSlice", remove_nodes=False)

    def pattern(self, op, x):
        return op.Slice(op.Slice(x, _allow_other_inputs=True, _outputs=["mid"]), _allow_other_inputs=True)

    def check(self, context, x: ir.Value, mid: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        outer = context.root
        inner = mid.producer()
        if inner is None or len(inner.inputs) < 3 or len(outer.inputs) < 3:
            return r.fail("Attribute-form Slice (opset < 10).")
        p1, p2 = slice_params(inner), slice_params(outer)
        if p1 is None or p2 is None:
            return r.fail("Slice parameters are not constant.")
        if x.shape is None:
            return r.fail("The input rank is not known.")
        rank = len(x.shape)
        merged: list[list[int]] = [[], [], [], []]
        seen: set[int] = set()
        for starts, ends, axes, steps in (p1, p2):
            axes = axes if axes is not None else list(range(len(starts)))
            steps = steps if steps is not None else [1] * len(starts)
            for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
                a = a + rank if a < 0 else a
                if a in seen:
                    return r.fail(f"Both Slices touch axis {a}.")
                seen.add(a)
                for lst, val in zip(merged, (s, e, a, st), strict=True):
                    lst.append(val)
        self._merged = merged
        return r

    def rewrite(self, op, x: ir.Value, mid: ir.Value):
        t = [op.Constant(value=ir.tensor(np.array(m, dtype=np.int64))) for m in self._merged]
        return op.Slice(x, *t)
