"""eliminate_common_subexpressions: common subexpression elimination (onnx-ir's pass, cleaning up only after itself)."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import CommonSubexpressionEliminationPass

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.cleanup import Cleanup


class CommonSubexpressionElimination(Pass, name="eliminate_common_subexpressions", aliases=("cse",), category=Category.SIMPLIFY, order=150):
    """Wraps onnx-ir's CommonSubexpressionEliminationPass."""

    mirrors_ort = "basic"

    title = "Common subexpression elimination"
    explain = """\
**What:** when two nodes run the same op with the same attributes on the same inputs, the
second is removed and its consumers use the first one's output. Random ops and control flow
are never merged.

**Why faster:** the duplicate computation and its output buffer disappear. Exporters duplicate
`Shape`/`Gather`/`Unsqueeze` chains and mask computations once per layer.
"""

    def transform(self, model: ir.Model) -> None:
        cleanup = Cleanup(model)
        CommonSubexpressionEliminationPass()(model)
        cleanup.prune(model)
