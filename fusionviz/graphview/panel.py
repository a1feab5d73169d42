"""``node_panel``: what the Graph page's side panel shows for one selected node, as plain data.

Rules (the code points back to them):

1. One record per node and side (:class:`NodePanel`), built from ``node_details`` (attributes,
   tensors, provenance) plus what only the pair knows: the change class and what changed
   (``GraphDiff``), the near misses naming the node, and the overlays' values at it (time,
   memory, error). The page lays it out; nothing here needs Streamlit.
2. Tensors: every input and output with its role, kind (activation, weight, graph input),
   dtype, shape and size in bytes when the shape is known. Weights get a summary of their own:
   shape, dtype, bytes, and min/max/mean when the tensor has at most :data:`SMALL_ELEMENTS`
   elements and its data is here (external data not loaded: shape and dtype only).
3. Attributes are written short: a list of more than :data:`ATTR_ITEMS` items is cut with its
   length; a tensor attribute says its dtype and shape; a graph attribute its node count.
4. Provenance: the original nodes a node absorbed (``fusionviz.sources``) and the passes that made
   or changed it; on the before side, the node it went into.
5. Near misses: those whose matched nodes or blocker include the node, with the pass (rule
   name), the node's part ("blocked here" or "matched") and the reason and hint.
6. Totals across the pair (:func:`totals`): for the nodes that stand for the selection on the
   other side, the sum of each additive overlay (time, bytes written), so a fused node's time
   reads against the time of the nodes it replaced. Error is not additive and is left out; an
   OpenVINO layer holding several of the nodes counts once (``overlays`` rule 4).
7. Several nodes selected (:func:`selection_table`): one row each (side, op, name, change class,
   each computed overlay's value), and per side the totals of the additive overlays (time,
   bytes written; rule 6), so a selected subgraph reads as one number against another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import onnx

from fusionviz.graphview.details import node_details

#: Rule 2: weights up to this many elements get min/max/mean.
SMALL_ELEMENTS = 1_000_000
#: Rule 3: list attributes longer than this are cut.
ATTR_ITEMS = 8

_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1,
             "u16": 2, "u32": 4, "u64": 8, "bool": 1}


@dataclasses.dataclass(frozen=True)
class TensorRow:
    """One input or output of the node (rule 2)."""

    name: str
    role: str
    kind: str
    dtype: str
    shape: str
    nbytes: int | None
    other: tuple[str, ...] = ()  # producer (inputs) or consumers (outputs)


@dataclasses.dataclass(frozen=True)
class WeightRow:
    """A weight the node reads (rule 2)."""

    name: str
    role: str
    dtype: str
    shape: str
    nbytes: int | None
    min: float | None = None
    max: float | None = None
    mean: float | None = None


@dataclasses.dataclass(frozen=True)
class NearMissRow:
    """A near miss that names the node (rule 5)."""

    rule: str
    part: str
    reason: str
    hint: str


@dataclasses.dataclass(frozen=True)
class NodePanel:
    """Everything the side panel shows for one node of one side (rule 1).

    Attributes:
        side, key, name, op, domain, scope: the node.
        status: its change class on its side ("fused", "removed", "changed", "unchanged", ...),
            or "" without a diff.
        what: what changed (changed nodes), in short sentences.
        attributes: (name, value as text).
        inputs, outputs: rule 2.
        weights: rule 2.
        absorbed: original nodes it came from (rule 4); ``went_into`` for a removed node.
        passes: passes that made or changed it.
        near_misses: rule 5.
        measures: (overlay title, value as text) for every overlay that has a value here.
    """

    side: str
    key: str
    name: str
    op: str
    domain: str
    scope: str
    status: str
    what: tuple[str, ...]
    attributes: tuple[tuple[str, str], ...]
    inputs: tuple[TensorRow, ...]
    outputs: tuple[TensorRow, ...]
    weights: tuple[WeightRow, ...]
    absorbed: tuple[str, ...]
    went_into: str | None
    passes: tuple[str, ...]
    near_misses: tuple[NearMissRow, ...]
    measures: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _dims(shape: str) -> list[int] | None:
    if shape == "scalar":
        return []
    try:
        return [int(p) for p in shape.split("×")]
    except ValueError:
        return None


def tensor_bytes(dtype: str, shape: str) -> int | None:
    """Rule 2: bytes of a tensor from its short dtype and shape text, or None when unknown."""
    size = _ITEMSIZE.get(dtype)
    dims = _dims(shape) if shape else None
    if size is None or dims is None:
        return None
    n = 1
    for d in dims:
        n *= d
    return n * size


def attr_text(value: object) -> str:
    """Rule 3: an attribute value, short."""
    if isinstance(value, dict) and "tensor" in value:
        t = value["tensor"]
        return f"tensor {t.get('dtype', '?')} [{', '.join(str(d) for d in t.get('shape', []))}]"
    if isinstance(value, dict) and "graph" in value:
        return f"graph '{value['graph'].get('name', '')}', {value['graph'].get('nodes', 0)} nodes"
    if isinstance(value, list):
        items = [attr_text(v) for v in value[:ATTR_ITEMS]]
        more = f", … ({len(value)} items)" if len(value) > ATTR_ITEMS else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _near_rows(key: str, near_misses: Iterable) -> tuple[NearMissRow, ...]:
    rows = []
    for nm in near_misses:
        if key == nm.blocker:
            rows.append(NearMissRow(nm.rule, "blocked here", nm.reason, nm.hint))
        elif key in nm.nodes:
            rows.append(NearMissRow(nm.rule, "matched", nm.reason, nm.hint))
    return tuple(rows)


def node_panel(model: onnx.ModelProto, key: str, side: str, *, diff=None, near_misses: Sequence = (),
               overlays: Iterable = ()) -> NodePanel:
    """The side panel of node ``key`` of ``model`` (the ``side`` of a pair), rules 1-5.

    Args:
        model: the snapshot the node is in.
        key: its key (name, or ``#i``).
        side: "before" or "after".
        diff: the pair's ``GraphDiff``, when there is one.
        near_misses: ``passes.nearmiss.NearMiss`` records of the pair's passes.
        overlays: ``graphview.overlays.Overlay`` records of this side.

    Raises:
        RenderError: no such node.
    """
    d = node_details(model, key)
    inputs, weights = [], []
    for t in d["inputs"]:
        if t.get("kind") == "omitted":
            continue
        dtype, shape = t.get("dtype", "?"), t.get("shape", "?")
        nb = tensor_bytes(dtype, shape)
        inputs.append(TensorRow(t["name"], t.get("role", ""), t["kind"], dtype, shape, nb,
                                (t["producer"],) if t.get("producer") else ()))
        if t["kind"] == "weight":
            s: Mapping = t.get("stats", {})
            small = int(s.get("elements", 0)) <= SMALL_ELEMENTS and "min" in s
            weights.append(WeightRow(t["name"], t.get("role", ""), dtype, shape, nb,
                                     float(s["min"]) if small else None, float(s["max"]) if small else None,
                                     float(s["mean"]) if small else None))
    outputs = [TensorRow(t["name"], "", t["kind"], t.get("dtype", "?"), t.get("shape", "?"),
                         tensor_bytes(t.get("dtype", "?"), t.get("shape", "?")), tuple(t.get("consumers", ())))
               for t in d["outputs"]]
    status, what, absorbed, went, passes = "", (), tuple(d["provenance"]["sources"]), None, d["provenance"]["passes"]
    if diff is not None:
        statuses = diff.status_after if side == "after" else diff.status_before
        status = statuses.get(d["key"], "")
        what = tuple(diff.what.get(d["key"], ())) if side == "after" else ()
        if side == "after":
            absorbed = tuple(diff.provenance.get(d["key"], absorbed))
            passes = diff.passes.get(d["key"], passes)
        else:
            went = diff.fused_into.get(d["key"]) or diff.lifted_to.get(d["key"])
    measures = []
    for ov in overlays:
        text = ov.text(d["key"])
        if text is not None:
            measures.append((ov.title, text))
    return NodePanel(
        side=side, key=d["key"], name=d["name"], op=d["op"], domain=d["domain"], scope=d["scope"],
        status=status, what=what,
        attributes=tuple((k, attr_text(v)) for k, v in d["attributes"].items()),
        inputs=tuple(inputs), outputs=tuple(outputs), weights=tuple(weights),
        absorbed=absorbed if len(absorbed) > 1 or (absorbed and absorbed[0] != d["key"]) else (),
        went_into=went, passes=tuple(passes), near_misses=_near_rows(d["key"], near_misses),
        measures=tuple(measures),
    )


#: Rule 6: overlays whose values add up over nodes.
ADDITIVE = ("time", "ov_time", "memory")


def totals(keys: Sequence[str], overlays: Iterable) -> tuple[tuple[str, str, int], ...]:
    """Rule 6: (title, the sum as text, how many of ``keys`` have a value) per additive overlay."""
    from fusionviz.graphview.build import format_value

    out = []
    for ov in overlays:
        if ov.kind not in ADDITIVE:
            continue
        total, n = ov.total(keys)
        if n:
            out.append((ov.title, format_value(total, ov.unit), n))
    return tuple(out)


# ------------------------------------------------------------------ several nodes (rule 7)


@dataclasses.dataclass(frozen=True)
class SelectionRow:
    """One selected node in the table of a selection of several (rule 7)."""

    side: str
    key: str
    op: str
    status: str
    values: tuple[str, ...]  # one per column; "" where the overlay has no value at the node


@dataclasses.dataclass(frozen=True)
class SelectionTable:
    """Rule 7: the selected nodes as one compact table.

    Attributes:
        columns: the overlays' titles, one column each (kinds in ``overlays.KINDS`` order).
        rows: the selected nodes, in the order they were selected.
        totals: side -> (title, sum as text, how many have a value) of each additive overlay.
        counts: side -> how many of the selected nodes are on it.
    """

    columns: tuple[str, ...]
    rows: tuple[SelectionRow, ...]
    totals: dict[str, tuple[tuple[str, str, int], ...]]
    counts: dict[str, int]


def selection_table(items: Sequence[tuple[str, str]], op_of, diff=None,
                    overlays: Mapping[str, Mapping[str, object]] | None = None) -> SelectionTable:
    """Rule 7: the table of a selection of several nodes.

    Args:
        items: (side, node key) of each selected node.
        op_of: (side, key) -> op type (``Links.op``).
        diff: the pair's ``GraphDiff`` (the change class), or None.
        overlays: kind -> side -> ``overlays.Overlay`` computed for the pair.
    """
    from fusionviz.graphview.overlays import KINDS

    overlays = overlays or {}
    kinds = [k for k in KINDS if k in overlays]
    columns = tuple(next(iter(overlays[k].values())).title for k in kinds if overlays[k])
    kinds = [k for k in kinds if overlays[k]]
    rows = []
    for side, key in items:
        status = ""
        if diff is not None:
            status = (diff.status_after if side == "after" else diff.status_before).get(key, "")
        vals = []
        for k in kinds:
            ov = overlays[k].get(side)
            text = ov.text(key) if ov is not None else None
            if text and k == "ov_time":  # the layer's sentence is for the card; the table keeps the number
                text = text.split(":", 1)[0].split(" for the whole layer", 1)[0]
            elif text and k == "time":  # likewise a function op's "ran as N inlined nodes"
                text = text.split(" (ran as", 1)[0]
            vals.append(text or "")
        rows.append(SelectionRow(side, key, op_of(side, key), status, tuple(vals)))
    sums, counts = {}, {}
    for side in ("before", "after"):
        keys = [k for s, k in items if s == side]
        if not keys:
            continue
        counts[side] = len(keys)
        sums[side] = totals(keys, [overlays[k][side] for k in kinds if side in overlays[k]])
    return SelectionTable(columns, tuple(rows), sums, counts)
