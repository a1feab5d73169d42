"""A model opened by its path on the server, in Chromium: a synthetic model with ~170 MB of external
data (written by the test, deleted after) under a folder the server allows (FUSIONVIZ_OPEN_PATHS),
opened from the Model page and drawn on the Graph page.

Screenshots: artifacts/e2e/open_by_path_model.png, open_by_path_graph.png.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import time

import pytest
from conftest import (
    ARTIFACTS,
    ROOT,
    app_page,
    assert_clean,
    drawn_nodes,
    fresh_server,
    nav,
    wait_idle,
)
from test_browser import graph_nodes

from fusionviz.passes import get_pass

pytestmark = pytest.mark.e2e

LAYERS = 10
DIM = 2048  # 16 MB per weight: 10 layers hold ~168 MB of external data


@functools.cache
def _bench_big():
    """benchmarks/bench_big.py: the synthetic model's writer."""
    spec = importlib.util.spec_from_file_location("bench_big", ROOT / "benchmarks" / "bench_big.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_big", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    bb = _bench_big()
    path = bb.write_synthetic(folder / "big" / "big.onnx", total_bytes=LAYERS * DIM * DIM * 4, dim=DIM)
    assert bb.model_bytes(path) > 160 * 2**20
    yield folder, path
    for p in sorted(path.parent.iterdir()):
        p.unlink()


def _open(page, url: str, folder, path) -> None:
    """The Model page: the model's path (relative: taken from the first allowed folder) opened."""
    page.goto(url + "/model")
    wait_idle(page)
    assert page.get_by_text("Allowed folders:").is_visible()
    page.get_by_role("textbox", name="Path of an .onnx file, a .zip or a model folder on the server").fill(
        str(path.relative_to(folder)))
    page.locator('[data-testid="stForm"]').get_by_role("button", name="Open").click()
    page.get_by_text("Summary: big.onnx").wait_for(timeout=90_000)
    wait_idle(page)


def _draw(page) -> list[str]:
    """From the Model page to the Graph page, once the last layer is drawn; the node titles."""
    page.get_by_role("button", name="See the graph before / after →").click()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("layer9" in t for t in graph_nodes(page)):
        time.sleep(0.2)
    wait_idle(page)
    assert_clean(page)
    titles = graph_nodes(page)
    assert any("layer0" in t for t in titles) and any("layer9" in t for t in titles), titles[:20]
    return titles


def test_open_a_big_model_by_path_and_draw_its_graph(big_model, browser):
    folder, path = big_model
    with fresh_server("--sample", "textbook", name="open_by_path",
                      env={"FUSIONVIZ_OPEN_PATHS": str(folder), "FUSIONVIZ_PREFETCH": "0"}) as url:
        with app_page(browser, 60_000) as page:
            t0 = time.monotonic()
            _open(page, url, folder, path)
            loaded_s = time.monotonic() - t0
            assert_clean(page)
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0
            page.get_by_text("Summary: big.onnx").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "open_by_path_model.png"))
            _draw(page)
            page.screenshot(path=str(ARTIFACTS / "open_by_path_graph.png"))
            print(f"opened in {loaded_s:.1f} s, graph drawn {time.monotonic() - t0:.1f} s after Open")


def test_weights_on_disk_graph_first_then_checked_and_toggled(big_model, browser):
    """With the weights on disk (the threshold lowered below the model's 168 MB) the result is
    drawn before its validity check, which then runs in the background; on the Passes page a pass
    toggled off redraws at once (the check of the graph before it may still run) and back on
    draws the result computed before."""
    folder, path = big_model
    env = {"FUSIONVIZ_OPEN_PATHS": str(folder), "FUSIONVIZ_PREFETCH": "0", "FUSIONVIZ_WEIGHTS_ON_DISK_MB": "16"}
    with fresh_server("--sample", "textbook", name="open_by_path_on_disk", env=env) as url:
        with app_page(browser, 60_000) as page:
            _open(page, url, folder, path)
            _draw(page)
            nav(page, "Passes")
            before = drawn_nodes(page)  # every drawn node's text, labels included
            title = get_pass("eliminate_identity").title
            for back_on in (False, True):
                page.get_by_text(title, exact=True).click()
                wait_idle(page)
                assert_clean(page)
                # Off: the Identity is drawn again; back on: the result computed before, drawn again.
                assert (drawn_nodes(page) == before) is back_on
            page.screenshot(path=str(ARTIFACTS / "open_by_path_on_disk_passes.png"))
