"""What a pass changed: Changes derived from node identity before and after it.

1. Node identity before/after is compared; nodes that disappeared are *removed*, nodes that
   appeared are *new*; surviving nodes whose op or attributes changed in place are *changed*.
   When a pass rebuilds the model (e.g. via a proto round trip) nodes are matched by
   (name, op_type, inputs, outputs) instead.
2. Removed and new nodes are grouped into Changes with a union-find over the values they shared:
   two removed nodes join when the tensor between them vanished; two new nodes join when the
   tensor between them is new; a removed and a new node join when they produced the same tensor
   name or fed the same surviving consumer. A pass that rebuilds the whole model can instead
   say which original tensor each new node stands for (``Pass.origin_tensor``).
3. Every new node is stamped with its provenance (:mod:`fusionviz.passes.provenance`).
4. Initializers that vanished without a removed node, and weights that stopped being graph
   inputs, get one summary Change each.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

import onnx_ir as ir

from fusionviz.passes.provenance import NodeRecord, record, same_attrs, stamp
from fusionviz.passes.walk import all_nodes


class ChangeKind(str, enum.Enum):
    FUSED = "fused"  # several nodes became one or more new nodes
    REMOVED = "removed"  # nodes vanished, nothing replaces them
    FOLDED = "folded"  # nodes were computed ahead of time into constants
    REPLACED = "replaced"  # one node became other node(s)
    CHANGED = "changed"  # same node, new attributes or inputs
    ADDED = "added"  # new nodes with no predecessor (e.g. layout reorders)


@dataclasses.dataclass(frozen=True)
class Change:
    """One thing a pass did. Node names refer to the model before (inputs) and after (outputs)."""

    kind: ChangeKind
    pass_name: str
    inputs: tuple[str, ...]  # node names in the model before the pass
    outputs: tuple[str, ...]  # node names in the model after the pass
    in_ops: tuple[str, ...] = ()
    out_ops: tuple[str, ...] = ()
    detail: str = ""

    def describe(self) -> str:
        ins = " + ".join(f"{o} {n}" for o, n in zip(self.in_ops, self.inputs, strict=False)) or "-"
        outs = " + ".join(f"{o} {n}" for o, n in zip(self.out_ops, self.outputs, strict=False)) or "-"
        return f"{self.kind.value}: {ins} → {outs}" + (f" ({self.detail})" if self.detail else "")

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        return d


class _UF:
    def __init__(self) -> None:
        self.parent: dict[object, object] = {}

    def find(self, x: object) -> object:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: object, b: object) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def _link_chains(uf: _UF, tag: str, recs: Sequence[NodeRecord], elsewhere: set[str]) -> dict[str, NodeRecord]:
    """Join each record of ``recs`` with the one producing its input, unless that tensor is in
    ``elsewhere`` (it exists on the other side of the pass); return ``recs`` by output name."""
    by_out: dict[str, NodeRecord] = {}
    for r in recs:
        uf.find((tag, id(r.node)))
        for o in r.outputs:
            if o:
                by_out[o] = r
    for r in recs:
        for i in r.inputs:
            p = by_out.get(i)
            if p is not None and i not in elsewhere:
                uf.union((tag, id(p.node)), (tag, id(r.node)))
    return by_out


def _value_names(model: ir.Model, nodes: Sequence[ir.Node]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        names.update(v.name for v in node.outputs if v.name)
    names.update(model.graph.initializers.keys())
    names.update(v.name for v in model.graph.inputs if v.name)
    return names


def diff_changes(before: list[NodeRecord], model: ir.Model, pass_name: str,
                 hint=None) -> list[Change]:
    """Changes between a pre-pass node snapshot and the model after (rules 1-3)."""
    before_by_id = {id(r.node): r for r in before}
    after_nodes = all_nodes(model)
    changed: list[tuple[NodeRecord, NodeRecord]] = []
    unmatched_after: list[NodeRecord] = []
    alive: set[int] = set()
    # Rule 1: identity first; a surviving node gets a record only when its op or attributes
    # changed (rewired inputs alone are a consequence of another change, not a change).
    for n in after_nodes:
        r = before_by_id.get(id(n))
        if r is None:
            unmatched_after.append(record(n))
            continue
        alive.add(id(n))
        if n.op_type != r.op or not same_attrs(tuple(n.attributes.data.items()), r.attrs):
            changed.append((r, record(n)))
    removed = [r for r in before if id(r.node) not in alive]
    # Then signature (for passes that rebuilt the model).
    if removed and unmatched_after:
        by_key: dict[tuple, list[NodeRecord]] = {}
        for r in removed:
            by_key.setdefault(r.key, []).append(r)
        still_removed_ids = {id(r.node) for r in removed}
        new: list[NodeRecord] = []
        for a in unmatched_after:
            cands = by_key.get(a.key)
            if cands:
                r = cands.pop()
                still_removed_ids.discard(id(r.node))
            else:
                new.append(a)
        removed = [r for r in removed if id(r.node) in still_removed_ids]
    else:
        new = unmatched_after

    changes: list[Change] = []
    for r, a in changed:
        stamp(a.node, r.sources, r.passes, pass_name)
        detail = ""
        if not same_attrs(r.attrs, a.attrs):
            detail = "attributes changed"
        elif r.inputs != a.inputs:
            detail = "inputs changed"
        changes.append(Change(ChangeKind.CHANGED, pass_name, (r.name,), (a.node.name,), (r.op,), (a.op,), detail))
    if not removed and not new:
        return changes

    if hint is not None:
        return changes + _hinted_changes(removed, new, hint, pass_name, before)

    after_values = _value_names(model, after_nodes)
    before_values: set[str] = set()
    for r in before:
        before_values.update(r.outputs)
    uf = _UF()
    # removed-removed: the tensor between them vanished; new-new: the tensor between them is new
    rem_by_out = _link_chains(uf, "r", removed, after_values)
    _link_chains(uf, "n", new, before_values)
    # removed-new: same produced name, or they fed the same slot of a surviving consumer
    # (the consumer's input at that slot, before the pass, was the removed node's output).
    # Slots, not just consumers: two branches into one Add stay separate.
    linked_new: set[int] = set()
    for a in new:
        for o in a.outputs:
            r = rem_by_out.get(o)
            if r is not None:
                uf.union(("r", id(r.node)), ("n", id(a.node)))
                linked_new.add(id(a.node))
        for v in a.node.outputs:
            for u in v.uses():
                c = before_by_id.get(id(u.node)) if id(u.node) in alive else None
                if c is None or u.idx >= len(c.inputs):
                    continue
                r = rem_by_out.get(c.inputs[u.idx])
                if r is not None:
                    uf.union(("r", id(r.node)), ("n", id(a.node)))
                    linked_new.add(id(a.node))
    # Unlinked new nodes: link to removed nodes they share an input with.
    rem_by_in: dict[str, list[NodeRecord]] = {}
    for r in removed:
        for i in r.inputs:
            if i:
                rem_by_in.setdefault(i, []).append(r)
    for a in new:
        if id(a.node) in linked_new:
            continue
        for i in a.inputs:
            for r in rem_by_in.get(i, ())[:1]:
                uf.union(("r", id(r.node)), ("n", id(a.node)))

    groups: dict[object, tuple[list[NodeRecord], list[NodeRecord]]] = {}
    for r in removed:
        groups.setdefault(uf.find(("r", id(r.node))), ([], []))[0].append(r)
    for a in new:
        groups.setdefault(uf.find(("n", id(a.node))), ([], []))[1].append(a)

    initializer_names = set(model.graph.initializers.keys())
    for rs, ns in groups.values():
        sources: list[str] = []
        passes: list[str] = []
        for r in rs:
            for s in r.sources:
                if s not in sources:
                    sources.append(s)
            for p in r.passes:
                if p not in passes:
                    passes.append(p)
        for a in ns:
            stamp(a.node, sources, passes, pass_name)
        if not ns:
            produced = {o for r in rs for o in r.outputs}
            kind = ChangeKind.FOLDED if produced & (initializer_names | after_values) else ChangeKind.REMOVED
        elif not rs:
            kind = ChangeKind.ADDED
        elif len(rs) >= 2:
            kind = ChangeKind.FUSED
        else:
            kind = ChangeKind.REPLACED
        changes.append(
            Change(
                kind,
                pass_name,
                tuple(r.name for r in rs),
                tuple(a.node.name for a in ns),
                tuple(r.op for r in rs),
                tuple(a.op for a in ns),
            )
        )
    order = {r.name: i for i, r in enumerate(before)}
    changes.sort(key=lambda c: min((order.get(n, 1 << 30) for n in c.inputs), default=1 << 30))
    return changes


#: ops all of whose inputs are data (no shape or axes input): which one a fusion absorbed it
#: through is the one only it read
_DATA_INPUTS_ONLY = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "PRelu"})


def _hinted_changes(removed: list[NodeRecord], new: list[NodeRecord], hint, pass_name: str,
                    before: Sequence[NodeRecord] = ()) -> list[Change]:
    """Grouping for passes that rebuild the model and say which original tensor each new node
    stands for: new node(s) ← producer of that tensor; a removed node without a counterpart joins
    the new node that took over the producer of its first input (e.g. an Add+Relu absorbed by a
    Conv), or, for an element-wise op, of an input it was the only reader of (a fusion takes in
    only what nothing else reads: the residual Add of ``Add(x, conv(y))`` is absorbed by the
    Conv, not by whatever made the shortcut ``x``); new nodes without a hint (layout reorders)
    are 'added'."""
    readers: dict[str, int] = {}
    for r in before:
        for i in set(r.inputs):
            if i:
                readers[i] = readers.get(i, 0) + 1
    by_out = {o: r for r in removed for o in r.outputs if o}
    by_in: dict[str, list[NodeRecord]] = {}
    for r in removed:
        for i in r.inputs:
            if i:
                by_in.setdefault(i, []).append(r)
    groups: dict[int, tuple[list[NodeRecord], list[NodeRecord]]] = {}
    owner: dict[int, int] = {}  # id(removed node) -> id(new node)
    added: list[NodeRecord] = []
    for a in new:
        tensor = hint(a.node)
        r = by_out.get(tensor) if tensor else None
        if r is None:
            added.append(a)
            continue
        if id(r.node) not in owner:  # new nodes standing for one tensor make one change
            owner[id(r.node)] = id(a.node)
            groups[id(a.node)] = ([r], [])
        groups[owner[id(r.node)]][1].append(a)
    pending = [r for r in removed if id(r.node) not in owner]

    def by_producer(r: NodeRecord, inputs: Sequence[str]) -> int | None:
        return next((owner[id(by_out[i].node)] for i in inputs if i in by_out and id(by_out[i].node) in owner), None)

    def by_consumer(r: NodeRecord) -> int | None:  # absorbed into what consumes it (Conv folded into a Conv+Relu)
        return next((owner[id(c.node)] for o in r.outputs for c in by_in.get(o, ()) if id(c.node) in owner), None)

    # Two phases, each absorbing chains (Add -> Relu) until nothing moves: first through the data
    # input (the first) and the consumers only, then through any input. A shape computation
    # shared by several blocks (a Reshape target) then cannot pull a later block's nodes into the
    # first block's change before they are reached through their own data path.
    def sole(r: NodeRecord) -> list[str]:  # every input of an element-wise op is data; of others, the first
        if r.op not in _DATA_INPUTS_ONLY:
            return []
        return [i for i in r.inputs if i and readers.get(i) == 1]

    phases = (lambda r: by_producer(r, sole(r)) or by_producer(r, r.inputs[:1]) or by_consumer(r),
              lambda r: by_producer(r, r.inputs))
    for find in phases:
        for _ in range(len(pending) + 1):
            still = []
            for r in pending:
                target = find(r)
                if target is None:
                    still.append(r)
                else:
                    owner[id(r.node)] = target
                    groups[target][0].append(r)
            if len(still) == len(pending):
                break
            pending = still
    changes: list[Change] = []
    for rs, ns in groups.values():
        sources = list(dict.fromkeys(s for r in rs for s in r.sources))
        passes = list(dict.fromkeys(p for r in rs for p in r.passes))
        for a in ns:
            stamp(a.node, sources, passes, pass_name)
        kind = ChangeKind.FUSED if len(rs) > 1 else ChangeKind.REPLACED
        changes.append(Change(kind, pass_name, tuple(r.name for r in rs), tuple(a.node.name for a in ns),
                              tuple(r.op for r in rs), tuple(a.op for a in ns)))
    for r in pending:
        changes.append(Change(ChangeKind.REMOVED, pass_name, (r.name,), (), (r.op,), ()))
    for a in added:
        stamp(a.node, [], [], pass_name)
        changes.append(Change(ChangeKind.ADDED, pass_name, (), (a.node.name,), (), (a.op,)))
    return changes


def _nbytes(v: ir.Value) -> int:
    cv = v.const_value
    try:
        return int(cv.nbytes) if cv is not None else 0
    except Exception:  # noqa: BLE001 - size is informative only
        return 0


def initializer_changes(inits_before: dict[str, ir.Value], inputs_before: set[str], model: ir.Model,
                         pass_name: str, fed_removed: set[str]) -> list[Change]:
    """Changes that touch only initializers or graph inputs (no node): one summary Change each.

    Initializers that fed a removed node are part of that node's Change and are not repeated.
    """
    changes = []
    after = set(model.graph.initializers.keys())
    gone = [n for n in inits_before if n not in after and n not in fed_removed]
    if gone:
        nbytes = sum(_nbytes(inits_before[n]) for n in gone)
        names = ", ".join(gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
        changes.append(Change(ChangeKind.REMOVED, pass_name, (), (), (), (),
                              f"{len(gone)} initializer(s) removed ({nbytes / 1e6:.2f} MB): {names}"))
    inputs_after = {v.name for v in model.graph.inputs}
    dropped = sorted(inputs_before - inputs_after)
    if dropped:
        names = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        changes.append(Change(ChangeKind.CHANGED, pass_name, (), (), (), (),
                              f"{len(dropped)} graph input(s) that were weights became constants: {names}"))
    return changes

