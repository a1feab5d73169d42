"""Which nodes of one snapshot a node of the other became or came from (provenance links).

Rules (the code points back to them):

1. A node's *origins* are the original node names in its ``fusionviz.sources`` metadata, or its
   own key when it has none (an untouched node stands for itself).
2. A *before* node and an *after* node are linked when their origins share a name, or when they
   have the same key (a node that kept its name). So a FusedConv made from Conv + BatchNorm +
   Relu links to those three, and each of them links back to the FusedConv.
3. The relation is said in words from the diff status (fused, replaced, changed, new, unchanged,
   lifted, removed) and, for removed nodes that went into no other node, from what the pass that dropped
   them recorded (``fates``: folded into a constant, removed as a no-op, ...).
4. Pairs without provenance (onnxruntime's own graph) link by key only; a removed node then
   says that this graph records no provenance.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence

import onnx

from fusionviz.graphview.diff import GraphDiff
from fusionviz.graphview.model_graph import PASSES_KEY, SOURCES_KEY, node_keys

logger = logging.getLogger(__name__)

SIDES = ("before", "after")

#: How a removed node's fate is said (change kind -> verb phrase).
FATE_WORDS = {
    "folded": "folded into a constant",
    "removed": "removed",
    "replaced": "replaced",
    "fused": "fused away",
    "changed": "changed",
    "added": "rewritten",
}


@dataclasses.dataclass(frozen=True)
class Fate:
    """What a pass recorded about a node it took out of the graph.

    Attributes:
        kind: the change kind ("folded", "removed", "replaced", "fused", ...).
        pass_title: the pass's title.
        into: node names the change produced (empty when nothing replaced the node).
    """

    kind: str
    pass_title: str
    into: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Counterpart:
    """A node and what it is on the other side.

    Attributes:
        side: the node's side ("before" or "after").
        key: the node's key.
        op: its op type.
        status: its diff status on its side.
        others: keys of the linked nodes on the other side, in model order.
        other_ops: their op types, same order.
        relation: one sentence: how the node relates to ``others``.
        passes: passes that made or changed the node (after side), or that made the nodes it
            went into (before side).
    """

    side: str
    key: str
    op: str
    status: str
    others: tuple[str, ...]
    other_ops: tuple[str, ...]
    relation: str
    passes: tuple[str, ...] = ()

    @property
    def other_side(self) -> str:
        """The side the linked nodes are on."""
        return "after" if self.side == "before" else "before"


def _meta(node: onnx.NodeProto, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == key:
            return [s for s in p.value.split(",") if s]
    return []


def _short(name: str, limit: int = 48) -> str:
    if len(name) <= limit:
        return name
    return "…" + name[-(limit - 1):]


def _by(passes: Sequence[str]) -> str:
    return f" (passes: {', '.join(passes)})" if passes else ""


def _list(ops: Sequence[str], keys: Sequence[str], limit: int = 4) -> str:
    items = [f"{op} {_short(k, 40)}" for op, k in zip(ops, keys, strict=True)]
    if len(items) <= limit:
        return " + ".join(items)
    return " + ".join(items[:limit - 1]) + f" + … ({len(items)} nodes)"


class Links:
    """Provenance links between the nodes of two snapshots (rules 1-4).

    Args:
        before: the earlier snapshot.
        after: the later snapshot.
        diff: ``diff_models(before, after)`` (None: every node counts as unchanged).
        fates: removed node name -> :class:`Fate`, from the pipeline's change records.
        provenance: False for pairs whose *after* graph carries no provenance (rule 4).
    """

    def __init__(self, before: onnx.ModelProto, after: onnx.ModelProto, diff: GraphDiff | None,
                 fates: Mapping[str, Fate] | None = None, provenance: bool = True) -> None:
        self.diff = diff
        self.fates = dict(fates or {})
        self.provenance = provenance
        self._keys: dict[str, list[str]] = {}
        self._ops: dict[str, dict[str, str]] = {}
        self._origins: dict[str, dict[str, list[str]]] = {}
        self._by_origin: dict[str, dict[str, list[str]]] = {}
        self._order: dict[str, dict[str, int]] = {}
        self._passes: dict[str, list[str]] = {}
        for side, model in (("before", before), ("after", after)):
            nodes = list(model.graph.node)
            keys = node_keys(nodes)
            self._keys[side] = keys
            self._ops[side] = {k: n.op_type for k, n in zip(keys, nodes, strict=True)}
            self._order[side] = {k: i for i, k in enumerate(keys)}
            origins: dict[str, list[str]] = {}
            by_origin: dict[str, list[str]] = {}
            for k, n in zip(keys, nodes, strict=True):
                o = (_meta(n, SOURCES_KEY) if provenance else []) or [k]  # rule 1
                origins[k] = o
                for name in o:
                    by_origin.setdefault(name, []).append(k)
                if side == "after":
                    self._passes[k] = _meta(n, PASSES_KEY)
            self._origins[side] = origins
            self._by_origin[side] = by_origin

    def has(self, side: str, key: str) -> bool:
        """True when ``key`` is a node of ``side``."""
        return key in self._ops.get(side, {})

    def op(self, side: str, key: str) -> str:
        """The op type of a node ('' when unknown)."""
        return self._ops.get(side, {}).get(key, "")

    def keys(self, side: str) -> list[str]:
        """Node keys of one side in model order."""
        return list(self._keys.get(side, []))

    def linked(self, side: str, key: str) -> list[str]:
        """Rule 2: keys on the other side linked to ``key`` (model order)."""
        other = "after" if side == "before" else "before"
        found: set[str] = set()
        if key in self._ops[other]:
            found.add(key)
        for name in self._origins[side].get(key, ()):
            found.update(self._by_origin[other].get(name, ()))
        order = self._order[other]
        return sorted(found, key=lambda k: order.get(k, 0))

    def counterpart(self, side: str, key: str) -> Counterpart | None:
        """Rule 3: the node ``key`` of ``side`` and what it is on the other side; None if unknown."""
        if side not in SIDES or key not in self._ops.get(side, {}):
            return None
        other = "after" if side == "before" else "before"
        others = self.linked(side, key)
        ops = tuple(self._ops[other].get(k, "") for k in others)
        status = self._status(side, key)
        op = self._ops[side][key]
        if side == "after":
            passes = tuple(self._passes.get(key, ()))
            relation = self._after_relation(key, status, others, ops, passes)
        else:
            into = [k for k in others if self._status("after", k) != "unchanged"]
            passes = tuple(dict.fromkeys(p for k in into for p in self._passes.get(k, ())))
            relation = self._before_relation(key, status, others, ops, passes)
        return Counterpart(side, key, op, status, tuple(others), ops, relation, passes)

    def _status(self, side: str, key: str) -> str:
        if self.diff is None:
            return "unchanged"
        table = self.diff.status_after if side == "after" else self.diff.status_before
        return table.get(key, "unchanged")

    def _after_relation(self, key: str, status: str, others: list[str], ops: tuple[str, ...],
                        passes: tuple[str, ...]) -> str:
        by = _by(passes)
        if status == "unchanged":
            return "Unchanged: the same node is in the before graph."
        if status == "fused":
            return f"Fused from {len(others)} node{'s' if len(others) != 1 else ''}: {_list(ops, others)}{by}."
        if status == "changed":
            if others and others != [key]:
                return f"Replaces {_list(ops, others)}{by}."
            what = self.diff.what.get(key) if self.diff is not None else None
            if what:
                return f"Changed: {'; '.join(what)}{by}."
            return f"Changed: same node, new attributes or weights{by}."
        if status == "added":
            return f"New: no node of the before graph went into it{by}."
        return status

    def _before_relation(self, key: str, status: str, others: list[str], ops: tuple[str, ...],
                         passes: tuple[str, ...]) -> str:
        by = _by(passes)
        if status == "unchanged":
            return "Unchanged: the same node is in the after graph."
        if status == "changed":
            absorbed = self.diff.contributors.get(key, []) if self.diff is not None else []
            if absorbed:
                return (f"Kept its name and absorbed {len(absorbed)} node{'s' if len(absorbed) != 1 else ''}: "
                        f"now {_list(ops, others)}{by}.")
            return f"Changed: now {_list(ops, others)}{by}."
        if status == "lifted":
            init = self.diff.lifted_to.get(key) if self.diff is not None else None
            where = f" '{_short(init, 40)}'" if init else ""
            return (f"Lifted to initializer{where}: the same value reaches the same nodes, now as an "
                    "initializer instead of a Constant node (no change).")
        # removed
        if others:
            into = self.diff.fused_into.get(key) if self.diff is not None else None
            verb = "Fused into" if into else "Replaced by"
            return f"{verb} {_list(ops, others)}{by}."
        fate = self.fates.get(key)
        if fate is not None:
            words = FATE_WORDS.get(fate.kind, fate.kind)
            return f"{words[0].upper()}{words[1:]} by {fate.pass_title}; nothing in the after graph stands for it."
        if not self.provenance:
            return "Not in the after graph (this graph records no provenance)."
        return "Removed: nothing in the after graph stands for it."


def fates_from_reports(reports: Iterable) -> dict[str, Fate]:
    """Removed node name -> :class:`Fate`, from pass reports (each with ``title`` and ``changes``).

    The first pass that took a node out wins (later passes never see it again).
    """
    out: dict[str, Fate] = {}
    for rep in reports:
        title = getattr(rep, "title", "") or getattr(rep, "name", "")
        for ch in getattr(rep, "changes", ()) or ():
            kind = getattr(getattr(ch, "kind", None), "value", str(getattr(ch, "kind", "")))
            outputs = tuple(getattr(ch, "outputs", ()) or ())
            for name in getattr(ch, "inputs", ()) or ():
                if name and name not in outputs and name not in out:
                    out[name] = Fate(kind, title, outputs)
    return out
