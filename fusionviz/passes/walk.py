"""The one way the pass engine walks a model: every node, every graph, every node count.

1. :func:`all_nodes`: every node of an onnx-ir model, If/Loop/Scan bodies included, in graph
   order (iterative: any nesting depth is safe). It is what onnx-ir's
   ``ir.traversal.RecursiveGraphIterator`` yields, collected into a list about five times
   faster for the common case of a model without subgraphs.
2. :func:`graphs`: the main graph and every subgraph (onnx-ir's ``Model.graphs()``);
   :func:`graph_likes` adds the model's local functions, which hold nodes too.
3. :func:`count_nodes`: the node count the reports show, for an onnx-ir model or a ModelProto
   (the same nodes in both forms).
4. :func:`proto_graphs` / :func:`proto_subgraphs`: a ``GraphProto`` and every subgraph in it,
   depth first, and one node's bodies, for the code that reads or edits protos (what a tool
   wrote before it is read into onnx-ir, the summary, the static analysis, validity). The
   other walkers in the package are left where they carry more than the graphs (a body's path
   for the graph view, function bodies and scopes for external data in ``model_io``).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_ir as ir

_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def all_nodes(model: ir.Model) -> list[ir.Node]:
    """Rule 1: every node, subgraphs included, in graph order."""
    out: list[ir.Node] = []
    stack: list[ir.Graph] = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph:
            out.append(node)
            # onnx-ir's Attributes is a UserDict: its plain dict (``.data``) iterates ~5x faster
            attrs = node.attributes.data
            if not attrs:
                continue
            for attr in attrs.values():
                kind = attr.type
                if kind is _GRAPH:
                    stack.append(attr.value)
                elif kind is _GRAPHS:
                    stack.extend(attr.value)
    return out


def subgraphs(node: ir.Node) -> list[ir.Graph]:
    """The graphs held by ``node``'s attributes (an If's branches, a Loop's body)."""
    out: list[ir.Graph] = []
    for attr in node.attributes.data.values():
        if attr.type is _GRAPH:
            out.append(attr.value)
        elif attr.type is _GRAPHS:
            out.extend(attr.value)
    return out


def graphs(model: ir.Model) -> list[ir.Graph]:
    """Rule 2: the main graph and every subgraph."""
    return list(model.graphs())


def graph_likes(model: ir.Model) -> list[ir.Graph | ir.Function]:
    """Rule 2: every graph, then the model's local functions."""
    out: list[ir.Graph | ir.Function] = list(model.graphs())
    out.extend(model.functions.values())
    return out


def count_nodes(model: ir.Model | onnx.ModelProto) -> int:
    """Rule 3: how many nodes the model has, subgraphs included."""
    if isinstance(model, onnx.ModelProto):
        from fusionviz.model_io import count_nodes as count_proto_nodes

        return count_proto_nodes(model)
    return len(all_nodes(model))


def proto_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """Rule 4: the graphs ``node``'s attributes hold (an If's branches, a Loop's or Scan's body)."""
    out: list[onnx.GraphProto] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def proto_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """Rule 4: ``graph`` and every subgraph in it (If/Loop/Scan bodies), depth first, in node
    order (iterative: any nesting depth)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        stack.extend(reversed([s for n in g.node for s in proto_subgraphs(n)]))
