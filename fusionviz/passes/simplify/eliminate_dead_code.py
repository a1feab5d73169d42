"""eliminate_dead_code: unused nodes, initializers, functions and opset imports removed."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import (
    RemoveUnusedFunctionsPass,
    RemoveUnusedNodesPass,
    RemoveUnusedOpsetsPass,
)

from fusionviz.passes.base import Category, Pass


class DeadCodeElimination(Pass, name="eliminate_dead_code", aliases=("dead_code_elimination",), category=Category.SIMPLIFY, order=190):
    """Wraps onnx-ir's RemoveUnusedNodesPass, RemoveUnusedFunctionsPass, RemoveUnusedOpsetsPass."""

    mirrors_ort = "basic"

    title = "Dead code elimination"
    explain = """\
**What:** removes nodes whose outputs reach no graph output, initializers nothing uses, model
functions nothing calls and opset imports no node needs.

**Why faster:** onnxruntime would still allocate and run dead nodes; unused initializers
cost load time and memory. Other passes leave such leftovers (each pass here removes only the
nodes *it* made dead, so that this pass can be switched on and off on its own).
"""

    def transform(self, model: ir.Model) -> None:
        default_opset = model.opset_imports.get("")
        RemoveUnusedNodesPass()(model)
        RemoveUnusedFunctionsPass()(model)
        RemoveUnusedOpsetsPass()(model)
        if default_opset is not None and "" not in model.opset_imports:
            model.opset_imports[""] = default_opset  # the default domain is always declared
