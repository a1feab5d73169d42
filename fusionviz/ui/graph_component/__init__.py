"""Pan/zoom/click graph viewer: a static Streamlit custom component (no build, nothing fetched).

The SVG is laid out on the server (pygraphviz, :func:`fusionviz.graphview.render_svg`; big graphs
by parts) and shown by ``frontend/index.html``, which implements the component protocol by hand
(componentReady, setFrameHeight, setComponentValue; render events). The frontend's docstring
numbers its rules: a camera applied as one CSS transform per frame; a readable first view (the
top of the drawing at 1 px per point); fit and fit width; wheel steps of 15%; a minimap; keys
(``/`` search, ``f`` fit, ``w`` fit width, n/p or arrows through the changed nodes); marks for the
selection, its counterpart and search matches (``MARKS``); and sync: viewers given the same
``sync`` group (the Graph page's two panes) find each other through the parent window and zoom and
pan together, matching nodes by element id, until the person unlinks them. Node elements carry ids
made by :func:`fusionviz.graphview.element_id`, so a click maps back to the ONNX node name without
any table, and the same node has the same id in both panes.

Use::

    clicked = graph_viewer(svg, key="after")          # node name, or "scope:<path>" for a box
    hit = graph_click(svg, key="after")               # ("node", name) / ("scope", path) / None
    click = graph_pane(svg, key="after", linked_ids=[...], match_ids=[...], sync="graph")  # Click with a nonce
    svg = svg_for(dot)                                # laid out once per DOT text (LRU)
    first = first_svg_for(dot)                        # big drawings: the first screen, at once
    packed = packed_svg_for(dot)                      # the same, gzip + base64, for big drawings
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import gzip
import hashlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

from fusionviz import errors

logger = logging.getLogger(__name__)

#: Prefix of the value returned when a collapsed scope box is clicked.
SCOPE_PREFIX = "scope:"

#: Outline colours of the viewer's marks: apart from each other, from the change colours
#: (``graphview.dot.STATUS_STYLE``), the near-miss outlines (violet, pink) and the error heat scale
#: with its NaN fill (CIE ΔE ≥ 30 from each; ``tests/e2e/test_graph_viewer.py``). The selected
#: node and what it stands for in the other pane share the selection colour (the latter dashed).
MARKS = {"selected": "#2563eb", "match": "#0891b2"}
#: Legend titles of the marks.
MARK_TITLES = {"selected": "selected", "linked": "its counterpart (dashed)", "match": "search match"}

_FRONTEND = Path(__file__).resolve().parent / "frontend"
_component = components.declare_component("fusionviz_graph_viewer", path=str(_FRONTEND))


@dataclasses.dataclass(frozen=True)
class Click:
    """The last click in one viewer.

    Attributes:
        kind: "node" or "scope".
        key: the node key or scope path.
        token: changes with every click (a per-page-load nonce and a counter), so a new click can
            be told from the value Streamlit hands back again on later runs.
    """

    kind: str
    key: str
    token: str


def graph_pane(svg: str | None, *, key: str, height: int = 700, selected_id: str | None = None,
               linked_ids: Sequence[str] = (), match_ids: Sequence[str] = (), pane: str = "",
               pane_label: str = "", reveal: str | None = None, packed: str | None = None,
               centre: bool = False, changed_ids: Sequence[str] = (), sync: str = "",
               search_key: str = "", selected_ids: Sequence[str] = ()) -> Click | None:
    """Show ``svg`` with marks; return the last click (None before the first).

    Args:
        svg: SVG text from ``render_svg`` (None when ``packed`` is given).
        key: Streamlit widget key (one per viewer on a page).
        height: viewer height in pixels.
        selected_id: element id to outline as selected (``MARKS["selected"]``).
        linked_ids: element ids linked to a selection in another viewer (the same colour, dashed).
        match_ids: element ids matching a search (``MARKS["match"]``).
        pane: a name for the viewer, set on its ``<body data-pane>`` (tests, benchmarks, sync).
        pane_label: a small label drawn in the viewer's bottom-left corner.
        reveal: a token; when it changes, the viewer pans to the linked nodes (else the selection,
            else the matches) unless they are in view already.
        packed: the SVG gzip-compressed and base64-encoded (:func:`packed_svg_for`): a big drawing
            travels to the browser in a tenth of the bytes and is unpacked there.
        centre: with a new ``reveal`` token, centre the target at a readable zoom even when it is in
            view (a search: the match centred in every pane).
        changed_ids: element ids of the changed nodes in model order; the arrow keys and n/p step
            through them.
        sync: a group name; viewers of one page with the same group zoom and pan together (they
            match nodes by element id) until the person unlinks them. "" moves alone.
        search_key: the widget key of the page's search box, which "/" focuses.
        selected_ids: more selected element ids (several nodes selected: outlined as the
            selection). A shift-, ctrl- or cmd-click reports ``add: true`` in the value.
    """
    value = _component(svg=None if packed else svg, svgz=packed, height=int(height), selected_id=selected_id,
                       linked_ids=list(linked_ids), match_ids=list(match_ids), pane=pane,
                       pane_label=pane_label, reveal=reveal, centre=bool(centre),
                       changed_ids=list(changed_ids), sync=sync, search_key=search_key,
                       selected_ids=list(selected_ids),
                       colours=dict(MARKS), key=key, default=None)
    if not isinstance(value, dict):
        return None
    kind, name = value.get("kind"), value.get("key")
    if kind not in ("node", "scope") or not isinstance(name, str):
        return None
    return Click(kind, name, f"{value.get('sid', '')}:{value.get('n', 0)}")


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
    hit = graph_pane(svg, key=key, height=height, selected_id=sel_id)
    return None if hit is None else (hit.kind, hit.key)


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


class _SvgCache:
    """SVG per DOT text, least recently used out first, bounded by total size.

    A rerun with an unchanged view (a click, a search) never lays the graph out again; two
    sessions asking for the same DOT at once share one layout. Plain Python (no st.cache_*): it
    also serves download callables, which run outside the script thread.
    """

    def __init__(self, max_bytes: int = 96 * 2**20, max_entries: int = 48) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._data: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._packed: dict[str, str] = {}
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {}

    @staticmethod
    def key(dot: str) -> str:
        return hashlib.sha1(dot.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, dot: str) -> str:
        from fusionviz.graphview import render_svg

        k = self.key(dot)
        with self._lock:
            if k in self._data:
                self._data.move_to_end(k)
                return self._data[k]
            busy = self._busy.setdefault(k, threading.Lock())
        with busy:
            with self._lock:
                if k in self._data:
                    return self._data[k]
            try:
                svg = render_svg(dot)
            finally:
                with self._lock:
                    self._busy.pop(k, None)
            with self._lock:
                self._data[k] = svg
                total = sum(len(v) for v in self._data.values()) + sum(len(v) for v in self._packed.values())
                while len(self._data) > 1 and (total > self.max_bytes or len(self._data) > self.max_entries):
                    old_key, old = self._data.popitem(last=False)
                    total -= len(old) + len(self._packed.pop(old_key, ""))
            return svg

    def packed(self, dot: str) -> str:
        svg = self.get(dot)
        k = self.key(dot)
        with self._lock:
            got = self._packed.get(k)
        if got is None:
            got = base64.b64encode(gzip.compress(svg.encode("utf-8"), compresslevel=3, mtime=0)).decode("ascii")
            with self._lock:
                if k in self._data:
                    self._packed[k] = got
        return got

    def has(self, dot: str) -> bool:
        with self._lock:
            return self.key(dot) in self._data


_SVGS = _SvgCache()


def svg_for(dot: str) -> str:
    """SVG for ``dot``, laid out once (big graphs by parts) and kept in a bounded LRU."""
    return _SVGS.get(dot)


def packed_svg_for(dot: str) -> str:
    """:func:`svg_for`, gzip-compressed and base64-encoded (kept beside the SVG)."""
    return _SVGS.packed(dot)


_FIRST: collections.OrderedDict[str, str | None] = collections.OrderedDict()
_FIRST_LOCK = threading.Lock()


def first_svg_for(dot: str) -> str | None:
    """The first screen of a big drawing (``render_svg_first``), kept for the last few DOT texts;
    None when the graph is drawn whole at once."""
    from fusionviz.graphview.svg import render_svg_first

    k = _SvgCache.key(dot)
    with _FIRST_LOCK:
        if k in _FIRST:
            _FIRST.move_to_end(k)
            return _FIRST[k]
    got = render_svg_first(dot)
    with _FIRST_LOCK:
        _FIRST[k] = got
        while len(_FIRST) > 16:
            _FIRST.popitem(last=False)
    return got


def svg_cached(dot: str) -> bool:
    """True when :func:`svg_for` would not lay ``dot`` out again."""
    return _SVGS.has(dot)


@st.cache_data(show_spinner=False, max_entries=16)
def cached_svg(dot: str) -> str:
    """``render_svg`` cached per DOT text (layout is the slow part)."""
    return svg_for(dot)


def show_graph(rendered, *, key: str, height: int = 700, selected: str | None = None) -> str | None:
    """Draw a :class:`fusionviz.graphview.Rendered`: the pan/zoom viewer when SVG can be made,
    else ``st.graphviz_chart`` (layout in the browser; no zoom, no click, returns None)."""
    if rendered.note:
        st.caption(rendered.note)
    try:
        svg = svg_for(rendered.dot)
    except errors.RenderError as exc:
        logger.info("SVG unavailable, falling back to st.graphviz_chart: %s", exc)
        st.graphviz_chart(rendered.dot, use_container_width=True)
        return None
    return graph_viewer(svg, key=key, height=height, selected=selected)
