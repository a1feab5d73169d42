"""LosslessCastCast: two Casts become one when the first is exact."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

_LOSSLESS: dict[ir.DataType, frozenset[ir.DataType]] = {}


def _init_lossless() -> None:
    d = ir.DataType
    num = [d.UINT8, d.INT8, d.UINT16, d.INT16, d.UINT32, d.INT32, d.UINT64, d.INT64,
           d.FLOAT16, d.BFLOAT16, d.FLOAT, d.DOUBLE]
    table = {
        d.BOOL: set(num),
        d.UINT8: {d.INT16, d.UINT16, d.INT32, d.UINT32, d.INT64, d.UINT64, d.FLOAT16, d.BFLOAT16,
                  d.FLOAT, d.DOUBLE},
        d.INT8: {d.INT16, d.INT32, d.INT64, d.FLOAT16, d.BFLOAT16, d.FLOAT, d.DOUBLE},
        d.UINT16: {d.INT32, d.UINT32, d.INT64, d.UINT64, d.FLOAT, d.DOUBLE},
        d.INT16: {d.INT32, d.INT64, d.FLOAT, d.DOUBLE},
        d.UINT32: {d.INT64, d.UINT64, d.DOUBLE},
        d.INT32: {d.INT64, d.DOUBLE},
        d.FLOAT16: {d.FLOAT, d.DOUBLE},
        d.BFLOAT16: {d.FLOAT, d.DOUBLE},
        d.FLOAT: {d.DOUBLE},
    }
    _LOSSLESS.update({k: frozenset(v) for k, v in table.items()})


_init_lossless()


class LosslessCastCast(orp.RewriteRuleClassBase):
    """``Cast(Cast(x, to=mid), to=t)`` → ``Cast(x, to=t)`` (or ``x``) when ``x → mid`` is exact.

    Exactness is what makes it safe: the intermediate holds the same number as ``x``, so the
    second cast sees the same value either way. (onnxscript's ``cast_cast_rule`` drops a
    float32 intermediate before float16, which can round twice; it is not used here.)
    """

    def __init__(self) -> None:
        super().__init__("LosslessCastCast", remove_nodes=False)

    def pattern(self, op, x, mid, to):
        return op.Cast(op.Cast(x, to=mid), to=to)

    def check(self, context, x: ir.Value, mid: ir.Attr, to: ir.Attr) -> orp.MatchResult:
        r = orp.MatchResult()
        if x.dtype is None:
            return r.fail("The input dtype is not known.")
        if ir.DataType(mid.as_int()) not in _LOSSLESS.get(x.dtype, frozenset()):
            return r.fail(f"Cast {x.dtype.name} -> {ir.DataType(mid.as_int()).name} is not exact.")
        return r

    def rewrite(self, op, x: ir.Value, mid: ir.Attr, to: ir.Attr):
        if x.dtype == ir.DataType(to.as_int()):
            return op.Identity(x)
        return op.Cast(x, to=to.as_int())
