"""Pieces every page uses: the error guard, the sidebar, the current pipeline, drawing a graph.

Rules:

1. A page body runs inside :func:`page`: a ``FusionvizError`` becomes ``st.error(one line)``,
   anything else becomes a short error line while the traceback goes to the server log.
   Streamlit's own control flow (rerun, stop, switch_page) is a ``BaseException`` and passes.
2. The graph is drawn by the pan/zoom component when it is there and works; otherwise by
   ``st.graphviz_chart`` (the browser lays the DOT out). Either way the page keeps working.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager

import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, state

logger = logging.getLogger(__name__)

PAGES = {
    "model": "fusionviz/ui/model_page.py",
    "graph": "fusionviz/ui/graph_page.py",
    "passes": "fusionviz/ui/passes_page.py",
    "bench": "fusionviz/ui/bench_page.py",
    "learn": "fusionviz/ui/learn_page.py",
}

# (label, fill, border): the same colours graphview draws (graphview.dot.STATUS_STYLE).
LEGEND = (
    ("fused / new", "#b7efc5", "#1b873f"),
    ("removed", "#ffc9c9", "#c62828"),
    ("changed", "#ffe2a8", "#d97706"),
    ("unchanged (colour = op family)", "#ffffff", "#7a7a7a"),
)


@contextmanager
def guard(what: str):
    """Rule 1 as a context manager; ``what`` names the step in the generic message."""
    try:
        yield
    except errors.FusionvizError as exc:
        st.error(str(exc))
    except ImportError as exc:
        logger.exception("missing module while %s", what)
        st.error(f"This part of fusionviz is not available ({exc.name or exc}); the rest of the app works.")
    except Exception:  # noqa: BLE001 - never a traceback in the page
        logger.exception("error while %s", what)
        st.error(f"Something went wrong while {what}; the details are in the server log.")


def page(title: str, body: Callable[[], None]) -> None:
    """Draw the sidebar and the page body under the error guard (rule 1)."""
    state.init()
    cache.page_run_started()
    try:
        _page(title, body)
    finally:
        cache.page_run_finished()


def _page(title: str, body: Callable[[], None]) -> None:
    with guard("drawing the sidebar"):
        sidebar()
    if st.session_state.get(state.LOAD_ERROR):
        st.error(st.session_state[state.LOAD_ERROR])
    msg = st.session_state.get(state.MESSAGE)
    if msg:
        st.info(msg)
        st.session_state[state.MESSAGE] = None
    with guard(f"drawing the {title} page"):
        body()
    state.sync_query_params()


def switch(name: str) -> None:
    """Go to page ``name`` (a key of PAGES)."""
    st.switch_page(PAGES[name])


def sidebar() -> None:
    """Current model and pass count on every page, plus the guided tour's controls when on."""
    loaded = state.model()
    with st.sidebar:
        if loaded is not None:
            st.caption("Model")
            st.markdown(f"**{loaded.name}**  \n`{loaded.short_hash}` · {fmt_bytes(loaded.size_bytes)}")
            n = len(state.passes())
            st.caption(f"{n} pass{'es' if n != 1 else ''} selected")
        else:
            st.caption("No model loaded: pick one on the Model page.")
        if st.session_state.get(state.TOUR) is not None:
            from fusionviz.ui import learn_page

            learn_page.tour_sidebar()


def require_model():
    """The current model, or an info box and ``st.stop()`` when there is none."""
    loaded = state.model()
    if loaded is None:
        st.info("No model loaded yet: choose a sample or upload an .onnx file on the Model page.")
        if st.button("Go to the Model page", key="goto_model"):
            switch("model")
        st.stop()
    return loaded


def current_pipeline(progress: bool = True):
    """The cached pipeline result for the current model, passes and shapes."""
    loaded = state.model()
    names = state.passes()
    if progress:
        with st.spinner(f"Running {len(names)} passes..."):
            return cache.run(loaded, names, state.shapes_key())
    return cache.run(loaded, names, state.shapes_key())


def pipeline_key(loaded, names) -> tuple:
    """Cache key of a pipeline: model hash, pass tuple and shapes."""
    return (loaded.sha256, tuple(names), state.shapes_key())


def legend(counts: dict | None = None) -> None:
    """The diff colour legend, with counts when given."""
    keys = {"fused / new": ("fused", "added"), "removed": ("removed",), "changed": ("changed",),
            "unchanged (colour = op family)": ("unchanged",)}
    parts = []
    for label, fill, border in LEGEND:
        n = ""
        if counts:
            n = f" <b>{sum(int(counts.get(k, 0)) for k in keys[label])}</b>"
        parts.append(
            f"<span style='display:inline-block;width:1.1em;height:0.8em;background:{fill};"
            f"border:2px solid {border};border-radius:3px;margin:0 0.35em 0 1em;"
            f"vertical-align:middle'></span>{label}{n}"
        )
    st.markdown("<div style='font-size:0.9em'>" + "".join(parts) + "</div>", unsafe_allow_html=True)


def render_options(**overrides) -> tuple:
    """Hashable RenderOptions kwargs from the persistent graph options plus ``overrides``."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    d = {
        "collapse": bool(opts.get("collapse", True)),
        "focus": st.session_state.get(state.FOCUS),
        "hops": int(opts.get("hops", 2)),
        "changed_only": bool(opts.get("changed_only", False)),
        "max_nodes": 400,
        "legend": False,
        "expanded": tuple(opts.get("expanded", ())),
    }
    d.update(overrides)
    return tuple(sorted(d.items()))


def show_graph(rendered, *, key: str, height: int = 620) -> tuple[str, str] | None:
    """Rule 2: draw ``rendered`` (a graphview Rendered).

    Returns:
        ("node", node name) or ("scope", scope path) for the last click in the pan/zoom viewer,
        else None (also always None with the ``st.graphviz_chart`` fallback, which has no clicks).
    """
    if getattr(rendered, "note", ""):
        st.caption(rendered.note)
    try:
        from fusionviz.ui.graph_component import graph_click

        svg = cache.svg(rendered.dot)
    except ImportError:
        logger.info("graph component missing; drawing with st.graphviz_chart")
    except errors.FusionvizError as exc:
        logger.info("server-side layout failed, drawing in the browser: %s", exc)
    except Exception:  # noqa: BLE001 - fall back to the browser renderer
        logger.exception("server-side layout failed; falling back to st.graphviz_chart")
    else:
        try:
            return graph_click(svg, key=key, height=height, selected=st.session_state.get(state.SELECTED))
        except Exception:  # noqa: BLE001 - fall back to the browser renderer
            logger.exception("graph component failed; falling back to st.graphviz_chart")
    st.graphviz_chart(rendered.dot, width="stretch")
    return None


def toggle_scope(path: str) -> None:
    """Open a collapsed block (or close an open one)."""
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    expanded = list(opts.get("expanded", ()))
    if path in expanded:
        expanded.remove(path)
    else:
        expanded.append(path)
    opts["expanded"] = expanded
    st.session_state[state.GRAPH_OPTS] = opts


def fmt_bytes(n: float | int | None) -> str:
    """Human-readable bytes (KB/MB/GB, powers of 1024)."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def fmt_count(n: float | int | None) -> str:
    """Compact count: 1.2 k, 3.4 M, 5.6 G."""
    if n is None:
        return "-"
    n = float(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f}"
