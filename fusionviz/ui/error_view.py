"""Colour by error on the Graph page: where inside the graph the compared pair starts to differ.

Rules (the code points back to them):

1. Off by default. "Error per tensor" in the Graph page's overlay selector (``overlay_view``:
   kept with the graph options and in the URL, ``?overlay=error``) turns it on; only then is the
   per-tensor comparison run
   (:func:`fusionviz.compare.compare_models`, each chunk in the verification child), on the
   current inputs (the user's data when given, else the ``normal`` set), and kept per pair and
   inputs (``cache.compare``): a rerun, a focus or a search costs nothing.
2. The after pane's nodes are filled by the largest max rel error of their outputs on the heat
   scale :data:`fusionviz.compare.ERROR_SCALE` (``graphview.build`` rule 8); a node whose output
   has a NaN or Inf the before side does not is marked apart. Nodes with nothing to compare
   (absorbed, removed, not numeric) keep their colour.
3. A banner names the first tensor beyond tolerance with its node on both sides and offers to
   focus it ("Go to the first divergence"), or says that none is and where the largest error
   is; a line under it draws the scale as a legend.
4. Inside an If/Loop/Scan body nothing is coloured (bodies are compared through the node that
   holds them) and the banner says so; a pair that cannot run says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import onnx
import streamlit as st

from fusionviz.ui import cache, state

logger = logging.getLogger(__name__)

TITLE = "max rel"


def enabled() -> bool:
    """Rule 1: whether the overlay is on (the overlay selector says ``error``)."""
    from fusionviz.ui import overlay_view

    return overlay_view.current() == "error"


def current(loaded: Any, key: tuple, before: onnx.ModelProto, after: onnx.ModelProto, in_body: bool) -> Any:
    """The comparison of the pair (rule 1): a CompareResult, a sentence saying why there is
    none, or None when the overlay is off."""
    if not enabled():
        return None
    if in_body:
        return ("The error overlay compares the main graphs: a body is compared through the outputs of the node "
                "that holds it. Go back to the main graph to see the colours.")
    inputs = state.input_plan(loaded)
    if inputs.plan is None:
        return f"The error overlay needs inputs the model runs on: {inputs.error}"
    with st.spinner("Comparing every tensor of the two graphs in onnxruntime...", show_time=True):
        return cache.compare(key, inputs.key, before, after, inputs.plan)


def overlay(result: Any) -> dict:
    """Rule 2: the after pane's RenderOptions for ``result`` (empty when there is nothing to draw)."""
    from fusionviz.compare import ERROR_SCALE, CompareResult
    from fusionviz.graphview.overlays import error_overlay

    if not isinstance(result, CompareResult):
        return {}
    return error_overlay(result.node_values("b"), ERROR_SCALE).render_options()


def _legend_html() -> str:
    from fusionviz.compare import ERROR_SCALE
    from fusionviz.graphview import RenderOptions
    from fusionviz.graphview.build import value_legend

    entries = value_legend(RenderOptions(node_values=(("", 0.0),), value_scale=ERROR_SCALE, value_title=TITLE))
    parts = [f"<span class='fv-sw' style='background:{fill};border-color:{border}'></span>{title}"
             for title, fill, border in entries]
    return ("<div style='font-size:0.85rem;line-height:1.7;margin:0 0 0.5rem 0'>After pane, largest error per node: "
            + "".join(parts) + "</div>")


def banner(result: Any, on_focus: Callable[[str | None, str | None], None]) -> None:
    """Rules 3-4: the first divergence (with a button to focus it), or why nothing is coloured."""
    from fusionviz.compare import CompareResult

    if result is None:
        return
    if not isinstance(result, CompareResult):
        st.info(str(result), icon=":material/info:")
        return
    c = result.counts()
    first = result.first_divergence
    cols = st.columns([12, 2.4], vertical_alignment="center")
    runs = f" in {result.runs} runs" if result.runs > 1 else ""
    if first is not None:
        d = first.diff
        extra = f", {d.new_nonfinite} new NaN/Inf" if d.new_nonfinite else ""
        cols[0].warning(f"**First tensor beyond tolerance:** `{first.pair.name}` ({first.where('before', 'after')}): "
                        f"max rel {d.max_rel_diff:.2g}, max abs {d.max_abs_diff:.2g}{extra}. "
                        f"{c['beyond_tolerance']:,} of {c['compared']:,} compared tensors are beyond tolerance "
                        f"(input set '{result.input_set}'{runs}).", icon=":material/error:")
        side, node = ("after", first.pair.node_b) if first.pair.node_b else ("before", first.pair.node_a)
        cols[1].button("Go to the first divergence", key="graph_error_focus", on_click=on_focus, args=(node, side),
                       icon=":material/my_location:", width="stretch")
    else:
        largest = result.largest()
        where = f"; the largest max rel error is {largest.max_rel:.2g} at `{largest.pair.name}`" if largest else ""
        cols[0].success(f"**No tensor beyond tolerance:** {c['compared']:,} tensors compared on input set "
                        f"'{result.input_set}'{runs}{where}.", icon=":material/check_circle:")
    with cols[0]:
        st.markdown(_legend_html(), unsafe_allow_html=True, help=" ".join(result.notes) or None)
