"""Pan/zoom/click graph viewer: a static Streamlit custom component (no build, nothing fetched).

The SVG is laid out on the server (pygraphviz, :func:`fusionviz.graphview.render_svg`) and shown
by ``frontend/index.html``, which implements the component protocol by hand (componentReady,
setFrameHeight, setComponentValue; render events) with wheel zoom, drag pan, fit, and click.
Node elements carry ids made by :func:`fusionviz.graphview.element_id`, so a click maps back to
the ONNX node name without any table.

Use::

    clicked = graph_viewer(svg, key="after")          # node name, or "scope:<path>" for a box
    clicked = show_graph(rendered, key="after")       # same, with st.graphviz_chart fallback
"""

from __future__ import annotations

import logging
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

from fusionviz import errors

logger = logging.getLogger(__name__)

#: Prefix of the value returned when a collapsed scope box is clicked.
SCOPE_PREFIX = "scope:"

_FRONTEND = Path(__file__).resolve().parent / "frontend"
_component = components.declare_component("fusionviz_graph_viewer", path=str(_FRONTEND))


def graph_click(svg: str, *, key: str, height: int = 700, selected: str | None = None
                ) -> tuple[str, str] | None:
    """Show ``svg``; return ("node", node_name) or ("scope", path) for the last click, else None.

    Args:
        svg: SVG text from ``render_svg``.
        key: Streamlit widget key (one per viewer on a page).
        height: viewer height in pixels.
        selected: a node name to outline as selected.
    """
    from fusionviz.graphview import NODE_ID_PREFIX, element_id

    sel_id = element_id(NODE_ID_PREFIX, selected) if selected else None
    value = _component(svg=svg, height=int(height), selected_id=sel_id, key=key, default=None)
    if not isinstance(value, dict):
        return None
    kind, name = value.get("kind"), value.get("key")
    if kind not in ("node", "scope") or not isinstance(name, str):
        return None
    return kind, name


def graph_viewer(svg: str, *, key: str, height: int = 700, selected: str | None = None) -> str | None:
    """Show ``svg`` with pan/zoom; return the clicked node's ONNX name.

    A click on a collapsed scope box returns ``"scope:" + path`` (pass the path in
    ``RenderOptions.expanded`` to open it).
    """
    hit = graph_click(svg, key=key, height=height, selected=selected)
    if hit is None:
        return None
    kind, name = hit
    return name if kind == "node" else SCOPE_PREFIX + name


@st.cache_data(show_spinner=False, max_entries=16)
def cached_svg(dot: str) -> str:
    """``render_svg`` cached per DOT text (layout is the slow part)."""
    from fusionviz.graphview import render_svg

    return render_svg(dot)


def show_graph(rendered, *, key: str, height: int = 700, selected: str | None = None) -> str | None:
    """Draw a :class:`fusionviz.graphview.Rendered`: the pan/zoom viewer when SVG can be made,
    else ``st.graphviz_chart`` (layout in the browser; no zoom, no click, returns None)."""
    if rendered.note:
        st.caption(rendered.note)
    try:
        svg = cached_svg(rendered.dot)
    except errors.RenderError as exc:
        logger.info("SVG unavailable, falling back to st.graphviz_chart: %s", exc)
        st.graphviz_chart(rendered.dot, use_container_width=True)
        return None
    return graph_viewer(svg, key=key, height=height, selected=selected)
