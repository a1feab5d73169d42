"""The pass contract: Pass, Change, and provenance.

A pass transforms an onnx-ir model in place (``transform``). ``Pass.apply`` wraps that with the
bookkeeping every pass needs, so no pass has to do it by hand:

1. Node identity before/after is recorded; nodes that disappeared are *removed*, nodes that
   appeared are *new*; surviving nodes whose op/attributes/inputs changed in place are *changed*.
   When a pass rebuilds the model (e.g. via a proto round trip) nodes are matched by
   (name, op_type, inputs, outputs) instead.
2. Removed and new nodes are grouped into Changes with a union-find over the values they shared:
   two removed nodes join when the tensor between them vanished; two new nodes join when the
   tensor between them is new; a removed and a new node join when they produced the same tensor
   name or fed the same surviving consumer.
3. Every new node gets provenance in ``metadata_props``: ``fusionviz.sources`` (the *original*
   node names it stands for, resolved through earlier passes' provenance) and
   ``fusionviz.passes`` (every pass that touched it). So a node made by two passes from five
   originals says so.
4. Unnamed or duplicate-named nodes get unique names so that every view can refer to them.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable, Sequence
from typing import ClassVar

import onnx_ir as ir

logger = logging.getLogger(__name__)

SOURCES_KEY = "fusionviz.sources"
PASSES_KEY = "fusionviz.passes"
SEP = ","


class Category(str, enum.Enum):
    SIMPLIFY = "simplify"
    FUSE = "fuse"
    LAYOUT = "layout-memory"
    PRECISION = "precision"


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


class Pass:
    """Base class. Subclasses set the class attributes and implement :meth:`transform`."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    category: ClassVar[Category] = Category.SIMPLIFY
    explain: ClassVar[str] = ""
    needs_shapes: ClassVar[bool] = False
    #: True when the pass can make shape inference learn more about values it did not create
    #: (the pipeline then re-infers shapes before the next pass that needs them).
    refines_shapes: ClassVar[bool] = False
    #: True when outputs must stay equal (fp32 tolerance); False for precision passes.
    exact: ClassVar[bool] = True

    def origin_tensor(self, node: ir.Node) -> str | None:
        """For passes that rebuild the whole model (names of tensors change): the *original*
        output tensor whose producer ``node`` stands for, or None. When a pass overrides this,
        Changes are grouped by these hints instead of by shared tensors (see diff_changes)."""
        return None

    uses_origin_hints: ClassVar[bool] = False

    #: Op types of which at least one must be in the model for the pass to have anything to do
    #: (empty: always run). The pipeline skips a pass whose triggers are all absent, without
    #: shape inference or bookkeeping, and reports why: a pass that cannot apply costs nothing.
    trigger_ops: ClassVar[frozenset[str]] = frozenset()

    def applicable(self, ops: set[str]) -> bool:
        """False when the model (its op types: ``ops``) certainly gives this pass nothing to do."""
        return not self.trigger_ops or bool(self.trigger_ops & ops)

    def skip_reason(self) -> str:
        return "nothing to do: the model has no " + " / ".join(sorted(self.trigger_ops))

    def transform(self, model: ir.Model) -> ir.Model | None:  # pragma: no cover - abstract
        """Change ``model`` in place (return None) or return a new model."""
        raise NotImplementedError

    def apply(self, model: ir.Model) -> tuple[ir.Model, list[Change]]:
        """Run the pass; return the resulting model and the changes it made (rules 1-4)."""
        nodes = all_nodes(model)
        ensure_unique_names(model, nodes)
        before = _snapshot_nodes(model, nodes)
        inits_before = dict(model.graph.initializers)  # name -> Value; sizes only for the gone ones
        inputs_before = {v.name for v in model.graph.inputs}
        result = self.transform(model)
        new_model = result if result is not None else model
        ensure_unique_names(new_model)
        hint = self.origin_tensor if self.uses_origin_hints else None
        changes = diff_changes(before, new_model, self.name, hint=hint)
        alive = {id(n) for n in all_nodes(new_model)}
        fed_removed = {i for r in before if id(r.node) not in alive for i in r.inputs}
        changes.extend(_initializer_changes(inits_before, inputs_before, new_model, self.name, fed_removed))
        return new_model, changes

    @classmethod
    def info(cls) -> dict:
        return {
            "name": cls.name,
            "title": cls.title,
            "category": cls.category.value,
            "exact": cls.exact,
            "needs_shapes": cls.needs_shapes,
            "explain": cls.explain,
        }


# --------------------------------------------------------------------------- helpers


_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def all_nodes(model: ir.Model) -> list[ir.Node]:
    """Every node, subgraphs included, in graph order (iterative: deep If/Loop nesting is fine).

    Faster than onnx-ir's RecursiveGraphIterator for the common case of no subgraphs.
    """
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


def node_sources(node: ir.Node) -> list[str]:
    raw = node.metadata_props.get(SOURCES_KEY)
    if raw:
        return [s for s in raw.split(SEP) if s]
    return [node.name or ""]


def node_passes(node: ir.Node) -> list[str]:
    raw = node.metadata_props.get(PASSES_KEY)
    return [s for s in raw.split(SEP) if s] if raw else []


def ensure_unique_names(model: ir.Model, nodes: Sequence[ir.Node] | None = None) -> int:
    """Rule 4: give every node a unique, non-empty name (``nodes``: ``all_nodes(model)`` if known).

    Returns how many nodes were renamed.
    """
    seen: set[str] = set()
    counter = 0
    renamed = 0
    for node in all_nodes(model) if nodes is None else nodes:
        name = node.name
        if not name or name in seen:
            base = f"{node.op_type}_fv"
            while True:
                counter += 1
                candidate = f"{base}{counter}"
                if candidate not in seen:
                    break
            node.name = candidate
            renamed += 1
        seen.add(node.name)
    return renamed


@dataclasses.dataclass
class _NodeRec:
    node: ir.Node
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple  # (name, Attr) pairs; Attr objects are compared by identity (see _same_attrs)
    raw_sources: str | None  # metadata_props values as they were (split only when needed)
    raw_passes: str | None

    @property
    def key(self) -> tuple:
        return (self.name, self.op, self.inputs, self.outputs)

    @property
    def sources(self) -> list[str]:
        if self.raw_sources:
            return [s for s in self.raw_sources.split(SEP) if s]
        return [self.name]

    @property
    def passes(self) -> list[str]:
        return [s for s in self.raw_passes.split(SEP) if s] if self.raw_passes else []


def _same_attrs(a: tuple, b: tuple) -> bool:
    """Whether two attribute snapshots hold the same Attr objects.

    onnx-ir attributes are immutable values: a pass that changes one puts a new Attr in the node
    (``node.attributes[k] = ...``), so identity is exact and costs nothing; the snapshot holds
    the objects, so an id is never reused while it is compared.
    """
    if len(a) != len(b):
        return False
    other = dict(b)
    return all(other.get(k) is v for k, v in a)


def _rec(node: ir.Node) -> _NodeRec:
    meta = node.metadata_props
    return _NodeRec(
        node=node,
        name=node.name or "",
        op=node.op_type,
        inputs=tuple(v.name if v is not None and v.name else "" for v in node.inputs),
        outputs=tuple(v.name or "" for v in node.outputs),
        attrs=tuple(node.attributes.data.items()),
        raw_sources=meta.get(SOURCES_KEY),
        raw_passes=meta.get(PASSES_KEY),
    )


def _snapshot_nodes(model: ir.Model, nodes: Sequence[ir.Node] | None = None) -> list[_NodeRec]:
    return [_rec(n) for n in (all_nodes(model) if nodes is None else nodes)]


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


def _value_names(model: ir.Model, nodes: Sequence[ir.Node]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        names.update(v.name for v in node.outputs if v.name)
    names.update(model.graph.initializers.keys())
    names.update(v.name for v in model.graph.inputs if v.name)
    return names


def diff_changes(before: list[_NodeRec], model: ir.Model, pass_name: str,
                 hint=None) -> list[Change]:
    """Compute Changes between a pre-pass node snapshot and the model after (rules 1-3)."""
    before_by_id = {id(r.node): r for r in before}
    after_nodes = all_nodes(model)
    changed: list[tuple[_NodeRec, _NodeRec]] = []
    unmatched_after: list[_NodeRec] = []
    alive: set[int] = set()
    # Rule 1: identity first; a surviving node gets a record only when its op or attributes
    # changed (rewired inputs alone are a consequence of another change, not a change).
    for n in after_nodes:
        r = before_by_id.get(id(n))
        if r is None:
            unmatched_after.append(_rec(n))
            continue
        alive.add(id(n))
        if n.op_type != r.op or not _same_attrs(tuple(n.attributes.data.items()), r.attrs):
            changed.append((r, _rec(n)))
    removed = [r for r in before if id(r.node) not in alive]
    # Then signature (for passes that rebuilt the model).
    if removed and unmatched_after:
        by_key: dict[tuple, list[_NodeRec]] = {}
        for r in removed:
            by_key.setdefault(r.key, []).append(r)
        still_removed_ids = {id(r.node) for r in removed}
        new: list[_NodeRec] = []
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
        _stamp(a.node, r.sources, r.passes, pass_name)
        detail = ""
        if not _same_attrs(r.attrs, a.attrs):
            detail = "attributes changed"
        elif r.inputs != a.inputs:
            detail = "inputs changed"
        changes.append(Change(ChangeKind.CHANGED, pass_name, (r.name,), (a.node.name,), (r.op,), (a.op,), detail))
    if not removed and not new:
        return changes

    if hint is not None:
        return changes + _hinted_changes(removed, new, hint, pass_name)

    after_values = _value_names(model, after_nodes)
    before_values: set[str] = set()
    for r in before:
        before_values.update(r.outputs)
    uf = _UF()
    rem_by_out: dict[str, _NodeRec] = {}
    for r in removed:
        uf.find(("r", id(r.node)))
        for o in r.outputs:
            if o:
                rem_by_out[o] = r
    for r in removed:  # removed-removed: the tensor between them vanished
        for i in r.inputs:
            p = rem_by_out.get(i)
            if p is not None and i not in after_values:
                uf.union(("r", id(p.node)), ("r", id(r.node)))
    new_by_out: dict[str, _NodeRec] = {}
    for a in new:
        uf.find(("n", id(a.node)))
        for o in a.outputs:
            if o:
                new_by_out[o] = a
    for a in new:  # new-new: the tensor between them is new
        for i in a.inputs:
            p = new_by_out.get(i)
            if p is not None and i not in before_values:
                uf.union(("n", id(p.node)), ("n", id(a.node)))
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
    rem_by_in: dict[str, list[_NodeRec]] = {}
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

    groups: dict[object, tuple[list[_NodeRec], list[_NodeRec]]] = {}
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
            _stamp(a.node, sources, passes, pass_name)
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


def _hinted_changes(removed: list[_NodeRec], new: list[_NodeRec], hint, pass_name: str) -> list[Change]:
    """Grouping for passes that rebuild the model and say which original tensor each new node
    stands for: new node ← producer of that tensor; a removed node without a counterpart joins
    the new node that took over its first input's producer (e.g. an Add+Relu absorbed by a Conv);
    new nodes without a hint (layout reorders) are 'added'."""
    by_out = {o: r for r in removed for o in r.outputs if o}
    by_in: dict[str, list[_NodeRec]] = {}
    for r in removed:
        for i in r.inputs:
            if i:
                by_in.setdefault(i, []).append(r)
    groups: dict[int, tuple[list[_NodeRec], list[_NodeRec]]] = {}
    owner: dict[int, int] = {}  # id(removed node) -> id(new node)
    added: list[_NodeRec] = []
    for a in new:
        tensor = hint(a.node)
        r = by_out.get(tensor) if tensor else None
        if r is None:
            added.append(a)
            continue
        groups.setdefault(id(a.node), ([], []))[1].append(a)
        if id(r.node) not in owner:
            owner[id(r.node)] = id(a.node)
            groups[id(a.node)][0].append(r)
    pending = [r for r in removed if id(r.node) not in owner]
    for _ in range(len(pending) + 1):  # absorb chains (Add -> Relu) iteratively
        still = []
        for r in pending:
            target = next((owner[id(by_out[i].node)] for i in r.inputs
                           if i in by_out and id(by_out[i].node) in owner), None)
            if target is None:  # absorbed into what consumes it (Conv folded into a Conv+Relu)
                target = next((owner[id(c.node)] for o in r.outputs for c in by_in.get(o, ())
                               if id(c.node) in owner), None)
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
            _stamp(a.node, sources, passes, pass_name)
        kind = ChangeKind.FUSED if len(rs) > 1 else ChangeKind.REPLACED
        changes.append(Change(kind, pass_name, tuple(r.name for r in rs), tuple(a.node.name for a in ns),
                              tuple(r.op for r in rs), tuple(a.op for a in ns)))
    for r in pending:
        changes.append(Change(ChangeKind.REMOVED, pass_name, (r.name,), (), (r.op,), ()))
    for a in added:
        _stamp(a.node, [], [], pass_name)
        changes.append(Change(ChangeKind.ADDED, pass_name, (), (a.node.name,), (), (a.op,)))
    return changes


def _nbytes(v: ir.Value) -> int:
    cv = v.const_value
    try:
        return int(cv.nbytes) if cv is not None else 0
    except Exception:  # noqa: BLE001 - size is informative only
        return 0


def _initializer_changes(inits_before: dict[str, ir.Value], inputs_before: set[str], model: ir.Model,
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


def _stamp(node: ir.Node, sources: Sequence[str], passes: Iterable[str], pass_name: str) -> None:
    srcs = [s for s in sources if s]
    if not srcs:
        srcs = node_sources(node) if node.metadata_props.get(SOURCES_KEY) else []
    plist = list(dict.fromkeys([*node_passes(node), *passes, pass_name]))
    if srcs:
        node.metadata_props[SOURCES_KEY] = SEP.join(dict.fromkeys(srcs))
    node.metadata_props[PASSES_KEY] = SEP.join(plist)
