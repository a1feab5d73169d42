"""Simplification passes: remove or precompute what does nothing at inference time."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import IdentityEliminationPass

from fusionviz.passes.base import Category, Pass


class IdentityElimination(Pass):
    """Wraps onnx-ir's IdentityEliminationPass (its numbered cases apply)."""

    name = "identity_elimination"
    title = "Identity elimination"
    category = Category.SIMPLIFY
    order = 120
    explain = """\
**What:** removes `Identity` nodes, wiring their consumers straight to the input.
An Identity that produces a graph output is kept only when its input is also a graph input.

**Why faster:** every node is a kernel launch and, without in-place reuse, a copy of the
tensor. Exporters leave Identities around parameters and outputs; they cost time and memory
for no computation.
"""

    def transform(self, model: ir.Model) -> None:
        IdentityEliminationPass()(model)


PASSES: list[type[Pass]] = [IdentityElimination]
