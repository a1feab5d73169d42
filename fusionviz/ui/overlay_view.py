"""Per-node overlays on the Graph page: the selector, the URL, the data and the legend.

Rules (the code points back to them):

1. One selector ("Overlay" in the page's bar) picks what fills the nodes: the change class (the
   default: the diff's colours), time per node, memory written, or error per tensor
   (``graphview.overlays`` rule 2). The choice is kept with the graph options and is in the URL
   (``?overlay=time``; absent for the change class): a link reproduces it.
2. Data is computed only for the overlay chosen, and kept per pair (and inputs): time runs both
   graphs under onnxruntime's profiler in a child process (``fusionviz.profile``), memory is
   shape inference (sized from that profile where inference cannot, when it was run), error is
   the per-tensor comparison of ``error_view`` (after pane only). What was computed stays in the
   session for the side panel (its per-node values) and the Model Explorer export.
3. A line above the panes draws the overlay's legend (its own scale and palette) and says where
   the numbers come from, or why there are none (no inputs, the model does not run, inside a body).
"""

from __future__ import annotations

import html
import logging
from typing import Any

import onnx
import streamlit as st

from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)

SELECT = "graph_overlay"  # the selector's widget key
OPT = "overlay"  # key in the graph options (state.GRAPH_OPTS)
URL_PARAM = "overlay"
URL_SEEN = "fv_graph_url_overlay"  # the overlay last read from or written to the URL
COMPUTED = "fv_graph_overlays"  # (pair key, inputs key) -> {kind: {side: Overlay}} (rule 2)
DEFAULT = "change"


def kinds() -> dict[str, str]:
    """Rule 1: kind -> its name, in the selector's order."""
    from fusionviz.graphview.overlays import KINDS

    return dict(KINDS)


def current() -> str:
    """Rule 1: the overlay chosen (``change`` by default)."""
    kind = (st.session_state.get(state.GRAPH_OPTS) or {}).get(OPT, DEFAULT)
    return kind if kind in kinds() else DEFAULT


def _set(kind: str) -> None:
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    opts[OPT] = kind
    st.session_state[state.GRAPH_OPTS] = opts


def _changed() -> None:
    _set(str(st.session_state.get(SELECT) or DEFAULT))


def from_url() -> None:
    """Rule 1: an ``?overlay=`` the page has not seen yet becomes the choice."""
    wanted = common.url_news(URL_PARAM, URL_SEEN)
    if wanted and wanted in kinds():
        _set(wanted)
        st.session_state[SELECT] = wanted


def to_url() -> None:
    """Rule 1: the URL names the overlay, or has none for the change class."""
    kind = current()
    common.to_url(URL_PARAM, None if kind == DEFAULT else kind, URL_SEEN)


def selector(where: Any) -> None:
    """Rule 1: the selector (``where``: a column of the bar)."""
    names = kinds()
    state.seed(SELECT, current())
    where.selectbox("Overlay", list(names), format_func=names.get, key=SELECT, on_change=_changed,
                    label_visibility="collapsed",
                    help="What fills the nodes: the change class, each node's time (onnxruntime's profiler), "
                         "the bytes each node writes, or each node's error against the before side.")


def _store(pair: tuple, kind: str, by_side: dict) -> None:
    got = st.session_state.setdefault(COMPUTED, {})
    got.setdefault(pair, {})[kind] = by_side
    while len(got) > 8:
        got.pop(next(iter(got)))


def computed(pair: tuple) -> dict[str, dict]:
    """Rule 2: the overlays computed so far for ``pair`` (kind -> side -> Overlay)."""
    return dict((st.session_state.get(COMPUTED) or {}).get(pair, {}))


def compute(loaded: Any, key: tuple, before: onnx.ModelProto, after: onnx.ModelProto, *, in_body: bool,
            errs: Any = None) -> tuple[dict, str | None]:
    """Rule 2: (side -> Overlay of the chosen kind, a sentence when there is none or a part is missing).

    ``errs`` is ``error_view.current``'s result (the comparison is shared with that view)."""
    from fusionviz.graphview.overlays import error_overlay, time_overlay

    kind = current()
    if kind == DEFAULT:
        return {}, None
    inputs = state.input_plan(loaded)
    pair = (key, inputs.key)
    if kind == "error":
        from fusionviz.compare import ERROR_SCALE, CompareResult

        if not isinstance(errs, CompareResult):
            return {}, None  # error_view's banner says why
        by_side = {"after": error_overlay(errs.node_values("b"), ERROR_SCALE)}
        _store(pair, kind, by_side)
        return by_side, None
    if in_body:
        return {}, ("Overlays are computed on the main graphs: a body runs inside the node that holds it. "
                    "Go back to the main graph to see them.")
    shapes = state.pipeline_shapes(inputs.plan)
    if kind == "memory":
        by_side = {s: cache.memory_overlay((*key, s), inputs.key, False, m, shapes, None)
                   for s, m in (("before", before), ("after", after))}
        if any(ov.missing for ov in by_side.values()) and inputs.plan is not None:
            # shape inference cannot size some outputs (NCHWc, contrib ops): the profile can
            times, _ = _times(key, inputs, before, after)
            by_side = {s: cache.memory_overlay((*key, s), inputs.key, s in times, m, shapes,
                                               times[s].output_bytes if s in times else None)
                       for s, m in (("before", before), ("after", after))}
        _store(pair, kind, by_side)
        return by_side, None
    times, why = _times(key, inputs, before, after)
    if why:
        return {}, why
    by_side = {s: time_overlay(t.times_ms, f"{t.total_ms:.3g} ms in {len(t.times_ms):,} kernels (median of "
                                           f"{t.runs} runs, {t.threads} thread, onnxruntime's optimizer off)")
               for s, t in times.items()}
    _store(pair, kind, by_side)
    return by_side, None


def _times(key: tuple, inputs: Any, before: onnx.ModelProto, after: onnx.ModelProto) -> tuple[dict, str | None]:
    """Rule 2: side -> ``profile.NodeTimes`` (cached per pair and inputs), or why there are none."""
    if inputs.plan is None:
        return {}, f"Timing the nodes needs inputs the model runs on: {inputs.error}"
    times = {}
    with st.spinner("Timing every node of both graphs with onnxruntime's profiler...", show_time=True):
        for side, model in (("before", before), ("after", after)):
            got = cache.node_times((*key, side), inputs.key, model, inputs.plan)
            if isinstance(got, str):
                return {}, got
            times[side] = got
    return times, None


def legend(by_side: dict, why: str | None) -> None:
    """Rule 3: the chosen overlay's legend and where its numbers come from (above the panes)."""
    kind = current()
    if kind in (DEFAULT, "error"):
        return  # the header's legend, or error_view's banner and scale
    if why:
        st.info(why, icon=":material/info:")
        return
    if not by_side:
        return
    any_ov = next(iter(by_side.values()))
    sw = "".join(f"<span class='fv-sw' style='background:{fill};border-color:{border}'></span>{html.escape(title)}"
                 for title, fill, border in any_ov.legend())
    notes = " · ".join(f"{s}: {ov.note}" for s, ov in by_side.items() if ov.note)
    st.markdown(f"<div class='fv-ovl' style='font-size:0.85rem;line-height:1.5;margin:0'>"
                f"<b>{html.escape(kinds()[kind])}</b> (both panes): {sw}</div>", unsafe_allow_html=True,
                help=notes or None)
