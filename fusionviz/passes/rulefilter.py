"""Skip onnxscript rewrite rules that cannot match before the rewriter tries them.

onnxscript's ``RewriteRuleSet`` tries every rule on every node (``for node: for rule:``); a try
that fails on the first op-type check is cheap, but a 300-node BERT × 20 rules × several rounds is
tens of thousands of tries, most of the pipeline's time. A pattern can only match when every op
on its mandatory spine (its output nodes and the nodes producing their inputs, transitively,
excluding ``OrValue`` alternatives) is present in the graph, so rules whose spine names an op the
model does not have are dropped from the set for that round.

The rules that stay get a fast root check: the rewriter matches a node against the pattern's
first output node, so a node of another op type can never match; checking ``node.op_type``
before entering the generic matcher makes a failed try ~20x cheaper. Commuted variants are
expanded here (before the check is installed), not by ``RewriteRuleSet(commute=True)``.

Rule objects are not thread-safe: onnxscript's matcher keeps the match in progress on the rule
(``self._match``), and rule objects are shared (onnxscript's module-level rules, our cached
lists). The app runs pipelines in two threads (the page and the one-toggle-away prefetch) and
for two sessions at once, so every rewrite goes through :func:`apply_rule_set`, which holds one
process-wide lock while the rule set walks the graph.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import onnx_ir as ir
from onnxscript.rewriter import _pattern_ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.base import all_nodes


def model_ops(model: ir.Model) -> set[str]:
    """Every op type in the model, subgraphs included (domains ignored: a conservative filter)."""
    return {n.op_type for n in all_nodes(model)}


def required_ops(rule: object) -> frozenset[str]:
    """Op types every match of ``rule`` needs; empty when unknown (the rule is then always kept)."""
    cached = getattr(rule, "_fusionviz_required_ops", None)
    if cached is not None:
        return cached
    ops: set[str] = set()
    pattern = getattr(rule, "_target_pattern", None)
    stack = list(getattr(pattern, "output_nodes", ()) or ())
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        op = getattr(node, "op", None)
        if isinstance(op, _pattern_ir.StringConstantPattern):
            ops.add(op.value())
        for inp in getattr(node, "inputs", ()) or ():
            if isinstance(inp, _pattern_ir.NodeOutputPattern):
                stack.append(inp.producer())
    result = frozenset(ops)
    try:
        rule._fusionviz_required_ops = result  # type: ignore[attr-defined]
    except AttributeError:  # slotted / frozen rule objects: recompute next time
        pass
    return result


def _with_root_check(rule: object) -> object:
    """Install (once) a ``try_rewrite`` that rejects nodes of the wrong op type up front."""
    if getattr(rule, "_fusionviz_root_checked", False):
        return rule
    pattern = getattr(rule, "_target_pattern", None)
    outs = getattr(pattern, "output_nodes", None)
    op = getattr(outs[0], "op", None) if outs else None
    if isinstance(op, _pattern_ir.StringConstantPattern):
        root = op.value()
        slow = rule.try_rewrite  # type: ignore[attr-defined]

        def try_rewrite(model, graph_or_function, node, *, verbose=None, tracer=None):
            if node.op_type != root:
                return None
            return slow(model, graph_or_function, node, verbose=verbose, tracer=tracer)

        rule.try_rewrite = try_rewrite  # type: ignore[attr-defined]
    try:
        rule._fusionviz_root_checked = True  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return rule


def applicable_rules(rules: Iterable[object], ops: set[str], *, commute: bool = False) -> list:
    """The rules of ``rules`` (with their commuted variants when ``commute``) whose mandatory
    ops are all in ``ops``, in their order, each with the fast root check."""
    expanded = [c for r in rules for c in r.commute()] if commute else list(rules)  # type: ignore[attr-defined]
    return [_with_root_check(r) for r in expanded if required_ops(r) <= ops]


def any_applicable(rules: Sequence[object], ops: set[str]) -> bool:
    return any(required_ops(r) <= ops for r in rules)


#: Serializes rule matching (see the module docstring); re-entrant for nested rule sets.
REWRITE_LOCK = threading.RLock()


def apply_rule_set(model: ir.Model, rules: Sequence[object], *, remove_unused_nodes: bool | None = None) -> int:
    """``RewriteRuleSet(rules).apply_to_model(model)`` under :data:`REWRITE_LOCK`."""
    rule_set = orp.RewriteRuleSet(list(rules))
    if remove_unused_nodes is not None:
        rule_set.remove_unused_nodes = remove_unused_nodes
    with REWRITE_LOCK:
        return rule_set.apply_to_model(model)
