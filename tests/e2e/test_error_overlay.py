"""Colour by error on the Graph page, in Chromium: the overlay selector's "Error per tensor" colours the after pane
by per-tensor error, the banner names the first divergence, and its button focuses that node.

The model is a small CNN quantized by ``int8_dynamic`` (its first Conv's output is already beyond
tolerance), opened by path on a server of its own; screenshots go to ``artifacts/screens/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from conftest import assert_clean, fresh_server, screenshot, wait_idle
from test_graph_daily import pane

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.test_compare import small_cnn  # noqa: E402

pytestmark = pytest.mark.e2e

FILL_JS = """
(id) => { const g = document.getElementById(id); if (!g) return null;
          const p = g.querySelector('path, polygon'); return p ? p.getAttribute('fill') : null; }
"""


def test_colour_by_error_marks_the_first_divergence(browser, tmp_path):
    from fusionviz.compare import ERROR_SCALE, compare_models
    from fusionviz.graphview.build import value_fill
    from fusionviz.graphview.dot import NODE_ID_PREFIX, element_id
    from fusionviz.passes import run_pipeline

    model = small_cnn()
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    r = run_pipeline(model, ["int8_dynamic"])
    first = compare_models(r.original, r.final).first_divergence
    with fresh_server("--model", str(path), name="error_overlay") as base:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(base + "/graph?passes=int8_dynamic")
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 180)
            page.locator(".st-key-graph_overlay").first.click()
            page.get_by_role("option", name="Error per tensor").first.click()
            banner = page.locator('[data-testid="stAlert"]', has_text="First tensor beyond tolerance").first
            banner.wait_for(timeout=180_000)
            wait_idle(page, 180)
            assert f"{first.pair.name}" in banner.inner_text() and "conv1" in banner.inner_text()
            after = pane(page, "after")
            fill = after.evaluate(FILL_JS, element_id(NODE_ID_PREFIX, first.pair.node_b))
            assert fill is not None, "the first divergence's node is not drawn in the after pane"
            assert fill.lower() == value_fill(first.max_rel, ERROR_SCALE).lower()
            assert_clean(page)
            screenshot(page, "error_overlay_graph_page")
            page.get_by_role("button", name="Go to the first divergence").first.click()
            wait_idle(page, 180)
            page.wait_for_url(lambda url: "focus=" in url)
            assert first.pair.node_b.replace("/", "%2F") in page.url or first.pair.node_b in page.url
            screenshot(page, "error_overlay_focused")
        finally:
            page.close()
