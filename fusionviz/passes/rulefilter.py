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

from fusionviz.passes import _compat, nearmiss
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


#: patterns of at most this many nodes report a node standing between two of their ops
SMALL_PATTERN = 3


def near_threshold(size: int) -> int:
    """Matched nodes from which a structural failure is a near miss (nearmiss rule 2)."""
    return max(2, (size + 1) // 2)


class RootCheckedMatcher(orp.SimplePatternMatcher):
    """onnxscript's matcher, refusing first a node whose op type is not the pattern's root, or
    whose inputs are not made by the ops the pattern's root reads (one look at each producer:
    of the 2^k commuted copies of a rule, this turns away all but the one whose operand order
    fits, before the generic matcher starts)."""

    #: the rule this matcher serves (set by :func:`_root_checked`; names its near misses)
    rule_name = ""

    def __init__(self, pattern) -> None:
        super().__init__(pattern)
        tree = _compat.pattern_tree(pattern, depth=1)
        self._root = tree[0] if tree else None
        self._inputs = tuple((i, sub[0]) for i, sub in tree[1]) if tree else ()
        size = _compat.pattern_size(pattern)
        #: a structural failure is a near miss from this many matched nodes on (nearmiss rule 2)
        self._near = near_threshold(size)
        #: a two- or three-node pattern: one wrong producer may be a node standing in between
        self._small = size <= SMALL_PATTERN

    def match(self, model, graph_or_function, node, *, verbose=0, remove_nodes=True, tracer=None):
        if self._root is not None and node.op_type != self._root:
            return orp.MatchResult().fail(f"{node.op_type} is not {self._root}")
        inputs = node.inputs
        for i, op in self._inputs:
            if i < len(inputs):
                producer = inputs[i].producer() if inputs[i] is not None else None
                if producer is None or producer.op_type != op:
                    if producer is not None and self._small and nearmiss.active():
                        nearmiss.between(self.rule_name, node, producer, op)
                    return orp.MatchResult().fail(f"input {i} is not made by {op}")
        result = super().match(model, graph_or_function, node, verbose=verbose, remove_nodes=remove_nodes,
                               tracer=tracer)
        if not result and nearmiss.active() and len(result.nodes) >= self._near:
            nearmiss.from_match(self.rule_name, node, result.nodes, result.reason,
                                result.failure_nodes_and_values, condition=False)
        return result


def _recording_condition(rule_name: str):
    """Wraps a rule's condition function so that a failed check is reported (nearmiss rule 2)."""

    def wrap(condition):
        def checked(context, **bindings):
            result = condition(context, **bindings)
            if (not result and len(context.nodes) > 1 and nearmiss.active()  # one node: no near miss
                    and not getattr(result, nearmiss.REPORTED, False)):  # the check said it itself
                reason = getattr(result, "reason", "") or ""
                sources = getattr(result, "failure_nodes_and_values", ()) or ()
                nearmiss.from_match(rule_name, context.root, context.nodes, reason, sources, condition=True)
            return result

        return checked

    return wrap


def _root_checked(rule: orp.RewriteRule) -> orp.RewriteRule:
    """``rule`` matched by :class:`RootCheckedMatcher` (one copy per rule, reused)."""
    checked = _CHECKED.get(rule)
    if checked is None:
        name = rule.name or type(rule).__name__

        def matcher(pattern) -> RootCheckedMatcher:
            m = RootCheckedMatcher(pattern)
            m.rule_name = name
            return m

        checked = _CHECKED[rule] = _compat.with_matcher(rule, matcher, _recording_condition(name))
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
        #: the nodes that have each skeleton (near-miss scans look a dropped rule's sites up here)
        self.sites: dict[int, list[ir.Node]] = {}
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
            s = sig(n, depth)
            self.roots.setdefault(n.op_type, set()).add(s)
            self.sites.setdefault(s, []).append(n)

    def fits(self, tree, memo: dict | None = None) -> bool:
        """Whether some node of the model has the skeleton ``tree`` above it."""
        memo = {} if memo is None else memo
        return any(self._fits(tree, s, memo) for s in self.roots.get(tree[0], ()))

    def partial(self, tree, sid: int, memo: dict) -> int:
        """How many of the skeleton ``tree``'s nodes a node of skeleton ``sid`` has above it,
        each branch counted up to its first mismatch."""
        key = (id(tree), sid)
        got = memo.get(key)
        if got is None:
            op, kids = self._table[sid]
            got = 0
            if op == tree[0]:
                got = 1
                if kids is not None:
                    for i, sub in tree[1]:
                        if i < len(kids) and kids[i] is not None:
                            got += self.partial(sub, kids[i], memo)
            memo[key] = got
        return got

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
    dropped = []
    for r in expanded:
        if not required_ops(r) <= ops:
            dropped.append(r)
            continue
        tree = _tree_of(r) if shapes is not None else None
        if tree is None or shapes.fits(tree, memo):
            out.append(_root_checked(r))
        else:
            dropped.append(r)
    if dropped and shapes is not None and nearmiss.active():
        _near_misses_of_dropped(dropped, shapes)
    return out


def _tree_size(tree) -> int:
    return 1 + sum(_tree_size(sub) for _, sub in tree[1])


_SCAN_MATCHERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scan_matcher(rule: orp.RewriteRule) -> RootCheckedMatcher:
    m = _SCAN_MATCHERS.get(rule)
    if m is None:
        m = _SCAN_MATCHERS[rule] = RootCheckedMatcher(_compat.target_pattern(rule))
        m.rule_name = rule.name or type(rule).__name__
    return m


def _near_misses_of_dropped(dropped: Sequence[orp.RewriteRule], shapes: ModelShapes) -> None:
    """The filter's dropped rules still have near misses (nearmiss rule 2): a small pattern
    whose anchor reads the op it needs through one node in between, and a big one whose
    skeleton matches at least half-way above a node, where the rule's own matcher then says
    exactly where it stops. Only the sites whose skeleton qualifies are matched."""
    by_tree: dict = {}
    for r in dropped:
        tree = _tree_of(r)
        if tree is not None and tree[0] in shapes.roots:
            by_tree.setdefault(tree, []).append(r)
    memo: dict = {}
    for tree, rules in by_tree.items():
        size = _tree_size(tree)
        sids = shapes.roots[tree[0]]
        if size <= SMALL_PATTERN:
            name = rules[0].name or type(rules[0]).__name__
            for i, (op, _) in tree[1]:
                for sid in sids:
                    for node in shapes.sites.get(sid, ()):
                        v = node.inputs[i] if i < len(node.inputs) else None
                        p = v.producer() if v is not None else None
                        if p is not None and p.op_type != op:
                            nearmiss.between(name, node, p, op)
            continue
        need = near_threshold(_compat.pattern_size(_compat.target_pattern(rules[0])))
        for sid in sids:
            if shapes.partial(tree, sid, memo) < need:
                continue
            for node in shapes.sites.get(sid, ()):
                for r in rules:
                    if node.graph is not None:
                        _scan_matcher(r).match(None, node.graph, node, remove_nodes=True)


def any_applicable(rules: Sequence[orp.RewriteRule], ops: set[str]) -> bool:
    return any(required_ops(r) <= ops for r in rules)
