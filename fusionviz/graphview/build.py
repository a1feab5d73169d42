"""``render_graph``: model (+ diff) → DOT text, with focus, changed-only, collapse and a cap.

Drawing rules (model_graph, collapse and dot hold theirs):

1. A node's fill is its op family's colour; with a diff, fused/added nodes are green, removed
   red (dashed), changed amber, each with a thick border; unchanged nodes keep the family fill;
   lifted nodes (a Constant now an initializer: no change, ``diff.NO_CHANGE``) are grey and
   dotted with a thin border, and "changed only" leaves them out like unchanged nodes.
2. Fused nodes say what they came from ("← Conv_12 + BatchNormalization_13 + Relu_14"; long
   lists "← 12 nodes: Conv_1 + … + Relu_9"); removed nodes in the before view say where they went
   ("fused into FusedConv_3").
3. Edges carry "shape dtype" when the picture is small enough for labels to help
   (``EDGE_LABEL_MAX`` items); edges between boxes say how many tensors they carry.
4. Hub tensors never constrain the layout: they are not drawn as edges but named in each
   consumer's label ("◂ ext_mask (hub ×24)"), because even ``constraint=false`` long edges cost
   the router seconds (measured: 1k nodes 11 s with unconstrained hub edges, 0.4 s without;
   93 collapsed boxes 5 s vs 0.05 s), and per-use stub nodes pushed the layout into a diagonal. Big pictures also bound the layout
   work with ``nslimit``/``mclimit``, and very big ones are laid out by parts (``parts``).
5. Edges from nodes that are not drawn (focus, changed-only, cap) start at a small "⋯" stub, so
   a cut is visible as a cut.
6. More selected nodes than ``max_nodes``: with ``auto_collapse`` the name scopes (without them,
   the blocks found by structure: collapse rule 5) are collapsed
   into blocks (the note says so); what still does not fit is cut at the cap, and the note says
   to focus a node.
7. Near misses (``RenderOptions.near_misses``) are drawn on its nodes: the matched ones outlined
   dashed in violet, the node that blocked the rewrite in pink with "near miss: <reason>" in its
   label, both in the legend; without a focus the picture is their neighbourhood.
8. Node values (``RenderOptions.node_values``: a number per node, e.g. the per-tensor error of
   ``fusionviz.compare``) fill their nodes on a heat scale (``value_scale``: ascending upper
   bounds with their legend labels; ``dot.HEAT_FILLS`` spread over its steps), replacing the
   family or diff fill (the diff's border stays); the value is added to the label after
   ``value_title``. A NaN value is marked apart (``dot.HEAT_NAN``, "NaN/Inf" in its label). A
   collapsed block takes its largest member value (NaN first). The legend lists every step of
   the scale, and NaN when one is drawn. Nodes without a value keep their fill. Every per-node
   overlay goes through this one rule (``graphview.overlays``: time, memory, error): each gives
   its own palette (``value_fills``), unit (``value_unit``: "ms", "B" or none) and NaN label;
   ``value_labels`` replaces a node's value line where the value is its group's (OpenVINO layers).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import threading
from collections.abc import Mapping

import onnx

from fusionviz import errors
from fusionviz.graphview import dot as D
from fusionviz.graphview.collapse import (
    AUTO_OPEN_ITEMS,
    carry_blocks,
    name_scopes_useful,
    neighbourhood,
    select,
    structural_blocks,
)
from fusionviz.graphview.diff import NO_CHANGE, GraphDiff
from fusionviz.graphview.model_graph import DisplayGraph, DisplayNode, build_display_graph, infer

logger = logging.getLogger(__name__)

#: Above this many drawn items, edges are not labelled with shapes (rule 3).
EDGE_LABEL_MAX = 500
#: Above this many drawn items, layout work is bounded (rule 4).
BIG_LAYOUT = 150
#: At most this many "⋯" stubs (rule 5); the rest share one.
MAX_STUBS = 120
#: With an automatic collapse (rule 6), scopes are opened level by level up to this many items.
AUTO_COLLAPSE_ITEMS = 1000


#: Default cap on drawn items (``FUSIONVIZ_MAX_DRAW_NODES``).
DEFAULT_MAX_DRAW = 4000


def _default_max_nodes() -> int:
    try:
        return max(1, int(os.environ.get("FUSIONVIZ_MAX_DRAW_NODES", str(DEFAULT_MAX_DRAW))))
    except ValueError:
        return DEFAULT_MAX_DRAW


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    """What to draw.

    Attributes:
        collapse: draw scopes as boxes with node counts (expand them with ``expanded``).
        expanded: scopes to keep open (``encoder/layer.3``; the ids ``Rendered.scope_ids`` maps to).
        focus: a node name: draw only it and its neighbours within ``hops`` edges.
        hops: see ``focus``.
        changed_only: draw only nodes the diff marks, with ``context_hops`` of neighbours.
        context_hops: see ``changed_only``.
        max_nodes: hard cap on drawn items [env FUSIONVIZ_MAX_DRAW_NODES, 4000].
        auto_collapse: collapse name scopes when more than ``max_nodes`` nodes are selected
            (rule 6).
        show_shapes: label edges with shape and dtype (small pictures only).
        rankdir: "TB" or "LR".
        legend: add a legend node to the DOT (the UI can draw ``Rendered.legend`` itself).
        near_misses: ``(nodes, blocker, reason)`` of each near miss to draw (rule 7): the
            matched nodes outlined dashed, the blocking node marked with the reason beside it;
            one near miss and no ``focus``: the picture is cut to its neighbourhood (``hops``).
        node_values: ``(node key, value)`` pairs drawn on a heat scale (rule 8); NaN is marked
            apart.
        value_scale: ``(upper bound, label)`` per step of the scale, ascending; a value above
            the last bound takes the last step. Empty: one step per decade of the values.
        value_title: what the values are, for labels and the legend ("max rel error").
        value_fills: the palette of the scale, low to high (empty: ``dot.HEAT_FILLS``).
        value_unit: how a value is written: "ms", "B" (bytes, in KB/MB/GB) or "" (2 digits).
        value_nan_label: the legend's and labels' name for a NaN value.
        value_labels: ``(node key, text)`` pairs that replace the label line written for a
            node's value (an overlay whose value belongs to a group of nodes says so on each).
    """

    collapse: bool = False
    expanded: tuple[str, ...] = ()
    focus: str | None = None
    hops: int = 2
    changed_only: bool = False
    context_hops: int = 1
    max_nodes: int = dataclasses.field(default_factory=_default_max_nodes)
    show_shapes: bool = True
    rankdir: str = "TB"
    legend: bool = True
    auto_collapse: bool = False
    near_misses: tuple[tuple[tuple[str, ...], str | None, str], ...] = ()
    node_values: tuple[tuple[str, float], ...] = ()
    value_scale: tuple[tuple[float, str], ...] = ()
    value_title: str = ""
    value_fills: tuple[str, ...] = ()
    value_unit: str = ""
    value_nan_label: str = "NaN/Inf introduced"
    value_labels: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Rendered:
    """A drawn graph.

    Attributes:
        dot: the DOT text.
        drawn: items drawn (nodes and collapsed boxes; not inputs, outputs, stubs, legend).
        total: op nodes in the model's main graph (folded constants excluded).
        note: a sentence for the user when something is left out, else None.
        node_ids: SVG/DOT element id → node key (the node name, ``#i`` for unnamed nodes).
        scope_ids: SVG/DOT element id → scope path of a collapsed box (pass it in ``expanded``).
        legend: (title, fill, border) entries for a legend drawn by the UI.
        focus: the node key focused on, if any.
        item_ids: node key -> element id of what stands for it in the drawing (its own box, or
            the collapsed block it is in); only drawn nodes.
        auto_collapsed: True when the scopes were collapsed because of the cap (rule 6).
    """

    dot: str
    drawn: int
    total: int
    note: str | None
    node_ids: dict[str, str]
    scope_ids: dict[str, str]
    legend: tuple[tuple[str, str, str], ...] = ()
    focus: str | None = None
    item_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    auto_collapsed: bool = False


def resolve_node(dg: DisplayGraph, name: str) -> str:
    """The key of the node called ``name`` (exact key, exact name, then a unique short name)."""
    if name in dg.by_key:
        return name
    exact = [n.key for n in dg.nodes if n.name == name]
    if exact:
        return exact[0]
    short = [n.key for n in dg.nodes if n.short_name == name or n.name.endswith("/" + name)]
    if len(short) == 1:
        return short[0]
    import difflib

    close = difflib.get_close_matches(name, [n.name for n in dg.nodes if n.name], n=3)
    hint = f" Did you mean: {', '.join(D.shorten(c, 60) for c in close)}?" if close else ""
    if len(short) > 1:
        hint = f" {len(short)} nodes are called that; give the full name." + hint
    raise errors.RenderError(f"No node named '{D.shorten(D.clean(name), 80)}' in the model.{hint}")


def _wrap(items: list[str], width: int = 34) -> list[str]:
    lines: list[str] = []
    cur = ""
    for it in items:
        if cur and len(cur) + 1 + len(it) > width:
            lines.append(cur)
            cur = it
        else:
            cur = f"{cur} {it}" if cur else it
    if cur:
        lines.append(cur)
    return lines


def _tail(name: str) -> str:
    """Last two parts of a scoped name: "/layer1/layer1.0/conv1/Conv" → "conv1/Conv"."""
    parts = [p for p in name.split("/") if p]
    return "/".join(parts[-2:]) if len(parts) > 1 else name


def provenance_text(names: list[str], limit: int = 4) -> str:
    """Rule 2: "← A + B + C", or "← 12 nodes: A + B + … + L" for long lists."""
    if len(names) <= limit:
        return "← " + " + ".join(D.shorten(_tail(D.clean(n)), 28) for n in names)
    short = [D.shorten(_tail(D.clean(n)), 20) for n in (names[0], names[1], names[-1])]
    return f"← {len(names)} nodes: " + " + ".join(short[:2]) + " + … + " + short[-1]


def hub_text(t: str, uses: int) -> str:
    """Rule 4: how a hub input is named in a label."""
    return f"◂ {D.shorten(D.clean(t), 26)} (hub ×{uses})"


def _node_lines(n: DisplayNode, status: str | None, diff: GraphDiff | None, side: str,
                hubs: list[str] = (), hub_counts: Mapping[str, int] | None = None,
                ) -> list[tuple[str, str | None, int | None, bool]]:
    hub_counts = hub_counts or {}
    op = n.op if n.domain in ("", "ai.onnx") else f"{n.op} ({n.domain})"
    lines: list[tuple[str, str | None, int | None, bool]] = [(D.shorten(op, 40), None, 12, True)]
    sn = n.short_name
    if sn != n.op:
        lines.append((D.shorten(sn, 36), "#555555", 9, False))
    for text in _wrap(n.attrs):
        lines.append((D.shorten(text, 48), "#333333", 9, False))
    for w in n.weights[:4]:
        lines.append((D.shorten(w, 40), "#333333", 9, False))
    if len(n.weights) > 4:
        lines.append((f"+{len(n.weights) - 4} more weights", "#333333", 9, False))
    for s in n.subgraphs:
        lines.append((D.shorten(s, 40), "#7a3e00", 9, False))
    for t in hubs:
        lines.append((hub_text(t, hub_counts.get(t, 0)), "#6b7280", 9, False))
    if diff is not None and status:
        if side == "after" and status in ("fused", "changed", "added"):
            src = diff.provenance.get(n.key) or []
            if status == "fused" or (src and src != [n.key]):
                lines.append((provenance_text(src or diff.contributors.get(n.key, [])), "#14602c", 9, True))
            elif status == "added":
                lines.append(("new", "#14602c", 9, True))
            else:
                lines.append(("changed", "#8a4b00", 9, True))
        elif side == "before" and status == "removed":
            into = diff.fused_into.get(n.key)
            text = f"fused into {D.shorten(_tail(D.clean(into)), 30)}" if into else "removed"
            lines.append((text, "#a11a1a", 9, True))
        elif side == "before" and status == "lifted":
            init = diff.lifted_to.get(n.key, "")
            lines.append((D.shorten(f"lifted to initializer {D.clean(init)}".strip(), 44), "#71717a", 9, False))
        elif side == "before" and status == "changed":
            absorbed = diff.contributors.get(n.key, [])
            text = f"absorbs {len(absorbed)} node{'s' if len(absorbed) > 1 else ''}" if absorbed else "changed"
            lines.append((text, "#8a4b00", 9, True))
    return lines


def _edge_label(dg: DisplayGraph, t: str) -> str:
    info = dg.tensor_info.get(t)
    if info is None:
        return ""
    dtype, shape = info
    return D.shorten(f"{shape} {dtype}", 44)


@functools.lru_cache(maxsize=1)
def _legend_families() -> tuple[str, ...]:
    return tuple(D.FAMILY_FILL)


def render_graph(model: onnx.ModelProto, *, diff: GraphDiff | None = None, side: str = "after",
                 options: RenderOptions | None = None, structure: onnx.ModelProto | None = None) -> Rendered:
    """Draw ``model`` as DOT.

    Args:
        model: the snapshot to draw.
        diff: a diff whose ``side`` is ``model`` (``diff_models(before, after)``), to colour changes.
        side: "after" (highlight fused/new/changed) or "before" (highlight removed/changed).
        options: what to draw (:class:`RenderOptions`).
        structure: the snapshot whose structure names the collapsed blocks of a model without
            name scopes (collapse rule 5; default ``model``): give both sides of a pair the
            before snapshot, so that a block opens in both panes.

    Returns:
        A :class:`Rendered` with the DOT text and what was left out.

    Raises:
        RenderError: unknown focus node, bad side or rankdir, or changed-only without a diff.
    """
    opts = options if options is not None else RenderOptions()
    if side not in ("before", "after"):
        raise errors.RenderError(f"side must be 'before' or 'after', not '{D.shorten(D.clean(side), 40)}'.")
    if opts.rankdir not in ("TB", "LR", "BT", "RL"):
        raise errors.RenderError("rankdir must be one of TB, LR, BT, RL.")
    if opts.max_nodes < 1 or opts.hops < 0 or opts.context_hops < 0:
        raise errors.RenderError("max_nodes must be at least 1 and hops at least 0.")
    dg = _display_graph(model)
    status: Mapping[str, str] = {}
    if diff is not None:
        status = diff.status_after if side == "after" else diff.status_before
    total = len(dg.nodes)
    selected = {n.key for n in dg.nodes}
    notes: list[str] = []
    focus_key = None
    near = _near_miss_keys(dg, opts.near_misses)
    if opts.focus:
        focus_key = resolve_node(dg, opts.focus)
        selected = neighbourhood(dg, [focus_key], opts.hops)
    elif len(opts.near_misses) == 1 and near.blocked:
        selected = neighbourhood(dg, [*near.matched, *near.blocked], opts.hops)
    if opts.changed_only:
        if diff is None:
            raise errors.RenderError("'changed only' needs two snapshots to compare (a diff).")
        seeds = [k for k in selected if status.get(k, "unchanged") not in NO_CHANGE]
        if not seeds:
            notes.append("No node changed between the two snapshots.")
            selected = set()
        else:
            selected = neighbourhood(dg, seeds, opts.context_hops, within=selected)
    collapse_on = opts.collapse
    auto = False
    if not collapse_on and opts.auto_collapse and len(selected) > opts.max_nodes:  # rule 6
        collapse_on = auto = True
    scopes = _block_scopes(model, dg, structure, diff, side) if collapse_on else None
    auto_items = AUTO_COLLAPSE_ITEMS if auto else None
    if scopes is not None and len(selected) == total:
        # Collapse rule 5: whether the blocks open by themselves is decided on the structure
        # snapshot, so that the two panes of a pair show the same blocks closed.
        ref_nodes = len(_display_graph(structure if structure is not None else model).nodes)
        if ref_nodes > (AUTO_COLLAPSE_ITEMS if auto else AUTO_OPEN_ITEMS):
            auto_items = 0
    sel = select(dg, selected, collapse_enabled=collapse_on, expanded=opts.expanded,
                 max_nodes=opts.max_nodes, status=status if diff is not None else None,
                 auto_items=auto_items, scopes=scopes)
    drawn = len(sel.items)
    if auto:
        what = "name scopes" if scopes is None else "repeated blocks"
        notes.append(f"{len(selected):,} nodes are more than the {opts.max_nodes:,} drawn at once, so {what} "
                     "are collapsed into blocks: open a block, or focus a node, to see single nodes.")
    if sel.left_out:
        what = f"{len(selected):,} nodes" if len(selected) == total else f"{len(selected):,} of {total:,} nodes selected"
        hint = "expand fewer scopes or focus" if collapse_on else "collapse or focus"
        notes.append(f"{what}: showing {drawn:,}; {hint} to see the rest.")
    dot, node_ids, scope_ids, legend, item_ids = _write_dot(dg, sel, status if diff is not None else None, diff,
                                                            side, opts, focus_key, notes)
    return Rendered(dot=dot, drawn=drawn, total=total, note=" ".join(notes) or None,
                    node_ids=node_ids, scope_ids=scope_ids, legend=legend, focus=focus_key,
                    item_ids=item_ids, auto_collapsed=auto)


@dataclasses.dataclass(frozen=True)
class _NearMarks:
    matched: set[str]
    blocked: dict[str, list[str]]  # node key -> the reasons it blocked


def _near_miss_keys(dg: DisplayGraph, near_misses) -> _NearMarks:
    """Rule 7: the drawn nodes each near miss marks. A blocker that is not drawn (a Constant
    folded into its consumer's label) is marked on the deepest matched node, which reads it."""
    marks = _NearMarks(set(), {})
    for nodes, blocker, reason in near_misses:
        keys = [n for n in nodes if n in dg.by_key]
        if blocker not in dg.by_key:
            if not keys:
                continue
            keys, blocker = keys[:-1], keys[-1]
        marks.matched.update(keys)
        marks.blocked.setdefault(blocker, []).append(reason)
    marks.matched.difference_update(marks.blocked)
    return marks


def value_steps(opts: RenderOptions) -> tuple[tuple[float, str], ...]:
    """Rule 8: the scale's steps (the given one, or one per decade of the values)."""
    if opts.value_scale:
        return opts.value_scale
    finite = [v for _, v in opts.node_values if math.isfinite(v) and v > 0]
    if not finite:
        return ((math.inf, "all"),)
    lo, hi = math.floor(math.log10(min(finite))), math.ceil(math.log10(max(finite)))
    return tuple((10.0 ** e, f"≤ 1e{e}") for e in range(lo, hi + 1))


def value_fill(value: float, steps: tuple[tuple[float, str], ...], fills: tuple[str, ...] = ()) -> str:
    """Rule 8: the fill of ``value`` on the scale ``steps`` (NaN: ``dot.HEAT_NAN``), from the
    palette ``fills`` (default ``dot.HEAT_FILLS``)."""
    if math.isnan(value):
        return D.HEAT_NAN
    i = next((k for k, (bound, _) in enumerate(steps) if value <= bound), len(steps) - 1)
    ramp = fills or D.HEAT_FILLS
    return ramp[round(i * (len(ramp) - 1) / max(1, len(steps) - 1))]


def value_legend(opts: RenderOptions, with_nan: bool = True) -> list[tuple[str, str, str]]:
    """Rule 8: the legend entries of the scale (title, fill, border)."""
    steps = value_steps(opts)
    head = f"{opts.value_title} " if opts.value_title else ""
    out = [(f"{head}{label}", value_fill(bound if math.isfinite(bound) else math.inf, steps, opts.value_fills),
            D.HEAT_BORDER) for bound, label in steps]
    if with_nan:
        out.append((opts.value_nan_label, D.HEAT_NAN, D.HEAT_BORDER))
    return out


def format_value(value: float, unit: str = "") -> str:
    """Rule 8: a value as written in labels and the side panel ("0.42 ms", "1.2 MB", "3.1e-05")."""
    if math.isnan(value):
        return "NaN/Inf"
    if unit == "B":
        v = float(value)
        for name in ("B", "KB", "MB", "GB"):
            if abs(v) < 1024 or name == "GB":
                return f"{v:.0f} {name}" if name == "B" else f"{v:.3g} {name}"
            v /= 1024
    if unit:
        return f"{value:.3g} {unit}"
    return f"{value:.2g}"


def _value_text(title: str, value: float, unit: str = "") -> str:
    return f"{title} {format_value(value, unit)}".strip()


def _box_value(members, values: Mapping[str, float]) -> float | None:
    """Rule 8: a block's value: NaN when a member has one, else its largest member value."""
    got = [values[k] for k in members if k in values]
    if not got:
        return None
    return math.nan if any(math.isnan(v) for v in got) else max(got)


# Shape inference and the display graph are the slowest steps on big models (20,000 nodes:
# seconds); the UI asks for the same snapshot often (focus, collapse, search), so both are kept
# for the last few models. Entries: [model, its fingerprint, inferred copy, display graph or None,
# blocks by structure or None].
_INFER_CACHE: list[list] = []
_CACHE_LOCK = threading.Lock()


def _fingerprint(model: onnx.ModelProto) -> tuple[int, ...]:
    """What tells an entry's model from the same object changed in place: the bytes of its nodes
    and the number of its initializers, inputs and outputs (not ``model.ByteSize()``, which
    serializes every in-memory weight: half a second for a few hundred MB)."""
    g = model.graph
    return (sum(n.ByteSize() for n in g.node), len(g.initializer), len(g.input), len(g.output))


def _entry(model: onnx.ModelProto) -> list:
    size = _fingerprint(model)
    with _CACHE_LOCK:
        for entry in _INFER_CACHE:
            if entry[0] is model and entry[1] == size:
                return entry
    entry = [model, size, infer(model), None, None]
    with _CACHE_LOCK:
        _INFER_CACHE.insert(0, entry)
        del _INFER_CACHE[6:]
    return entry


def _block_scopes(model: onnx.ModelProto, dg: DisplayGraph, structure: onnx.ModelProto | None,
                  diff: GraphDiff | None, side: str) -> dict[str, tuple[str, ...]] | None:
    """Collapse rule 5: the blocks by structure, or None when the names have scopes to collapse."""
    ref_model = structure if structure is not None else model
    ref = _display_graph(ref_model)
    if name_scopes_useful(ref):
        return None
    entry = _entry(ref_model)
    if entry[4] is None:
        entry[4] = structural_blocks(ref)
    blocks = entry[4]
    if ref is dg:
        return blocks
    by_name = {ref.by_key[k].name or k: sc for k, sc in blocks.items()}
    came_from: dict[str, list[str]] = {}
    if diff is not None and side == "after":
        for k, v in diff.provenance.items():
            came_from[k] = list(v)
        for k, v in diff.contributors.items():
            came_from[k] = [*v, *came_from.get(k, ())]
    return carry_blocks(by_name, dg, came_from)


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    return _entry(model)[2]


def _display_graph(model: onnx.ModelProto) -> DisplayGraph:
    entry = _entry(model)
    if entry[3] is None:
        entry[3] = build_display_graph(model, inferred=entry[2])
    return entry[3]


def _write_dot(dg: DisplayGraph, sel, status: Mapping[str, str] | None, diff: GraphDiff | None,
               side: str, opts: RenderOptions, focus_key: str | None, notes: list[str]):
    drawn = len(sel.items)
    out = D.graph_header(rankdir=opts.rankdir, big=drawn > BIG_LAYOUT)
    node_ids: dict[str, str] = {}
    scope_ids: dict[str, str] = {}
    item_eid: dict[str, str] = {}
    dot_name: dict[str, str] = {}
    families: set[str] = set()
    statuses: set[str] = set()
    hub_counts = {t: len(dg.consumers.get(t, ())) for t in dg.hubs}
    near = _near_miss_keys(dg, opts.near_misses)
    values = dict(opts.node_values)
    value_labels = dict(opts.value_labels)
    steps = value_steps(opts) if values else ()
    nan_drawn = False
    for i, item in enumerate(sel.items):
        name = f"n{i}"
        dot_name[item] = name
        if item.startswith("n:"):
            n = dg.by_key[item[2:]]
            st = status.get(n.key, "unchanged") if status is not None else None
            fam = D.family(n.op, n.domain)
            fill, border, style, pen = D.FAMILY_FILL[fam], "#7a7a7a", "rounded,filled", "1"
            if st in D.STATUS_STYLE:
                fill, border, style = D.STATUS_STYLE[st]
                pen = "1" if st in NO_CHANGE else "2.5"
                statuses.add(st)
            else:
                families.add(fam)
            if n.key == focus_key:
                border, pen = "#1d4ed8", "3.5"
            eid = D.element_id(D.NODE_ID_PREFIX, n.key)
            node_ids[eid] = n.key
            item_eid[item] = eid
            hubs = [t for t in n.inputs if t in dg.hubs]
            lines = _node_lines(n, st, diff, side, hubs, hub_counts)
            if n.key in near.matched or n.key in near.blocked:  # rule 7
                style = style.replace(",dashed", "") + ",dashed"
                border, pen = (D.NEAR_MISS_BLOCKER, "4") if n.key in near.blocked else (D.NEAR_MISS_MATCHED, "3")
                for reason in near.blocked.get(n.key, ()):
                    lines.extend((D.shorten(t, 48), D.NEAR_MISS_BLOCKER, 9, True)
                                 for t in _wrap(("near miss: " + reason).split(" "), width=44))
            lines.extend((f"▸ {D.shorten(D.clean(t), 26)} (hub, {hub_counts[t]} uses)", "#6b7280", 9, False)
                         for t in n.outputs if t in dg.hubs)
            if n.key in values:  # rule 8
                fill = value_fill(values[n.key], steps, opts.value_fills)
                nan_drawn = nan_drawn or math.isnan(values[n.key])
                lines.append((D.shorten(value_labels.get(n.key)
                                        or _value_text(opts.value_title, values[n.key], opts.value_unit), 44),
                              "#111827", 9, True))
            label = D.html_label(lines)
            out.append(f"  {name} " + D.attrs(id=eid, label=label, fillcolor=fill, color=border,
                                                style=style, penwidth=pen) + ";")
        else:
            box = sel.boxes[item[2:]]
            eid = D.element_id(D.SCOPE_ID_PREFIX, box.key)
            scope_ids[eid] = box.key
            item_eid[item] = eid
            lines: list[tuple[str, str | None, int | None, bool]] = [
                ("▸ " + D.shorten(box.scope[-1], 36), None, 12, True),
                (D.shorten(D.clean("/".join(box.scope[:-1])), 40), "#666666", 8, False) if len(box.scope) > 1
                else ("", None, None, False),
                (f"{len(box.members):,} nodes", "#333333", 9, False),
            ]
            top = ", ".join(f"{op}×{c}" for op, c in box.ops.most_common(3))
            lines.append((D.shorten(top, 48), "#333333", 9, False))
            fill, border, pen = "#f2f2f2", "#8a8a8a", "1"
            changed = {k: v for k, v in box.statuses.items() if k not in NO_CHANGE and v}
            if changed:
                lines.append((" · ".join(f"{v} {k}" for k, v in sorted(changed.items())), "#14602c"
                              if side == "after" else "#a11a1a", 9, True))
                key = "removed" if "removed" in changed else ("fused" if "fused" in changed or "added" in changed
                                                              else "changed")
                border, pen = D.STATUS_STYLE[key][1], "2.5"
                statuses.add(key)
            members = set(box.members)
            box_hubs = sorted({t for k in box.members for t in dg.by_key[k].inputs
                               if t in dg.hubs and dg.producer.get(t) not in members})
            for t in box_hubs[:3]:
                lines.append((hub_text(t, hub_counts.get(t, 0)), "#6b7280", 9, False))
            box_value = _box_value(box.members, values) if values else None
            if box_value is not None:  # rule 8
                fill = value_fill(box_value, steps, opts.value_fills)
                nan_drawn = nan_drawn or math.isnan(box_value)
                lines.append((D.shorten("largest " + _value_text(opts.value_title, box_value, opts.value_unit), 44),
                              "#111827", 9, True))
            lines = [ln for ln in lines if ln[0]]
            out.append(f"  {name} " + D.attrs(id=eid, label=D.html_label(lines), shape="box3d",
                                                style="filled", fillcolor=fill, color=border,
                                                penwidth=pen) + ";")

    labels_on = opts.show_shapes and drawn <= EDGE_LABEL_MAX
    edges: dict[tuple[str, str], list[str]] = {}
    terminals: list[str] = []
    term_name: dict[str, str] = {}
    stub_of: dict[str, str] = {}
    shared_stub: list[str] = []

    def terminal(t: str, kind: str) -> str:
        key = kind + t
        if key not in term_name:
            nm = f"{kind}{len(term_name)}"
            term_name[key] = nm
            info = dg.tensor_info.get(t)
            lines = [(D.shorten(t, 36), None, 10, True)]
            if info:
                lines.append((D.shorten(f"{info[1]} {info[0]}", 40), "#333333", 9, False))
            shape = "invhouse" if kind == "i" else "house"
            fill = "#dbeafe" if kind == "i" else "#e0f2e9"
            terminals.append(f"  {nm} " + D.attrs(label=D.html_label(lines), shape=shape,
                                                    style="filled", fillcolor=fill, color="#4b5563")
                             + ";")
        return term_name[key]

    def stub(t: str) -> str:
        if t in stub_of:
            return stub_of[t]
        if len(stub_of) >= MAX_STUBS:
            if not shared_stub:
                shared_stub.append("xs")
                terminals.append("  xs " + D.attrs(label="⋯", shape="plaintext", fontcolor="#777777",
                                                   style="filled", fillcolor="white", color="white") + ";")
            return "xs"
        nm = f"x{len(stub_of)}"
        stub_of[t] = nm
        p = dg.producer.get(t)
        src = dg.by_key[p].short_name if p is not None else _tail(D.clean(t))
        terminals.append(f"  {nm} " + D.attrs(label="⋯ from " + D.shorten(D.clean(src), 24), shape="plaintext",
                                                fontsize="9", fontcolor="#777777", style="filled",
                                                fillcolor="white", color="white") + ";")
        return nm

    graph_inputs = set(dg.inputs)
    for item in sel.items:
        members = [item[2:]] if item.startswith("n:") else sel.boxes[item[2:]].members
        dst = dot_name[item]
        for k in members:
            for t in dg.by_key[k].inputs:
                p = dg.producer.get(t)
                if t in dg.hubs:  # rule 4: named in the label instead
                    continue
                if p is not None and p in sel.item_of:
                    src = dot_name[sel.item_of[p]]
                elif t in graph_inputs:
                    src = terminal(t, "i")
                else:
                    src = stub(t)
                if src == dst:
                    continue
                lst = edges.setdefault((src, dst), [])
                if t not in lst:
                    lst.append(t)
    drawn_outputs = 0
    for t in dg.outputs:
        p = dg.producer.get(t)
        if p is not None and p in sel.item_of:
            edges.setdefault((dot_name[sel.item_of[p]], terminal(t, "o")), []).append(t)
            drawn_outputs += 1
        elif t in graph_inputs and (dg.consumers.get(t) or drawn == 0):
            pass
    out.extend(terminals)
    for (src, dst), ts in edges.items():
        kv: dict[str, object] = {}
        if labels_on:
            kv["label"] = _edge_label(dg, ts[0]) if len(ts) == 1 else f"{len(ts)} tensors"
        elif len(ts) > 1:
            kv["penwidth"] = "1.6"
        out.append(f"  {src} -> {dst}" + (" " + D.attrs(**kv) if kv else "") + ";")

    if drawn == 0:
        msg = notes[0] if notes else "Nothing to draw."
        out.append("  empty " + D.attrs(label=msg, shape="plaintext", fontsize="12") + ";")
    legend = _legend(families, statuses, diff is not None)
    if near.blocked:
        legend += [("near miss: matched so far", "#ffffff", D.NEAR_MISS_MATCHED),
                   ("near miss: blocked here", "#ffffff", D.NEAR_MISS_BLOCKER)]
    if values:
        legend += value_legend(opts, with_nan=nan_drawn)
    if opts.legend and legend and drawn:
        out.append("  legend " + D.attrs(label=_legend_label(legend), shape="plaintext",
                                           style="filled", fillcolor="white", color="white",
                                           fontsize="9") + ";")
    out.append("}")
    item_ids = {k: item_eid[it] for k, it in sel.item_of.items() if it in item_eid}
    return "\n".join(out) + "\n", node_ids, scope_ids, tuple(legend), item_ids


def _legend(families: set[str], statuses: set[str], with_diff: bool) -> list[tuple[str, str, str]]:
    entries: list[tuple[str, str, str]] = []
    if with_diff:
        for st in ("fused", "removed", "changed", "lifted"):
            if st == "lifted" and st not in statuses:
                continue  # only where a lifted node is drawn
            fill, border, _ = D.STATUS_STYLE[st]
            entries.append((D.STATUS_TITLE[st], fill, border))
    for fam in _legend_families():
        if fam in families:
            entries.append((D.FAMILY_TITLE[fam], D.FAMILY_FILL[fam], "#7a7a7a"))
    return entries


def _legend_label(entries: list[tuple[str, str, str]]) -> D.HtmlLabel:
    rows = []
    for title, fill, border in entries:
        rows.append(f'<TR><TD BGCOLOR="{D.html_text(fill)}" COLOR="{D.html_text(border)}" BORDER="1" '
                    f'WIDTH="14" HEIGHT="10"></TD><TD ALIGN="LEFT">{D.html_text(title)}</TD></TR>')
    return D.HtmlLabel('<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="2">'
                       '<TR><TD COLSPAN="2"><B>legend</B></TD></TR>' + "".join(rows) + "</TABLE>")
