"""Applying onnxscript rewrite rules: the one entry point every rule-based pass uses.

:func:`apply_rules` runs a list of rules (pattern + check + rewrite) on a model in place and
returns how many fired. Two conventions, chosen by the caller:

1. Fusions (default): one sweep of the rules; afterwards only what the rewrite orphaned goes
   away: nodes of the main graph and initializers that had consumers before and have none now
   (old weights, the Constant nodes that fed a Pad). A weight is rewritten only when no other
   node uses it, which each rule checks.
2. Simplifications (``to_fixed_point=True``): the rules run again until none fires (at most
   :data:`MAX_ROUNDS` rounds; rules can make the ops other rules need), in every graph; after
   each round the Identity nodes the rules produced are bypassed and the nodes they made dead
   are removed (:class:`fusionviz.passes.cleanup.Cleanup`).

Either way the rules are filtered by the ops present (:mod:`fusionviz.passes.rulefilter`), run
under the process-wide rewrite lock, and new value names are made unique across the model (the
rewriter names new values per graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.cleanup import Cleanup
from fusionviz.passes.hygiene import unique_value_names
from fusionviz.passes.rulefilter import REWRITE_LOCK, ModelShapes, applicable_rules, model_ops

MAX_ROUNDS = 8


def apply_rules(model: ir.Model, rules: Sequence[orp.RewriteRule], *, commute: bool = False,
                to_fixed_point: bool = False) -> int:
    """Apply ``rules`` to ``model`` in place (convention 1, or 2 with ``to_fixed_point``);
    ``commute`` adds every operand order of commutative ops. Returns how many rewrites fired."""
    if to_fixed_point:
        return _to_fixed_point(model, rules, commute=commute)
    return _once(model, rules, commute=commute)


def _used(value: ir.Value) -> bool:
    return bool(value.uses()) or value.is_graph_output()


def _run(model: ir.Model, rules: Sequence[orp.RewriteRule], *, remove_unused_nodes: bool | None = None) -> int:
    """``RewriteRuleSet(rules).apply_to_model(model)`` under the rewrite lock."""
    rule_set = orp.RewriteRuleSet(list(rules))
    if remove_unused_nodes is not None:
        rule_set.remove_unused_nodes = remove_unused_nodes
    with REWRITE_LOCK:
        return rule_set.apply_to_model(model)


def _once(model: ir.Model, rules: Sequence[orp.RewriteRule], *, commute: bool) -> int:
    """Convention 1."""
    graph = model.graph
    had_uses = {id(n) for n in graph if any(_used(v) for v in n.outputs)}
    used_inits = {name for name, v in graph.initializers.items() if _used(v)}
    rule_list = applicable_rules(rules, model_ops(model), commute=commute, shapes=ModelShapes(model))
    if not rule_list:
        return 0
    for r in rule_list:  # keep the rewrite scoped: never a global dead-code sweep
        r.remove_nodes = True
    count = _run(model, rule_list)
    if count:
        unique_value_names(model)
        for node in reversed(list(graph)):
            if id(node) in had_uses and not any(_used(v) for v in node.outputs):
                graph.remove(node, safe=True)
        graph_inputs = set(graph.inputs)
        for name in used_inits:
            v = graph.initializers.get(name)
            if v is not None and not _used(v) and v not in graph_inputs:
                del graph.initializers[name]
    return count


def _to_fixed_point(model: ir.Model, rules: Sequence[orp.RewriteRule], *, commute: bool) -> int:
    """Convention 2."""
    cleanup = Cleanup(model)
    rules = [c for r in rules for c in r.commute()] if commute else list(rules)
    total = 0
    for _ in range(MAX_ROUNDS):
        live = applicable_rules(rules, model_ops(model), shapes=ModelShapes(model))  # each round: rules make ops
        if not live:
            break
        # remove_unused_nodes=False: only what the rules made dead is pruned
        count = _run(model, live, remove_unused_nodes=False)
        total += count
        cleanup.bypass_new_identities(model)
        cleanup.prune(model)
        if not count:
            break
    if total:
        unique_value_names(model)
    return total
