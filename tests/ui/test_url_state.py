"""The address says the whole state after every finished run (state rule 3), even when the
browser's rerun request carried an older address."""

from __future__ import annotations

from urllib import parse

import pytest
from streamlit.runtime.state.query_params import QueryParams
from streamlit.testing.v1 import AppTest
from ui_helpers import APP, TIMEOUT, page_path

from fusionviz.ui import state


@pytest.fixture
def sent(monkeypatch):
    """Every address the app sends to the browser, parsed, in order."""
    out: list[dict[str, list[str]]] = []
    original = QueryParams._send_query_param_msg

    def spy(self):
        out.append(parse.parse_qs(parse.urlencode(self._query_params, doseq=True), keep_blank_values=True))
        original(self)

    monkeypatch.setattr(QueryParams, "_send_query_param_msg", spy)
    return out


def _run(at, page: str, query: dict) -> AppTest:
    at.query_params = dict(query)
    at.run()
    at.query_params = dict(query)
    at.switch_page(page_path(page)).run()
    assert not at.exception, at.exception
    return at


def test_a_toggle_made_before_the_last_address_arrived_is_in_the_last_address(sent):
    link = {"sample": "textbook", "passes": "eliminate_identity"}
    at = _run(AppTest.from_file(APP, default_timeout=TIMEOUT), "passes", link)
    at.toggle(key="pass_eliminate_identity").set_value(False).run()  # off: the server writes passes=
    assert sent[-1]["passes"] == [""]
    # On again, before the browser got that address: the rerun request carries the older one,
    # which happens to say what the state now is. The last address sent must say it too.
    at.query_params = dict(link)
    at.toggle(key="pass_eliminate_identity").set_value(True).run()
    assert not at.exception
    assert at.session_state[state.PASSES] == ["eliminate_identity"]
    assert sent[-1]["passes"] == ["eliminate_identity"], sent[-1]


def test_an_older_focus_sent_back_by_the_browser_is_not_taken_as_news(sent):
    link = {"sample": "textbook", "passes": "eliminate_identity", "focus": "Conv_0"}
    at = _run(AppTest.from_file(APP, default_timeout=TIMEOUT), "graph", link)
    assert at.session_state[state.FOCUS] == "Conv_0"
    assert sent[-1]["focus"] == ["Conv_0"]
    at.session_state[state.FOCUS] = None  # "Whole graph", asked from the focused address
    at.query_params = dict(link)
    at.run()
    assert at.session_state[state.FOCUS] is None
    at.query_params = dict(link)  # the next rerun request, sent before that run's address arrived
    at.run()
    assert not at.exception
    assert at.session_state[state.FOCUS] is None
    assert "focus" not in sent[-1]


def test_a_link_restores_the_graph_options_pair_and_focus(sent):
    link = {"sample": "textbook", "passes": "eliminate_identity,fold_batchnorm", "compare": "step:1",
            "focus": "Conv_0", "g.collapse": "off", "g.changed_only": "on", "g.hops": "3",
            "g.expanded": ["block A.1", "block B.2"], "overlay": "memory"}
    at = _run(AppTest.from_file(APP, default_timeout=TIMEOUT), "graph", link)
    ss = at.session_state
    assert ss[state.COMPARE] == "step:1" and ss[state.FOCUS] == "Conv_0"
    opts = ss[state.GRAPH_OPTS]
    assert opts["collapse"] is False and opts["changed_only"] is True and opts["hops"] == 3
    assert opts["expanded"] == ["block A.1", "block B.2"] and opts["overlay"] == "memory"
    last = sent[-1]
    for key, value in link.items():
        assert last[key] == (value if isinstance(value, list) else [value]), key


def test_graph_options_encode_and_decode():
    for name, value in (("collapse", False), ("hops", 4), ("expanded", ["a/b", "block A.2"]), ("error", True),
                        ("overlay", "time")):
        assert state.decode_opt(name, state.encode_opt(value)) == value


def test_the_tour_step_link_carries_that_step_s_state(monkeypatch):
    import streamlit as st

    asked: list[dict] = []
    original = st.switch_page

    def spy(page, *, query_params=None, **kw):
        asked.append(dict(query_params or {}))
        return original(page, query_params=query_params, **kw)

    monkeypatch.setattr(st, "switch_page", spy)
    at = _run(AppTest.from_file(APP, default_timeout=TIMEOUT), "learn",
              {"sample": "textbook", "passes": "eliminate_identity"})
    at.button(key="tour_start").click().run()
    assert not at.exception, at.exception
    assert asked, "the tour did not switch pages"
    link = asked[-1]
    assert link.get("passes") == ",".join(at.session_state[state.PASSES])
    assert link.get("sample") == at.session_state[state.ORIGIN]["name"]
