"""The Graph page's "compiled by OpenVINO / TVM" view: what a compiler actually executes.

Rules (the code points back to them):

1. The view is chosen in the sidebar ("Graph view"), kept in ``state.GRAPH_VIEW`` and written
   to the URL with the rest of the state (``?view=openvino``, ``?view=tvm``; state rule 3). The
   passes view (before → after) stays the Graph page's own.
2. The model is compiled in a fresh process (``graphview.compiled.compile_executed_isolated``):
   a runtime that crashes, hangs or leaks cannot take the app down; its failure is one line.
   A backend that is not installed here says why in one line. Results are cached per model,
   input shapes, backend and timing choice.
3. Left pane: one box per executed layer with the ONNX nodes it absorbed listed in it,
   reorders (layout changes) amber and dashed, runtime precision, output layout, and the time
   per inference when per-layer times are on (OpenVINO's ``PERF_COUNT``; TVM only on request:
   untuned, it is slow). Right pane: our optimized graph (the passes selected in the app), or
   the original graph coloured by what the compiler fused. Selecting a layer (click, or the
   layer picker) outlines the ONNX nodes it came from in the right pane.
4. Below: every executed layer as a table, with whether our passes also turned its ONNX nodes
   into one node, so a user sees what the compiler fused that our passes did not.
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
import streamlit as st

from fusionviz import errors
from fusionviz.ui import common, state

logger = logging.getLogger(__name__)

URL_PARAM = state.QP_VIEW
VIEWS = {"passes": "Passes: before → after", "openvino": "Compiled by OpenVINO", "tvm": "Compiled by TVM"}
WIDGET = "graph_view_choice"
PICK = "compiled_layer_pick"
RIGHT = "compiled_right"
TIMES = "compiled_times"
CLICK_SEEN = "fv_compiled_click_seen"
PANE_HEIGHT = 700


# ------------------------------------------------------------------ rule 1: the choice


def _set_view() -> None:
    st.session_state[state.GRAPH_VIEW] = st.session_state.get(WIDGET) or "passes"  # the URL follows (state rule 3)


def view_choice() -> str:
    """Draw the "Graph view" choice in the sidebar; return "passes", "openvino" or "tvm"."""
    value = st.session_state.get(state.GRAPH_VIEW) or "passes"
    st.session_state[WIDGET] = value if value in VIEWS else "passes"
    st.sidebar.radio("Graph view", list(VIEWS), format_func=VIEWS.get, key=WIDGET, on_change=_set_view,
                     help="What the Graph page draws: our passes' before and after, or the layers a "
                          "compiler executes with the ONNX nodes each one absorbed.")
    return str(st.session_state.get(WIDGET) or "passes")


# ------------------------------------------------------------------ rule 2: compile, isolated


@st.cache_data(max_entries=32, show_spinner=False)
def _executed(sha: str, backend: str, shapes: tuple, times: bool, _model: onnx.ModelProto):
    """(ExecutedGraph, compile seconds) or (None, one sentence)."""
    from fusionviz.graphview.compiled import compile_executed_isolated

    try:
        return compile_executed_isolated(_model, backend, shapes=dict(shapes) or None, layer_times=times)
    except errors.FusionvizError as exc:
        return None, str(exc)


@st.cache_data(max_entries=32, show_spinner=False)
def _why_unavailable(backend: str) -> str | None:
    from fusionviz.backends import get_backend

    return get_backend(backend).quick_check()


# ------------------------------------------------------------------ rule 4: what our passes did


def _sources(model: onnx.ModelProto) -> dict[str, set[str]]:
    """Node key of ``model`` → the original node keys it stands for (its provenance, else itself)."""
    from fusionviz.graphview.model_graph import node_keys
    from fusionviz.passes.provenance import SEP, SOURCES_KEY

    out: dict[str, set[str]] = {}
    for key, node in zip(node_keys(model.graph.node), model.graph.node, strict=True):
        src = next((p.value for p in node.metadata_props if p.key == SOURCES_KEY), "")
        out[key] = {s for s in src.split(SEP) if s} or {key}
    return out


def _ours(absorbed: tuple[str, ...], sources: dict[str, set[str]]) -> tuple[str, list[str]]:
    """How our optimized graph holds the layer's ONNX nodes: ("one node" | "k nodes" | ..., keys)."""
    want = set(absorbed)
    holders = [k for k, src in sources.items() if src & want]
    if not want:
        return "-", []
    if len(holders) == 1 and want <= sources[holders[0]]:
        return "one node too", holders
    if not holders:
        return "folded away", []
    return f"{len(holders)} nodes", holders


# ------------------------------------------------------------------ drawing


def _svg(dot: str) -> str | None:
    from fusionviz.ui.graph_component import svg_for

    try:
        return svg_for(dot)
    except errors.RenderError as exc:
        logger.info("SVG unavailable: %s", exc)
        return None


def _pane(rendered, *, key: str, pane: str, label: str, selected: str | None = None,
          linked: list[str] | None = None):
    from fusionviz.ui.graph_component import graph_pane

    svg = _svg(rendered.dot)
    if svg is None:
        st.caption(label)
        st.graphviz_chart(rendered.dot, width="stretch")
        return None
    return graph_pane(svg, key=key, height=PANE_HEIGHT, selected_id=selected, linked_ids=linked or [],
                      pane=pane, pane_label=label, reveal=f"{pane}:{st.session_state.get(PICK) or ''}")


def _take_click(layers: dict[str, Any]) -> None:
    """A click on a layer in the left pane picks it (before the picker is drawn)."""
    value = st.session_state.get("compiled_layers")
    if not isinstance(value, dict) or value.get("kind") != "node":
        return
    token = f"{value.get('sid', '')}:{value.get('n', 0)}"
    if st.session_state.get(CLICK_SEEN) == token:
        return
    st.session_state[CLICK_SEEN] = token
    if value.get("key") in layers:
        st.session_state[PICK] = value["key"]


def _table(graph, sources: dict[str, set[str]], ops: dict[str, str] | None = None) -> list[dict]:
    """One row per executed layer; ``ops``: ONNX node key -> op type, for the kernel column of a
    layer our passes left apart (what onnxruntime could run it as, or that it has no kernel)."""
    from fusionviz.graphview.fused_kernels import kernel_note

    rows = []
    for layer in graph.layers:
        if layer.is_constant or layer.is_io:
            continue
        ours, _ = _ours(layer.absorbed, sources)
        apart = len(layer.absorbed) >= 2 and ours not in ("one node too", "folded away")
        kernel = kernel_note(ops.get(k, "") for k in layer.absorbed) if apart and ops else ""
        rows.append({"order": layer.exec_order, "layer": layer.name, "type": layer.layer_type,
                     "ONNX nodes absorbed": len(layer.absorbed), "origins": ", ".join(layer.absorbed),
                     "our passes": ours if len(layer.absorbed) >= 2 else "-",
                     "onnxruntime (CPU) for the group": kernel,
                     "precision": layer.precision or "", "layout": layer.output_layout or "",
                     "ms": round(layer.time_ms, 4) if layer.time_ms is not None else None})
    return rows


def body(loaded: Any, result: Any, backend: str) -> None:
    """The compiled view of ``loaded`` for ``backend`` ("openvino" or "tvm")."""
    import pandas as pd

    from fusionviz.backends.registry import TITLES
    from fusionviz.graphview import RenderOptions, diff_models, render_graph
    from fusionviz.graphview.compiled import CompiledRenderOptions, executed_diff, render_executed

    title = TITLES.get(backend, backend)
    st.markdown(f"### Graph: compiled by {title}")
    why = _why_unavailable(backend)
    if why is not None:
        st.info(f"{title} is not available here: {why}")
        return
    c = st.columns([2.8, 1.3, 2.9], vertical_alignment="center")
    right = c[0].selectbox("Right pane", ["optimized", "original"], key=RIGHT, label_visibility="collapsed",
                           format_func={"optimized": f"Beside: our optimized graph ({len(result.reports)} passes)",
                                        "original": f"Beside: the original, coloured by {title}'s fusion"}.get)
    st.session_state.setdefault(f"{TIMES}_{backend}", backend == "openvino")
    times = c[1].toggle("Per-layer times", key=f"{TIMES}_{backend}",
                        help="Profile a few inferences and show each layer's time (TVM: untuned, slow).")
    shapes = tuple(sorted((k, tuple(v)) for k, v in state.shapes().items()))
    with st.spinner(f"Compiling with {title} in a separate process...", show_time=True):
        graph, got = _executed(loaded.sha256, backend, shapes, bool(times), result.original)
    if graph is None:
        st.error(f"{title} could not compile this model: {got}")
        return
    body_layers = {layer.name: layer for layer in graph.layers if not layer.is_constant and not layer.is_io}
    fused = [lay for lay in body_layers.values() if len(lay.absorbed) >= 2]
    reorders = sum(1 for lay in body_layers.values() if lay.is_reorder)
    precisions = sorted({lay.precision for lay in body_layers.values() if lay.precision})
    sources = _sources(result.final)
    ours_too = sum(1 for lay in fused if _ours(lay.absorbed, sources)[0] == "one node too")
    timed = f"; {sum(lay.time_ms or 0 for lay in body_layers.values()):.2f} ms per inference in layers" \
        if graph.timed else ""
    st.caption(f"{title} compiled the original model in {got:.2f} s: {len(body_layers)} executed layers, "
               f"{len(fused)} of them absorbed 2+ ONNX nodes ({ours_too} of those are one node after our "
               f"passes too), {reorders} layout changes (Reorder), precision {', '.join(precisions) or '?'}"
               f"{timed}." + (f" {graph.note}" if graph.note else ""))

    _take_click(body_layers)
    names = [lay.name for lay in sorted(fused, key=lambda x: -len(x.absorbed))] + \
        [n for n in body_layers if n not in {f.name for f in fused}]
    if st.session_state.get(PICK) not in names:
        st.session_state[PICK] = names[0] if names else None
    pick = c[2].selectbox("Executed layer", names, key=PICK, label_visibility="collapsed",
                          format_func=lambda n: f"{body_layers[n].layer_type} {n} ← "
                                                f"{len(body_layers[n].absorbed)} ONNX nodes")
    layer = body_layers.get(pick) if pick else None

    left = render_executed(graph, options=CompiledRenderOptions())
    ids_left = {v: k for k, v in left.node_ids.items()}
    if right == "original":
        other = render_graph(result.original, diff=executed_diff(result.original, graph), side="before",
                             options=RenderOptions(collapse=False, auto_collapse=True))
        linked_keys = list(layer.absorbed) if layer else []
        other_label = f"Original · coloured by what {title} fused"
        other_pane = "original"
    else:
        other = render_graph(result.final, diff=diff_models(result.original, result.final), side="after",
                             options=RenderOptions(collapse=False, auto_collapse=True))
        linked_keys = _ours(layer.absorbed, sources)[1] if layer else []
        other_label = f"Ours · {len(result.reports)} passes"
        other_pane = "optimized"
    linked = [other.item_ids[k] for k in linked_keys if k in other.item_ids]
    cols = st.columns(2, gap="small")
    with cols[0], common.guard(f"drawing the {title} layers"):
        _pane(left, key="compiled_layers", pane="compiled",
              label=f"{title} · {left.drawn:,} of {left.total:,} executed layers",
              selected=ids_left.get(pick) if pick else None)
    with cols[1], common.guard("drawing the graph beside it"):
        _pane(other, key="compiled_other", pane=other_pane, label=other_label, linked=linked)
    from fusionviz.graphview.fused_kernels import kernel_note
    from fusionviz.graphview.model_graph import node_keys

    ops = dict(zip(node_keys(result.original.graph.node), (n.op_type for n in result.original.graph.node),
                   strict=True))
    if layer is not None:
        ours, _ = _ours(layer.absorbed, sources)
        if len(layer.absorbed) >= 2 and ours not in ("one node too", "folded away"):
            note = kernel_note(ops.get(k, "") for k in layer.absorbed)
            if note.startswith("no kernel"):
                st.info(f"{title} fused these; our passes did not: onnxruntime's CPU provider has no kernel for "
                        f"them ({note.removeprefix('no kernel: ')}), so no ONNX rewrite can hold them in one node "
                        "it runs.", icon=":material/info:")
            else:
                st.info(f"{title} fused these; our passes did not. onnxruntime could run them as: {note}.",
                        icon=":material/info:")
        st.markdown(f"**{layer.layer_type} `{layer.name}`** runs {len(layer.absorbed)} ONNX node(s): "
                    + ", ".join(f"`{k}`" + (" (inferred)" if k in layer.inferred else "") for k in layer.absorbed)
                    + (f" · {layer.precision}" if layer.precision else "")
                    + (f" · layout {layer.output_layout}" if layer.output_layout else "")
                    + (f" · {layer.time_ms:.3f} ms" if layer.time_ms is not None else "")
                    + (f" · our passes: {ours}" if len(layer.absorbed) >= 2 else ""))
    with st.expander(f"All {len(body_layers)} executed layers", expanded=False):
        st.dataframe(pd.DataFrame(_table(graph, sources, ops)), width="stretch", hide_index=True)
