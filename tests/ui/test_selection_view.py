"""Several nodes selected (ui.selection_view): shift-click in and out, the first node stays the
page's selection, the URL option, and a link's selection checked against the graph."""

from __future__ import annotations

import pytest
import streamlit as st

from fusionviz.ui import selection_view as sv
from fusionviz.ui import state


class _Page:
    """The Graph page's one-node selection, as ``graph_page._select`` keeps it."""

    def __init__(self) -> None:
        self.primary: tuple[str | None, str | None] = (None, None)

    def select(self, name, side) -> None:
        self.primary = (name, side) if name else (None, None)
        sv.clear()


class _Links:
    def __init__(self, keys: dict[str, set[str]]) -> None:
        self._keys = keys

    def has(self, side: str, key: str) -> bool:
        return key in self._keys.get(side, set())


@pytest.fixture
def session(monkeypatch):
    monkeypatch.setattr(st, "session_state", {state.GRAPH_OPTS: {"collapse": True}})
    return st.session_state


def test_shift_clicks_add_and_remove_and_the_first_stays_selected(session):
    page = _Page()
    sv.toggle("after", "a", page.primary, page.select)  # nothing selected: it becomes the selection
    assert page.primary == ("a", "after") and sv.items(page.primary) == [("after", "a")]
    assert "sel" not in session[state.GRAPH_OPTS]  # one node: nothing in the URL option
    sv.toggle("after", "b", page.primary, page.select)
    sv.toggle("before", "c", page.primary, page.select)
    assert sv.items(page.primary) == [("after", "a"), ("after", "b"), ("before", "c")]
    assert session[state.GRAPH_OPTS]["sel"] == ["after:a", "after:b", "before:c"]
    assert page.primary == ("a", "after")
    sv.toggle("after", "a", page.primary, page.select)  # the first out: the next one leads
    assert page.primary == ("b", "after") and sv.items(page.primary) == [("after", "b"), ("before", "c")]
    sv.toggle("before", "c", page.primary, page.select)  # down to one
    assert sv.items(page.primary) == [("after", "b")] and "sel" not in session[state.GRAPH_OPTS]
    sv.toggle("after", "b", page.primary, page.select)
    assert page.primary == (None, None) and sv.items(page.primary) == []


def test_a_plain_selection_clears_several(session):
    page = _Page()
    for key in ("a", "b"):
        sv.toggle("after", key, page.primary, page.select)
    page.select("z", "before")
    assert sv.items(page.primary) == [("before", "z")]


def test_a_link_restores_the_nodes_the_graph_has(session):
    page = _Page()
    session[state.GRAPH_OPTS]["sel"] = state.decode_opt("sel", ["after:a", "before:gone", "before:c:with:colons"])
    links = _Links({"after": {"a"}, "before": {"c:with:colons"}})
    sv.restore(links, page.primary, page.select)
    assert page.primary == ("a", "after")
    assert sv.items(page.primary) == [("after", "a"), ("before", "c:with:colons")]
    # a link whose nodes are all gone but one: that one is the selection
    session[state.GRAPH_OPTS]["sel"] = ["after:a", "before:gone"]
    page2 = _Page()
    sv.restore(links, page2.primary, page2.select)
    assert page2.primary == ("a", "after") and "sel" not in session[state.GRAPH_OPTS]


def test_marks_outline_every_selected_node_and_their_counterparts():
    class R:
        item_ids = {"a": "fv-n-a", "b": "fv-n-b", "x": "fv-n-x", "y": "fv-n-y"}

    class CP:
        def __init__(self, other_side, others):
            self.other_side, self.others = other_side, others

    class L:
        def counterpart(self, side, key):
            return {("after", "a"): CP("before", ["x"]), ("after", "b"): CP("before", ["y", "x"])}.get((side, key))

    def ids(r, keys):
        return [r.item_ids[k] for k in keys if k in r.item_ids]

    marks = {s: {"selected_id": None, "linked_ids": [], "match_ids": [], "changed_ids": []} for s in sv.SIDES}
    marks["after"]["selected_id"] = "fv-n-a"
    chosen = [("after", "a"), ("after", "b")]
    sv.add_marks(marks, {"before": R(), "after": R()}, L(), chosen, ids)
    assert marks["after"]["selected_ids"] == ["fv-n-b"]
    assert marks["before"]["linked_ids"] == ["fv-n-x", "fv-n-y"]
    assert sv.counterparts(L(), chosen) == {"before": ["x", "y"]}
