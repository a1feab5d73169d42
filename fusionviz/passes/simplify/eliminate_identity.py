"""eliminate_identity: remove Identity nodes, following onnx-ir's numbered cases.

:func:`eliminate_identity` is also what other passes use to bypass the Identity nodes their own
rules produce (:class:`fusionviz.passes.cleanup.Cleanup`).
"""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import is_onnx
from fusionviz.passes.remove import detach_and_remove
from fusionviz.passes.walk import graph_likes


def _produced_in(v: ir.Value, graph: ir.Graph | ir.Function) -> bool:
    """Whether a node of ``graph`` itself (not of an enclosing graph) produces ``v``."""
    p = v.producer()
    return p is not None and p.graph is graph


def eliminate_identity(node: ir.Node, *, report: bool = False) -> bool:
    """Remove ``y = Identity(x)``, following onnx-ir's numbered cases, plus one guard.

    1. ``y`` is not a graph output: every use of ``y`` becomes a use of ``x``.
    2. ``y`` is a graph output and ``x`` is produced by a node: ``x`` is renamed ``y``.
    3. ``y`` is a graph output and ``x`` is a graph input or initializer: kept.
    4. (fusionviz) ``y`` and ``x`` are both graph outputs: kept. onnx-ir 1.1 removes the node
       and renames ``x``, which silently drops the graph output ``x``.
    5. (fusionviz) ``y`` is an output of a subgraph (an If/Loop/Scan body) and ``x`` is not
       produced inside that subgraph (it is captured from an enclosing graph): kept. A graph's
       outputs must be produced in that graph, and renaming ``x`` would rename the outer value.

    Uses of ``y`` inside subgraphs (a branch that captures ``y`` by name) are uses like any
    other: case 1 rewires them too. ``report``: a kept Identity is a near miss of the caller
    (eliminate_identity's own; other passes bypass Identities as cleanup).
    """
    if not is_onnx(node, "Identity") or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if x is None or node.graph is None:
        return False
    if y.is_graph_output() and (x.is_graph_input() or x.is_initializer() or x.is_graph_output()):
        if report:
            nearmiss.note([node], node, f"it names the graph output '{y.name}' after a graph "
                          f"{'input' if x.is_graph_input() else 'output' if x.is_graph_output() else 'initializer'} "
                          f"'{x.name}': removing it would change the model's interface", rule="identity")
        return False  # Cases 3 and 4
    if y.is_graph_output() and not _produced_in(x, node.graph):
        if report:
            nearmiss.note([node], node, f"it hands the enclosing graph's value '{x.name}' out of a control-flow "
                          "body; a body's outputs must be made inside it", rule="identity")
        return False  # Case 5
    if x.shape is None:
        x.shape = y.shape
    if x.type is None:
        x.type = y.type
    was_output = y.is_graph_output()
    ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
    if was_output:  # Case 2
        x.name = y.name
    detach_and_remove(node.graph, node)
    return True


class IdentityElimination(Pass, name="eliminate_identity", aliases=("identity_elimination",), category=Category.SIMPLIFY, order=120,
                          trigger_ops={"Identity"}):
    """onnx-ir's IdentityEliminationPass cases, with a guard for outputs fed by outputs."""

    mirrors_ort = "basic"

    title = "Identity elimination"
    explain = """\
**What:** removes `Identity` nodes, wiring their consumers straight to the input.
An Identity that produces a graph output is kept when its input is a graph input, an
initializer, or another graph output (removing it would lose an output name).

**Why faster:** every node is a kernel launch and, without in-place reuse, a copy of the
tensor. Exporters leave Identities around parameters and outputs; they cost time and memory
for no computation.
"""

    def transform(self, model: ir.Model) -> None:
        for g in graph_likes(model):
            for node in list(g):
                eliminate_identity(node, report=True)
