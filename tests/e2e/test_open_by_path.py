"""A model opened by its path on the server, in Chromium: a synthetic model with ~170 MB of external
data (written by the test, deleted after) under a folder the server allows (FUSIONVIZ_OPEN_PATHS),
opened from the Model page and drawn on the Graph page.

Screenshots: artifacts/e2e/open_by_path_model.png, open_by_path_graph.png.
"""

from __future__ import annotations

import importlib.util
import sys
import time

import pytest
from conftest import ARTIFACTS, ROOT, assert_clean, fresh_server, wait_idle
from test_browser import graph_nodes

pytestmark = pytest.mark.e2e

LAYERS = 10
DIM = 2048  # 16 MB per weight: 10 layers hold ~168 MB of external data


def _writer():
    spec = importlib.util.spec_from_file_location("bench_big", ROOT / "benchmarks" / "bench_big.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_big", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    bb = _writer()
    path = bb.write_synthetic(folder / "big" / "big.onnx", total_bytes=LAYERS * DIM * DIM * 4, dim=DIM)
    assert bb.model_bytes(path) > 160 * 2**20
    yield folder, path
    for p in sorted(path.parent.iterdir()):
        p.unlink()


def test_open_a_big_model_by_path_and_draw_its_graph(big_model, browser):
    folder, path = big_model
    with fresh_server("--sample", "textbook", name="open_by_path",
                      env={"FUSIONVIZ_OPEN_PATHS": str(folder), "FUSIONVIZ_PREFETCH": "0"}) as url:
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url + "/model")
            wait_idle(page)
            assert page.get_by_text("Allowed folders:").is_visible()
            page.get_by_role("textbox", name="Path of an .onnx file, a .zip or a model folder on the server").fill(
                str(path.relative_to(folder)))  # relative: taken from the first allowed folder
            t0 = time.monotonic()
            page.locator('[data-testid="stForm"]').get_by_role("button", name="Open").click()
            page.get_by_text("Summary: big.onnx").wait_for(timeout=90_000)
            wait_idle(page)
            loaded_s = time.monotonic() - t0
            assert_clean(page)
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0
            page.get_by_text("Summary: big.onnx").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "open_by_path_model.png"))

            page.get_by_role("button", name="See the graph before / after →").click()
            deadline = time.monotonic() + 120
            titles: list[str] = []
            while time.monotonic() < deadline:
                titles = graph_nodes(page)
                if any("layer9" in t for t in titles):
                    break
                time.sleep(0.3)
            wait_idle(page)
            assert_clean(page)
            titles = graph_nodes(page)
            assert any("layer0" in t for t in titles) and any("layer9" in t for t in titles), titles[:20]
            page.screenshot(path=str(ARTIFACTS / "open_by_path_graph.png"))
            print(f"opened in {loaded_s:.1f} s, graph drawn {time.monotonic() - t0:.1f} s after Open")
        finally:
            ctx.close()
