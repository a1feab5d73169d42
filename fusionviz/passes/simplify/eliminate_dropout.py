"""eliminate_dropout: Dropout is the identity at inference."""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.cleanup import Cleanup, detach_and_remove
from fusionviz.passes.facts import const_value, is_onnx
from fusionviz.passes.hygiene import unique_value_names
from fusionviz.passes.simplify.eliminate_identity import eliminate_identity
from fusionviz.passes.walk import graph_likes

logger = logging.getLogger(__name__)

def _dropout_is_inference(node: ir.Node, opset: int) -> tuple[bool, str]:
    """(True, "") when this Dropout is the identity at inference; else (False, why)."""
    if opset < 7:
        is_test = node.attributes.get_int("is_test", 0)
        return (bool(is_test), "" if is_test else "is_test=0 (training) in opset < 7")
    if opset < 12:
        return True, ""
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return True, ""
    mode = const_value(node.inputs[2])
    if mode is None:
        return False, "training_mode is not a constant"
    if bool(mode.reshape(-1)[0]):
        return False, "training_mode is true"
    return True, ""


class DropoutElimination(Pass, name="eliminate_dropout", aliases=("dropout_elimination",), category=Category.SIMPLIFY, order=125,
                         trigger_ops={"Dropout"}):
    """Own rule (onnxscript's dropout rules only match the attribute form of opset < 12)."""

    mirrors_ort = "basic"

    title = "Dropout elimination (inference)"
    explain = """\
**What:** at inference a `Dropout` passes its input through unchanged (any ratio), so it is
removed. A Dropout in training mode (`training_mode` true, or not a constant) is kept. When its
`mask` output is used, the mask (all true at inference) is made by
`ConstantOfShape(Shape(x), true)`.

**Why faster:** one fewer kernel and one fewer copy of the activation per Dropout; training
exports of BERT-style models have one after every attention and feed-forward block.
"""

    def transform(self, model: ir.Model) -> None:
        cleanup = Cleanup(model)
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        for g in graph_likes(model):
            for node in list(g):
                if not is_onnx(node, "Dropout") or not node.inputs or node.inputs[0] is None:
                    continue
                ok, why = _dropout_is_inference(node, opset)
                if not ok:
                    logger.debug("dropout %s kept: %s", node.name, why)
                    nearmiss.note([node], node, f"kept: {why}", rule="dropout")
                    continue
                x = node.inputs[0]
                out = node.outputs[0]
                mask = node.outputs[1] if len(node.outputs) > 1 else None
                out_name = out.name
                mask_name = mask.name if mask is not None else None
                new_nodes: list[ir.Node] = []
                mask_value = None
                if mask is not None and (mask.uses() or mask.is_graph_output()):
                    if opset < 9:
                        continue  # no ConstantOfShape before opset 9
                    shape = ir.node("Shape", [x], name=f"{node.name}_mask_shape")
                    fill = ir.node("ConstantOfShape", [shape.outputs[0]],
                                   attributes={"value": ir.tensor(np.array([True]))},
                                   name=f"{node.name}_mask")
                    mask_value = fill.outputs[0]
                    mask_value.dtype, mask_value.shape = ir.DataType.BOOL, x.shape
                    new_nodes += [shape, fill]
                ident = ir.node("Identity", [x], name=f"{node.name}_bypass")
                ident.outputs[0].shape, ident.outputs[0].type = out.shape, out.type
                new_nodes.append(ident)
                g.insert_before(node, new_nodes)
                ir.convenience.replace_all_uses_with(out, ident.outputs[0], replace_graph_outputs=True)
                if mask_value is not None:
                    ir.convenience.replace_all_uses_with(mask, mask_value, replace_graph_outputs=True)
                for v in node.outputs:
                    v.name = None  # the replacements carry the names now
                detach_and_remove(g, node)
                ident.outputs[0].name = out_name
                if mask_value is not None:
                    mask_value.name = mask_name
                eliminate_identity(ident)
        cleanup.prune(model)
        unique_value_names(model)  # the mask nodes' values are named per graph by onnx-ir
