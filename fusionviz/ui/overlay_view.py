"""Per-node overlays on the Graph page: the selector, the URL, the data and the legend.

Rules (the code points back to them):

1. One selector ("Overlay" in the page's bar) picks what fills the nodes: the change class (the
   default: the diff's colours), time per node, memory written, or error per tensor
   (``graphview.overlays`` rule 2). The choice is kept with the graph options and is in the URL
   (``?overlay=time``, ``?overlay=ov_time``; absent for the change class): a link reproduces it.
2. Data is computed only for the overlay chosen, and kept per pair (and inputs): time runs both
   graphs under onnxruntime's profiler in a child process (``fusionviz.profile``), OpenVINO's
   time compiles and profiles both with OpenVINO in a child process (``graphview.compiled``; the
   layer times mapped onto nodes by ``overlays`` rule 4), memory is
   shape inference (sized from that profile where inference cannot, when it was run), error is
   the per-tensor comparison of ``error_view`` (after pane only). What was computed stays in the
   session for the side panel (its per-node values) and the Model Explorer export.
3. A line above the panes draws the overlay's legend (its own scale and palette) and says where
   the numbers come from, or why there are none (no inputs, the model does not run, OpenVINO
   not installed, no data inside a body), and how many nodes have none.
4. Inside an If/Loop/Scan body the overlays colour the body's nodes where data exists: time from
   the profile of the whole pair (onnxruntime's profile names body nodes; a name that occurs twice
   in the model is left out), memory from shape inference of the body (sized from that profile
   where inference cannot); error and OpenVINO's times are of the main graph only, and the line
   says "no data inside this body" rather than colouring nothing silently.
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
    """Rule 1: the selector (``where``: a column of the bar); an overlay that cannot be had here
    (OpenVINO not installed) is listed as unavailable, and choosing it says why."""
    names = kinds()
    if unavailable():
        names["ov_time"] += " (unavailable)"
    state.seed(SELECT, current())
    where.selectbox("Overlay", list(names), format_func=names.get, key=SELECT, on_change=_changed,
                    label_visibility="collapsed",
                    help="What fills the nodes: the change class, each node's time (onnxruntime's profiler), "
                         "each OpenVINO layer's time on the nodes it holds, the bytes each node writes, or each "
                         "node's error against the before side.")


def _store(pair: tuple, kind: str, by_side: dict) -> None:
    got = st.session_state.setdefault(COMPUTED, {})
    got.setdefault(pair, {})[kind] = by_side
    while len(got) > 8:
        got.pop(next(iter(got)))


def computed(pair: tuple) -> dict[str, dict]:
    """Rule 2: the overlays computed so far for ``pair`` (kind -> side -> Overlay)."""
    return dict((st.session_state.get(COMPUTED) or {}).get(pair, {}))


def compute(loaded: Any, key: tuple, before: onnx.ModelProto, after: onnx.ModelProto, *, in_body: bool,
            errs: Any = None, whole: tuple | None = None, body: str | None = None) -> tuple[dict, str | None]:
    """Rule 2: (side -> Overlay of the chosen kind, a sentence when there is none or a part is missing).

    ``errs`` is ``error_view.current``'s result (the comparison is shared with that view). Inside a
    body (rule 4), ``whole`` is the main pair (key, before, after) and ``body`` the body's path."""
    kind = current()
    if kind == DEFAULT:
        return {}, None
    inputs = state.input_plan(loaded)
    pair = (key, inputs.key)
    if in_body:
        by_side, why = _in_body(loaded, kind, inputs, whole, body, before, after, errs, key)
    else:
        by_side, why = _main(kind, inputs, key, before, after, errs)
    if by_side:
        _store(pair, kind, by_side)
    return by_side, why


def _main(kind: str, inputs: Any, key: tuple, before: onnx.ModelProto, after: onnx.ModelProto,
          errs: Any) -> tuple[dict, str | None]:
    from fusionviz.graphview.overlays import error_overlay, time_overlay

    if kind == "error":
        from fusionviz.compare import ERROR_SCALE, CompareResult

        if not isinstance(errs, CompareResult):
            return {}, None  # error_view's banner says why
        return {"after": error_overlay(errs.node_values("b"), ERROR_SCALE)}, None
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
        return by_side, None
    if kind == "ov_time":
        return _openvino(key, inputs, before, after)
    times, why = _times(key, inputs, before, after)
    if why:
        return {}, why
    from fusionviz.graphview.overlays import unattributed_kernels

    out = {}
    for s, t in times.items():
        note = (f"{t.total_ms:.3g} ms in {len(t.times_ms):,} kernels (median of {t.runs} runs, {t.threads} thread, "
                "onnxruntime's optimizer off)")
        if t.inlined:
            note += (f"; {len(t.inlined):,} function ops onnxruntime runs as their function body (e.g. HardSwish as "
                     f"HardSigmoid + Mul) have the sum of their {sum(t.inlined.values()):,} kernels")
        n, ms = unattributed_kernels(before if s == "before" else after, t.inner_ms)
        if n:
            note += (f"; {ms:.3g} ms in {n:,} kernels onnxruntime made itself (function ops it inlines in a body "
                     "with unnamed nodes, casts it inserts) have no node to colour")
        out[s] = time_overlay(t.times_ms, note, t.inlined)
    return out, None


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


@st.cache_resource(max_entries=16, show_spinner=False)
def _openvino_graph(key: tuple, inputs_key: tuple, _model: onnx.ModelProto, _plan) -> Any:
    """Rule 2: OpenVINO's executed graph of one snapshot with per-layer times, compiled and
    profiled in a child process (``compiled.compile_executed_isolated``): an ExecutedGraph, or
    the sentence saying why there is none."""
    from fusionviz import errors
    from fusionviz.graphview.compiled import compile_executed_isolated

    feeds = _plan.feeds("user" if _plan.user_data else "normal")
    try:
        graph, _ = compile_executed_isolated(_model, "openvino", layer_times=True, feeds=feeds,
                                             shapes={k: list(v.shape) for k, v in feeds.items()})
    except errors.FusionvizError as exc:
        return f"OpenVINO could not time this model's layers: {exc}"
    return graph


def unavailable() -> str | None:
    """Rule 2: why OpenVINO's per-layer times cannot be had here (not installed), or None."""
    from fusionviz.backends import get_backend

    why = get_backend("openvino").quick_check()
    return f"OpenVINO's per-layer times are unavailable: {why}" if why else None


def _openvino(key: tuple, inputs: Any, before: onnx.ModelProto, after: onnx.ModelProto) -> tuple[dict, str | None]:
    """Rule 2: side -> OpenVINO time overlay (``overlays.openvino_time_overlay``), or why none."""
    from fusionviz.graphview.overlays import openvino_time_overlay

    why = unavailable()
    if why:
        return {}, why
    if inputs.plan is None:
        return {}, f"Timing OpenVINO's layers needs inputs the model runs on: {inputs.error}"
    by_side, whys = {}, []
    with st.spinner("Compiling both graphs with OpenVINO and reading its per-layer times...", show_time=True):
        for side, model in (("before", before), ("after", after)):
            got = _openvino_graph((*key, side), inputs.key, model, inputs.plan)
            if isinstance(got, str):  # e.g. onnxruntime's contrib ops (FusedConv) after our passes
                whys.append(f"{side.capitalize()} pane: {got}")
                continue
            by_side[side] = openvino_time_overlay(got, model)
    return by_side, " ".join(whys) or None


#: Rule 4: why a kind has no data inside a body, whatever the body.
NO_BODY_DATA = {
    "error": "the comparison compares the tensors of the main graphs; a body's tensors live inside the node "
             "that holds it",
    "ov_time": "OpenVINO's per-layer times are read for the main graph's layers; it runs a body inside the "
               "layer of the node that holds it",
}


@st.cache_resource(max_entries=32, show_spinner=False)
def _body_overlay(key: tuple, _make) -> Any:
    """Rule 4: an overlay of one side of an open body, made once per body, side, kind and inputs
    (``key``); ``_make()`` makes it."""
    return _make()


def _in_body(loaded: Any, kind: str, inputs: Any, whole: tuple | None, path: str | None,
             before: onnx.ModelProto, after: onnx.ModelProto, errs: Any, key: tuple = ()) -> tuple[dict, str | None]:
    """Rule 4: the chosen overlay on the nodes of an open body, from the main pair's run (``key``:
    the body pair's key)."""
    from fusionviz.graphview import overlays as O

    where = f"inside this body ({path})" if path else "inside this body"
    if kind in NO_BODY_DATA:
        return {}, f"No data {where}: {NO_BODY_DATA[kind]}. Go back to the main graph to see this overlay."
    if whole is None:
        return {}, f"No data {where}."
    wkey, wbefore, wafter = whole
    bodies = {"before": before, "after": after}
    if kind == "memory":
        by_side = {s: _body_overlay((*key, s, kind, False), lambda m=m: O.memory_overlay(m))
                   for s, m in bodies.items() if len(m.graph.node)}
        if any(ov.missing for ov in by_side.values()) and inputs.plan is not None:
            times, _ = _times(wkey, inputs, wbefore, wafter)
            by_side = {s: _body_overlay((*key, s, kind, inputs.key), lambda s=s: O.memory_overlay(
                bodies[s], None, times[s].inner_bytes if s in times else None)) for s in by_side}
        if not any(ov.values for ov in by_side.values()):
            return {}, f"No data {where}: shape inference cannot size the tensors of this body."
        return by_side, None
    times, why = _times(wkey, inputs, wbefore, wafter)
    if why:
        return {}, why
    by_side = {s: _body_overlay((*key, s, kind, inputs.key), lambda s=s, m=model: O.body_time_overlay(
        wbefore if s == "before" else wafter, m, times[s].inner_ms, times[s].inlined))
        for s, model in bodies.items() if s in times and len(model.graph.node)}
    if not any(ov.values for ov in by_side.values()):
        return {}, (f"No data {where}: none of its nodes ran on these inputs (an If branch not taken) "
                    "or their names occur twice in the model.")
    return by_side, None


def legend(by_side: dict, why: str | None) -> None:
    """Rule 3: the chosen overlay's legend and where its numbers come from (above the panes)."""
    kind = current()
    if kind in (DEFAULT, "error"):
        return  # the header's legend, or error_view's banner and scale
    if why:
        st.info(why, icon=":material/info:")
    if not by_side:
        return
    any_ov = next(iter(by_side.values()))
    entries = any_ov.legend()
    if kind == "ov_time":  # the heading names it; short steps leave room for how a layer is drawn
        entries = [(t.removeprefix(f"{any_ov.title} "), f, b) for t, f, b in entries]
    sw = "".join(f"<span class='fv-sw' style='background:{fill};border-color:{border}'></span>{html.escape(title)}"
                 for title, fill, border in entries)
    notes = " · ".join(f"{s}: {ov.note}" for s, ov in by_side.items() if ov.note)
    extra = ""
    if kind == "ov_time":
        extra = " · <i>a layer's time, not split: on all nodes it holds, written on its first</i>"
    missing = {s: ov.missing for s, ov in by_side.items() if ov.missing}
    if missing:
        extra += " · no data for " + ", ".join(f"{n:,} node{'s' if n != 1 else ''} ({s})" for s, n in missing.items())
    panes = " and ".join(by_side) if len(by_side) < 2 else "both panes"
    st.markdown(f"<div class='fv-ovl' style='font-size:0.85rem;line-height:1.5;margin:0'>"
                f"<b>{html.escape(kinds()[kind])}</b> ({panes}): {sw}{extra}</div>", unsafe_allow_html=True,
                help=notes or None)
