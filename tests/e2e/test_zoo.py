"""The Zoo page in a real browser: a sweep's heatmap, and a click on a cell opens it on the Graph page.

Runs when app.py registers the page (``url_path="zoo"``); skipped before that. The results file
comes from a real in-process sweep of the textbook sample (three pass sets) plus two rows of a
model that is not on the server (an error and a mismatch, to show the symbols). Screenshots go
to ``artifacts/screens/zoo_*.png``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from conftest import (  # at collection: 'conftest' is this folder's then
    ROOT,
    app_page,
    fresh_server,
    wait_idle,
)

SCREENS = ROOT / "artifacts" / "screens"

CELL_XY_JS = """
([model, column]) => {
  const gd = document.querySelector('.js-plotly-plot');
  if (!gd || !gd._fullLayout || !gd._fullLayout.xaxis) return null;
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const xi = xa.d2c(column), yi = ya.d2c(model);
  if (xi === undefined || yi === undefined || isNaN(xi) || isNaN(yi)) return null;
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p(xi), r.top + ya._offset + ya.l2p(yi)];
}
"""


def _zoo_registered() -> bool:
    app = (ROOT / "app.py").read_text(encoding="utf-8")
    return re.search(r"""url_path\s*=\s*["']zoo["']""", app) is not None


pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not _zoo_registered(), reason="app.py does not register "
                                                                                 "the Zoo page (url_path='zoo') yet")]


@pytest.fixture(scope="module")
def results_csv(tmp_path_factory) -> Path:
    """A results file from a real inline sweep of the textbook sample, plus two synthetic rows."""
    from fusionviz.sweep import SweepStore, parse_passes, resolve_models, run_sweep, write_results

    tmp = tmp_path_factory.mktemp("zoo")
    with SweepStore(tmp / "zoo.sqlite") as store:
        summary = run_sweep(resolve_models(["textbook"]), parse_passes("eliminate_identity,eliminate_common_subexpressions,all"),
                            store=store, engine="inline")
    rows = list(summary.rows)
    base = dict(rows[0], model="not_on_this_server", model_path="", model_sha256="")
    rows.append(dict(base, variant="eliminate_common_subexpressions", status="error", valid=False, verified=None,
                     error="cannot load or run the model: not an ONNX file"))
    rows.append(dict(base, variant="all", status="mismatch", verified=False,
                     error="DIFFERENT: output 'y' on input set 'edge'"))
    rows.append(dict(base, variant="eliminate_identity"))
    return write_results(rows, tmp / "zoo_results.csv")


def _cell_xy(page, model: str, column: str, timeout_s: float = 60) -> tuple[float, float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        xy = page.evaluate(CELL_XY_JS, [model, column])
        if xy:
            return xy[0], xy[1]
        time.sleep(0.3)
    raise AssertionError(f"heatmap cell {model} / {column} not drawn within {timeout_s}s")


def test_zoo_heatmap_and_open_a_cell(server, page, results_csv):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.goto(server + "/zoo")
    page.get_by_text("Zoo: every model × pass set").wait_for()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(results_csv))
    page.locator(".js-plotly-plot").first.wait_for()
    x, y = _cell_xy(page, "textbook", "eliminate_common_subexpressions")
    time.sleep(1.0)  # let plotly finish laying out before the screenshot
    assert page.locator('[data-testid="stException"]').count() == 0
    legend = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot .legendtext')]"
                           ".map(e => e.textContent)")
    assert any("mismatch" in t for t in legend) and any("error" in t for t in legend), legend
    page.screenshot(path=str(SCREENS / "zoo_heatmap.png"), full_page=True)

    x, y = _cell_xy(page, "textbook", "eliminate_common_subexpressions")
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_url(re.compile(r".*/graph.*"), timeout=60_000)
    page.wait_for_url(re.compile(r".*sample=textbook.*passes=eliminate_common_subexpressions.*"), timeout=60_000)
    page.get_by_text("Opened from the Zoo: textbook with pass set 'eliminate_common_subexpressions'").wait_for()
    page.get_by_text("Graph: before and after").wait_for()
    assert page.locator('[data-testid="stSidebar"]').get_by_text("textbook.onnx").count() >= 1
    assert page.locator('[data-testid="stException"]').count() == 0
    time.sleep(1.0)
    page.screenshot(path=str(SCREENS / "zoo_opened_graph.png"), full_page=False)


def _choose(page, label: str, option: str) -> None:
    box = page.locator('[data-testid="stMultiSelect"]').filter(has_text=label)
    box.locator("input").click()
    box.locator("input").fill(option)
    page.get_by_role("option", name=option, exact=True).click()
    page.keyboard.press("Escape")


def test_zoo_runs_a_small_sweep_from_the_page(server, page):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.goto(server + "/zoo")
    page.get_by_text("Zoo: every model × pass set").wait_for()
    page.get_by_role("tab", name="Run a small sweep").click()
    _choose(page, "Models", "sample: textbook")
    _choose(page, "Pass sets", "eliminate_identity")
    _choose(page, "Pass sets", "all")
    page.get_by_text("4 cells;").wait_for()  # the loaded model (chosen to start with) and textbook
    page.get_by_role("button", name="Run the sweep").click()
    page.get_by_text("Results: artifacts/sweep/zoo_").wait_for(timeout=180_000)
    _cell_xy(page, "textbook", "all")
    time.sleep(1.0)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(SCREENS / "zoo_page_sweep.png"), full_page=True)


def test_zoo_sweeps_the_loaded_model_and_shows_node_changes(browser, tmp_path):
    """A model opened by path is the page's sweep target by default; its cells say their node change."""
    import sys

    import onnx

    if str(ROOT / "tests" / "ui") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests" / "ui"))
    from gv_model import tiny_cnn

    SCREENS.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "my_cnn.onnx"
    onnx.save(tiny_cnn(), path)
    with fresh_server("--model", str(path), name="zoo-loaded") as base:
        with app_page(browser, 120_000) as page:
            page.goto(base + "/zoo")
            page.get_by_text("Zoo: every model × pass set").wait_for()
            wait_idle(page)
            page.get_by_role("tab", name="Run a small sweep").click()
            models = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Models")
            assert "loaded: my_cnn.onnx" in models.inner_text()
            _choose(page, "Pass sets", "fold_batchnorm")
            _choose(page, "Pass sets", "all")
            page.get_by_text("2 cells;").wait_for()
            page.get_by_role("button", name="Run the sweep").click()
            page.get_by_text("Results: artifacts/sweep/zoo_").wait_for(timeout=180_000)
            _cell_xy(page, "my_cnn", "all")
            texts = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot text')]"
                                  ".map(t => t.textContent || '')")
            assert any(re.fullmatch(r"3→[12]", t.strip()) for t in texts), texts[:40]
            assert page.locator('[data-testid="stException"]').count() == 0
            page.screenshot(path=str(SCREENS / "zoo_loaded_model_nodes.png"), full_page=True)
