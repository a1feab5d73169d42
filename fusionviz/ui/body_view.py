"""The Graph page's control-flow bodies: open an If/Loop/Scan body in both panes.

Rules (the code points back to them):

1. When either model of the compared pair holds bodies, a row under the bar shows where the
   panes are (breadcrumbs: "Main graph › If_0 · then_branch › ...", each step a button back up)
   and a picker "Open a body" listing every body path of both models with its node counts
   before → after. Selecting a node that holds bodies (a click in a pane) adds one button per
   body to open it.
2. An open body is drawn in both panes, the same path on both sides
   (``graphview.bodies.body_model``): the whole page (diff colours, search, focus, links,
   details, exports) works on the two bodies as on two models, so a pass that changed the
   body shows its changes there.
3. A side without that body (a pass folded the If that held it, or onnxruntime inlined it) draws
   the other side without diff colours, and its pane says what became of the node that held
   the body, in the words of the provenance links of the graph that held it.
4. The open body lives in the URL (``?body=If_0/then_branch``); only that parameter is read or
   written here. Opening a body, or going back up, clears the focus and the selection (they
   name nodes of another graph). A link to a body the model does not have shows the main graph
   and says so; the link stays as it was given.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx
import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

if TYPE_CHECKING:
    from fusionviz.graphview.bodies import Body
    from fusionviz.graphview.links import Links

logger = logging.getLogger(__name__)

URL_PARAM = "body"
URL_SEEN = "fv_graph_url_body"  # body last read from or written to the URL (rule 4)
PICK = "graph_body_pick"
SIDES = ("before", "after")


@dataclasses.dataclass(frozen=True)
class OpenBody:
    """The pair the panes draw when a body is open (rule 2).

    Attributes:
        path: the body path.
        before: the before side's body as a model (an empty model when that side has none).
        after: the after side's body as a model (an empty model when that side has none).
        key: the pair's cache key.
        missing: the side without the body, or None.
        note: one sentence for the missing side's pane (rule 3), else "".
    """

    path: str
    before: onnx.ModelProto
    after: onnx.ModelProto
    key: tuple
    missing: str | None = None
    note: str = ""


# ------------------------------------------------------------------ the URL (rule 4)


def current() -> str | None:
    """The open body path, or None for the main graph."""
    return st.session_state.get(state.BODY) or None


def set_body(path: str | None) -> None:
    """Open ``path`` (None: the main graph); the focus and the selection are cleared (rule 4)."""
    st.session_state[state.BODY] = path or None
    st.session_state[state.FOCUS] = None
    st.session_state[state.SELECTED] = None


def from_url() -> None:
    """A ``?body=`` the page has not seen yet (a link, an edited address) becomes the open body."""
    wanted = common.url_news(URL_PARAM, URL_SEEN)
    if wanted:
        st.session_state[state.BODY] = wanted


def to_url() -> None:
    """The URL says which body is open: ``body`` set to its path, or removed."""
    common.to_url(URL_PARAM, current(), URL_SEEN)


# ------------------------------------------------------------------ the pair (rules 2, 3)


@st.cache_resource(max_entries=16, show_spinner=False)
def _listing(key: tuple, _before: onnx.ModelProto, _after: onnx.ModelProto
             ) -> tuple[tuple[Body, ...], tuple[Body, ...]]:
    """Every body of each side (``key`` identifies the pair)."""
    from fusionviz.graphview.bodies import list_bodies

    return tuple(list_bodies(_before)), tuple(list_bodies(_after))


@st.cache_resource(max_entries=16, show_spinner=False)
def _extract(key: tuple, side: str, path: str, _model: onnx.ModelProto) -> onnx.ModelProto | None:
    """One side's body as a model, or None when that side has no such body (kept as one object,
    so the drawing's shape inference is cached with it)."""
    from fusionviz.graphview.bodies import body_model

    try:
        return body_model(_model, path)
    except errors.GraphPathError:
        return None


def _empty_like(model: onnx.ModelProto) -> onnx.ModelProto:
    """A model with no nodes: the stand-in for a side without the body (rule 3)."""
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.graph.name = "none"
    return out


def _what_became(key: tuple, path: str, missing: str, before: onnx.ModelProto, after: onnx.ModelProto,
                 reports: Sequence, provenance: bool) -> str:
    """Rule 3: what became of the node that held the body, said by the links of its graph.

    A body the missing side's graph took in whole (onnxscript's constant folding inlines the
    branch an If with a constant condition takes, naming its nodes ``<If name>_<node name>``)
    is said to be inlined there.
    """
    from fusionviz.graphview import Links, fates_from_reports
    from fusionviz.graphview.bodies import split_path

    present = "before" if missing == "after" else "after"
    models = {"before": before, "after": after}
    plain = f"The {missing} graph has no body '{path}'."
    try:
        steps = split_path(path, models[present])
    except errors.GraphPathError:
        return plain
    gone = next((i for i, (p, _) in enumerate(steps) if _extract(key, missing, p, models[missing]) is None),
                len(steps) - 1)
    parent = steps[gone - 1][0] if gone else ""
    node = steps[gone][1]
    pair = {s: (_extract(key, s, parent, models[s]) if parent else models[s]) for s in SIDES}
    if any(m is None for m in pair.values()):
        return plain
    pkey = (*key, "body", parent) if parent else key
    fates = fates_from_reports(reports)
    links = Links(pair["before"], pair["after"], cache.diff(pkey, pair["before"], pair["after"]), fates,
                  provenance=provenance)
    cp = links.counterpart(present, node)
    where = f"in {_crumb(steps[gone - 1][1], parent.rsplit('/', 1)[-1])}" if parent else "in the main graph"
    attribute = steps[gone][0].rsplit("/", 1)[-1]
    if cp is None:
        return plain
    if links.has(missing, node):
        return f"Its {cp.op} '{_short(node)}' {where} holds no {attribute} in the {missing} graph."
    held = _extract(key, present, steps[gone][0], models[present])
    inner = {n.name for n in held.graph.node if n.name} if held is not None else set()
    prefix = f"{node}_"
    moved = sum(1 for n in pair[missing].graph.node
                if n.name.startswith(prefix) and n.name[len(prefix):] in inner)
    if moved:
        fate = fates.get(node)
        by = f" by {fate.pass_title}" if fate is not None else ""
        return (f"Its {cp.op} '{_short(node)}' is gone from the {missing} graph: it was resolved{by} and "
                f"this {attribute} was inlined {where} ({moved:,} of its nodes are there, named "
                f"'{_short(node)}_…').")
    return f"Its {cp.op} '{_short(node)}' is gone from the {missing} graph {where}. {cp.relation}"


def open_pair(key: tuple, before: onnx.ModelProto, after: onnx.ModelProto, reports: Sequence,
              *, provenance: bool = True) -> OpenBody | None:
    """Rule 2: the body pair to draw, or None for the main graph (also when neither side has
    the body: the page then says so, rule 4)."""
    path = current()
    if not path:
        return None
    got = {s: _extract(key, s, path, m) for s, m in (("before", before), ("after", after))}
    if got["before"] is None and got["after"] is None:
        st.warning(f"No body `{path}` in this model; showing the main graph.")
        return None
    bkey = (*key, "body", path)
    for side in SIDES:
        if got[side] is None:
            other = got["after" if side == "before" else "before"]
            note = _what_became(key, path, side, before, after, reports, provenance)
            stand_in = _empty_like(other)
            pair = {side: stand_in, ("after" if side == "before" else "before"): other}
            return OpenBody(path, pair["before"], pair["after"], bkey, side, note)
    return OpenBody(path, got["before"], got["after"], bkey)


# ------------------------------------------------------------------ the row (rule 1)


def _short(node: str, limit: int = 24) -> str:
    """A node key cut to its tail (``If_0_then_branch__Inline_0__/decoder/If_1`` →
    ``…/decoder/If_1``): the tail is what tells sibling nodes apart."""
    if len(node) <= limit:
        return node
    parts = node.split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + len(tail) + 3 > limit:
            break
        tail = f"{part}/{tail}"
    if len(tail) + 2 > limit:
        return "…" + node[-(limit - 1):]
    return "…/" + tail


def _crumb(node: str, attribute: str) -> str:
    return f"{_short(node)} · {attribute}"


def _nodes(n: int) -> str:
    return f"{n:,} node{'s' if n != 1 else ''}"


def _counts(path: str, sides: dict[str, dict[str, Body]]) -> str:
    """Node counts of a body (nested bodies included) before → after."""
    b, a = sides["before"].get(path), sides["after"].get(path)
    if b is not None and a is not None:
        if b.total_nodes == a.total_nodes:
            return _nodes(b.total_nodes)
        return f"{b.total_nodes:,} → {_nodes(a.total_nodes)}"
    if b is not None:
        return f"{_nodes(b.total_nodes)}; not in after"
    return f"{_nodes(a.total_nodes)}; only in after" if a is not None else ""


def _option_label(body: Body, sides: dict[str, dict[str, Body]]) -> str:
    """The picker's line for a body: indented by depth under its parent (the list is depth first),
    ``↳ …/decoder/If_1 · then_branch (112 nodes; not in after)``."""
    indent = "\u2003" * (body.depth - 1) + ("↳ " if body.depth > 1 else "")
    return f"{indent}{_crumb(body.node, body.attribute)} ({_counts(body.path, sides)})"


def _unique_labels(ordered: Sequence[str], merged: dict[str, Body], sides: dict[str, dict[str, Body]]
                   ) -> dict[str, str]:
    """Rule 1: one distinct line per body (Streamlit maps a picked line back to its option by its
    text): a line two bodies share names the top-level body it is in, then the whole path."""
    labels = {p: _option_label(merged[p], sides) for p in ordered}

    def top(path: str) -> str:
        b = merged[path]
        while b.parent and b.parent in merged:
            b = merged[b.parent]
        return _crumb(b.node, b.attribute)

    for widen in (lambda p: f" · in {top(p)}", lambda p: f" · {p}"):
        seen: dict[str, int] = {}
        for text in labels.values():
            seen[text] = seen.get(text, 0) + 1
        for p in ordered:
            if seen[labels[p]] > 1:
                labels[p] += widen(p)
    return labels


def _pick() -> None:
    set_body(st.session_state.get(PICK) or None)


def bar(key: tuple, before: onnx.ModelProto, after: onnx.ModelProto, opened: OpenBody | None,
        links: Links, selected: tuple[str | None, str | None]) -> None:
    """Rule 1: breadcrumbs, the body picker, and buttons to open the selected node's bodies.

    ``before``/``after`` are the pair's whole models (not the open body); ``links`` and
    ``selected`` are those of the graph the panes draw.
    """
    from fusionviz.graphview.bodies import split_path

    listing = _listing(key, before, after)
    if not listing[0] and not listing[1]:
        return
    sides = {"before": {b.path: b for b in listing[0]}, "after": {b.path: b for b in listing[1]}}
    ordered = list(dict.fromkeys([*sides["before"], *sides["after"]]))
    merged = {**sides["after"], **sides["before"]}
    path = opened.path if opened is not None else None
    cols = st.columns([5.6, 3.0, 1.9], vertical_alignment="center")
    with cols[0].container(horizontal=True, gap="small", vertical_alignment="center"):
        if path is None:
            mine = listing[0] or listing[1]
            top = sum(1 for b in mine if not b.parent)
            nested = f" ({len(mine)} with nested ones)" if len(mine) != top else ""
            st.markdown(f"**Main graph** · {top} If/Loop/Scan bod{'ies' if top != 1 else 'y'} inside{nested}: "
                        "open one →")
        else:
            st.button("Main graph", key="graph_body_up_main", type="tertiary", icon=":material/home:",
                      on_click=set_body, args=(None,), help="Back to the main graph")
            model = before if opened is not None and opened.missing != "before" else after
            try:
                steps = split_path(path, model)
            except errors.GraphPathError:
                steps = [(path, path)]
            for i, (step_path, _node) in enumerate(steps):
                b = merged.get(step_path)
                label = _crumb(b.node, b.attribute) if b is not None else step_path
                st.markdown("›")
                if i == len(steps) - 1:
                    st.markdown(f"**{label}**", help=f"Body `{step_path}` ({_counts(step_path, sides)})")
                else:
                    st.button(label, key=f"graph_body_up_{i}", type="tertiary", on_click=set_body,
                              args=(step_path,), help=f"Back to body `{step_path}`")
    choices = [""] + ordered
    labels = {"": "Main graph"} | _unique_labels(ordered, merged, sides)
    state.seed(PICK, path if path in choices else "")
    cols[1].selectbox("Open a body", choices, format_func=labels.get, key=PICK, on_change=_pick,
                      label_visibility="collapsed",
                      help="If/Loop/Scan bodies (subgraphs), nested ones under their parent; both panes "
                           "show the same body. Node counts take in nested bodies and Constant nodes "
                           "(drawn as weights in their readers' boxes).")
    name, side = selected
    if name and side:
        held = [b for b in sides[side].values() if b.parent == (path or "") and b.node == name]
        if held:
            with cols[2].container(horizontal=True, gap="small"):
                for i, b in enumerate(held[:3]):
                    st.button(f"Open {b.attribute}", key=f"graph_body_open_{i}", on_click=set_body,
                              args=(b.path,), icon=":material/subdirectory_arrow_right:",
                              help=f"Open `{b.path}` ({_counts(b.path, sides)}) in both panes")


def missing_pane(side: str, opened: OpenBody, height: int) -> None:
    """Rule 3: the pane of the side without the body."""
    with st.container(border=True):
        st.markdown(f"**{side.capitalize()}**: no such body")
        st.info(opened.note or f"The {side} graph has no body '{opened.path}'.")
