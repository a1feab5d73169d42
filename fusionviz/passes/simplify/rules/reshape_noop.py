"""ReshapeNoOp: a ``Reshape`` to the shape its input already has is removed."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import const_value, static_dims
from fusionviz.passes.simplify.rules.noop import NoOpRule


class ReshapeNoOp(NoOpRule):
    """``Reshape(x, shape)`` → ``x`` when ``x``'s static shape is what the Reshape produces."""

    def pattern(self, op, x, shape):
        return op.Reshape(x, shape)

    def check(self, context, x: ir.Value, shape: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        dims = static_dims(x.shape)
        if dims is None:
            return r.fail("The input shape is not fully static.")
        target = const_value(shape)
        if target is None:
            if static_dims(context.output_values[0].shape) == dims:
                return r
            return r.fail("The shape input is not constant.")
        target = [int(t) for t in target.reshape(-1)]
        if len(target) != len(dims):
            return r.fail("Reshape changes the rank.")
        allowzero = context.root.attributes.get_int("allowzero", 0)
        resolved = [dims[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
        if resolved.count(-1) == 1:
            known = int(np.prod([t for t in resolved if t != -1], dtype=np.int64))
            total = int(np.prod(dims, dtype=np.int64))
            if known == 0 or total % known:
                return r.fail("Cannot resolve -1.")
            resolved[resolved.index(-1)] = total // known
        if tuple(resolved) != dims:
            return r.fail(f"Reshape {dims} -> {tuple(resolved)} changes the shape.")
        return r
