"""Skip onnxscript rewrite rules that cannot match before the rewriter tries them.

onnxscript's ``RewriteRuleSet`` tries every rule on every node (``for node: for rule:``); a try
that fails on the first op-type check is cheap, but a 300-node BERT × 20 rules × several rounds is
tens of thousands of tries, most of the pipeline's time. A pattern can only match when every op
on its mandatory spine (its output nodes and the nodes producing their inputs, transitively,
excluding ``OrValue`` alternatives) is present in the graph, so rules whose spine names an op the
model does not have are dropped from the set for that round.

The rules that stay are matched by :class:`RootCheckedMatcher`: the rewriter matches a node
against the pattern's first output node, so a node of another op type can never match; the
matcher refuses it before the generic matching starts, which makes a failed try many times
cheaper. It is onnxscript's public extension point (a rule's ``matcher``); the rule is a copy
built with it (:func:`fusionviz.passes._compat.with_matcher`), the library's object is never
changed. Commuted variants are expanded here, before the copy, and keep the matcher.

Rule objects are not thread-safe: onnxscript's matcher keeps the match in progress on the rule,
and rule objects are shared (onnxscript's module-level rules, our cached lists). The app runs
pipelines in two threads (the page and the one-toggle-away prefetch) and for two sessions at
once, so every rewrite holds :data:`REWRITE_LOCK` while the rule set walks the graph
(:func:`fusionviz.passes.rewrite.apply_rules`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.walk import all_nodes

#: Serializes rule matching (see the module docstring); re-entrant for nested rule sets.
REWRITE_LOCK = threading.RLock()

_REQUIRED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_ops(model: ir.Model) -> set[str]:
    """Every op type in the model, subgraphs included (domains ignored: a conservative filter)."""
    return {n.op_type for n in all_nodes(model)}


def required_ops(rule: orp.RewriteRule) -> frozenset[str]:
    """Op types every match of ``rule`` needs; empty when unknown (the rule is then always kept)."""
    ops = _REQUIRED.get(rule)
    if ops is None:
        ops = _REQUIRED[rule] = _compat.pattern_ops(_compat.target_pattern(rule))[1]
    return ops


class RootCheckedMatcher(orp.SimplePatternMatcher):
    """onnxscript's matcher, refusing a node whose op type is not the pattern's root first."""

    def __init__(self, pattern) -> None:
        super().__init__(pattern)
        self._root = _compat.pattern_ops(pattern)[0]

    def match(self, model, graph_or_function, node, *, verbose=0, remove_nodes=True, tracer=None):
        if self._root is not None and node.op_type != self._root:
            return orp.MatchResult().fail(f"{node.op_type} is not {self._root}")
        return super().match(model, graph_or_function, node, verbose=verbose, remove_nodes=remove_nodes,
                             tracer=tracer)


def _root_checked(rule: orp.RewriteRule) -> orp.RewriteRule:
    """``rule`` matched by :class:`RootCheckedMatcher` (one copy per rule, reused)."""
    checked = _CHECKED.get(rule)
    if checked is None:
        checked = _CHECKED[rule] = _compat.with_matcher(rule, RootCheckedMatcher)
        _REQUIRED[checked] = required_ops(rule)
    return checked


def applicable_rules(rules: Iterable[orp.RewriteRule], ops: set[str], *, commute: bool = False) -> list:
    """The rules of ``rules`` (with their commuted variants when ``commute``) whose mandatory
    ops are all in ``ops``, in their order, each with the fast root check."""
    expanded = [c for r in rules for c in r.commute()] if commute else list(rules)
    return [_root_checked(r) for r in expanded if required_ops(r) <= ops]


def any_applicable(rules: Sequence[orp.RewriteRule], ops: set[str]) -> bool:
    return any(required_ops(r) <= ops for r in rules)
