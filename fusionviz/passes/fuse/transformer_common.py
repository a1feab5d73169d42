"""What the transformer fusions share: imperative matching on onnx-ir with reasons.

Each check that fails raises :class:`Reject` with the reason, which ``-v`` logging shows, so a
user can see why a block did not fuse. The helpers read producers (:func:`produced_by`,
:func:`need`), strip scalar scales (:func:`peel_scale`), and insert, rewire and clean up in
graph order (:func:`latest`, :func:`replace_value`, :func:`remove_unused`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from fusionviz.passes.facts import const_value
from fusionviz.passes.hygiene import Namer


class Reject(Exception):
    """A check failed; the message says which one, ``at`` the node where matching stopped and
    ``kind`` what stopped it (:data:`fusionviz.passes.nearmiss.KINDS`)."""

    def __init__(self, reason: str, at: ir.Node | None = None, *, kind: str = "condition", hint: str = "") -> None:
        super().__init__(reason)
        self.at = at
        self.kind = kind
        self.hint = hint


_QDQ = ("QuantizeLinear", "DequantizeLinear")
#: torch's exporter writes ``Where(IsNaN(p), 0, p)`` after every Softmax
_GUARD_HINT = ("torch's exporter guards every Softmax with IsNaN/Where; the rule needs the probabilities "
               "to feed only MatMul(probs, V)")


def other_uses(v: ir.Value, what: str, *inside: ir.Node) -> Reject:
    """The Reject for ``v`` (``what``) being read outside the pattern (``inside``: its own readers)."""
    users = [u.node for u in v.uses() if all(u.node is not n for n in inside)]
    if not users:
        return Reject(f"{what} is a graph output", v.producer(), kind="other_uses")
    ops = ", ".join(dict.fromkeys(u.op_type for u in users))
    hint = _GUARD_HINT if any(u.op_type == "IsNaN" for u in users) else ""
    return Reject(f"{what} also feed(s) {ops} ({users[0].name}), outside the pattern", users[0], kind="other_uses",
                  hint=hint)


def scalar(v: ir.Value | None) -> float | None:
    c = const_value(v)
    if c is None or c.size != 1 or not np.issubdtype(c.dtype, np.number):
        return None
    return float(c.reshape(()))


def produced_by(v: ir.Value | None, op: str, domain: str = "") -> ir.Node | None:
    if v is None:
        return None
    p = v.producer()
    if p is not None and p.op_type == op and p.domain == domain:
        return p
    return None


def need(v: ir.Value | None, op: str, what: str) -> ir.Node:
    p = produced_by(v, op)
    if p is None:
        found = v.producer() if v is not None else None
        got = found.op_type if found is not None else "no node"
        if got in _QDQ:
            raise Reject(f"{what}: a QuantizeLinear/DequantizeLinear pair sits where {op} should be", found, kind="qdq",
                         hint="the fused kernel takes float tensors; onnxruntime runs QDQ groups with its QDQ "
                              "transformers")
        raise Reject(f"{what}: expected {op}, found {got}", found, kind="form")
    return p


def single_use(v: ir.Value) -> bool:
    return len(v.uses()) == 1 and not v.is_graph_output()


def perm_of(node: ir.Node) -> list[int] | None:
    a = node.attributes.get("perm")
    return list(a.value) if a is not None else None


def new_initializer(model: ir.Model, namer: Namer, name: str, array: np.ndarray) -> ir.Value:
    """Register a new initializer with a name no graph of the model uses."""
    name = namer(name)
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape = ir.Shape(list(array.shape))
    value.type = ir.TensorType(ir.DataType.from_numpy(array.dtype))
    model.graph.register_initializer(value)
    return value


def remove_unused(model: ir.Model, consumed: Sequence[ir.Value] = ()) -> None:
    """Drop nodes left without consumers and initializers this pass made unused."""
    RemoveUnusedNodesPass()(model)
    for v in consumed:
        if v.name in model.graph.initializers and not v.uses() and not v.is_graph_output():
            del model.graph.initializers[v.name]


def replace_value(old: ir.Value, new: ir.Value, namer: Namer) -> None:
    """Rewire every use of ``old`` to ``new`` (uses inside subgraphs included); a graph output
    keeps its name."""
    was_output = old.is_graph_output()
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    if was_output:
        name = old.name
        old.name = namer(f"{name}_replaced")
        new.name = name


def float32_or_unknown(v: ir.Value) -> bool:
    return v.dtype in (None, ir.DataType.FLOAT)


def peel_scale(v: ir.Value) -> tuple[ir.Value, float, list[ir.Node]]:
    """Strip Mul/Div by scalar constants (single-use) above ``v``; return base, factor, nodes."""
    factor = 1.0
    nodes: list[ir.Node] = []
    while True:
        p = v.producer()
        if p is None or p.domain != "" or p.op_type not in ("Mul", "Div") or (nodes and not single_use(v)):
            return v, factor, nodes
        a, b = p.inputs[0], p.inputs[1]
        if p.op_type == "Div":
            s = scalar(b)
            if s is None or s == 0:
                return v, factor, nodes
            factor /= s
            v = a
        else:
            sa, sb = scalar(a), scalar(b)
            if sb is not None:
                factor *= sb
                v = a
            elif sa is not None:
                factor *= sa
                v = b
            else:
                return v, factor, nodes
        nodes.append(p)


def in_graph_order(model: ir.Model, nodes: Sequence[ir.Node]) -> list[ir.Node]:
    order = {id(n): i for i, n in enumerate(model.graph)}
    return sorted(set(nodes), key=lambda n: order.get(id(n), -1))


def latest(model: ir.Model, nodes: Sequence[ir.Node]) -> ir.Node:
    """The matched node that comes last: inserting the fused node before it keeps inputs defined."""
    return in_graph_order(model, nodes)[-1]


def insert_early(model: ir.Model, new: ir.Node, src: ir.Value) -> None:
    p = src.producer()
    if p is not None and p.graph is model.graph:
        model.graph.insert_after(p, new)
    else:
        nodes = list(model.graph)
        if nodes:
            model.graph.insert_before(nodes[0], new)
        else:
            model.graph.append(new)


def substitute(model: ir.Model, new: ir.Node, matched: Sequence[ir.Node], old: ir.Value, namer: Namer,
               suffix: str) -> None:
    """Put ``new`` in place of ``matched``: inserted before the last of them, its output named
    after ``old`` (``<old>_<suffix>``) with ``old``'s type and shape, every use of ``old``
    rewired to it, and the matched nodes left without uses removed."""
    model.graph.insert_before(latest(model, matched), new)
    new.outputs[0].name = namer(f"{old.name}_{suffix}")
    new.outputs[0].shape, new.outputs[0].type = old.shape, old.type
    replace_value(old, new.outputs[0], namer)
    for n in reversed(in_graph_order(model, matched)):
        if all(not o.uses() and not o.is_graph_output() for o in n.outputs):
            model.graph.remove(n, safe=True)
