"""Two browser sessions at once: separate models and results, benchmarks queued."""

from __future__ import annotations

import time

import pytest
from conftest import ARTIFACTS

pytestmark = pytest.mark.e2e


def _no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, "a traceback reached the page"


def test_two_sessions_benchmark_at_once_with_separate_results(server, browser):
    ctx_a = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx_b = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        a, b = ctx_a.new_page(), ctx_b.new_page()
        for p in (a, b):
            p.set_default_timeout(120_000)
        a.goto(server + "/bench?sample=textbook&passes=eliminate_identity")
        b.goto(server + "/bench?sample=mobilenet&passes=fold_batchnorm")
        a.get_by_role("button", name="Run benchmark").wait_for()
        b.get_by_role("button", name="Run benchmark").wait_for()
        # Each session holds its own model.
        assert a.get_by_text("textbook.onnx").first.is_visible()
        assert b.get_by_text("mobilenet.onnx").first.is_visible()
        t0 = time.monotonic()
        a.get_by_role("button", name="Run benchmark").click()
        b.get_by_role("button", name="Run benchmark").click()
        for p in (a, b):
            p.locator('[data-testid="stPlotlyChart"]').first.wait_for(state="visible", timeout=240_000)
            p.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=20_000)
            _no_exception(p)
        assert time.monotonic() - t0 < 240
        # Results stay with their session: neither page shows the other's model.
        assert a.get_by_text("mobilenet.onnx").count() == 0
        assert b.get_by_text("textbook.onnx").count() == 0
        a.screenshot(path=str(ARTIFACTS / "06_concurrent_a.png"))
        b.screenshot(path=str(ARTIFACTS / "07_concurrent_b.png"))
    finally:
        ctx_a.close()
        ctx_b.close()
