"""SVG from DOT in-process with pygraphviz (its wheel bundles Graphviz; no ``dot`` binary needed).

Rules:

1. No renderer → :class:`~fusionviz.errors.RenderError` with a sentence saying what to install;
   the UI then falls back to ``st.graphviz_chart`` (layout in the browser).
2. Graphviz's own warnings (e.g. a label it had to squeeze) are logged, never printed.
3. The SVG is checked for markup that must never come out of a graph drawing (``<script``,
   ``javascript:``, ``on*=`` handlers); the DOT writer escapes every label, so finding one is a bug
   and raises rather than passing it on to a browser.
"""

from __future__ import annotations

import logging
import re
import warnings

from fusionviz import errors

logger = logging.getLogger(__name__)

_FORBIDDEN = re.compile(r"<script|javascript:|<foreignObject|\son[a-z]+\s*=", re.IGNORECASE)


def svg_available() -> bool:
    """True when pygraphviz (with its bundled Graphviz) can be imported."""
    try:
        import pygraphviz  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install counts as unavailable
        return False
    return True


def render_svg(dot: str, *, prog: str = "dot") -> str:
    """Lay out ``dot`` and return SVG text (rules 1-3).

    Args:
        dot: DOT text (from :func:`fusionviz.graphview.render_graph`).
        prog: Graphviz layout program.

    Raises:
        RenderError: pygraphviz is missing, or Graphviz could not lay the graph out.
    """
    try:
        import pygraphviz
    except Exception as exc:  # noqa: BLE001 - rule 1
        raise errors.RenderError(
            "SVG needs the 'pygraphviz' package (pip install pygraphviz), which is not available "
            f"here ({type(exc).__name__}); write .dot instead."
        ) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            graph = pygraphviz.AGraph(string=dot)
            data = graph.draw(format="svg", prog=prog)
        except Exception as exc:  # noqa: BLE001 - graphviz reports problems as various errors
            raise errors.RenderError(f"Graphviz could not lay out the graph: {exc}") from None
    for w in caught:  # rule 2
        logger.info("graphviz: %s", str(w.message).strip()[:300])
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
    if _FORBIDDEN.search(text):  # rule 3
        raise errors.RenderError("The drawing contained markup that is not allowed; it was not shown.")
    return text
