"""SliceNoOp: a ``Slice`` that keeps every element is removed."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import slice_params
from fusionviz.passes.simplify.rules.noop import NoOpRule

_INT_END = 2**31 - 1  # Slice ends at or above this mean "to the end" (exporters use INT32/INT64 max)


class SliceNoOp(NoOpRule):
    """``Slice`` that keeps every element (start 0, end past the dim, step 1 on every axis) → ``x``."""

    def pattern(self, op, x):
        return op.Slice(x, _allow_other_inputs=True)

    def check(self, context, x: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        params = slice_params(context.root)
        if params is None:
            return r.fail("Slice parameters are not constant.")
        starts, ends, axes, steps = params
        if x.shape is None:
            return r.fail("The input shape is not known.")
        rank = len(x.shape)
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            return r.fail("Malformed Slice.")
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            if st != 1:
                return r.fail("A step is not 1.")
            dim = x.shape[a + rank if a < 0 else a]
            dim_i = dim if isinstance(dim, int) else None
            if not (s == 0 or (dim_i is not None and s <= -dim_i)):
                return r.fail(f"Start {s} is not the beginning of axis {a}.")
            if not (e >= _INT_END or (dim_i is not None and e >= dim_i)):
                return r.fail(f"End {e} is not past the end of axis {a}.")
        return r
