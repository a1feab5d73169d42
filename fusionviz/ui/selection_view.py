"""Several nodes selected at once on the Graph page.

Rules (the code points back to them):

1. A shift-, ctrl- or cmd-click on a node in either pane adds it to the selection, or takes it
   out when it is in already; a plain click, a search pick or a focus selects one node again.
   The first node selected stays the page's selection (its counterpart, its card); the others
   are added to it. Nodes of both sides can be selected together.
2. Every selected node is outlined in its pane, and what stands for each in the other pane is
   outlined there dashed (``graphview.Links``), as for one node.
3. The side panel lists a selection of several as one compact table (``graphview.panel``
   rule 7: op, name, change class, each computed overlay's value, and per side the totals of
   time and bytes written), then the counterparts in the other pane with their totals.
4. A selection of several is in the URL, once per node as ``g.sel=SIDE:NODE`` (a Graph option:
   ``state`` rule 3 writes and reads it); a link opens with the same nodes selected. A node the
   graph does not have (another body, another pair) is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from fusionviz.ui import state

OPT = "sel"  # the Graph option (and ``g.sel`` in the URL) holding a selection of several
SIDES = ("before", "after")


def _encode(side: str, key: str) -> str:
    return f"{side}:{key}"


def _decode(text: str) -> tuple[str, str] | None:
    side, _, key = str(text).partition(":")
    return (side, key) if side in SIDES and key else None


def _stored() -> list[tuple[str, str]]:
    raw = (st.session_state.get(state.GRAPH_OPTS) or {}).get(OPT) or []
    if isinstance(raw, str):
        raw = [raw]
    out = []
    for t in raw:
        got = _decode(t)
        if got and got not in out:
            out.append(got)
    return out


def _write(items: Sequence[tuple[str, str]]) -> None:
    opts = dict(st.session_state.get(state.GRAPH_OPTS) or {})
    if len(items) >= 2:
        opts[OPT] = [_encode(s, k) for s, k in items]
    else:
        opts.pop(OPT, None)
    st.session_state[state.GRAPH_OPTS] = opts


def clear() -> None:
    """Rule 1: back to one node (or none)."""
    if (st.session_state.get(state.GRAPH_OPTS) or {}).get(OPT):
        _write([])


def items(primary: tuple[str | None, str | None]) -> list[tuple[str, str]]:
    """(side, key) of every selected node, the page's selection first; one or none when a single
    node is selected or none. ``primary`` is the page's (node, side)."""
    name, side = primary
    got = _stored()
    if len(got) >= 2:
        return got
    return [(side, name)] if name and side else []


def toggle(side: str, key: str, primary: tuple[str | None, str | None],
           select: Callable[[str | None, str | None], None]) -> None:
    """Rule 1: a shift-click on ``key`` of ``side``: in or out of the selection. ``select`` is the
    page's one-node selection (it clears a selection of several), called when the first node
    changes."""
    now = items(primary)
    item = (side, key)
    now = [i for i in now if i != item] if item in now else [*now, item]
    first = now[0] if now else (None, None)
    if first[::-1] != tuple(primary) or len(now) < 2:
        select(first[1], first[0])
    _write(now)


def restore(links: Any, primary: tuple[str | None, str | None],
            select: Callable[[str | None, str | None], None]) -> None:
    """Rule 4: drop selected nodes the graph does not have; a selection of several read from a
    link makes its first node the page's selection."""
    got = _stored()
    if not got:
        return
    kept = [(s, k) for s, k in got if links.has(s, k)]
    if len(kept) < 2:
        _write([])
        if kept and kept[0][::-1] != tuple(primary):
            select(kept[0][1], kept[0][0])
        return
    if kept[0][::-1] != tuple(primary):
        select(kept[0][1], kept[0][0])  # clears the option: written back below
    _write(kept)


def add_marks(marks: dict[str, dict], rendered: dict, links: Any, chosen: Sequence[tuple[str, str]],
              ids: Callable[[Any, Sequence[str]], list[str]]) -> None:
    """Rule 2: outline every selected node in its pane (``selected_ids``) and what stands for
    each in the other pane (added to ``linked_ids``). ``ids`` maps keys to element ids."""
    if len(chosen) < 2:
        return
    for side in SIDES:
        r = rendered.get(side)
        if r is None:
            continue
        mine = [k for s, k in chosen if s == side]
        other = "before" if side == "after" else "after"
        linked: list[str] = []
        for s, k in chosen:
            if s == other:
                cp = links.counterpart(s, k)
                linked.extend(cp.others if cp is not None else ())
        primary = marks[side].get("selected_id")
        marks[side]["selected_ids"] = [i for i in ids(r, mine) if i != primary]
        marks[side]["linked_ids"] = list(dict.fromkeys([*marks[side]["linked_ids"], *ids(r, linked)]))


def counterparts(links: Any, chosen: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Rule 3: other side -> the nodes standing for the selected nodes of a side, in order, each
    once (selected nodes themselves left out)."""
    out: dict[str, list[str]] = {}
    picked = set(chosen)
    for s, k in chosen:
        cp = links.counterpart(s, k)
        if cp is None:
            continue
        for o in cp.others:
            if (cp.other_side, o) not in picked and o not in out.setdefault(cp.other_side, []):
                out[cp.other_side].append(o)
    return out
