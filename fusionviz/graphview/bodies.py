"""Control-flow bodies (If/Loop/Scan subgraphs): their paths, and a body as a model of its own.

Rules (the code points back to them):

1. A body's *path* is the key of the node that holds it and the attribute that holds it, from
   the main graph down: ``If_0/then_branch``, nested ``If_0/then_branch/Loop_3/body``. A node's
   key is its display key (``model_graph`` rule 1: its name, ``#<index>`` when empty or
   repeated), so a node clicked in a drawing names its bodies. Node names may hold ``/``
   themselves (``/decoder/If_1``): a path is read by matching, level by level, the node keys
   and attribute names that exist, never by splitting at ``/``. A ``GRAPHS`` attribute (a list
   of graphs, custom ops only) names its members ``attr[0]``, ``attr[1]``...
2. :func:`body_model` turns a body into a ModelProto whose main graph is that body, so every
   display tool (``model_graph``, ``render_graph``, the diff, node details) works on it as it
   is: the body's own inputs, initializers, nodes and outputs are kept; every value it reads
   from an enclosing graph (at any depth, its nested bodies' reads included) is added:
   an outer initializer or ``Constant`` output as an initializer (a weight, folded into its
   reader's label as in the main graph), any other value as a graph input, typed from shape
   inference of the whole model where it knows the type. Opset imports, the IR version and
   local functions are kept.
3. A path that names no body is a :class:`fusionviz.errors.GraphPathError`: one line naming
   the bodies that exist where the path stopped matching (the model's top-level bodies, or the
   bodies under the deepest body the path did name), at most :data:`LIST_IN_ERROR` of them.
4. :func:`list_bodies` lists every body, depth first in model order, with its node count (the
   body's own nodes) and its total (nested bodies' nodes included, as rule 4 of
   ``model_graph`` writes in the holding node's label).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import onnx

from fusionviz import errors
from fusionviz.graphview.model_graph import node_keys

logger = logging.getLogger(__name__)

#: At most this many body paths are named in an error (rule 3).
LIST_IN_ERROR = 8


@dataclasses.dataclass(frozen=True)
class Body:
    """One control-flow body of a model (rule 4).

    Attributes:
        path: its path (rule 1), e.g. ``If_0/then_branch``.
        parent: the path of the body that holds its node ("" for a node of the main graph).
        node: the key of the node that holds it, in the parent graph.
        op: that node's op type (If, Loop, Scan, or a custom op).
        attribute: the attribute that holds it (``then_branch``, ``body``; ``attr[i]`` for lists).
        nodes: nodes directly in the body.
        total_nodes: nodes in the body and in every body nested in it.
        depth: 1 for a body of a main-graph node, 2 for a body nested in one, ...
    """

    path: str
    parent: str
    node: str
    op: str
    attribute: str
    nodes: int
    total_nodes: int
    depth: int = 1

    def label(self) -> str:
        """``If_0/then_branch (113 nodes, 342 with nested bodies)``."""
        words = f"{self.nodes:,} node{'s' if self.nodes != 1 else ''}"
        if self.total_nodes != self.nodes:
            words += f", {self.total_nodes:,} with nested bodies"
        return f"{self.path} ({words})"


#: Attributes listed first, in this order (an If's branches as people read them); others follow.
_FIRST = {"then_branch": 0, "else_branch": 1, "body": 2}


def _node_bodies(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute segment, graph) for every graph held by ``node`` (rule 1), then before else."""
    for a in sorted(node.attribute, key=lambda a: _FIRST.get(a.name, len(_FIRST))):
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            for i, g in enumerate(a.graphs):
                yield f"{a.name}[{i}]", g


def _children(graph: onnx.GraphProto) -> list[tuple[str, str, onnx.NodeProto, onnx.GraphProto]]:
    """(node key, attribute segment, node, body) for every body of ``graph``'s nodes, in order."""
    out = []
    keys = node_keys(graph.node)
    for key, node in zip(keys, graph.node, strict=True):
        for seg, g in _node_bodies(node):
            out.append((key, seg, node, g))
    return out


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of ``graph`` and of every body nested in it (iterative: any depth)."""
    total = 0
    stack = [graph]
    while stack:
        g = stack.pop()
        total += len(g.node)
        for node in g.node:
            stack.extend(b for _, b in _node_bodies(node))
    return total


def list_bodies(model: onnx.ModelProto) -> list[Body]:
    """Rule 4: every body of ``model``, depth first in model order."""
    out: list[Body] = []

    def visit(graph: onnx.GraphProto, prefix: str, depth: int) -> None:
        if depth > 64:  # a hostile model could nest without end; nobody reads that deep
            return
        for key, seg, node, g in _children(graph):
            path = f"{prefix}/{key}/{seg}" if prefix else f"{key}/{seg}"
            out.append(Body(path=path, parent=prefix, node=key, op=node.op_type, attribute=seg,
                            nodes=len(g.node), total_nodes=count_nodes(g), depth=depth + 1))
            visit(g, path, depth + 1)

    visit(model.graph, "", 0)
    return out


def has_bodies(model: onnx.ModelProto) -> bool:
    """True when a node of the main graph holds a body."""
    return any(True for n in model.graph.node for _ in _node_bodies(n))


def _resolve(graph: onnx.GraphProto, rest: str, prefix: str
             ) -> tuple[list[onnx.GraphProto], str]:
    """Rule 1: the chain of graphs ``rest`` walks down from ``graph`` (``graph`` first).

    Returns the longest chain that matched and the path matched so far; the chain ends at the
    body when the whole of ``rest`` matched (the caller compares the matched path).
    """
    best: tuple[list[onnx.GraphProto], str] = ([graph], prefix)
    for key, seg, _node, g in _children(graph):
        head = f"{key}/{seg}"
        if rest == head:
            return [graph, g], f"{prefix}/{head}" if prefix else head
        if rest.startswith(head + "/"):
            chain, matched = _resolve(g, rest[len(head) + 1:], f"{prefix}/{head}" if prefix else head)
            if len(chain) + 1 > len(best[0]):
                best = ([graph, *chain], matched)
    return best


def _not_found(model: onnx.ModelProto, path: str, matched: str, where: str) -> errors.GraphPathError:
    """Rule 3: one line naming the bodies where ``path`` stopped matching."""
    bodies = list_bodies(model)
    if not bodies:
        return errors.GraphPathError(f"'{path}' names no body: {where} has no If/Loop/Scan bodies.")
    under = [b for b in bodies if b.parent == matched]
    if matched and not under:
        return errors.GraphPathError(f"No body '{path}' in {where}: '{matched}' holds no nested bodies.")
    cut = len(matched) + 1 if matched else 0
    shown = [f"{b.path[cut:]} ({b.total_nodes:,} node{'s' if b.total_nodes != 1 else ''})"
             for b in under[:LIST_IN_ERROR]]
    more = f" and {len(under) - LIST_IN_ERROR} more" if len(under) > LIST_IN_ERROR else ""
    if matched:
        return errors.GraphPathError(f"No body '{path}' in {where}; '{matched}/' goes on with one of: "
                                     f"{', '.join(shown)}{more}.")
    return errors.GraphPathError(f"No body '{path}' in {where} (a path is NODE/attribute, nested "
                                 f"NODE/attribute/NODE/attribute); its bodies are: {', '.join(shown)}{more}.")


def find_body(model: onnx.ModelProto, path: str, *, where: str = "this model") -> list[onnx.GraphProto]:
    """The graphs from the main graph down to the body ``path`` names (rule 1).

    ``where`` names the model in the error ("this model", a file name).

    Raises:
        GraphPathError: ``path`` names no body (rule 3).
    """
    wanted = path.strip().strip("/")
    chain, matched = _resolve(model.graph, wanted, "") if wanted else ([model.graph], "")
    if not wanted or matched != wanted:
        raise _not_found(model, path, matched, where)
    return chain


def _graph_reads(graph: onnx.GraphProto) -> list[str]:
    """Values ``graph`` reads from enclosing graphs, nested bodies' reads included, in order."""
    defined = {"", *(v.name for v in graph.input), *(t.name for t in graph.initializer),
               *(t.values.name for t in graph.sparse_initializer)}
    for node in graph.node:
        defined.update(node.output)
    out: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name not in defined:
                out[name] = None
        for _, g in _node_bodies(node):
            for name in _graph_reads(g):
                if name not in defined:
                    out[name] = None
    return list(out)


def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
    return None


def _outer_values(chain: list[onnx.GraphProto]) -> tuple[dict[str, onnx.TensorProto], set[str]]:
    """Weights (initializers, Constant outputs) and other values defined in the enclosing graphs."""
    weights: dict[str, onnx.TensorProto] = {}
    values: set[str] = set()
    for g in chain:
        for t in g.initializer:
            weights[t.name] = t
        for v in g.input:
            values.add(v.name)
        for n in g.node:
            t = _constant_value(n) if n.op_type == "Constant" and n.domain in ("", "ai.onnx") else None
            if t is not None and len(n.output) == 1:
                weights[n.output[0]] = t
            else:
                values.update(n.output)
    return weights, values


def _types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Value name -> ValueInfoProto with a type, from every graph of the shape-inferred model."""
    from fusionviz.graphview.build import _inferred

    out: dict[str, onnx.ValueInfoProto] = {}
    stack = [_inferred(model).graph]
    while stack:
        g = stack.pop()
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.WhichOneof("value") is not None:
                out.setdefault(vi.name, vi)
        for n in g.node:
            stack.extend(b for _, b in _node_bodies(n))
    return out


def body_model(model: onnx.ModelProto, path: str, *, where: str = "this model") -> onnx.ModelProto:
    """Rule 2: a model whose main graph is the body ``path`` names.

    Args:
        model: the model.
        path: a body path (rule 1), e.g. ``If_0/then_branch``.
        where: how the error names the model ("this model", a file name).

    Returns:
        A new ModelProto: the body as its graph, outer-scope reads as inputs or initializers.

    Raises:
        GraphPathError: ``path`` names no body (rule 3).
    """
    chain = find_body(model, path, where=where)
    body, outer = chain[-1], chain[:-1]
    weights, values = _outer_values(outer)
    types: dict[str, onnx.ValueInfoProto] | None = None
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    if not graph.name:
        graph.name = path
    for name in _graph_reads(body):
        if name in weights:
            t = graph.initializer.add()
            t.CopyFrom(weights[name])
            t.name = name
            continue
        if name not in values:
            logger.info("body %s reads %r, which no enclosing graph defines", path, name)
        if types is None:
            types = _types(model)
        vi = graph.input.add()
        if name in types:
            vi.CopyFrom(types[name])
        else:
            vi.name = name
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.producer_name = model.producer_name
    out.producer_version = model.producer_version
    out.domain = model.domain
    out.model_version = model.model_version
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    out.graph.CopyFrom(graph)
    return out


def split_path(path: str, model: onnx.ModelProto) -> list[tuple[str, str]]:
    """The (path so far, node key) steps of ``path`` in ``model``: breadcrumbs for a view.

    ``If_0/then_branch/Loop_3/body`` → ``[("If_0/then_branch", "If_0"),
    ("If_0/then_branch/Loop_3/body", "Loop_3")]``.

    Raises:
        GraphPathError: ``path`` names no body (rule 3).
    """
    find_body(model, path)
    by_path = {b.path: b for b in list_bodies(model)}
    steps = []
    cur = by_path[path.strip().strip("/")]
    while True:
        steps.append((cur.path, cur.node))
        if not cur.parent:
            break
        cur = by_path[cur.parent]
    return steps[::-1]
