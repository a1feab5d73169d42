"""The fence: the only module that touches private names of onnxscript and onnx-ir.

fusionviz builds on parts of onnxscript 0.7.2 and onnx-ir 1.1.0 that they do not export (pinned
exactly in requirements.txt and pyproject.toml). Everything of that kind is reached through
this module, so a library upgrade breaks in one place, and ``tests/passes/test_compat.py``
names the symbol that moved. What we rely on:

1. Library rule classes that fusionviz extends with guards (their pattern and math are kept):
   BatchNorm into Conv / ConvTranspose / Gemm, scalar affine before Conv, Pad into Conv,
   MatMul + Add into Gemm, the GELU and RMSNorm forms of ``ort_fusions``, LayerNorm.
2. onnxscript's constant folder (``FoldConstantsPass``, ``Replacement``), subclassed with
   public-named hooks for its per-node shape inference and the model's opset imports
   (:class:`ConstantFolderBase`).
3. Pattern introspection: which op types a rule's pattern must find (:func:`pattern_ops`), and
   the fixed-op skeleton below its root (:func:`pattern_tree`).
4. A copy of a rule with another matcher (:func:`with_matcher`), built the way onnxscript's own
   ``RewriteRule.commute`` builds its copies.
5. onnx-ir's ``call_onnx_api`` (its way to run an onnx C API call without big initializers).

The rest of the engine uses only public API: ``onnxscript.rewriter.pattern``,
``onnxscript.rewriter.rules.common`` (exported rules), ``onnxscript.optimizer``,
``onnx_ir.passes.common``.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir
from onnx_ir.passes.common import _c_api_utils
from onnxscript.optimizer import _constant_folding
from onnxscript.rewriter import _pattern_ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.ort_fusions import erfgelu, gelu, rms_normalization
from onnxscript.rewriter.rules.common import (
    _fuse_batchnorm,
    _fuse_conv_affine,
    _fuse_pad_into_conv,
    _matmul_add_to_gemm,
)
from onnxscript.rewriter.rules.fusion import _layer_norm

# --------------------------------------------------------------------------- 1. rule classes

FuseBatchNormIntoConv = _fuse_batchnorm.FuseBatchNormIntoConv
FuseBatchNormIntoConvTranspose = _fuse_batchnorm.FuseBatchNormIntoConvTranspose
FuseBatchNormIntoGemm = _fuse_batchnorm.FuseBatchNormIntoGemm
AffineConvFusion = _fuse_conv_affine.AffineConvFusion
FuseConvPad = _fuse_pad_into_conv.FuseConvPad
NormalizePadFormatConv = _fuse_pad_into_conv.NormalizePadFormatConv
MatMulAddToGemm = _matmul_add_to_gemm.MatMulAddToGemm
TransAMatMulAddToGemm = _matmul_add_to_gemm.TransAMatMulAddToGemm
TransBMatMulAddToGemm = _matmul_add_to_gemm.TransBMatMulAddToGemm
TransABMatMulAddToGemm = _matmul_add_to_gemm.TransABMatMulAddToGemm
GeluErfFusion = gelu.GeluErfFusion
GeluTanhFusion = gelu.GeluTanhFusion
erf_gelu_pattern_2 = erfgelu.erf_gelu_pattern_2
erf_gelu_replacement = erfgelu.gelu
LayerNormFusion = _layer_norm.LayerNormFusion
RmsNormFusion = rms_normalization.RmsNormFusion
LayerNormBiasFusion = _layer_norm.LayerNormBiasFusion

# --------------------------------------------------------------------------- 2. constant folder

Replacement = _constant_folding.Replacement


class ConstantFolderBase(_constant_folding.FoldConstantsPass):
    """onnxscript's ``FoldConstantsPass`` with public-named hooks over its private ones."""

    def _do_inference(self, node: ir.Node) -> None:
        self.infer_node(node)

    def infer_node(self, node: ir.Node) -> None:
        """Per-node type and shape inference (override to skip or redo it)."""
        super()._do_inference(node)

    @property
    def opset_imports(self) -> dict[str, int]:
        """The opset imports of the model being folded."""
        return self._opset_imports


# --------------------------------------------------------------------------- 3. pattern ops


def target_pattern(rule: orp.RewriteRule) -> object | None:
    """The pattern ``rule`` matches (None when it has none we can read)."""
    return getattr(rule, "_target_pattern", None)


def pattern_ops(target: object | None) -> tuple[str | None, frozenset[str]]:
    """(root op, spine ops) of a rule's target pattern.

    The root is the op type of the pattern's first output node (the node the rewriter matches a
    graph node against), or None when it is not a fixed string. The spine is every op type on
    the pattern's mandatory path: its output nodes and, transitively, the nodes producing their
    inputs (alternatives of an ``OrValue`` excluded). Empty when the pattern cannot be read.
    """
    outs = list(getattr(target, "output_nodes", ()) or ())
    root = _op_name(outs[0]) if outs else None
    ops: set[str] = set()
    stack = list(outs)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        op = _op_name(node)
        if op is not None:
            ops.add(op)
        for inp in getattr(node, "inputs", ()) or ():
            if isinstance(inp, _pattern_ir.NodeOutputPattern):
                stack.append(inp.producer())
    return root, frozenset(ops)


def pattern_size(target: object | None) -> int:
    """How many nodes a rule's target pattern has (0 when it cannot be read)."""
    count = getattr(target, "num_nodes", None)
    return int(count()) if callable(count) else len(pattern_ops(target)[1])


PatternTree = tuple  # (op type, ((input index, PatternTree), ...))


def pattern_tree(target: object | None, depth: int = 8) -> PatternTree | None:
    """The fixed-op skeleton of a rule's target pattern from its root: ``(op, ((i, subtree),
    ...))`` where input ``i`` of the node must be made by a node matching ``subtree``. Inputs
    that are variables, constants, ``OrValue`` alternatives or nodes of a non-fixed op (and
    anything below ``depth``) put no requirement. None when the root's op is not fixed."""
    outs = list(getattr(target, "output_nodes", ()) or ())
    return _tree(outs[0], depth) if outs else None


def _tree(node_pattern: object, depth: int) -> PatternTree | None:
    op = _op_name(node_pattern)
    if op is None:
        return None
    kids = []
    if depth > 0:
        for i, inp in enumerate(getattr(node_pattern, "inputs", ()) or ()):
            if isinstance(inp, _pattern_ir.NodeOutputPattern):
                sub = _tree(inp.producer(), depth - 1)
                if sub is not None:
                    kids.append((i, sub))
    return op, tuple(kids)


def _op_name(node_pattern: object) -> str | None:
    op = getattr(node_pattern, "op", None)
    return op.value() if isinstance(op, _pattern_ir.StringConstantPattern) else None


# --------------------------------------------------------------------------- 4. rule copies


def with_matcher(rule: orp.RewriteRule, matcher: Callable[[object], orp.PatternMatcher],
                 condition: Callable[[Callable], Callable] | None = None) -> orp.RewriteRule:
    """A copy of ``rule`` whose target pattern is matched by ``matcher(pattern)``, its condition
    function wrapped by ``condition`` when given (``condition(original) -> function``)."""
    cond = rule._condition_function
    return orp.RewriteRule(
        rule._target_pattern,
        rule._replacement_pattern,
        condition(cond) if condition is not None else cond,
        matcher(rule._target_pattern),
        rule._verbose,
        rule.name,
        rule.remove_nodes,
        rule.graph_pre_visitor,
        rule.graph_post_visitor,
        rule.as_function,
    )


# --------------------------------------------------------------------------- 5. onnx C API

call_onnx_api = _c_api_utils.call_onnx_api
