"""SVG from DOT in-process with pygraphviz (its wheel bundles Graphviz; no ``dot`` binary needed).

Rules:

1. No renderer → :class:`~fusionviz.errors.RenderError` with a sentence saying what to install;
   the UI then falls back to ``st.graphviz_chart`` (layout in the browser).
2. Graphviz's own warnings (e.g. a label it had to squeeze) are logged, never printed.
3. The SVG is checked for markup that must never come out of a graph drawing (``<script``,
   ``javascript:``, ``on*=`` handlers); the DOT writer escapes every label, so finding one is a bug
   and raises rather than passing it on to a browser.
4. Big graphs (more than ``parts.SPLIT_ABOVE`` op nodes, DOT written by ``render_graph``) are laid
   out by parts and stacked (:mod:`fusionviz.graphview.parts`); ``parts=False`` lays out in one
   piece whatever the size.
5. A node's ``<title>`` (the browser's tooltip) is its ONNX name, or the block's scope path, read
   back from the element id; the DOT carries no tooltip, so Graphviz writes no ``<a>`` wrapper per
   node (thousands of elements fewer for the browser on a big graph).
6. The text is compacted without changing the picture: the font family every label repeats is
   said once on the root element, and ``text-anchor="start"`` (the default) is dropped (a
   3,000-node drawing: about 12% fewer bytes to send and parse).
7. The root element says which DOT text it draws (``data-source``, a digest), so a viewer that
   shows a first screen (:func:`render_svg_first`) knows the whole drawing when it comes.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import urllib.parse
import warnings

from fusionviz import errors

logger = logging.getLogger(__name__)

_FORBIDDEN = re.compile(r"<script|javascript:|<foreignObject|\son[a-z]+\s*=", re.IGNORECASE)
_NODE_TITLE = re.compile(r'(<g id="(fv(?:-|&#45;)[ns](?:-|&#45;)[^"]*)" class="node">\n?<title>)[^<]*(</title>)')


def _title(m: re.Match) -> str:
    key = urllib.parse.unquote(html.unescape(m.group(2))[5:])
    return m.group(1) + html.escape(key, quote=False) + m.group(3)


def name_titles(svg: str) -> str:
    """Rule 5: every op node's and block's ``<title>`` says its name."""
    return _NODE_TITLE.sub(_title, svg)


_FAMILY = re.compile(r' font-family="([^"]*)"')
_SVG_TAG = re.compile(r"<svg\b")


def compact(svg: str) -> str:
    """Rule 6: the same drawing in fewer bytes."""
    families = _FAMILY.findall(svg)
    if families:
        common = max(set(families), key=families.count)
        attr = f' font-family="{common}"'
        m = _SVG_TAG.search(svg)
        if m:
            svg = svg.replace(attr, "")
            svg = svg[:m.end()] + attr + svg[m.end():]
    return svg.replace(' text-anchor="start"', "")


def svg_available() -> bool:
    """True when pygraphviz (with its bundled Graphviz) can be imported."""
    try:
        import pygraphviz  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install counts as unavailable
        return False
    return True


def render_svg(dot: str, *, prog: str = "dot", parts: bool = True) -> str:
    """Lay out ``dot`` and return SVG text (rules 1-4).

    Args:
        dot: DOT text (from :func:`fusionviz.graphview.render_graph`).
        prog: Graphviz layout program.
        parts: lay big graphs out by parts (rule 4).

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
    from fusionviz.graphview import parts as P

    parsed = P.parse_dot(dot) if parts else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if parsed is not None and parsed.op_count > P.SPLIT_ABOVE:  # rule 4
                data = P.svg_by_parts(parsed, prog=prog)
            else:
                graph = pygraphviz.AGraph(string=dot)
                data = graph.draw(format="svg", prog=prog)
        except Exception as exc:  # noqa: BLE001 - graphviz reports problems as various errors
            raise errors.RenderError(f"Graphviz could not lay out the graph: {exc}") from None
    for w in caught:  # rule 2
        logger.info("graphviz: %s", str(w.message).strip()[:300])
    return _finish(data, dot)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def source_id(dot: str) -> str:
    """Rule 7: the id a drawing of ``dot`` carries (``data-source``)."""
    return hashlib.sha1(dot.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _finish(data: bytes | str, dot: str) -> str:
    """Rules 3, 5, 6 and 7 on a drawing of ``dot``."""
    text = compact(name_titles(data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)))
    # Control characters are not allowed in XML and must never reach a terminal or a browser raw.
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if _FORBIDDEN.search(text):  # rule 3
        raise errors.RenderError("The drawing contained markup that is not allowed; it was not shown.")
    m = _SVG_TAG.search(text)
    if m:
        text = text[:m.end()] + f' data-source="{source_id(dot)}"' + text[m.end():]
    return text


def render_svg_first(dot: str, *, prog: str = "dot") -> str | None:
    """The first screen of a big drawing (``parts.svg_first``: its first parts, stacked), or None
    when the graph is not laid out by parts or is small enough to lay out whole at once.

    Raises:
        RenderError: Graphviz could not lay the parts out.
    """
    from fusionviz.graphview import parts as P

    parsed = P.parse_dot(dot)
    if parsed is None or parsed.op_count <= P.SPLIT_ABOVE:
        return None
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            data = P.svg_first(parsed, prog=prog)
        except Exception as exc:  # noqa: BLE001 - graphviz reports problems as various errors
            raise errors.RenderError(f"Graphviz could not lay out the graph: {exc}") from None
    return None if data is None else _finish(data, dot)


def render_png(dot: str, *, prog: str = "dot", max_side: int = 16000, max_pixels: float = 64e6) -> bytes:
    """Lay out ``dot`` and return PNG bytes (Graphviz's own PNG renderer, in-process).

    Big graphs are laid out by parts like :func:`render_svg` and pasted together. The image is
    96 dpi, scaled down when it would be longer than ``max_side`` pixels or bigger than
    ``max_pixels`` (a 3,000-node graph is a very tall picture: the SVG export keeps every detail).

    Raises:
        RenderError: pygraphviz (or Pillow, for big graphs) is missing, or the layout failed.
    """
    try:
        import pygraphviz
    except Exception as exc:  # noqa: BLE001 - rule 1
        raise errors.RenderError(
            f"PNG needs the 'pygraphviz' package, which is not available here ({type(exc).__name__})."
        ) from None
    from fusionviz.graphview import parts as P

    parsed = P.parse_dot(dot)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if parsed is not None:
                data = P.png_by_parts(parsed, prog=prog, max_side=max_side, max_pixels=max_pixels,
                                      whole=parsed.op_count <= P.SPLIT_ABOVE)
            else:
                graph = pygraphviz.AGraph(string=dot)
                graph.layout(prog=prog)
                llx, lly, urx, ury = (float(v) for v in str(graph.graph_attr["bb"]).split(","))
                scale = P.png_scale(urx - llx, ury - lly, max_side=max_side, max_pixels=max_pixels)
                graph.graph_attr["dpi"] = f"{72 * scale:.3f}"
                data = graph.draw(format="png")
        except ImportError as exc:
            raise errors.RenderError(f"PNG needs {exc.name or 'a missing package'}; export SVG instead.") from None
        except Exception as exc:  # noqa: BLE001 - graphviz reports problems as various errors
            raise errors.RenderError(f"Graphviz could not draw the graph as PNG: {exc}") from None
    for w in caught:
        logger.info("graphviz: %s", str(w.message).strip()[:300])
    return bytes(data)
