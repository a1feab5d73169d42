"""Graph page: before and after side by side, diff colours and counts, search, focus, details.

Rules (the code points back to them):

1. Selection follows provenance: a node selected in one pane is outlined there, and the nodes
   it became or came from are outlined in the other pane (``graphview.Links``: fused, replaced,
   folded, removed are said in words). The selection is (side, node), so a FusedConv that kept
   its Conv's name is never confused with that Conv.
2. Search matches a node's name (substring) or op type (whole word), case-insensitive, in both
   panes at once; matches inside a collapsed block outline the block. A new search selects its
   first match (after side first; the picker chooses another), so selection and search marks
   agree in both panes, and both panes centre it. The legend lists the marks that are drawn.
3. Up to :func:`max_draw` items are drawn per pane (big graphs are laid out by parts on the
   server). "Collapse" folds name scopes into blocks, opening them while the picture stays small
   (a model whose nodes all sit in one scope is drawn node by node); a selection bigger than the
   cap is collapsed automatically whatever the toggle says, and the page offers a focus.
4. The focused node lives in the URL (``?focus=NODE``): a link reproduces the view. Only that
   parameter is read or written here; the others belong to the rest of the app (the open
   If/Loop/Scan body, ``?body=``, to ``body_view``).
5. The first screen is the graph: one compact bar of controls above two panes that fill the
   window (1600×1000: the panes start about 200 px down).
6. A rerun that changes nothing in the view lays nothing out again (SVG kept per DOT text), big
   drawings travel gzip-compressed (a tenth of the bytes), and clicks are read before the panes
   are drawn, so one click is one run.
7. Exports of the current view: SVG and DOT as drawn, PNG by Graphviz (scaled down when very
   big); made when the button is pressed.
8. First screen first: a big drawing not laid out yet shows its first parts at once; the rest is
   laid out at the end of the run, and the pane asks for the whole drawing (a rerun), which
   replaces the first screen without moving the view.
9. The panes keep their place in the page: whatever comes and goes between the bar and the panes
   (banners, notes, the search row, a spinner) is drawn in one container, so Streamlit never
   replaces the panes' frames (which would lose the view) when it appears or goes.
10. The selected node and its counterparts are shown in a side panel beside the panes
    (``panel_view``), not below them; the per-node overlay is chosen in the bar
    (``overlay_view``: change class, time, memory, error; ``?overlay=`` in the URL), and the
    Export popover also writes the pair in Model Explorer's graph and node-data JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx
import streamlit as st

from fusionviz import errors
from fusionviz.ortlevels import OPTIMIZING as ORT_LEVELS
from fusionviz.ui import (
    body_view,
    cache,
    common,
    compiled_view,
    error_view,
    nearmiss_view,
    overlay_view,
    panel_view,
    selection_view,
    state,
)

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

    from fusionviz.graphview import Counterpart, GraphDiff, Links, Rendered
    from fusionviz.model_io import LoadedModel

logger = logging.getLogger(__name__)

SIDES = ("before", "after")

#: Pane heights (pixels): side by side, and stacked.
PANE_HEIGHT = 740
STACKED_HEIGHT = 560
MAX_MATCHES = 2000
#: Drawings bigger than this (characters) travel gzip-compressed (rule 6).
PACK_ABOVE = 256 * 1024

# Session keys owned by this page.
SEL_SIDE = "fv_graph_sel_side"  # (node name, side) of the selection (rule 1)
CLICKS = "fv_graph_clicks"  # pane -> token of the last click handled (rule 6)
REVEAL = "fv_graph_reveal"  # token that makes the panes pan to a new selection
URL_FOCUS = "fv_graph_url_focus"  # focus last read from or written to the URL (rule 4)
SEARCH_SEEN = "fv_graph_search_seen"  # the search text the panes were last revealed for
URL_PARAM = "focus"

_CSS = """
<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.6rem; padding-bottom: 1rem; padding-left: 2rem;
                                        padding-right: 2rem; }
[data-testid="stMainBlockContainer"] [data-testid="stVerticalBlock"] { gap: 0.45rem; }
.fv-head { font-size: 0.92rem; line-height: 1.4; margin: 0 0 1rem 0; display: flex; flex-wrap: wrap;
           align-items: baseline; column-gap: 0.35rem; }
.fv-head h1.fv-title { font-size: 1.08rem !important; font-weight: 700 !important; margin: 0 !important;
                      padding: 0 !important; line-height: 1.4 !important; display: inline; }
.fv-head h1.fv-title a, .fv-head h1.fv-title span[data-testid="stHeaderActionElements"] { display: none; }
.fv-head span.fv-cap { color: #4b5563; }
.fv-legend { margin-left: auto; font-size: 0.85rem; white-space: nowrap; }
.fv-sw { display: inline-block; width: 1.05em; height: 0.75em; border: 2px solid; border-radius: 3px;
         margin: 0 0.3em 0 0.9em; vertical-align: middle; }
.fv-sw.fv-mark { background: #fff; border-width: 3px; }
</style>
"""


def max_draw() -> int:
    """Rule 3: the cap on drawn items per pane."""
    from fusionviz.graphview.build import _default_max_nodes

    return _default_max_nodes()


# ------------------------------------------------------------------ the compared pair


def reference_graph(loaded: LoadedModel, level: str, original: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's own optimized graph of ``original`` at ``level`` (cached per model hash)."""
    got = cache.reference(loaded.sha256, f"ort:{level}", state.shapes_key(), original)
    if isinstance(got, errors.FusionvizError):
        raise got
    if not isinstance(got, onnx.ModelProto):
        raise errors.PassError(f"onnxruntime's '{level}' graph is not available for this model.")
    return got


def compare_options(result: Any) -> dict[str, str]:
    """Compare-pair choices: value -> label."""
    opts = {"current": f"original → current ({result.nodes_before} → {result.nodes_after} nodes)"}
    for k, rep in enumerate(result.reports, start=1):
        n = len(rep.changes)
        opts[f"step:{k}"] = f"step {k}: {rep.title} ({n} change{'s' if n != 1 else ''})"
    for level in ORT_LEVELS:
        opts[f"ort:{level}"] = f"original → onnxruntime's own graph at level '{level}'"
    return opts


def pick_pair(loaded: LoadedModel, result: Any, choice: str
              ) -> tuple[onnx.ModelProto, onnx.ModelProto, tuple, str]:
    """(before, after, key, caption) for a compare choice ("current", "step:K", "ort:LEVEL")."""
    if choice.startswith("step:"):
        k = int(choice.split(":", 1)[1])
        if 1 <= k < len(result.snapshots):
            before, after = result.snapshots[k - 1], result.snapshots[k]
            return before.model, after.model, (*common.pipeline_key(loaded, state.passes()), k), \
                f"Before and after pass **{result.reports[k - 1].title}** (step {k} of {len(result.reports)})."
    if choice.startswith("ort:"):
        level = choice.split(":", 1)[1]
        try:
            match = reference_graph(loaded, level, result.original)
        except errors.FusionvizError as exc:
            st.warning(f"{exc} Showing original → current instead.")
        else:
            return result.original, match, (loaded.sha256, "ort", level, state.shapes_key()), \
                f"The original model and the graph onnxruntime itself produces at level **{level}** " \
                "(saved with `optimized_model_filepath`; 'layout'/'all' use this CPU's NCHWc kernels)."
    return result.original, result.final, (*common.pipeline_key(loaded, state.passes()), "final"), \
        f"The original model and the model after the **{len(result.reports)} selected passes**."


def _pair_reports(result: Any, choice: str) -> list:
    """The pass reports that lie between the two snapshots of the pair."""
    if choice.startswith("ort:"):
        return []
    if choice.startswith("step:"):
        k = int(choice.split(":", 1)[1])
        return list(result.reports[k - 1:k])
    return list(result.reports)


@st.cache_resource(max_entries=16, show_spinner=False)
def _links(key: tuple, provenance: bool, _before: onnx.ModelProto, _after: onnx.ModelProto,
           _diff: GraphDiff | None, _reports: Sequence) -> Links:
    """Rule 1: provenance links of a pair (``key`` identifies the pair)."""
    from fusionviz.graphview import Links, fates_from_reports

    return Links(_before, _after, _diff, fates_from_reports(_reports), provenance=provenance)


@st.cache_resource(max_entries=48, show_spinner=False)
def _render(key: tuple, side: str, opts: tuple, _model: onnx.ModelProto, _diff: GraphDiff | None,
            _before: onnx.ModelProto | None = None) -> Rendered:
    """``render_graph`` of one side of a pair, kept as one shared object (no copy per run); the
    before snapshot names the blocks of a model without name scopes on both sides (collapse
    rule 5), so that opening one opens it in both panes."""
    from fusionviz.graphview import RenderOptions, render_graph

    return render_graph(_model, diff=_diff, side=side, options=RenderOptions(**dict(opts)), structure=_before)


# ------------------------------------------------------------------ session helpers


def _set_opt(name: str, widget_key: str) -> None:
    """A view option's widget changed: keep its value in the persistent graph options."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    opts[name] = st.session_state[widget_key]
    st.session_state[state.GRAPH_OPTS] = opts


def _set_compare() -> None:
    """The compare pair changed."""
    st.session_state[state.COMPARE] = st.session_state["graph_compare"]


def _set_focus(name: str | None, side: str | None = None) -> None:
    """Focus ``name`` (None: the whole graph); a focused node is also the selection."""
    st.session_state[state.FOCUS] = name
    if name:
        _select(name, side)


def _select(name: str | None, side: str | None, keep_several: bool = False) -> None:
    """Rule 1: select node ``name`` of ``side``; the panes pan to it once. A selection of several
    is cleared unless ``keep_several`` (a link's focus comes with its selection)."""
    st.session_state[state.SELECTED] = name
    st.session_state[SEL_SIDE] = (name, side) if name else None
    st.session_state[REVEAL] = f"sel:{side}:{name}:{id(object())}"
    if not keep_several:
        selection_view.clear()  # one node again (selection_view rule 1)


def selection(links: Links) -> tuple[str | None, str | None]:
    """Rule 1: (node key, side) of the selection; the side is guessed (after first) when another
    page set the node without one."""
    name = st.session_state.get(state.SELECTED)
    if not name:
        return None, None
    got = st.session_state.get(SEL_SIDE)
    if isinstance(got, tuple) and len(got) == 2 and got[0] == name and got[1] in SIDES \
            and links.has(got[1], name):
        return name, got[1]
    for side in ("after", "before"):
        if links.has(side, name):
            return name, side
    return name, None


def _hit(text: str, name: str, op: str) -> bool:
    """Rule 2 for one node (``text`` already lower-case)."""
    return text in name.lower() or text == op.lower()


def matches(links: Links, side: str, text: str) -> list[str]:
    """Rule 2: keys of ``side`` whose name contains ``text`` or whose op type is ``text``
    (case-insensitive), in model order."""
    t = text.strip().lower()
    if not t:
        return []
    return [k for k in links.keys(side) if _hit(t, k, links.op(side, k))]


def _picks(hits: dict[str, list[str]]) -> dict[str, str]:
    """Rule 2: the matches offered in the picker (after side first, 50 per side) -> their side."""
    picks: dict[str, str] = {}
    for side in ("after", "before"):
        for k in hits.get(side, [])[:50]:
            picks.setdefault(k, side)
    return picks


def _pick(name: str, side: str) -> None:
    """Rule 2: select a match; both panes centre it (the ``search:`` reveal token)."""
    _select(name, side)
    st.session_state[REVEAL] = f"search:{side}:{name}:{id(object())}"


def _on_pick(picks: dict[str, str]) -> None:
    """Another match picked in the status row."""
    name = st.session_state.get("graph_search_pick")
    if name in picks:
        _pick(name, picks[name])


def _search_selects(text: str, hits: dict[str, list[str]]) -> None:
    """Rule 2: a new search selects its first match (after side first), so the selection and the
    search marks agree in both panes, and both panes centre it."""
    if text == st.session_state.get(SEARCH_SEEN, ""):
        return
    st.session_state[SEARCH_SEEN] = text
    picks = _picks(hits)
    if picks:
        first = next(iter(picks))
        st.session_state["graph_search_pick"] = first
        _pick(first, picks[first])


# ------------------------------------------------------------------ focus in the URL (rule 4)


def _focus_from_url() -> None:
    """A ``?focus=`` the page has not seen yet (a link, an edited address) becomes the focus."""
    wanted = common.url_news(URL_PARAM, URL_FOCUS)
    if wanted:
        st.session_state[state.FOCUS] = wanted
        _select(wanted, None, keep_several=True)


def _focus_to_url() -> None:
    """The URL says what the page shows: ``focus`` set to the focused node, or removed."""
    common.to_url(URL_PARAM, st.session_state.get(state.FOCUS), URL_FOCUS)


# ------------------------------------------------------------------ clicks (rule 6)


def _take_clicks(links: Links) -> None:
    """Apply clicks the panes reported since the last run, before anything is drawn."""
    from fusionviz.ui.graph_component import Click

    seen = st.session_state.setdefault(CLICKS, {})
    for side in SIDES:
        value = st.session_state.get(f"graph_{side}")
        if not isinstance(value, dict) or value.get("kind") not in ("node", "scope"):
            continue
        click = Click(str(value["kind"]), str(value.get("key", "")),
                      f"{value.get('sid', '')}:{value.get('n', 0)}")
        if seen.get(side) == click.token:
            continue
        seen[side] = click.token
        if click.kind == "scope":
            common.toggle_scope(click.key)
        elif links.has(side, click.key) and value.get("add"):  # shift/ctrl-click: several nodes
            selection_view.toggle(side, click.key, selection(links), _select)
        elif links.has(side, click.key):
            _select(click.key, side)


# ------------------------------------------------------------------ the bar (rule 5)


def _legend_html(counts: dict | None, shown: dict[str, bool] | None = None) -> str:
    """The diff colours with their counts, then the marks drawn now (selection, search matches,
    near misses), on one short line."""
    keys = {"fused / new": ("fused", "added"), "removed": ("removed",), "changed": ("changed",),
            "unchanged": ("unchanged",)}
    parts = []
    for (_, fill, border), label in zip(common.LEGEND, keys, strict=True):
        n = f" <b>{sum(int(counts.get(k, 0)) for k in keys[label]):,}</b>" if counts else ""
        parts.append(f"<span class='fv-sw' style='background:{fill};border-color:{border}'></span>{label}{n}")
    parts.append(common.lifted_swatch(counts, "class='fv-sw' style='background:{fill};border-color:{border}'"))
    parts.append(_marks_legend(shown or {}))
    return "<span class='fv-legend'>" + "".join(parts) + "</span>"


def _marks_legend(shown: dict[str, bool]) -> str:
    """Legend entries of the marks that are drawn: selection (and its dashed counterpart), search
    matches, near misses (outlines only)."""
    from fusionviz.graphview.dot import NEAR_MISS_BLOCKER, NEAR_MISS_MATCHED
    from fusionviz.ui.graph_component import MARK_TITLES, MARKS

    entries = []
    if shown.get("selected"):
        entries += [(MARK_TITLES["selected"], MARKS["selected"], "solid"),
                    (MARK_TITLES["linked"], MARKS["selected"], "dashed")]
    if shown.get("match"):
        entries.append((MARK_TITLES["match"], MARKS["match"], "solid"))
    if shown.get("near_miss"):
        entries += [("near miss: matched", NEAR_MISS_MATCHED, "dashed"),
                    ("near miss: blocked here", NEAR_MISS_BLOCKER, "solid")]
    return "".join(f"<span class='fv-sw fv-mark' style='border-color:{colour};border-style:{style}'></span>{title}"
                   for title, colour, style in entries)


def _header(caption: str, counts: dict | None, shown: dict[str, bool] | None = None) -> None:
    """The page's title, the pair's caption and the diff colours, on one line."""
    plain = caption.replace("**", "")
    st.markdown(f"<div class='fv-head'><h1 class='fv-title'>Graph: before and after</h1>"
                f"<span class='fv-cap'>· {plain}</span>{_legend_html(counts, shown)}</div>", unsafe_allow_html=True)


def _toolbar(result: Any, collapse_on: bool) -> tuple[DeltaGenerator, DeltaGenerator]:
    """Compare, search, collapse, changed-only, then the View and Export popovers (returned, to be
    filled once the panes are drawn)."""
    choices = compare_options(result)
    current = st.session_state.get(state.COMPARE, "current")
    if current not in choices:
        current = "current"
    opts = st.session_state.get(state.GRAPH_OPTS) or {}
    c = st.columns([2.1, 1.9, 1.3, 1.65, 1.6, 1.1, 1.2], vertical_alignment="center")
    state.seed("graph_compare", current)
    c[0].selectbox("Compare", list(choices), format_func=choices.get, key="graph_compare",
                   on_change=_set_compare, label_visibility="collapsed")
    c[1].text_input("Search a node by name or op type", key="graph_search", label_visibility="collapsed",
                    placeholder="Search: name or op type (Conv, /layer1/, Softmax)")
    state.seed("graph_collapse", collapse_on)
    c[2].toggle("Collapse", key="graph_collapse", on_change=_set_opt,
                args=("collapse", "graph_collapse"),
                help="Fold name scopes (layer.3/attention/...) into one block each; click a block to open it.")
    state.seed("graph_changed_only", bool(opts.get("changed_only", False)))
    c[3].toggle("Changed only", key="graph_changed_only", on_change=_set_opt,
                args=("changed_only", "graph_changed_only"),
                help="Draw only what the passes changed, with a hop of context.")
    overlay_view.selector(c[4])
    view = c[5].popover("View", icon=":material/tune:", width="stretch")
    with view:
        state.seed("graph_panel_on", bool(opts.get("panel", True)))
        st.toggle("Side panel", key="graph_panel_on", on_change=_set_opt, args=("panel", "graph_panel_on"),
                  help="The selected node's details beside the panes.")
        state.seed("graph_stacked", bool(opts.get("stacked", False)))
        st.toggle("Stack vertically", key="graph_stacked", on_change=_set_opt,
                  args=("stacked", "graph_stacked"), help="For narrow screens.")
        state.seed("graph_hops", int(opts.get("hops", 2)))
        st.slider("Hops around focus", 1, 6, key="graph_hops", on_change=_set_opt, args=("hops", "graph_hops"))
    export = c[6].popover("Export", icon=":material/download:", width="stretch")
    return view, export


def _status_row(text: str, hits: dict[str, list[str]], notes: list[str], first_change: str | None) -> None:
    """One line under the bar: search results (or notes on what is not drawn), then the focus."""
    focus = st.session_state.get(state.FOCUS)
    if not text and not focus and not notes:
        return
    cols = st.columns([3.9, 2.5, 0.8, 2.8, 1.0], vertical_alignment="center")
    if text:
        nb, na = len(hits.get("before", [])), len(hits.get("after", []))
        if nb or na:
            cols[0].markdown(f"Search **{text}**: {nb:,} in before, {na:,} in after (teal outline).",
                             help="The match picked on the right is selected and centred in both panes.")
            picks = _picks(hits)
            pick = cols[1].selectbox(f"{len(picks)} match{'es' if len(picks) != 1 else ''}", list(picks),
                                     key="graph_search_pick", label_visibility="collapsed",
                                     on_change=_on_pick, args=(picks,))
            side = picks.get(pick, "after")
            cols[2].button("Focus", key="graph_focus_btn", on_click=_set_focus, args=(pick, side),
                           width="stretch", help="Draw only this node and its neighbours")
        else:
            cols[0].caption(f"No node matches '{text}'.")
    elif notes:
        cols[0].caption(" ".join(notes))
        if first_change:
            cols[1].button("Focus the first change", key="graph_focus_change", on_click=_set_focus,
                           args=(first_change, "after"))
    if focus:
        from fusionviz.graphview.dot import shorten

        hops = (st.session_state.get(state.GRAPH_OPTS) or {}).get("hops", 2)
        where, button = (cols[3], cols[4]) if text or notes else (cols[0], cols[1])
        where.markdown(f"Focus: `{shorten(focus, 48)}` ± {hops} hops", help=focus)
        button.button("Whole graph", key="graph_clear_focus", on_click=_set_focus, args=(None,),
                      help="Show the whole graph again")


# ------------------------------------------------------------------ drawing


def _side_focus(links: Links, focus: str | None, side: str) -> str | None:
    """The focus node for one side: the node itself, else the first node linked to it."""
    if not focus:
        return None
    if links.has(side, focus):
        return focus
    other = "before" if side == "after" else "after"
    if links.has(other, focus):
        linked = links.linked(other, focus)
        return linked[0] if linked else None
    return None


def _ids(rendered: Rendered, keys: Sequence[str], limit: int = MAX_MATCHES) -> list[str]:
    """Element ids that stand for ``keys`` in a drawing (a node's own box, or its block)."""
    out: dict[str, None] = {}
    for k in keys:
        eid = rendered.item_ids.get(k)
        if eid:
            out[eid] = None
            if len(out) >= limit:
                break
    return list(out)


def _wants_whole(side: str, dot: str) -> bool:
    """Rule 8: the pane showed the first screen of ``dot`` and asked for the whole drawing."""
    from fusionviz.graphview.svg import source_id

    value = st.session_state.get(f"graph_{side}")
    return isinstance(value, dict) and value.get("kind") == "more" and value.get("key") == source_id(dot)


def _draw_pane(side: str, rendered: Rendered, *, height: int, selected_id: str | None,
               linked_ids: list[str], match_ids: list[str], changed_ids: list[str], pending: list[str],
               selected_ids: Sequence[str] = ()) -> None:
    """One pane: the pan/zoom viewer with its marks, or the browser's own renderer without SVG.

    A big drawing not laid out yet shows its first screen at once (rule 8) and goes on ``pending``.
    """
    from fusionviz.ui.graph_component import (
        first_svg_for,
        graph_pane,
        packed_svg_for,
        svg_cached,
        svg_for,
    )

    label = f"{side.capitalize()} · {rendered.drawn:,} of {rendered.total:,} nodes drawn"
    token = st.session_state.get(REVEAL)
    view = {"pane": side, "reveal": token, "centre": str(token or "").startswith("search:"),
            "changed_ids": changed_ids, "sync": "graph", "search_key": "graph_search", "selected_ids": selected_ids}
    if rendered.auto_collapsed:
        label += " · collapsed automatically"
    try:
        first = None
        if not svg_cached(rendered.dot) and not _wants_whole(side, rendered.dot):
            first = first_svg_for(rendered.dot)
        if first is not None:
            pending.append(rendered.dot)
            graph_pane(first, key=f"graph_{side}", height=height, selected_id=selected_id,
                       linked_ids=linked_ids, match_ids=match_ids,
                       pane_label=label + " · laying out the rest...", **view)
            return
        with st.spinner(f"Laying out the {side} graph ({rendered.drawn:,} items)...", show_time=True):
            svg = svg_for(rendered.dot)
    except errors.RenderError as exc:
        logger.info("SVG unavailable, drawing in the browser: %s", exc)
        st.caption(label)
        st.graphviz_chart(rendered.dot, width="stretch")
        return
    packed = packed_svg_for(rendered.dot) if len(svg) > PACK_ABOVE else None
    graph_pane(svg, key=f"graph_{side}", height=height, selected_id=selected_id, linked_ids=linked_ids,
               match_ids=match_ids, pane_label=label, packed=packed, **view)


def _prepare_layouts(rendered: dict[str, Rendered | None]) -> None:
    """Lay out both panes at once when neither is laid out yet (parts of both run in parallel)."""
    from fusionviz.graphview import parts as P
    from fusionviz.ui.graph_component import svg_cached, svg_for

    todo = [r.dot for r in rendered.values() if r is not None and not svg_cached(r.dot)]
    big = [d for d in todo if (P.parse_dot(d) or P.ParsedDot([], {}, [], [])).op_count > P.SPLIT_ABOVE]
    if len(big) < 2 or not P.layout_workers():
        return
    import concurrent.futures

    with st.spinner("Laying out both graphs...", show_time=True), \
            concurrent.futures.ThreadPoolExecutor(max_workers=len(big)) as ex:
        for fut in [ex.submit(svg_for, d) for d in big]:
            try:
                fut.result()
            except errors.RenderError:
                pass  # the pane says so when it is drawn


def _marks(rendered: dict[str, Rendered | None], cp: Counterpart | None, hits: dict[str, list[str]],
           diff: GraphDiff | None = None) -> dict[str, dict]:
    """Per pane: the selected element, the elements linked to it (rule 1), the search matches (rule 2),
    the changed nodes in model order (the pane's n/p keys step through them)."""
    marks: dict[str, dict] = {s: {"selected_id": None, "linked_ids": [], "match_ids": [], "changed_ids": []}
                              for s in SIDES}
    for side in SIDES:
        r = rendered.get(side)
        if r is None:
            continue
        marks[side]["match_ids"] = _ids(r, hits.get(side, []))
        status = (getattr(diff, f"status_{side}", None) or {}) if diff is not None else {}
        marks[side]["changed_ids"] = _ids(r, [k for k, s in status.items() if s not in ("unchanged", "lifted")])
        if cp is not None and side == cp.side:
            marks[side]["selected_id"] = r.item_ids.get(cp.key)
        elif cp is not None:
            marks[side]["linked_ids"] = _ids(r, cp.others)
    return marks


# ------------------------------------------------------------------ details (rule 1)


def _details(before: onnx.ModelProto, after: onnx.ModelProto, links: Links, pair_key: tuple) -> None:
    """Rule 1: the selected node and what stands for it on the other side, both in full."""
    name, side = selection(links)
    cp = panel_view.counterpart_of(links, name, side, "Click a node (or focus one from the search) to see it on "
                                   "both sides: attributes, shapes, weights and provenance.")
    if cp is None:
        return
    models = {"before": before, "after": after}
    st.markdown(f"**{cp.op} `{name}`** ({side}): {cp.relation}")
    c1, _ = st.columns([1, 5])
    c1.button("Focus here", key="graph_details_focus", on_click=_set_focus, args=(name, side))
    cols = dict(zip(SIDES, st.columns(2), strict=True))
    with cols[side]:
        st.markdown(f"**{side.capitalize()}**: {cp.op} `{name}`")
        st.json(cache.node_details((*pair_key, side), name, models[side]), expanded=1)
    other = cp.other_side
    with cols[other]:
        if not cp.others:
            st.markdown(f"**{other.capitalize()}**: nothing stands for it.")
        else:
            n = len(cp.others)
            st.markdown(f"**{other.capitalize()}**: {n} node{'s' if n != 1 else ''}")
            for k, op in list(zip(cp.others, cp.other_ops, strict=True))[:8]:
                st.markdown(f"{op} `{k}`")
                st.json(cache.node_details((*pair_key, other), k, models[other]), expanded=False)
            if n > 8:
                st.caption(f"... and {n - 8} more.")


# ------------------------------------------------------------------ exports (rule 7)


def _exports(box: DeltaGenerator, loaded: LoadedModel, rendered: dict[str, Rendered | None],
             me: tuple | None = None) -> None:
    """Rule 7: SVG, PNG and DOT of each pane as drawn (made when the button is pressed); rule 10:
    the pair in Model Explorer's JSON (``me``: before, after, diff, overlays computed so far)."""
    from fusionviz.graphview import render_png
    from fusionviz.ui.graph_component import svg_for

    stem = loaded.name.rsplit(".", 1)[0] or "graph"
    with box:
        st.caption("The view as drawn (focus, collapse and changed-only apply). PNG is scaled down "
                   "when the drawing is very big; SVG keeps every detail.")
        for side in SIDES:
            r = rendered.get(side)
            if r is None:
                continue
            dot = r.dot
            st.markdown(f"**{side.capitalize()}** ({r.drawn:,} items)")
            c = st.columns(3)
            c[0].download_button("SVG", data=lambda d=dot: svg_for(d).encode("utf-8"),
                                 file_name=f"{stem}_{side}.svg", mime="image/svg+xml",
                                 key=f"graph_export_{side}_svg", on_click="ignore", width="stretch")
            c[1].download_button("PNG", data=lambda d=dot: render_png(d), file_name=f"{stem}_{side}.png",
                                 mime="image/png", key=f"graph_export_{side}_png", on_click="ignore",
                                 width="stretch")
            c[2].download_button("DOT", data=lambda d=dot: d.encode("utf-8"), file_name=f"{stem}_{side}.dot",
                                 mime="text/vnd.graphviz", key=f"graph_export_{side}_dot", on_click="ignore",
                                 width="stretch")
        if me is not None and me[2] is not None:
            from fusionviz.graphview.model_explorer import export_files, export_zip

            before, after, diff, overlays = me
            kinds = ", ".join(["change class", *overlays]) if overlays else "change class"
            st.markdown("**Model Explorer** (both graphs, provenance, overlays)",
                        help="graphs.json opens in Google Model Explorer; each node_data_*.json then colours its "
                             f"nodes. Overlays in the file: {kinds} (choose another overlay to add it).")
            st.download_button("Model Explorer JSON (.zip)",
                               data=lambda: export_zip(export_files(loaded.name, before, after, diff, overlays)),
                               file_name=f"{stem}_model_explorer.zip", mime="application/zip",
                               key="graph_export_me", on_click="ignore", width="stretch")


def _set_expanded() -> None:
    """The open blocks changed."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    opts["expanded"] = list(st.session_state["graph_expanded"])
    st.session_state[state.GRAPH_OPTS] = opts


def _blocks(box: DeltaGenerator, rendered: dict[str, Rendered | None]) -> None:
    """Open collapsed blocks by name (clicking a block in a pane does the same)."""
    paths = sorted({p for r in rendered.values() if r is not None for p in r.scope_ids.values()})
    opened = list((st.session_state.get(state.GRAPH_OPTS) or {}).get("expanded", ()))
    if not paths and not opened:
        return
    options = sorted(set(paths) | set(opened))
    state.seed("graph_expanded", [p for p in opened if p in options])
    with box:
        st.multiselect("Open collapsed blocks", options, key="graph_expanded", on_change=_set_expanded,
                       help="Blocks are name scopes drawn as one box; open one to see its nodes.")


# ------------------------------------------------------------------ the page


def body() -> None:
    """The Graph page."""
    loaded = common.require_model()
    st.markdown(_CSS, unsafe_allow_html=True)
    _focus_from_url()
    overlay_view.from_url()
    body_view.from_url()
    nearmiss_view.from_url()
    result = common.current_pipeline()
    view = compiled_view.view_choice()  # "compiled by OpenVINO / TVM" lives in compiled_view.py
    if view != "passes":
        return compiled_view.body(loaded, result, view)
    near = nearmiss_view.current(result)  # may compare the step of its pass (nearmiss_view rule 2)
    choice = st.session_state.get(state.COMPARE, "current")
    before, after, key, caption = pick_pair(loaded, result, choice)
    whole = (key, before, after)
    reports = tuple(_pair_reports(result, choice))
    opened = body_view.open_pair(key, before, after, reports, provenance=not choice.startswith("ort:"))
    if opened is not None:  # an If/Loop/Scan body in both panes (body_view rule 2)
        before, after, key = opened.before, opened.after, opened.key
    diff = cache.diff(key, before, after)
    links = _links(key, not choice.startswith("ort:"), before, after, diff, reports)
    if opened is not None and opened.missing:
        diff = None  # one side has no such body: nothing to colour (body_view rule 3)
    _take_clicks(links)
    selection_view.restore(links, selection(links), _select)
    collapse_on = bool((st.session_state.get(state.GRAPH_OPTS) or {}).get("collapse", True))
    text = (st.session_state.get("graph_search") or "").strip()
    hits = {side: matches(links, side, text) for side in SIDES} if text else {}
    _search_selects(text, hits)
    overlay = nearmiss_view.overlay(result, near) if opened is None else ()
    errs = error_view.current(loaded, key, before, after, in_body=opened is not None)
    ovl, ovl_why = overlay_view.compute(loaded, key, before, after, in_body=opened is not None, errs=errs,
                                        whole=whole, body=getattr(opened, "path", None))

    shown = {"selected": selection(links)[0] is not None, "match": any(hits.values()), "near_miss": bool(overlay)}
    _header(caption, getattr(diff, "counts", None), shown)
    view_box, export_box = _toolbar(result, collapse_on)
    above = st.container()  # rule 9: all that comes and goes above the panes, in one place
    with above:
        body_view.bar(*whole, opened, links, selection(links))
        nearmiss_view.picker(result, near)
        nearmiss_view.banner(near)
        error_view.banner(errs, _set_focus)
        overlay_view.legend(ovl, ovl_why)

    focus = st.session_state.get(state.FOCUS)
    if focus and not (links.has("before", focus) or links.has("after", focus)):
        # The link stays as it was given (rule 4); "Whole graph" clears it.
        above.warning(f"No node `{focus}` in this model; showing the whole graph.")
        focus = None
    rendered: dict[str, Rendered | None] = {}
    for side, model in (("before", before), ("after", after)):
        if opened is not None and opened.missing == side:
            rendered[side] = None
            continue
        opts = common.render_options(focus=_side_focus(links, focus, side), max_nodes=max_draw(),
                                     collapse=collapse_on, auto_collapse=True, near_misses=overlay,
                                     **(ovl[side].render_options() if side in ovl else {}))
        try:
            rendered[side] = _render(key, side, opts, model, diff, before)
        except errors.FusionvizError as exc:
            above.error(f"{side.capitalize()}: {exc}")
            rendered[side] = None

    notes = sorted({r.note for r in rendered.values() if r is not None and r.note})
    first_change = next((k for k, s in (getattr(diff, "status_after", {}) or {}).items() if s != "unchanged"), None)
    with above:
        _status_row(text, hits, notes, first_change)

    sel, sel_side = selection(links)
    cp = links.counterpart(sel_side, sel) if sel and sel_side else None
    marks = _marks(rendered, cp, hits, diff)
    selection_view.add_marks(marks, rendered, links, selection_view.items(selection(links)), _ids)

    with above:
        _prepare_layouts(rendered)
    stacked = bool((st.session_state.get(state.GRAPH_OPTS) or {}).get("stacked"))
    panel_on = bool((st.session_state.get(state.GRAPH_OPTS) or {}).get("panel", True))
    side_box = None
    if panel_on and stacked:  # rule 10: the panel beside the two stacked panes
        left, side_box = st.columns([3, 1.1], gap="small")
        panes = [left.container(), left.container()]
    elif panel_on:
        *panes, side_box = st.columns([1, 1, 0.72], gap="small")
    else:
        panes = [st.container(), st.container()] if stacked else list(st.columns(2, gap="small"))
    pending: list[str] = []
    for pane, side in zip(panes, SIDES, strict=True):
        with pane, common.guard(f"drawing the {side} graph"):
            if rendered.get(side) is not None:
                _draw_pane(side, rendered[side], height=STACKED_HEIGHT if stacked else PANE_HEIGHT,
                           pending=pending, **marks[side])
            elif opened is not None and opened.missing == side:
                body_view.missing_pane(side, opened, STACKED_HEIGHT if stacked else PANE_HEIGHT)
    if cp is not None:
        shown = len(marks[cp.other_side]["linked_ids"])
        if cp.others and not shown:
            st.caption(f"The {len(cp.others)} linked node(s) are not drawn in the {cp.other_side} pane "
                       "(focus or changed-only hides them).")

    pair_ovl = overlay_view.computed((key, state.input_plan(loaded).key))
    if side_box is not None:
        with side_box, common.guard("drawing the side panel"):
            near_all = tuple(m for r in reports for m in getattr(r, "near_misses", ())) if opened is None else ()
            panel_view.draw(2 * STACKED_HEIGHT if stacked else PANE_HEIGHT, {"before": before, "after": after},
                            key, diff, links, selection(links), near_all, pair_ovl, _set_focus)
    _exports(export_box, loaded, rendered, (before, after, diff, pair_ovl))
    _blocks(view_box, rendered)
    if side_box is None:
        with st.expander("Node details: both sides", expanded=bool(sel)):
            chosen = selection_view.items(selection(links))
            if len(chosen) >= 2:  # several selected: their table first (panel_view rule 5)
                panel_view.several(chosen, diff, links, pair_ovl)
            try:
                _details(before, after, links, key)
            except errors.FusionvizError as exc:
                st.error(str(exc))
    _focus_to_url()
    overlay_view.to_url()
    body_view.to_url()
    nearmiss_view.to_url()
    _lay_out_the_rest(pending)


def _lay_out_the_rest(pending: Sequence[str]) -> None:
    """Rule 8: lay out the whole drawings whose first screen is shown; the panes ask for them."""
    from fusionviz.ui.graph_component import svg_for

    for dot in pending:
        try:
            svg_for(dot)
        except errors.RenderError:
            logger.info("the whole drawing could not be laid out", exc_info=True)


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Graph", body)


if __name__ == "__main__":
    render()
