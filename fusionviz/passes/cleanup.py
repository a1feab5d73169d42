"""Removing what a rewrite left behind, and only that.

A pass cleans up after itself: nodes that *it* made dead are removed, nodes that were already
dead are left for ``eliminate_dead_code``, and Identity nodes that *its* rules produced are
bypassed while Identities that were already there are left for ``eliminate_identity``. So
turning one pass off really turns that simplification off. :class:`Cleanup` remembers what was
dead before a pass and removes, afterwards, what became dead since.
"""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes.facts import is_onnx
from fusionviz.passes.remove import detach_and_remove
from fusionviz.passes.simplify.eliminate_identity import eliminate_identity
from fusionviz.passes.walk import all_nodes, graph_likes

__all__ = ["Cleanup", "dead_nodes", "detach_and_remove", "live_users", "unused_initializers"]


def live_users(v: ir.Value) -> list[ir.Node]:
    """Nodes that use ``v`` and are still in a graph (removed nodes may keep stale uses)."""
    return [u.node for u in v.uses() if u.node.graph is not None]


def dead_nodes(graph: ir.Graph | ir.Function) -> list[ir.Node]:
    """Nodes of ``graph`` (not its subgraphs) whose outputs reach no live use, in reverse order."""
    dead: set[int] = set()
    out: list[ir.Node] = []
    for node in reversed(list(graph)):
        live = False
        for v in node.outputs:
            if v.is_graph_output():
                live = True
                break
            if any(id(user) not in dead for user in live_users(v)):
                live = True
                break
        if not live:
            dead.add(id(node))
            out.append(node)
    return out


def unused_initializers(graph: ir.Graph) -> list[ir.Value]:
    return [
        v
        for v in graph.initializers.values()
        if not live_users(v) and not v.is_graph_output() and not v.is_graph_input()
    ]


class Cleanup:
    """Remember what was dead before a pass; afterwards remove only what it made dead."""

    def __init__(self, model: ir.Model) -> None:
        self.node_ids = {id(n) for n in all_nodes(model)}
        for f in model.functions.values():
            self.node_ids.update(id(n) for n in f)
        self.dead_before = {id(n) for g in graph_likes(model) for n in dead_nodes(g)}
        self.unused_inits_before = {id(v) for g in model.graphs() for v in unused_initializers(g)}

    def is_new(self, node: ir.Node) -> bool:
        return id(node) not in self.node_ids

    def bypass_new_identities(self, model: ir.Model) -> None:
        for g in graph_likes(model):
            for node in list(g):
                if self.is_new(node) and is_onnx(node, "Identity"):
                    eliminate_identity(node)

    def prune(self, model: ir.Model) -> int:
        removed = 0
        for g in graph_likes(model):
            for node in dead_nodes(g):  # reverse topological: users go first
                if id(node) in self.dead_before:
                    continue
                detach_and_remove(g, node)
                removed += 1
        for g in model.graphs():
            for v in unused_initializers(g):
                if id(v) not in self.unused_inits_before and v.name is not None:
                    g.initializers.pop(v.name)
        return removed
