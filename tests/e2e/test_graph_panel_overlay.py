"""The Graph page's side panel and a per-node overlay, in Chromium at 1600×1000.

The side panel: clicking a fused node shows it beside the panes (right of them, level with
their top, not below), with its change class, what it absorbed, its tensors and weights, and the
nodes it came from on the other side. The overlay: "Time per node" in the bar fills both panes'
nodes from the time palette with its legend, is in the URL, and a link opened in a fresh browser
context shows the same overlay. Screenshots: artifacts/screens/panel_*.png and overlay_*.png.
"""

from __future__ import annotations

import pytest
from conftest import app_page, assert_clean, screenshot, wait_idle
from test_graph_daily import NODES_JS, open_graph, pane, params

from fusionviz.graphview.dot import TIME_FILLS

pytestmark = pytest.mark.e2e

FILLS_JS = """
() => [...document.querySelectorAll('g.node')].map(g => {
    const p = g.querySelector('path, polygon'); return p ? (p.getAttribute('fill') || '').toLowerCase() : ''; })
"""
PANEL = ".st-key-graph_panel"


def _rect(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def test_the_side_panel_shows_the_selected_node_beside_the_panes(server, page):
    open_graph(page, server + "/graph?sample=resnet_ts")
    panel = page.locator(PANEL).first
    assert "Click a node in either pane" in panel.inner_text()
    after = pane(page, "after")
    fused = next(n for n in after.evaluate(NODES_JS) if n["op"].startswith("FusedConv"))
    after.locator(f'g.node[id="{fused["id"]}"]').click()
    page.locator(PANEL, has_text="Absorbed").first.wait_for(timeout=120_000)
    wait_idle(page)
    text = panel.inner_text().lower()  # the section heads are drawn in capitals
    for word in ("FusedConv", "fused / new", "Absorbed 3 nodes", "Inputs", "Outputs", "Weights", "min ", "f32"):
        assert word.lower() in text, word
    assert "before: 3 nodes" in text and "batchnormalization" in text  # what it came from, other side
    frames = page.locator('iframe[title*="fusionviz_graph_viewer"]')
    right_pane = max((frames.nth(i).bounding_box() for i in range(frames.count())), key=lambda r: r["x"])
    box = _rect(page, PANEL)
    assert box["x"] >= right_pane["x"] + right_pane["width"] - 2, (box, right_pane)  # beside, on the right
    assert abs(box["y"] - right_pane["y"]) < 40 and box["y"] + 100 < 1000  # level with the panes, on screen
    assert box["width"] >= 260
    assert_clean(page)
    screenshot(page, "panel_fused_node")
    # The wheel over the panel scrolls the panel, not the page.
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, 600)
    page.wait_for_timeout(400)
    assert page.evaluate("() => window.scrollY") < 5
    screenshot(page, "panel_scrolled")


def test_time_overlay_colours_both_panes_and_lives_in_the_link(server, browser, page):
    open_graph(page, server + "/graph?sample=resnet_ts")
    page.locator(".st-key-graph_overlay").first.click()
    page.get_by_role("option", name="Time per node").first.click()
    legend = page.locator(".fv-ovl").first
    legend.wait_for(timeout=240_000)
    wait_idle(page, 240)
    assert "Time per node" in legend.inner_text() and "time > 10 ms" in legend.inner_text()
    assert params(page)["overlay"] == "time"
    palette = {f.lower() for f in TIME_FILLS}
    for side in ("before", "after"):
        fills = pane(page, side).evaluate(FILLS_JS)
        timed = [f for f in fills if f in palette]
        assert len(timed) >= 10, (side, len(timed), len(fills))
    # The panel shows the time of the node selected.
    after = pane(page, "after")
    fused = next(n for n in after.evaluate(NODES_JS) if n["op"].startswith("FusedConv"))
    after.locator(f'g.node[id="{fused["id"]}"]').click()
    page.locator(PANEL, has_text=" ms").first.wait_for(timeout=120_000)
    assert_clean(page)
    screenshot(page, "overlay_time")
    url = page.url
    with app_page(browser, 60_000) as fresh:
        open_graph(fresh, url)
        fresh.locator(".fv-ovl", has_text="Time per node").first.wait_for(timeout=240_000)
        wait_idle(fresh, 240)
        shown = fresh.locator(".st-key-graph_overlay").first.evaluate(
            "el => [...el.querySelectorAll('input')].map(i => i.value).join(' ') + ' ' + el.innerText")
        assert "Time per node" in shown, shown
        fills = pane(fresh, "after").evaluate(FILLS_JS)
        assert len([f for f in fills if f in palette]) >= 10
        screenshot(fresh, "overlay_time_link")


def test_memory_overlay_from_a_link_colours_both_panes(server, page):
    from fusionviz.graphview.dot import MEMORY_FILLS

    open_graph(page, server + "/graph?sample=resnet_ts&overlay=memory")
    legend = page.locator(".fv-ovl", has_text="Memory written").first
    legend.wait_for(timeout=240_000)
    wait_idle(page, 240)
    assert "writes ≤ 16 KB" in legend.inner_text() and "writes > 4 MB" in legend.inner_text()
    palette = {f.lower() for f in MEMORY_FILLS}
    for side in ("before", "after"):
        fills = pane(page, side).evaluate(FILLS_JS)
        assert len([f for f in fills if f in palette]) >= 10, side
    # nodes onnxruntime fused into NCHWc kernels are sized too (from the profile)
    after_text = pane(page, "after").evaluate("() => document.body.innerText")
    assert "writes " in after_text and " KB" in after_text
    assert_clean(page)
    screenshot(page, "overlay_memory")


def test_model_explorer_download_follows_the_schema(server, page):
    import io
    import json
    import sys
    import zipfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graphview"))
    from test_model_explorer import validate_graphs, validate_node_data

    open_graph(page, server + "/graph?sample=resnet_ts&overlay=memory")
    page.locator(".fv-ovl", has_text="Memory written").first.wait_for(timeout=240_000)
    wait_idle(page, 240)
    page.get_by_role("button", name="Export").first.click()
    btn = page.locator(".st-key-graph_export_me button").first
    btn.wait_for()
    with page.expect_download(timeout=120_000) as info:
        btn.click()
    with open(info.value.path(), "rb") as f:
        z = zipfile.ZipFile(io.BytesIO(f.read()))
    names = sorted(z.namelist())
    assert names == ["graphs.json", "node_data_change.json", "node_data_memory.json"], names
    graphs = json.loads(z.read("graphs.json"))
    validate_graphs(graphs)
    for name in names[1:]:
        validate_node_data(json.loads(z.read(name)), graphs)
    ids = [g["id"] for g in graphs["graphCollections"][0]["graphs"]]
    assert ids == ["before", "after"]
    screenshot(page, "export_model_explorer")
