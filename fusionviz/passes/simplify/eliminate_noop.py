"""eliminate_noop: nodes that return their input unchanged are removed."""

from __future__ import annotations

import functools

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.rules import common as lib_rules

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.simplify.rules.concat_single import ConcatSingle
from fusionviz.passes.simplify.rules.expand_noop import ExpandNoOp
from fusionviz.passes.simplify.rules.neutral_element import NeutralElement
from fusionviz.passes.simplify.rules.noop import flatten
from fusionviz.passes.simplify.rules.pad_noop import PadNoOp
from fusionviz.passes.simplify.rules.reshape_noop import ReshapeNoOp
from fusionviz.passes.simplify.rules.slice_noop import SliceNoOp


def _neutral_rules() -> list[orp.RewriteRule]:
    return [
        NeutralElement.rule("Add", 0.0, False),
        NeutralElement.rule("Add", 0.0, True),
        NeutralElement.rule("Sub", 0.0, False),
        NeutralElement.rule("Mul", 1.0, False),
        NeutralElement.rule("Mul", 1.0, True),
        NeutralElement.rule("Div", 1.0, False),
    ]


@functools.cache
def _noop_rules() -> tuple[orp.RewriteRule, ...]:
    # Not onnxscript's add_0 / sub_0 / mul_by_1 / div_by_1 rules: their pattern constants match
    # within 1e-8 absolute, so ``x + 1e-10`` (the epsilon before a Log) counts as ``x + 0``.
    # NeutralElement compares exactly.
    return tuple(flatten(
        _neutral_rules(),
        lib_rules.no_op_transpose_rule,
        lib_rules.no_op_cast_rule,
        lib_rules.no_op_expand_rule,
        ExpandNoOp.rule(),
        ReshapeNoOp.rule(),
        PadNoOp.rule(),
        ConcatSingle.rule(),
        lib_rules.collapse_slice_rule,
        lib_rules.collapse_slice2_rule,
        SliceNoOp.rule(),
    ))


class NoOpElimination(Pass, name="eliminate_noop", aliases=("noop_elimination",), category=Category.SIMPLIFY, order=130):
    """onnxscript no-op rules plus broadcast-aware own rules."""

    mirrors_ort = "basic"

    title = "No-op elimination"
    needs_shapes = True
    explain = """\
**What:** removes nodes that return their input unchanged: `x+0`, `x-0`, `x*1`, `x/1` (the
constant may be a tensor of 0s/1s), a `Reshape` to the shape `x` already has, a `Transpose`
with the identity permutation, a `Cast` to the type `x` already has, a `Pad` whose pads are all
0, a `Concat` of a single input, a `Slice` that keeps everything, an `Expand` that cannot
enlarge its input.

**Careful with broadcasting:** `x + zeros(4, 8)` with `x` of shape `(8,)` returns a `(4, 8)`
tensor, so it is *not* a no-op and is kept; the same for dtypes (the result must have `x`'s).

**Why faster:** each of these is a full read and write of the tensor for nothing; they come
from generic export code (e.g. `x * 1.0` scaling, `Reshape` to a computed shape).

**Never a no-op:** a constant that is *almost* 0 or 1. `x + 1e-10` in front of a `Log`,
a `Sqrt` or a division is an epsilon that keeps the result finite when `x` is 0; the constant
must equal the neutral element exactly (onnxscript's `add_0_rule` family matches within 1e-8,
so it is not used).

Wraps onnxscript rules `no_op_transpose_rule`, `no_op_cast_rule`, `no_op_expand_rule`,
`collapse_slice_rule(2)`, plus fusionviz's `NeutralElement` (exact, tensor constants,
broadcast check), `ReshapeNoOp`, `PadNoOp`, `ConcatSingle`, `SliceNoOp`, `ExpandNoOp`.
"""

    def transform(self, model: ir.Model) -> None:
        apply_rules(model, _noop_rules(), to_fixed_point=True)
