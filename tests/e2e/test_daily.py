"""The app as a daily tool, in a real browser (Debian chromium via Playwright).

One test per point: every page opens by its own URL on a fresh server; query parameters
reproduce a view; the sidebar names an uploaded model and no server path is shown; the
benchmark compares with onnxruntime level 'all' by default; the report downloads parse; an
inputs file becomes an extra verification set; a declined pass is shown with its reason.
Screenshots go to artifacts/screens/daily_*.png (look at them).
"""

from __future__ import annotations

import io
import json
import re
from urllib.parse import parse_qs, urlparse

import numpy as np
import onnx
import pytest
from conftest import (
    ROOT,
    app_page,
    assert_clean,
    declining_pass_env,
    fresh_server,
    nav,
    screenshot,
    wait_idle,
)

from fusionviz import samples

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not samples.sample_names(), reason="sample models not built")]

PAGES = {"model": "Model", "graph": "Graph: before and after", "passes": "Passes: what if?",
         "bench": "Benchmark", "zoo": "Zoo: every model × pass set", "learn": "Learn"}


def _heading(page, text: str):
    return page.get_by_role("heading", name=text, exact=True).first


def _params(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query, keep_blank_values=True).items()}


def _upload_model(page, name: str, data: bytes) -> None:
    page.locator('.st-key-upload input[type="file"]').set_input_files(
        files=[{"name": name, "mimeType": "application/octet-stream", "buffer": data}])
    page.get_by_text(f"Summary: {name}").wait_for(timeout=60_000)
    wait_idle(page)


def test_every_page_opens_by_its_own_url_on_a_fresh_server(browser):
    for key, title in PAGES.items():
        with fresh_server("--sample", "resnet_ts", name=f"url-{key}") as base:
            ctx = browser.new_context(viewport={"width": 1500, "height": 950})
            try:
                page = ctx.new_page()
                page.set_default_timeout(90_000)
                page.goto(f"{base}/{key}")
                _heading(page, title).wait_for()
                wait_idle(page)
                assert urlparse(page.url).path == f"/{key}", page.url
                assert_clean(page)
                screenshot(page, f"daily_url_{key}")
            finally:
                ctx.close()


def test_root_url_opens_the_graph_page_with_the_links_parameters(server, page):
    page.goto(server + "/?sample=textbook&passes=eliminate_identity&focus=x")
    _heading(page, PAGES["graph"]).wait_for()
    wait_idle(page)
    assert urlparse(page.url).path == "/graph"
    p = _params(page)
    assert p["sample"] == "textbook" and p["passes"] == "eliminate_identity" and p["focus"] == "x"
    assert_clean(page)


def test_query_params_reproduce_a_view(server, browser, page):
    page.goto(server + "/passes?sample=textbook&passes=eliminate_identity")
    _heading(page, PAGES["passes"]).wait_for()
    wait_idle(page)
    page.get_by_text("Dropout elimination (inference)", exact=True).click()
    wait_idle(page)
    p = _params(page)
    assert p["sample"] == "textbook"
    assert set(p["passes"].split(",")) == {"eliminate_identity", "eliminate_dropout"}
    nodes = page.locator('[data-testid="stMetricValue"]').first.inner_text()
    nav(page, "Benchmark")
    page.get_by_role("combobox").first.wait_for()
    level_box = page.locator(".st-key-bench_level")
    level_box.click()
    page.get_by_role("option", name="basic", exact=True).click()
    wait_idle(page)
    p = _params(page)
    assert p["level"] == "basic"
    link = page.url.replace("/bench", "/passes")
    # The copied address, opened in another browser session, shows the same view.
    other = browser.new_context(viewport={"width": 1500, "height": 950})
    try:
        q = other.new_page()
        q.set_default_timeout(90_000)
        q.goto(link)
        _heading(q, PAGES["passes"]).wait_for()
        wait_idle(q)
        assert q.locator('[data-testid="stMetricValue"]').first.inner_text() == nodes
        side = q.locator('[data-testid="stSidebar"]').inner_text()
        assert "textbook.onnx" in side and "2 passes selected" in side
        assert_clean(q)
        screenshot(q, "daily_link_passes")
        q.goto(link.replace("/passes", "/bench"))
        _heading(q, "Benchmark").wait_for()
        wait_idle(q)
        assert q.locator(".st-key-bench_level input").input_value() == "basic"
    finally:
        other.close()


def test_sidebar_names_the_uploaded_model_and_no_path_is_shown(server, page):
    page.goto(server + "/model")
    _heading(page, "Model").wait_for()
    wait_idle(page)
    side = page.locator('[data-testid="stSidebar"]')
    assert "resnet_ts.onnx" in side.inner_text()
    data = samples.sample_path("textbook").read_bytes()
    _upload_model(page, "my_model.onnx", data)
    text = side.inner_text()
    assert "my_model.onnx" in text and "upload" in text and "resnet_ts.onnx" not in text
    screenshot(page, "daily_upload_sidebar")
    for title in ("Passes (what-if)", "Benchmark", "Model"):
        nav(page, title)
        body = page.inner_text("body")
        assert str(ROOT) not in body and "/tmp/" not in body and "sample_models/" not in body, title
        assert "my_model.onnx" in side.inner_text()
        assert_clean(page)
    assert "model" in _params(page) and "sample" not in _params(page)


def test_a_link_to_an_upload_the_server_no_longer_has_opens_the_default_sample(server, page):
    page.goto(server + "/passes?model=0123456789abcdef0123&passes=eliminate_identity")
    page.get_by_text("no longer on this server").wait_for()
    wait_idle(page)
    assert "resnet_ts.onnx" in page.locator('[data-testid="stSidebar"]').inner_text()
    assert _params(page).get("sample") == "resnet_ts"
    assert_clean(page)
    screenshot(page, "daily_stale_link")


@pytest.mark.slow
def test_benchmark_compares_with_onnxruntime_level_all_by_default(server, page):
    page.goto(server + "/bench?sample=textbook&passes=eliminate_identity,fold_batchnorm")
    _heading(page, "Benchmark").wait_for()
    wait_idle(page)
    ref = page.get_by_role("checkbox", name=re.compile("Reference: original under onnxruntime level 'all'"))
    assert ref.is_checked()
    page.get_by_text("Per pass: cumulative", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Run benchmark").click()
    page.get_by_role("tab", name="Per pass").wait_for(timeout=240_000)
    wait_idle(page, 240)
    latency = page.locator('[data-testid="stPlotlyChart"]').first.text_content()
    assert "original @ORT all" in latency and "level 'off'" in latency
    page.get_by_role("tab", name="Per pass").click()
    page.wait_for_timeout(1500)
    chart = page.locator('[data-testid="stPlotlyChart"]').nth(1).text_content()
    assert "What each pass adds" in chart and "level 'off'" in chart and "%" in chart
    assert_clean(page)
    screenshot(page, "daily_bench_per_pass", full_page=True)


def test_benchmark_also_on_openvino_in_the_browser(server, page):
    pytest.importorskip("openvino")
    page.goto(server + "/bench?sample=textbook&passes=eliminate_identity,fold_batchnorm")
    _heading(page, "Benchmark").wait_for()
    wait_idle(page)
    page.locator(".st-key-bench_backends").click()
    page.get_by_role("option", name="OpenVINO").click()
    page.keyboard.press("Escape")
    wait_idle(page)
    page.get_by_role("button", name="Run benchmark").click()
    page.get_by_role("tab", name="Per pass").wait_for(timeout=240_000)
    wait_idle(page, 240)
    latency = page.locator('[data-testid="stPlotlyChart"]').first.text_content()
    assert "original @OpenVINO" in latency and "@OpenVINO" in latency.replace("original @OpenVINO", "")
    assert_clean(page)
    screenshot(page, "daily_bench_openvino", full_page=True)


def test_report_downloads_parse(server, page, tmp_path):
    page.goto(server + "/passes?sample=textbook&passes=eliminate_identity,eliminate_dropout")
    _heading(page, PAGES["passes"]).wait_for()
    page.get_by_text("Input sets used").wait_for(timeout=120_000)
    wait_idle(page)
    got = {}
    for key in ("dl_json", "dl_md", "dl_model"):
        with page.expect_download(timeout=60_000) as dl:
            page.locator(f".st-key-{key} button").first.click()
        path = tmp_path / dl.value.suggested_filename
        dl.value.save_as(path)
        got[key] = path
    rep = json.loads(got["dl_json"].read_text())
    assert rep["model"]["name"] == "textbook.onnx"
    assert [p["name"] for p in rep["passes"]] == ["eliminate_identity", "eliminate_dropout"]
    assert rep["verify"]["input_sets"] == ["normal", "zeros", "edge"]
    assert rep["command"].startswith("python -m fusionviz optimize textbook -o textbook.fusionviz.onnx --passes ")
    md = got["dl_md"].read_text()
    assert md.startswith("# fusionviz report: textbook.onnx") and rep["command"] in md
    model = onnx.load(str(got["dl_model"]))
    assert len(model.graph.node) == rep["nodes_after"]
    screenshot(page, "daily_exports", full_page=True)
    # The optimized model is downloadable on the Benchmark page too.
    nav(page, "Benchmark")
    with page.expect_download(timeout=60_000) as dl:
        page.locator(".st-key-dl_model button").first.click()
    assert dl.value.suggested_filename == "textbook.fusionviz.onnx"


def test_inputs_file_shows_an_extra_input_set(server, page):
    loaded = samples.load_sample("textbook")
    vi = loaded.proto.graph.input[0]
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    buf = io.BytesIO()
    np.savez(buf, **{vi.name: np.random.default_rng(3).standard_normal(dims).astype(np.float32)})
    page.goto(server + "/model?sample=textbook&passes=eliminate_identity")
    _heading(page, "Inputs").wait_for()
    wait_idle(page)
    files = page.locator('.st-key-inputs_upload input[type="file"]')
    files.set_input_files(files=[{"name": "wrong.npz", "mimeType": "application/octet-stream",
                                  "buffer": _npz_bytes(nope=np.zeros(3, np.float32))}])
    err = page.locator('[data-testid="stAlertContentError"]').first
    err.wait_for(timeout=30_000)
    assert "nope" in err.inner_text()
    assert_clean(page)
    err.scroll_into_view_if_needed()
    screenshot(page, "daily_inputs_bad_file")
    files.set_input_files(files=[{"name": "mine.npz", "mimeType": "application/octet-stream",
                                  "buffer": buf.getvalue()}])
    page.get_by_text("Using your inputs from").wait_for(timeout=30_000)
    wait_idle(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    _heading(page, "Inputs").scroll_into_view_if_needed()
    screenshot(page, "daily_inputs_file")
    nav(page, "Passes (what-if)")
    page.get_by_text("Input sets used: normal, zeros, edge, user").wait_for(timeout=120_000)
    assert_clean(page)
    page.get_by_text("Input sets used").scroll_into_view_if_needed()
    screenshot(page, "daily_inputs_user_set")


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_declined_pass_is_shown_with_its_reason(browser, tmp_path):
    """On a server whose registry holds a pass the validity rule declines, opened through the
    link of an upload (uploads are shared by their link)."""
    env = declining_pass_env(tmp_path / "plugin")
    with fresh_server("--sample", "textbook", name="declined", env=env) as base:
        with app_page(browser, 120_000) as page:
            page.goto(base + "/model")
            _heading(page, "Model").wait_for()
            wait_idle(page)
            _upload_model(page, "mine.onnx", samples.sample_path("textbook").read_bytes())
            ref = _params(page)["model"]
            other = browser.new_context(viewport={"width": 1600, "height": 1000})
            q = other.new_page()
            q.set_default_timeout(120_000)
            q.goto(f"{base}/passes?model={ref}&passes=eliminate_identity,test_break_signature")
            warn = q.get_by_text("was declined and rolled back")
            warn.wait_for()
            wait_idle(q)
            text = q.inner_text("body")
            assert "Test: rename the first output (declined)" in text and "outputs changed" in text
            assert "mine.onnx" in q.locator('[data-testid="stSidebar"]').inner_text()
            assert_clean(q)
            screenshot(q, "daily_declined_top")
            warn.first.scroll_into_view_if_needed()
            screenshot(q, "daily_declined")
            other.close()
