"""fold_chains: runs of the same data-movement op merged into one."""

from __future__ import annotations

import functools

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.rules import common as lib_rules

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.simplify.rules.lossless_cast_cast import LosslessCastCast
from fusionviz.passes.simplify.rules.noop import flatten
from fusionviz.passes.simplify.rules.slice_slice import SliceSlice


@functools.cache
def _chain_rules() -> tuple[orp.RewriteRule, ...]:
    return tuple(flatten(
        lib_rules.transpose_transpose_rule,
        lib_rules.reshape_reshape_rule,
        lib_rules.unsqueeze_unsqueeze_rule,
        lib_rules.squeeze_reshape_1d_rule,
        LosslessCastCast.rule(),
        SliceSlice.rule(),
    ))


class ChainMerging(Pass, name="fold_chains", aliases=("chain_merging",), category=Category.SIMPLIFY, order=140,
                   trigger_ops={"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Cast", "Slice"}):
    """onnxscript chain rules plus LosslessCastCast and SliceSlice."""

    mirrors_ort = "basic"

    title = "Transpose / Reshape / Squeeze / Cast / Slice chain merging"
    needs_shapes = True
    explain = """\
**What:** merges runs of the same data-movement op into one:
`Transpose(Transpose(x, p1), p2)` → `Transpose(x, p1∘p2)` (removed when the composition is the
identity; `(p1∘p2)[i] = p1[p2[i]]`), `Reshape(Reshape(x))` → one `Reshape`,
`Unsqueeze(Unsqueeze(x))` → one `Unsqueeze`, `Reshape(Squeeze(x), [-1])` → `x` for 1-D `x`,
`Cast(Cast(x))` → one `Cast` when the first cast is exact, and `Slice(Slice(x))` on different
axes → one `Slice`.

**Why faster:** each op in the chain reads and writes the whole tensor (a Transpose is a full
strided copy); merged, the data moves once. Such chains come from layout conversions and
`view`/`permute` code in PyTorch.

Wraps onnxscript rules `transpose_transpose_rule`, `reshape_reshape_rule`,
`unsqueeze_unsqueeze_rule`, `squeeze_reshape_1d_rule`, plus fusionviz's `LosslessCastCast` and
`SliceSlice`. (onnxscript's `cast_cast_rule` is not used: float64→float32→float16 rounds twice.)
"""

    def transform(self, model: ir.Model) -> None:
        apply_rules(model, _chain_rules(), to_fixed_point=True)
