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
    """onnxscript's matcher, refusing first a node whose op type is not the pattern's root, or
    whose inputs are not made by the ops the pattern's root reads (one look at each producer:
    of the 2^k commuted copies of a rule, this turns away all but the one whose operand order
    fits, before the generic matcher starts)."""

    def __init__(self, pattern) -> None:
        super().__init__(pattern)
        tree = _compat.pattern_tree(pattern, depth=1)
        self._root = tree[0] if tree else None
        self._inputs = tuple((i, sub[0]) for i, sub in tree[1]) if tree else ()

    def match(self, model, graph_or_function, node, *, verbose=0, remove_nodes=True, tracer=None):
        if self._root is not None and node.op_type != self._root:
            return orp.MatchResult().fail(f"{node.op_type} is not {self._root}")
        inputs = node.inputs
        for i, op in self._inputs:
            if i < len(inputs):
                producer = inputs[i].producer() if inputs[i] is not None else None
                if producer is None or producer.op_type != op:
                    return orp.MatchResult().fail(f"input {i} is not made by {op}")
        return super().match(model, graph_or_function, node, verbose=verbose, remove_nodes=remove_nodes,
                             tracer=tracer)


def _root_checked(rule: orp.RewriteRule) -> orp.RewriteRule:
    """``rule`` matched by :class:`RootCheckedMatcher` (one copy per rule, reused)."""
    checked = _CHECKED.get(rule)
    if checked is None:
        checked = _CHECKED[rule] = _compat.with_matcher(rule, RootCheckedMatcher)
        _REQUIRED[checked] = required_ops(rule)
    return checked


class ModelShapes:
    """The op-type skeleton above every node of a model (subgraphs included), up to ``depth``
    producers up, interned: node skeletons that look alike share one id, so a rule's pattern
    skeleton (:func:`fusionviz.passes._compat.pattern_tree`) is tested once per distinct shape,
    not once per node."""

    def __init__(self, model: ir.Model, depth: int = 8) -> None:
        self._table: list[tuple[str, tuple[int | None, ...] | None]] = []
        self._ids: dict[tuple, int] = {}
        self.roots: dict[str, set[int]] = {}
        memo: dict[tuple[int, int], int] = {}

        def sig(node: ir.Node, d: int) -> int:
            key = (id(node), d)
            got = memo.get(key)
            if got is None:
                kids = None
                if d > 0:
                    kids = tuple(sig(v.producer(), d - 1) if v is not None and v.producer() is not None else None
                                 for v in node.inputs)
                entry = (node.op_type, kids)
                got = self._ids.get(entry)
                if got is None:
                    got = self._ids[entry] = len(self._table)
                    self._table.append(entry)
                memo[key] = got
            return got

        for n in all_nodes(model):
            self.roots.setdefault(n.op_type, set()).add(sig(n, depth))

    def fits(self, tree, memo: dict | None = None) -> bool:
        """Whether some node of the model has the skeleton ``tree`` above it."""
        memo = {} if memo is None else memo
        return any(self._fits(tree, s, memo) for s in self.roots.get(tree[0], ()))

    def _fits(self, tree, sid: int, memo: dict) -> bool:
        key = (id(tree), sid)
        got = memo.get(key)
        if got is None:
            op, kids = self._table[sid]
            got = op == tree[0]
            if got and kids is not None:
                for i, sub in tree[1]:
                    if i < len(kids) and (kids[i] is None or not self._fits(sub, kids[i], memo)):
                        got = False
                        break
            memo[key] = got
        return got


def _tree_of(rule: orp.RewriteRule):
    got = _TREE.get(rule)
    if got is None:
        got = _TREE[rule] = (_compat.pattern_tree(_compat.target_pattern(rule)),)
    return got[0]


_TREE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def applicable_rules(rules: Iterable[orp.RewriteRule], ops: set[str], *, commute: bool = False,
                     shapes: ModelShapes | None = None) -> list:
    """The rules of ``rules`` (with their commuted variants when ``commute``) whose mandatory
    ops are all in ``ops`` and, when the model's ``shapes`` are given, whose pattern skeleton
    fits above some node of it; in their order, each with the fast root check. A rule set walks
    every node once per rule, so dropping the commuted copies no node can match is most of its
    time on a big model (GELU's tanh form has 384 copies)."""
    expanded = [c for r in rules for c in r.commute()] if commute else list(rules)
    memo: dict = {}
    out = []
    for r in expanded:
        if not required_ops(r) <= ops:
            continue
        tree = _tree_of(r) if shapes is not None else None
        if tree is None or shapes.fits(tree, memo):
            out.append(_root_checked(r))
    return out


def any_applicable(rules: Sequence[orp.RewriteRule], ops: set[str]) -> bool:
    return any(required_ops(r) <= ops for r in rules)
