"""A near miss on the Passes page opens the Graph page with the blocking node marked and the reason shown.

The model is Megatron's tanh GELU, ``tanh(√(2/π)·x·(1 + 0.044715·x·x))`` (``fuse_gelu`` matches
it from the output down to the factored product), opened by path on a server of its own;
screenshots go to ``artifacts/screens/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from conftest import assert_clean, fresh_server, screenshot, wait_idle
from test_graph_daily import pane

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.passes import nearmiss_models  # noqa: E402

pytestmark = pytest.mark.e2e

NODE_TEXT_JS = """
(id) => { const g = document.getElementById(id); return g ? g.textContent : null; }
"""
OUTLINE_JS = """
(id) => { const g = document.getElementById(id); if (!g) return null;
          const p = g.querySelector('path, polygon'); return p ? p.getAttribute('stroke') : null; }
"""


def test_near_miss_opens_the_graph_with_the_blocker_marked(browser, tmp_path):
    model, expected = nearmiss_models.tanh_gelu_megatron()
    path = tmp_path / "gelu_megatron.onnx"
    onnx.save(model, path)
    with fresh_server("--model", str(path), name="nearmiss") as base:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(base + "/passes?passes=fuse_gelu")
            wait_idle(page, 180)
            head = page.locator('[data-testid="stExpander"] summary', has_text="near misses 1").first
            head.scroll_into_view_if_needed()
            head.click()
            reason = page.get_by_text("a computed value").first
            reason.wait_for()
            wait_idle(page)
            reason.scroll_into_view_if_needed()
            screenshot(page, "near_miss_passes_page")
            page.locator(".st-key-near_1_0 button").first.click()
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 180)
            assert "nearmiss=fuse_gelu%3A0" in page.url or "nearmiss=fuse_gelu:0" in page.url
            banner = page.locator('[data-testid="stAlert"]', has_text="Near miss of Fuse GELU").first
            banner.wait_for()
            assert expected["blocker"] in banner.inner_text()
            before = pane(page, "before")
            from fusionviz.graphview.dot import NEAR_MISS_BLOCKER, NODE_ID_PREFIX, element_id

            blocker_id = element_id(NODE_ID_PREFIX, expected["blocker"])
            text = before.evaluate(NODE_TEXT_JS, blocker_id)
            assert text is not None, "the blocking node is not drawn in the before pane"
            assert "near miss" in text and "computed" in text
            assert (before.evaluate(OUTLINE_JS, blocker_id) or "").lower() == NEAR_MISS_BLOCKER
            matched = before.evaluate(OUTLINE_JS, element_id(NODE_ID_PREFIX, "tanh"))
            assert matched is not None and matched.lower() != NEAR_MISS_BLOCKER
            assert_clean(page)
            screenshot(page, "near_miss_graph_page")
        finally:
            page.close()
