"""eliminate_cast_expand: CastLike / Cast / Expand simplification where types and shapes are known."""

from __future__ import annotations

import functools

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.rules import common as lib_rules

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.simplify.rules.cast_like_to_cast import CastLikeToCast
from fusionviz.passes.simplify.rules.expand_noop import ExpandNoOp
from fusionviz.passes.simplify.rules.lossless_cast_cast import LosslessCastCast
from fusionviz.passes.simplify.rules.noop import flatten


@functools.cache
def _cast_expand_rules() -> tuple[orp.RewriteRule, ...]:
    return tuple(flatten(
        CastLikeToCast.rule(),
        lib_rules.no_op_cast_rule,
        LosslessCastCast.rule(),
        lib_rules.cast_constant_of_shape_rule,
        lib_rules.cast_constant_of_shape_without_value_rule,
        lib_rules.no_op_expand_rule,
        ExpandNoOp.rule(),
        lib_rules.expand_before_binary_op_rules,
    ))


class CastExpandSimplify(Pass, name="eliminate_cast_expand", aliases=("cast_expand_simplify",), category=Category.SIMPLIFY, order=115,
                         trigger_ops={"Cast", "CastLike", "Expand"}):
    """CastLike/Cast/Expand rules: own CastLikeToCast, LosslessCastCast, ExpandNoOp + onnxscript's."""

    mirrors_ort = "basic"

    title = "CastLike / Cast / Expand simplification"
    needs_shapes = True
    explain = """\
**What:** where types and shapes are statically known:
`CastLike(x, like)` becomes `Cast(x, to=T)`, or disappears when `x` already has type `T`;
a `Cast` to the type the tensor already has is removed; `Cast(Cast(x))` becomes one `Cast` when
the first cast is exact (e.g. float16→float32, int32→int64);
`Cast(ConstantOfShape)` becomes one `ConstantOfShape` of the right type;
an `Expand` whose target shape cannot enlarge its input is removed; and an `Expand` in front of
a broadcasting binary op (`Add`, `Mul`, ...) is removed when the op's own broadcasting gives
the same result.

**Why faster:** exporters such as PyTorch's dynamo exporter build a Conv bias or a BatchNorm
parameter as `CastLike(0, x)` → `Expand(…, Shape(W))`. Each is a tiny kernel, and, worse,
such chains hide that the value is a plain constant, so onnxruntime, onnxsim and onnxslim do
not fold BatchNorm into the Conv. With these nodes gone, constant folding and the fusion
passes see ordinary weights. An Expand before an Add also writes a full-size copy that the
Add's broadcasting makes unnecessary.

Wraps onnxscript rules `no_op_cast_rule`, `cast_constant_of_shape_rule(s)`, `no_op_expand_rule`,
`expand_before_binary_op_rules`, plus fusionviz's `CastLikeToCast`, `LosslessCastCast`,
`ExpandNoOp` (broadcast-aware).
"""

    def transform(self, model: ir.Model) -> None:
        apply_rules(model, _cast_expand_rules(), to_fixed_point=True)
