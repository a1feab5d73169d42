"""Diff of two snapshots of a model: which nodes were fused, removed, added, changed or lifted.

Rules (numbered; the code points back to them). Only main-graph nodes are compared.

1. Nodes are matched by name first (the pipeline keeps names stable and names unnamed nodes).
2. A node of *after* whose name is not in *before* is matched through provenance: its
   ``fusionviz.sources`` (original node names) are looked up among the *before* nodes' own
   sources; the *before* nodes found and gone from *after* are its *contributors*.
   Two or more contributors → ``fused``; one → ``changed`` (it replaced that node, and is
   compared with it for rule 7); none → ``added``.
3. A node in both is ``fused`` when its provenance names *before* nodes that are gone from
   *after* (it absorbed them and kept its name), ``changed`` when what it computes differs: its
   op, domain or attributes, or a value it reads (rule 6); else ``unchanged``. Rewired
   activation inputs alone are not a change (they follow from another node's change).
4. A *before* node whose name is not in *after* is ``removed``, unless rule 5 makes it
   ``lifted``; when it is a contributor of an *after* node it is also listed in ``fused_into``.
5. A *before* ``Constant`` node gone from *after* is ``lifted`` (lifted to an initializer) when
   its value still reaches every node that read it: each of its consumers is in *after* under
   the same name and reads, at the same input, an initializer with the same content (rule 6);
   a graph output it gave is now such an initializer; a subgraph that read it by name finds an
   initializer of that name with that content. A Constant that nothing read is ``removed``.
   Paddle2ONNX writes every weight as a ``Constant`` node, and constant folding lifts them all:
   that is no change of what the model computes.
6. Values read: an input that is a constant in both snapshots (an initializer or a ``Constant``
   node's output, :mod:`fusionviz.graphview.values`) is compared by element type, dims and
   content, whatever its name or storage; a ``Constant`` node in both is compared by the value
   it gives. A constant on one side and a computed value on the other is a change (nothing here
   proves the computed value equal); computed on both sides is not (rule 3). An input added or
   dropped is a change. Attributes: one spelled out with its schema default is the same as one
   left out (``auto_pad="NOTSET"``); a subgraph (If/Loop/Scan body) is compared by what it
   computes (:func:`_graph_key`: not its node names, shape annotations or where its constants
   are stored).
7. What changed: every ``changed`` node carries short reasons (``what``): "op Conv →
   FusedConv", "domain ai.onnx → com.microsoft", "attribute alpha 0.1 → 0.2", "attribute
   activation added (Relu)", "input 1 (W) values changed, shape [64,3,3,3]", "input 1 (W) shape
   [64,3,3,3] → [64,3,1,1]", "input 2 (B) added". A node that replaced one other node says
   "replaces <name>" and how it differs from it, or "renamed from <name>" when it does not.
8. Counts: ``fused``/``added``/``changed``/``unchanged`` count *after* nodes; ``removed`` and
   ``lifted`` count *before* nodes that are gone (``absorbed``: removed nodes that went into a
   fused or replacing node).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os

import numpy as np
import onnx

from fusionviz.graphview.model_graph import (
    PASSES_KEY,
    SOURCES_KEY,
    _input_role,
    default_opset,
    node_keys,
)
from fusionviz.graphview.values import ConstantValues, dims_text, dtype_text, is_constant_node

logger = logging.getLogger(__name__)

BEFORE_STATUSES = ("removed", "lifted", "changed", "unchanged")
AFTER_STATUSES = ("fused", "added", "changed", "unchanged")
#: The counts a diff reports, in the order they are printed (rule 8).
COUNT_KEYS = ("fused", "removed", "added", "changed", "lifted", "unchanged")
#: Statuses that are no change of what the graph computes: drawn quietly, hidden by "changed only".
NO_CHANGE = frozenset({"unchanged", "lifted"})

#: Longest attribute value text in a reason (rule 7).
_VALUE_CHARS = 40
#: List attributes longer than this show their head and their length (rule 7).
_LIST_ITEMS = 8


@dataclasses.dataclass(frozen=True)
class GraphDiff:
    """What changed between two snapshots (keys are node names; ``#i`` for unnamed nodes).

    Attributes:
        counts: fused, removed, added, changed, lifted, unchanged (and absorbed: removed nodes
            that went into a fused or replacing node).
        status_before: before-node → "removed" | "lifted" | "changed" | "unchanged".
        status_after: after-node → "fused" | "added" | "changed" | "unchanged".
        provenance: after-node → original node names it came from (metadata ``fusionviz.sources``),
            for every non-unchanged after-node.
        passes: after-node → passes that made or changed it (metadata ``fusionviz.passes``).
        fused_into: removed before-node → the after-node it went into.
        contributors: after-node → the before-nodes it replaced (rule 2).
        what: changed after-node → what changed, in short sentences (rule 7).
        lifted_to: lifted before-node → the initializer of *after* that now holds its value
            (rule 5).
    """

    counts: dict[str, int]
    status_before: dict[str, str]
    status_after: dict[str, str]
    provenance: dict[str, list[str]]
    passes: dict[str, list[str]]
    fused_into: dict[str, str] = dataclasses.field(default_factory=dict)
    contributors: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    what: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    lifted_to: dict[str, str] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line, e.g. "2 fused, 5 removed, 0 added, 1 changed, 120 unchanged" (lifted when any)."""
        c = self.counts
        keys = [k for k in COUNT_KEYS if k != "lifted" or c.get("lifted")]
        return ", ".join(f"{c.get(k, 0):,} {k}" for k in keys)

    def as_dict(self) -> dict:
        """Counts and every non-unchanged node with its status (and what changed), for JSON."""
        return {
            "counts": {k: self.counts.get(k, 0) for k in (*COUNT_KEYS, "absorbed")},
            "changed": [{"node": k, "what": self.what.get(k, []), "passes": self.passes.get(k, [])}
                        for k, s in self.status_after.items() if s == "changed"],
            "fused": [{"node": k, "from": self.provenance.get(k, []), "passes": self.passes.get(k, [])}
                      for k, s in self.status_after.items() if s == "fused"],
            "added": [k for k, s in self.status_after.items() if s == "added"],
            "removed": [{"node": k, "into": self.fused_into.get(k)}
                        for k, s in self.status_before.items() if s == "removed"],
            "lifted": [{"node": k, "initializer": self.lifted_to.get(k)}
                       for k, s in self.status_before.items() if s == "lifted"],
        }


def _meta(node: onnx.NodeProto, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == key:
            return [s for s in p.value.split(",") if s]
    return []


# ------------------------------------------------------------------ what changed (rules 6-7)


def _attr_key(a: onnx.AttributeProto, versions: dict[str, int]) -> object:
    """What an attribute says, for comparing (rule 6): a subgraph by :func:`_graph_key`, any
    other value by its bytes (its comment left out)."""
    if a.type == onnx.AttributeProto.GRAPH:
        return _graph_key(a.g, versions)
    if a.type == onnx.AttributeProto.GRAPHS:
        return tuple(_graph_key(g, versions) for g in a.graphs)
    if a.doc_string:  # a comment is no change
        a2 = onnx.AttributeProto()
        a2.CopyFrom(a)
        a2.doc_string = ""
        a = a2
    return a.SerializeToString(deterministic=True)


def _graph_key(g: onnx.GraphProto, versions: dict[str, int]) -> tuple:
    """A subgraph as what it computes (rule 6): its nodes in order (op, domain, attributes less
    those at their default, inputs, outputs), its inputs' and outputs' names, and its constants
    (initializers and ``Constant`` outputs) by content wherever they are read. Names of nodes,
    shape annotations (``value_info``), comments and provenance stamps are left out, and a
    constant lifted from a ``Constant`` node to an initializer inside the body is no change."""
    vals = ConstantValues(g)

    def ref(x: str) -> str:
        return "c:" + vals.digest(x).hex() if x in vals else "v:" + x

    nodes = []
    for n in g.node:
        if is_constant_node(n) and n.output[0] in vals:
            continue
        attrs = tuple(sorted((x.name, _attr_key(x, versions)) for x in n.attribute
                             if not _is_default(n, x, versions, n, versions)))
        nodes.append((n.op_type, n.domain or "ai.onnx", tuple(ref(x) for x in n.input), tuple(n.output), attrs))
    return (tuple(nodes), tuple(i.name for i in g.input if i.name not in vals), tuple(ref(o.name) for o in g.output))


def _num(x: float) -> str:
    return str(np.float32(x))


def _list_text(items: list[str]) -> str:
    if len(items) <= _LIST_ITEMS:
        return "[" + ",".join(items) + "]"
    return "[" + ",".join(items[:_LIST_ITEMS]) + f",…] ({len(items)} values)"


def _short(text: str, n: int = _VALUE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def attr_text(a: onnx.AttributeProto) -> str:
    """An attribute's value in a few characters ("0.1", "[1,1,1,1]", "tensor [4] float")."""
    T = onnx.AttributeProto
    if a.ref_attr_name:
        return f"@{a.ref_attr_name}"
    if a.type == T.FLOAT:
        return _num(a.f)
    if a.type == T.INT:
        return str(a.i)
    if a.type == T.STRING:
        return _short(a.s.decode("utf-8", "replace"))
    if a.type == T.FLOATS:
        return _list_text([_num(x) for x in a.floats])
    if a.type == T.INTS:
        return _list_text([str(x) for x in a.ints])
    if a.type == T.STRINGS:
        return _short(_list_text([s.decode("utf-8", "replace") for s in a.strings]))
    if a.type == T.TENSOR:
        return f"tensor {dims_text(tuple(a.t.dims))} {dtype_text(a.t.data_type)}"
    if a.type == T.GRAPH:
        return f"graph of {len(a.g.node)} nodes"
    if a.type == T.GRAPHS:
        return f"{len(a.graphs)} graphs"
    try:
        return T.AttributeType.Name(a.type).lower()
    except ValueError:
        return "?"


def opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Domain → opset version of a model (the default domain as "")."""
    out = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    out.setdefault("", default_opset(model))
    return out


@functools.lru_cache(maxsize=1024)
def _defaults(op: str, domain: str, version: int) -> dict[str, object]:
    """Attribute name → its schema default value, for the attributes that have one."""
    try:
        schema = onnx.defs.get_schema(op, version, domain)
    except Exception:  # noqa: BLE001 - custom ops have no schema
        return {}
    return {name: onnx.helper.get_attribute_value(a.default_value)
            for name, a in schema.attributes.items() if a.default_value.type}


def _is_default(node: onnx.NodeProto, a: onnx.AttributeProto, versions: dict[str, int],
                other: onnx.NodeProto, other_versions: dict[str, int]) -> bool:
    """Rule 6: ``a`` is set to the value its schema gives when it is left out (the other
    node's schema when ``node``'s op has none, as com.microsoft.nchwc's Conv)."""
    if a.ref_attr_name:
        return False
    for n, v in ((node, versions), (other, other_versions)):
        domain = "" if n.domain == "ai.onnx" else n.domain
        defaults = _defaults(n.op_type, domain, v.get(domain, 1))
        if a.name in defaults:
            try:
                return onnx.helper.get_attribute_value(a) == defaults[a.name]
            except Exception:  # noqa: BLE001
                return False
    return False


def _attr_reasons(b: onnx.NodeProto, a: onnx.NodeProto, bver: dict[str, int], aver: dict[str, int]) -> list[str]:
    battrs = {x.name: x for x in b.attribute}
    aattrs = {x.name: x for x in a.attribute}
    out: list[str] = []
    for name in sorted(set(battrs) | set(aattrs)):
        x, y = battrs.get(name), aattrs.get(name)
        if (y is None and _is_default(b, x, bver, a, aver)) or (x is None and _is_default(a, y, aver, b, bver)):
            continue  # rule 6: spelled out with its default value, or left to it
        if y is None:
            out.append(f"attribute {name} removed ({attr_text(x)})")
        elif x is None:
            out.append(f"attribute {name} added ({attr_text(y)})")
        elif x.type != y.type or _attr_key(x, bver) != _attr_key(y, aver):
            tx, ty = attr_text(x), attr_text(y)
            if x.type == y.type == onnx.AttributeProto.GRAPH and len(x.g.node) != len(y.g.node):
                out.append(f"attribute {name} changed (graph of {len(x.g.node)} → {len(y.g.node)} nodes)")
            else:
                out.append(f"attribute {name} {tx} → {ty}" if tx != ty else f"attribute {name} changed ({tx})")
    return out


def _role(b: onnx.NodeProto, a: onnx.NodeProto, i: int, opset: int) -> str:
    role = _input_role(a.op_type, a.domain, i, opset)
    if role == f"in{i}":  # no schema for the new op (com.microsoft.nchwc's Conv): the old op's name
        role = _input_role(b.op_type, b.domain, i, opset)
    return role


@dataclasses.dataclass(frozen=True)
class Side:
    """One snapshot as the comparison needs it: its constants and its opsets."""

    values: ConstantValues
    opsets: dict[str, int]

    @classmethod
    def of(cls, model: onnx.ModelProto, base_dir: str | os.PathLike | None = None) -> Side:
        """The constants (external data under ``base_dir``, by default the folder of weights
        fusionviz keeps on disk: ``fusionviz.model_io`` rule 9) and opsets of ``model``."""
        if base_dir is None:
            from fusionviz.model_io import weights_dir

            base_dir = weights_dir(model)
        return cls(ConstantValues(model.graph, base_dir=base_dir), opsets(model))


def _input_reasons(b: onnx.NodeProto, a: onnx.NodeProto, before: Side, after: Side) -> list[str]:
    bvals, avals = before.values, after.values
    out: list[str] = []
    for i in range(max(len(b.input), len(a.input))):
        x = b.input[i] if i < len(b.input) else ""
        y = a.input[i] if i < len(a.input) else ""
        if not x and not y:
            continue
        what = f"input {i} ({_role(b, a, i, after.opsets[''])})"
        xc, yc = x in bvals, y in avals
        if not x:
            out.append(f"{what} added" + (f" (constant {avals.describe(y)})" if yc else ""))
        elif not y:
            out.append(f"{what} dropped")
        elif xc and yc:
            (bt, bd), (at, ad) = bvals.dtype_dims(x), avals.dtype_dims(y)
            if bt != at or bd != ad:
                parts = []
                if bd != ad:
                    parts.append(f"shape {dims_text(bd)} → {dims_text(ad)}")
                if bt != at:
                    parts.append(f"type {dtype_text(bt)} → {dtype_text(at)}")
                out.append(f"{what} " + ", ".join(parts))
            elif not bvals.same(x, avals, y):
                out.append(f"{what} values changed, shape {dims_text(ad)}")
        elif xc:
            out.append(f"{what} is now computed (was a constant {bvals.describe(x)})")
        elif yc:
            out.append(f"{what} is now a constant {avals.describe(y)} (was computed)")
    return out


def what_changed(b: onnx.NodeProto, a: onnx.NodeProto, before: Side, after: Side) -> list[str]:
    """Rules 6-7: why node ``a`` of *after* computes something else than node ``b`` of *before*
    (empty: it does not).

    Args:
        b: the before node.
        a: the after node.
        before: the before snapshot's constants and opsets (:meth:`Side.of`).
        after: the after snapshot's.
    """
    bvals, avals = before.values, after.values
    out: list[str] = []
    if b.op_type != a.op_type:
        out.append(f"op {b.op_type} → {a.op_type}")
    if (b.domain or "ai.onnx") != (a.domain or "ai.onnx"):
        out.append(f"domain {b.domain or 'ai.onnx'} → {a.domain or 'ai.onnx'}")
    if is_constant_node(b) and is_constant_node(a) and b.output[0] in bvals and a.output[0] in avals:
        x, y = b.output[0], a.output[0]  # rule 6: a Constant is compared by the value it gives
        if bvals.dtype_dims(x) != avals.dtype_dims(y):
            out.append(f"value {bvals.describe(x)} → {avals.describe(y)}")
        elif not bvals.same(x, avals, y):
            out.append(f"value changed, shape {dims_text(avals.dtype_dims(y)[1])}")
        return out
    out.extend(_attr_reasons(b, a, before.opsets, after.opsets))
    out.extend(_input_reasons(b, a, before, after))
    return out


# ------------------------------------------------------------------ lifted constants (rule 5)


def _subgraph_reads(node: onnx.NodeProto, into: set[str]) -> None:
    """Every name read by a node inside ``node``'s subgraphs (outer-scope names among them)."""
    for at in node.attribute:
        graphs = [at.g] if at.type == onnx.AttributeProto.GRAPH else list(at.graphs)
        for g in graphs:
            for n in g.node:
                into.update(x for x in n.input if x)
                _subgraph_reads(n, into)


def _lifted(before: onnx.ModelProto, after: onnx.ModelProto, bmap: dict[str, onnx.NodeProto],
            amap: dict[str, onnx.NodeProto], bvals: ConstantValues, avals: ConstantValues) -> dict[str, str]:
    """Rule 5: before ``Constant`` key → the after initializer that holds its value now."""
    gone = {n.output[0]: k for k, n in bmap.items()
            if k not in amap and is_constant_node(n) and n.output[0] in bvals}
    if not gone:
        return {}
    uses: dict[str, list[tuple[str, int]]] = {}
    by_name: set[str] = set()
    for k, n in bmap.items():
        for i, x in enumerate(n.input):
            if x in gone:
                uses.setdefault(x, []).append((k, i))
        if any(at.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for at in n.attribute):
            _subgraph_reads(n, by_name)
    aout = [o.name for o in after.graph.output]
    bout = [o.name for o in before.graph.output]
    out: dict[str, str] = {}
    for v, key in gone.items():
        reads: list[str] = []  # the after names that must hold v's value
        ok = True
        for c, i in uses.get(v, ()):
            an = amap.get(c)
            if an is None or i >= len(an.input):
                ok = False
                break
            reads.append(an.input[i])
        for j, o in enumerate(bout):
            if o == v:
                if j >= len(aout):
                    ok = False
                    break
                reads.append(aout[j])
        if v in by_name:
            reads.append(v)
        if not ok or not reads:
            continue
        if all(avals.is_initializer(y) and bvals.same(v, avals, y) for y in dict.fromkeys(reads)):
            out[key] = reads[0]
    return out


# ------------------------------------------------------------------ the diff


def diff_models(before: onnx.ModelProto, after: onnx.ModelProto, *,
                before_dir: str | os.PathLike | None = None,
                after_dir: str | os.PathLike | None = None) -> GraphDiff:
    """Compare two snapshots (rules 1-8).

    Args:
        before: the earlier snapshot (e.g. ``run_pipeline(...).snapshots[k-1].model``).
        after: the later snapshot.
        before_dir: folder of ``before``'s external data, when it was loaded without it
            (:mod:`fusionviz.graphview.values`, rule 4); by default the folder fusionviz's own
            loader keeps a big model's weights in (``fusionviz.model_io`` rule 9), else none.
        after_dir: the same for ``after``.

    Returns:
        A :class:`GraphDiff`.
    """
    bnodes = list(before.graph.node)
    anodes = list(after.graph.node)
    bkeys = node_keys(bnodes)
    akeys = node_keys(anodes)
    bmap = dict(zip(bkeys, bnodes, strict=True))
    amap = dict(zip(akeys, anodes, strict=True))
    bside, aside = Side.of(before, before_dir), Side.of(after, after_dir)
    bvals, avals = bside.values, aside.values

    # Rule 2: original name -> before nodes that stand for it.
    orig_to_before: dict[str, list[str]] = {}
    for k, n in bmap.items():
        for s in _meta(n, SOURCES_KEY) or [k]:
            orig_to_before.setdefault(s, []).append(k)

    status_after: dict[str, str] = {}
    provenance: dict[str, list[str]] = {}
    passes: dict[str, list[str]] = {}
    contributors: dict[str, list[str]] = {}
    what: dict[str, list[str]] = {}
    for k, n in amap.items():
        sources = _meta(n, SOURCES_KEY)
        contrib: list[str] = []
        for s in sources:
            for b in orig_to_before.get(s, ()):
                if b != k and b not in amap and b not in contrib:
                    contrib.append(b)
        reasons: list[str] = []
        if k not in bmap:  # rule 2
            status = "fused" if len(contrib) >= 2 else "changed" if contrib else "added"
            if status == "changed":  # rule 7: compared with the node it replaced
                diffs = what_changed(bmap[contrib[0]], n, bside, aside)
                reasons = [f"replaces {contrib[0]}", *diffs] if diffs else [f"renamed from {contrib[0]}"]
        elif contrib:  # rule 3
            status = "fused"
        else:
            reasons = what_changed(bmap[k], n, bside, aside)
            status = "changed" if reasons else "unchanged"
        status_after[k] = status
        if status == "changed":
            what[k] = reasons
        if status != "unchanged":
            provenance[k] = sources or ([k] if k in bmap else [])
            passes[k] = _meta(n, PASSES_KEY)
            if contrib:
                contributors[k] = contrib

    fused_into: dict[str, str] = {}
    for a, bs in contributors.items():
        for b in bs:
            fused_into.setdefault(b, a)
    lifted_to = _lifted(before, after, bmap, amap, bvals, avals)
    status_before: dict[str, str] = {}
    for k in bmap:
        if k in lifted_to and k not in fused_into:  # rule 5
            status_before[k] = "lifted"
        elif k not in amap:  # rule 4
            status_before[k] = "removed"
        else:
            status_before[k] = "unchanged" if status_after[k] == "unchanged" else "changed"
    lifted_to = {k: v for k, v in lifted_to.items() if status_before[k] == "lifted"}

    counts = {s: 0 for s in COUNT_KEYS}
    for s in status_after.values():
        counts[s] += 1
    counts["removed"] = sum(1 for s in status_before.values() if s == "removed")
    counts["lifted"] = len(lifted_to)
    counts["absorbed"] = len(fused_into)
    logger.debug("diff: %s", counts)
    return GraphDiff(counts, status_before, status_after, provenance, passes, fused_into, contributors,
                     what, lifted_to)
