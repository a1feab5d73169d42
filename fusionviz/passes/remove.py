"""Removing one node from a graph (below :mod:`fusionviz.passes.cleanup` and the passes that
use it, so that :mod:`fusionviz.passes.simplify.eliminate_identity` and cleanup do not import each other)."""

from __future__ import annotations

import onnx_ir as ir


def detach_and_remove(graph: ir.Graph | ir.Function, node: ir.Node) -> None:
    """Remove a node whose outputs have no live users (stale uses from discarded rewrites are ignored)."""
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node, safe=False)
