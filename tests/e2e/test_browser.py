"""The app in a real browser (Debian chromium via Playwright) against `streamlit run app.py`.

Screenshots go to artifacts/e2e/ (look at them: they are the point of these tests).
"""

from __future__ import annotations

import time

import pytest
from conftest import ARTIFACTS, drawn_nodes

pytestmark = pytest.mark.e2e

def graph_nodes(page) -> list[str]:
    """Titles of every drawn graph node, in the page and in component iframes."""
    return drawn_nodes(page, "title")


def wait_graph(page, *, min_nodes: int = 1, timeout_s: float = 90, different_from: list[str] | None = None,
               settle_s: float = 0.5) -> list[str]:
    """Wait until graph nodes are drawn (and differ from ``different_from``), then until stable."""
    deadline = time.monotonic() + timeout_s
    last: list[str] = []
    while time.monotonic() < deadline:
        nodes = graph_nodes(page)
        if len(nodes) >= min_nodes and (different_from is None or nodes != different_from):
            if nodes == last:
                return nodes
            last = nodes
            time.sleep(settle_s)
            continue
        last = nodes
        time.sleep(0.2)
    raise AssertionError(f"graph not drawn/changed within {timeout_s}s (have {len(last)} nodes)")


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, "a traceback reached the page"


def test_app_opens_on_sample_with_graph(server, page):
    page.goto(server + "/")
    nodes = wait_graph(page, min_nodes=10)
    assert page.get_by_text("Graph: before and after").is_visible()
    assert page.get_by_text("fused / new", exact=False).first.is_visible()
    no_exception(page)
    shot(page, "01_graph_resnet")
    assert len(nodes) >= 10


def test_toggling_a_pass_changes_the_graph(server, page):
    page.goto(server + "/passes?sample=textbook&passes=")
    before = wait_graph(page, min_nodes=5)
    shot(page, "02_passes_none")
    page.get_by_text("Identity elimination", exact=True).click()
    after = wait_graph(page, min_nodes=5, different_from=before)
    assert after != before
    assert len(after) < len(before) or set(after) != set(before)
    no_exception(page)
    shot(page, "03_passes_identity_on")


def test_short_benchmark_produces_a_chart(server, page):
    page.goto(server + "/bench?sample=textbook&passes=eliminate_identity")
    page.get_by_role("button", name="Run benchmark").click()
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(state="visible", timeout=150_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=10_000)
    no_exception(page)
    time.sleep(1.0)
    shot(page, "04_benchmark")


def test_broken_upload_shows_error_and_app_keeps_working(server, page):
    page.goto(server + "/model")
    page.get_by_text("Samples").first.wait_for()
    page.locator('.st-key-upload input[type="file"]').set_input_files(
        files=[{"name": "broken.onnx", "mimeType": "application/octet-stream",
                "buffer": b"\x08\x01this is not a model" * 20}]
    )
    err = page.locator('[data-testid="stAlertContentError"]').first
    err.wait_for(timeout=30_000)
    assert "not an ONNX model" in err.inner_text()
    no_exception(page)
    shot(page, "05_bad_upload")
    # The app keeps working: open a sample from the gallery.
    page.locator(".st-key-sample_textbook button").click()
    page.get_by_text("Summary: textbook.onnx").wait_for(timeout=30_000)
    no_exception(page)
