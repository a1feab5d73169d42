"""The constant folder: onnxscript's, restricted to what makes a value *constant*.

Its partial evaluators also bypass Identity/Dropout/Cast/Expand nodes on runtime tensors; those
belong to their own passes here, so such replacements are declined. One exception:
``CastLike(constant, x)`` becomes ``Cast(constant)`` (a constant) and is folded next round.
An ``If`` with a constant condition is replaced by its branch (:mod:`.if_inlining`), never by
onnxscript's If rule. Folding may create at most a budget of new constant bytes
(:func:`fold_budget_bytes`).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes._compat import ConstantFolderBase, Replacement
from fusionviz.passes.facts import const_value, is_onnx, static_dims
from fusionviz.passes.simplify.if_inlining import (
    defined_name_counts,
    inline_blocker,
    inline_branch,
    taken_branch,
)
from fusionviz.passes.walk import subgraphs

logger = logging.getLogger(__name__)

FOLD_MAX_MB_ENV = "FUSIONVIZ_FOLD_MAX_MB"
DEFAULT_FOLD_MAX_MB = 256

def fold_budget_bytes() -> int:
    """Bytes constant folding may create in one run (env ``FUSIONVIZ_FOLD_MAX_MB``, default 256)."""
    raw = os.environ.get(FOLD_MAX_MB_ENV, "")
    try:
        mb = float(raw) if raw.strip() else DEFAULT_FOLD_MAX_MB
    except ValueError:
        logger.warning("%s=%r is not a number; using %s", FOLD_MAX_MB_ENV, raw, DEFAULT_FOLD_MAX_MB)
        mb = DEFAULT_FOLD_MAX_MB
    return max(0, int(mb * 1024 * 1024))


class FoldOnlyConstants(ConstantFolderBase):
    """onnxscript's folder, restricted to what makes a value *constant*.

    Its partial evaluators also bypass Identity/Dropout/Cast/Expand nodes on runtime tensors;
    those belong to their own passes here, so such replacements are declined. One exception:
    ``CastLike(constant, x)`` becomes ``Cast(constant)`` (a constant) and is folded next round.
    """

    def __init__(self, budget: int, *, specialize: bool = True) -> None:
        limit = max(budget, 1)
        super().__init__(shape_inference=True, input_size_limit=limit, output_size_limit=limit,
                         should_fold=self._should_fold)
        self.budget = budget
        #: fold Ifs with a constant condition, re-infer symbolic dims and fold inside subgraphs
        #: (see ConstantFolding); False: the main graph only, as its shapes were inferred
        self.specialize = specialize
        self.used = 0
        self.skipped: list[str] = []
        #: a replacement added a node that is not a Constant (CastLike -> Cast): folding it
        #: needs another round. Otherwise one topological visit has reached the fixed point.
        self.made_nodes = False
        self._model: ir.Model | None = None

    def visit_attribute(self, attr: ir.Attr) -> None:
        if self.specialize:
            super().visit_attribute(attr)

    def call(self, model: ir.Model):  # type: ignore[override]
        self._model = model  # If folding checks names against every graph of the model
        return super().call(model)

    def _should_fold(self, node: ir.Node) -> bool | None:
        if is_onnx(node, "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"):
            return False  # keep quantization information
        est = _estimate_output_bytes(node)
        if est is None:
            return None  # onnxscript's default size rules
        shared = _still_read_elsewhere(node) if est >= TIED_MIN_BYTES else None
        if shared is not None:  # a tied weight: folding would store a second copy of it
            w, other = shared
            nearmiss.note([node], node, f"folding it would store a second {est / 1e6:.1f} MB constant, while "
                          f"its input '{w.name}' stays in use ({other.op_type} {other.name} reads it too)",
                          hint="onnxruntime computes it at run time from the one stored weight", kind="condition",
                          rule="fold_tied_weight")
            return False
        if self.used + est > self.budget:
            self.skipped.append(node.name or node.op_type)
            return False
        self.used += est
        return True

    def infer_node(self, node: ir.Node) -> None:
        # Per-node inference can only refine what is unknown: outputs whose type and fully
        # static shape are already known (from the pipeline's whole-model inference) are left
        # alone. This halves the pass on models that were shape-inferred before it. A symbolic
        # dim is not known: folding may have made it computable (inside subgraphs, which the
        # whole-model inference saw before their inputs were constants).
        known = static_dims if self.specialize else (lambda shape: shape)
        if node.outputs and all(v.dtype is not None and known(v.shape) is not None for v in node.outputs):
            return
        super().infer_node(node)

    def process_node(self, node: ir.Node, is_function: bool):  # type: ignore[override]
        replacement = self._process_node(node, is_function)
        if replacement is not None and any(not is_onnx(n, "Constant") for n in replacement.new_nodes):
            self.made_nodes = True
        return replacement

    def _process_node(self, node: ir.Node, is_function: bool):
        if is_onnx(node, "Identity"):
            return None  # eliminate_identity's job
        if is_onnx(node, "If"):
            # Never onnxscript's If rule: it empties the branch before the replacement is
            # accepted, and renames captured outer values to the If's output names.
            return None if is_function or not self.specialize else self._fold_if(node)
        replacement = super().process_node(node, is_function)
        if replacement is None:
            return None
        if all(_is_constant_value(v) for v in replacement.new_outputs):
            return replacement
        if (len(replacement.new_nodes) == 1 and is_onnx(replacement.new_nodes[0], "Identity")
                and _is_constant_value(replacement.new_nodes[0].inputs[0])
                and not any(v.is_graph_output() for v in node.outputs)):
            # e.g. Expand/Cast/Reshape that leave a *constant* unchanged: use the constant itself
            return Replacement([replacement.new_nodes[0].inputs[0]], [])
        if (is_onnx(node, "CastLike") and const_value(node.inputs[0]) is not None
                and len(replacement.new_nodes) == 1 and replacement.new_nodes[0].op_type == "Cast"):
            return replacement
        return None

    def _fold_if(self, node: ir.Node) -> Replacement | None:
        """The Replacement of an If with a constant condition by its branch, or None (kept)."""
        branch, why = taken_branch(node)
        if branch is None:
            logger.debug("If %s kept: %s", node.name, why)
            return None
        self._reinfer(branch)
        why = inline_blocker(node, branch, self.opset_imports)
        if why:
            logger.info("fold_constants: If %s kept: %s", node.name, why)
            nearmiss.note([node], node, f"the If's condition is constant, but its branch cannot be inlined: {why}",
                          rule="fold_if")
            return None
        return inline_branch(node, branch, defined_name_counts(self._model))

    def _reinfer(self, branch: ir.Graph) -> None:
        """Infer the branch's value shapes afresh, in order (the folder visits an If before its
        branches, so they still hold what inference said before anything was folded; merging
        into those would keep a stale rank)."""
        for n in branch:
            if subgraphs(n):
                continue  # per-node inference does not see into subgraphs: keep what is known
            for v in n.outputs:
                v.shape = None
            super().infer_node(n)


#: A fold of a weight that other nodes keep reading is declined from this size on (tied weights:
#: ``Transpose(lm_head.weight)`` of a weight shared with the embedding would double it).
TIED_MIN_BYTES = 1024 * 1024


def _still_read_elsewhere(node: ir.Node) -> tuple[ir.Value, ir.Node] | None:
    """(input weight, another reader) when a constant input of ``node`` is also read by another
    node (or is a graph output), so folding ``node`` would keep both copies."""
    for v in node.inputs:
        if v is None or v.const_value is None:
            continue
        others = [u.node for u in v.uses() if u.node is not node]
        if others:
            return v, others[0]
    return None


def _is_constant_value(v: ir.Value | None) -> bool:
    if v is None:
        return False
    if v.const_value is not None:
        return True
    p = v.producer()
    return p is not None and is_onnx(p, "Constant")


def _estimate_output_bytes(node: ir.Node) -> int | None:
    total = 0
    for i, out in enumerate(node.outputs):
        dims: tuple[int, ...] | None = None
        dtype = out.dtype
        if i == 0 and is_onnx(node, "ConstantOfShape"):
            shape = const_value(node.inputs[0]) if node.inputs else None
            if shape is None:
                return None
            dims = tuple(int(s) for s in shape.reshape(-1))
            value = node.attributes.get("value")
            dtype = value.as_tensor().dtype if value is not None else ir.DataType.FLOAT
        else:
            dims = static_dims(out.shape)
        if dims is None or dtype is None:
            return None
        total += int(np.prod(dims, dtype=np.int64)) * max(dtype.itemsize, 1)
    return total
