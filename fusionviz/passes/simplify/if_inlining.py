"""Replacing an ``If`` with a constant condition by the branch it always takes (constant folding).

1. :func:`taken_branch`: the branch a constant condition selects.
2. :func:`inline_blocker`: why that branch cannot replace the If (its outputs contradict what
   the If declares, it declares inputs, ...), or None.
3. :func:`inline_branch`: the branch's nodes and initializers move into the If's graph, with
   fresh names where a name is defined elsewhere in the model.
"""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes._compat import Replacement
from fusionviz.passes.facts import const_value
from fusionviz.passes.walk import graphs


def taken_branch(node: ir.Node) -> tuple[ir.Graph | None, str]:
    """The branch an If with a constant condition always takes, or (None, why there is none)."""
    cond = const_value(node.inputs[0]) if node.inputs else None
    if cond is None or cond.size != 1:
        return None, "the condition is not a constant scalar"
    key = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    attr = node.attributes.get(key)
    if attr is None or attr.type is not ir.AttributeType.GRAPH:
        return None, f"the If has no {key} graph"
    return attr.as_graph(), ""


def inline_blocker(node: ir.Node, branch: ir.Graph, opsets: dict[str, int]) -> str | None:
    """Why the taken branch of ``node`` cannot replace it, or None when it can."""
    if node.graph is None:
        return "the If is not in a graph"
    if branch.inputs:
        return "the branch declares inputs"
    if len(branch.outputs) != len(node.outputs) or any(v is None for v in branch.outputs):
        return "the branch's outputs do not match the If's"
    for formal, actual in zip(branch.outputs, node.outputs, strict=True):
        why = _type_conflict(formal, actual)
        if why:
            return f"branch output '{formal.name}' {why} (the branch is not what the If declares)"
    opset = opsets.get("", opsets.get("ai.onnx", 0)) or 0
    for formal in branch.outputs:
        if not _owned_by(formal, branch) and not isinstance(formal.type, (ir.TensorType, type(None))) and opset < 16:
            return f"branch output '{formal.name}' is a captured non-tensor value and Identity of it needs opset 16"
    return None


def _type_conflict(formal: ir.Value, actual: ir.Value) -> str | None:
    """How the branch output ``formal`` contradicts the If output ``actual`` it would replace.

    The If's declared type and shape are what its consumers were checked against; a branch that
    makes something else (another rank, dtype or static size) would break them once inlined.
    """
    if formal.dtype is not None and actual.dtype is not None and formal.dtype != actual.dtype:
        return f"has dtype {formal.dtype.name}, the If output {actual.dtype.name}"
    a, b = formal.shape, actual.shape
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return f"has rank {len(a)}, the If output rank {len(b)}"
    for i, (x, y) in enumerate(zip(a.dims, b.dims, strict=True)):
        if isinstance(x, int) and isinstance(y, int) and x != y:
            return f"has size {x} in dim {i}, the If output {y}"
    return None


def _owned_by(v: ir.Value, branch: ir.Graph) -> bool:
    """Whether ``v`` belongs to ``branch`` (made by one of its nodes, or one of its initializers)."""
    p = v.producer()
    if p is not None:
        return p.graph is branch
    return v.is_initializer() and branch.initializers.get(v.name or "") is v


def defined_name_counts(model: ir.Model) -> dict[str, int]:
    """How many values of the whole model (every graph) are defined under each name."""
    counts: dict[str, int] = {}
    for g in graphs(model):
        values = [*g.inputs, *g.initializers.values(), *(v for n in g for v in n.outputs)]
        for v in values:
            if v.name:
                counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _fresh(name: str, counts: dict[str, int]) -> str:
    i = 1
    while f"{name}_{i}" in counts:
        i += 1
    new = f"{name}_{i}"
    counts[new] = 1
    return new


def inline_branch(node: ir.Node, branch: ir.Graph, counts: dict[str, int]) -> Replacement:
    """Move the taken branch of ``node`` into its graph; the Replacement for the If's outputs.

    1. The branch's nodes and initializers move to the If's graph; values they read from
       enclosing graphs stay connected (same value objects).
    2. A moved value whose name is defined elsewhere in the model (a sibling subgraph may reuse
       names; the enclosing graph may not see them twice) gets a fresh name.
    3. The If's outputs keep their names: a branch output made in the branch takes the output's
       name; a captured outer value (or one the branch returns twice) is not renamed, an
       ``Identity`` of it carries the name instead.
    """
    target = node.graph
    assert target is not None
    formals = list(branch.outputs)
    moved = list(branch)
    branch.outputs.clear()
    branch.remove(moved, safe=False)
    for name in list(branch.initializers):
        init = branch.initializers.pop(name)
        if counts.get(name, 0) > 1 or name in target.initializers:
            init.name = _fresh(name, counts)
        target.register_initializer(init)
    for n in moved:
        n.name = f"{node.name}_{n.name}" if n.name else n.name
        for v in n.outputs:
            if v.name and counts.get(v.name, 0) > 1:
                v.name = _fresh(v.name, counts)
    moved_ids = {id(n) for n in moved}
    new_outputs: list[ir.Value] = []
    extra: list[ir.Node] = []
    claimed: set[int] = set()
    for i, formal in enumerate(formals):
        p = formal.producer()
        owned = (p is not None and id(p) in moved_ids) or (p is None and target.initializers.get(formal.name or "") is formal)
        if owned and id(formal) not in claimed:
            claimed.add(id(formal))
            new_outputs.append(formal)
            # the Replacement copies the If output's type and shape onto the value: the branch's
            # own are at least as precise (the If's merge both branches)
            actual = node.outputs[i]
            actual.type = formal.type if formal.type is not None else actual.type
            actual.shape = formal.shape
            continue
        ident = ir.node("Identity", [formal], name=f"{node.name}_output_{i}")
        extra.append(ident)
        new_outputs.append(ident.outputs[0])
    return Replacement(new_outputs, moved + extra)
