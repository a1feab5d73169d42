"""The HTML report opens offline in Chromium: ``optimize --report R.html`` on a corpus model (a
sample when the corpus is not cached) and the app's "Report (HTML)" download, each opened from a
file:// URL with every other request aborted. Screenshots go to ``artifacts/screens/``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, screenshot, wait_idle

pytestmark = pytest.mark.e2e

#: Corpus models tried in order; the first cached one is used.
CORPUS = ("ppocr_v4_det", "nudenet_320n")
FALLBACK = "resnet_ts"

STATE_JS = """
() => {
  const panes = [...document.querySelectorAll('#graphs .pz')].map(p => {
    const svg = p.querySelector('svg'); const r = p.getBoundingClientRect();
    return {nodes: svg ? svg.querySelectorAll('g.node').length : 0, w: r.width, h: r.height,
            transform: svg ? svg.style.transform : ''};
  });
  return {panes, passRows: document.querySelectorAll('table.passes tbody tr').length,
          charts: [...document.querySelectorAll('svg.chart')].map(c => c.querySelectorAll('rect').length),
          json: JSON.parse(document.getElementById('fusionviz-report').textContent)};
}
"""


def _model() -> tuple[str, str]:
    """(MODEL argument, name) of the first cached corpus model, else a sample."""
    from fusionviz.corpus import load_manifest
    from fusionviz.corpus.fetch import path_of, select

    for name in CORPUS:
        try:
            path = path_of(select(load_manifest(), only=[name])[0])
        except Exception:  # noqa: BLE001 - a manifest without the model: try the next
            path = None
        if path is not None:
            return str(path), name
    return FALLBACK, FALLBACK


def _open_offline(browser, path: Path):
    """A page showing ``path`` from file:// with the network off and every other request aborted."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000}, offline=True)
    aborted: list[str] = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            aborted.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return ctx, page, aborted, problems


def _check(page, aborted, problems) -> dict:
    st = page.evaluate(STATE_JS)
    assert aborted == [], f"the report asked the network for {aborted}"
    assert problems == [], problems
    assert len(st["panes"]) == 2 and all(p["nodes"] > 0 and p["w"] > 300 and p["h"] > 300 for p in st["panes"]), st["panes"]
    assert st["passRows"] == len(st["json"]["passes"]) > 0
    assert st["charts"] and st["charts"][0] >= 2, "the nodes-per-pass plot has bars"
    page.get_by_role("heading", name="Passes", exact=True).wait_for()
    page.get_by_role("heading", name="Verification", exact=True).wait_for()
    return st


def test_optimize_report_html_of_a_corpus_model_opens_offline(browser, tmp_path):
    model, name = _model()
    out = tmp_path / f"{name}.html"
    proc = subprocess.run([sys.executable, "-m", "fusionviz", "optimize", model, "-o", str(tmp_path / "o.onnx"),
                           "--all", "--report", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    size = out.stat().st_size
    sys.stderr.write(f"report of {name}: {size:,} bytes\n")
    ctx, page, aborted, problems = _open_offline(browser, out)
    try:
        st = _check(page, aborted, problems)
        assert st["json"]["model"]["name"] == Path(model).name or name == FALLBACK
        assert st["json"]["verify"]["ok"] is True
        # pan/zoom: "+" zooms the after graph in
        after = page.locator("#graphs .pane").nth(1)
        before_t = st["panes"][1]["transform"]
        after.get_by_role("button", name="+").click()
        assert page.evaluate(STATE_JS)["panes"][1]["transform"] != before_t
        after.get_by_role("button", name="−").click()
        screenshot(page, f"report_html_{name}")
        page.locator("#passes").scroll_into_view_if_needed()
        page.evaluate("document.getElementById('passes').scrollIntoView()")
        screenshot(page, f"report_html_{name}_passes")
    finally:
        ctx.close()
    assert size < 8_000_000, f"the report of {name} is {size:,} bytes"


def test_app_report_html_download_opens_offline(server, page, browser, tmp_path):
    page.goto(server + "/passes?sample=textbook&passes=eliminate_identity,eliminate_dropout,fold_batchnorm")
    page.get_by_text("Input sets used").wait_for(timeout=120_000)
    wait_idle(page)
    with page.expect_download(timeout=120_000) as dl:
        page.locator(".st-key-dl_html button").first.click()
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.name == "textbook.fusionviz.html"
    ctx, report_page, aborted, problems = _open_offline(browser, path)
    try:
        st = _check(report_page, aborted, problems)
        data = st["json"]
        assert [p["name"] for p in data["passes"]] == ["eliminate_identity", "eliminate_dropout",
                                                       "fold_batchnorm"]
        assert data["command"].startswith("python -m fusionviz optimize textbook ")
        assert json.dumps(data)  # the embedded data is the report the JSON download holds
        screenshot(report_page, "report_html_app_textbook")
    finally:
        ctx.close()
