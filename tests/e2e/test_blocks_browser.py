"""Collapse by structure in Chromium (collapse rule 5): a Paddle OCR detector whose names carry no
scope is drawn as its repeated blocks in both panes, and opening a block in one pane opens it in
both. Screenshots go to ``artifacts/screens/``."""

from __future__ import annotations

from urllib import parse

import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle, wild_model
from test_graph_daily import pane

pytestmark = pytest.mark.e2e

BLOCKS_JS = "() => [...document.querySelectorAll('g.node')].map(g => g.id).filter(i => i.startsWith('fv-s-'))"
VISIBLE_JS = """() => [...document.querySelectorAll('g.node')].filter(g => g.id.startsWith('fv-s-')).filter(g => {
  const r = g.getBoundingClientRect();
  return r.width > 8 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight;
}).map(g => g.id)"""


def _blocks(page, side: str) -> set[str]:
    return {parse.unquote(i[len("fv-s-"):]) for i in pane(page, side).evaluate(BLOCKS_JS)}


def test_a_paddle_detector_collapses_into_blocks_that_open_in_both_panes(browser):
    with fresh_server("--model", wild_model("ppocr_v4_det"), name="blocks") as url:
        with app_page(browser) as page:
            page.goto(url + "/graph")
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 300)
            before, after = _blocks(page, "before"), _blocks(page, "after")
            assert len(before) >= 20 and len(after) >= 10, (before, after)
            visible = {parse.unquote(i[len("fv-s-"):]) for i in pane(page, "before").evaluate(VISIBLE_JS)}
            both = sorted(visible & after, key=lambda b: (len(b), b))
            assert both, (visible, after)
            screenshot(page, "blocks_ppocr_closed")
            target = both[0]
            eid = "fv-s-" + parse.quote(target, safe="")
            pane(page, "before").locator(f'g.node[id="{eid}"]').first.click()
            wait_idle(page, 300)
            page.wait_for_timeout(500)
            wait_idle(page, 300)
            assert target not in _blocks(page, "before") and target not in _blocks(page, "after")
            query = parse.parse_qs(parse.urlparse(page.url).query)
            assert target in query.get("g.expanded", []), page.url
            assert_clean(page)
            screenshot(page, "blocks_ppocr_one_open")
