"""The Graph page's compiled view in a real browser (Debian chromium via Playwright).

The ResNet sample compiled by OpenVINO: the first Conv, its BatchNormalization and its Relu run
as ONE executed layer whose box lists the three ONNX nodes; picking that layer outlines its
origins in the pane beside it; the sidebar choice goes back to the passes view. Screenshot:
artifacts/screens/compiled_openvino.png (look at it).
"""

from __future__ import annotations

import time

import pytest
from conftest import assert_clean, screenshot, wait_idle

from fusionviz import samples
from fusionviz.backends import get_backend

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not samples.sample_names(), reason="sample models not built"),
    pytest.mark.skipif(get_backend("openvino").quick_check() is not None,
                       reason=f"OpenVINO is not available here: {get_backend('openvino').quick_check()}"),
]

VIEWER = 'iframe[title*="fusionviz_graph_viewer"]'
ORIGINS = ("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu")

NODES_JS = """
() => [...document.querySelectorAll('g.node')].map(g => ({
    id: g.id, classes: g.getAttribute('class') || '',
    texts: [...g.querySelectorAll('text')].map(t => t.textContent)}))
"""


def pane(page, name: str, timeout_s: float = 180):
    """The viewer frame whose body says ``data-pane=name`` once its drawing is shown."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for el in page.locator(VIEWER).element_handles():
            fr = el.content_frame()
            if fr is None:
                continue
            try:
                if fr.evaluate("() => document.body.dataset.pane") == name and \
                        fr.evaluate("() => document.body.dataset.ready") == "1":
                    return fr
            except Exception:  # noqa: BLE001 - the frame is being replaced by a rerun
                continue
        page.wait_for_timeout(250)
    raise AssertionError(f"the {name} pane was not drawn within {timeout_s} s")


def test_conv_bn_relu_runs_as_one_openvino_layer(server, page):
    page.goto(server + "/graph?view=openvino")
    page.get_by_role("heading", name="Graph: compiled by OpenVINO").first.wait_for(timeout=120_000)
    wait_idle(page, 300)
    layers = pane(page, "compiled")
    nodes = layers.evaluate(NODES_JS)
    hits = [n for n in nodes if all(any(o == t.strip() for t in n["texts"]) for o in ORIGINS)]
    assert hits, "no executed layer lists /conv1/Conv, /bn1/BatchNormalization and /relu/Relu together"
    texts = hits[0]["texts"]
    assert texts[0] == "Convolution", texts
    assert any("f32" in t for t in texts), texts  # runtime precision is shown
    assert any(t.endswith(" ms") for t in texts), texts  # per-layer time, measured with PERF_COUNT
    pane(page, "optimized")  # our optimized graph beside it
    caption = page.inner_text("body")
    assert "executed layers" in caption and "layout changes" in caption
    assert_clean(page)

    # Pick that layer: its three origins are named under the panes, and outlined in the original.
    boxes = page.locator('[data-testid="stSelectbox"]')  # "Beside: ..." then the layer picker
    boxes.nth(0).click()
    page.get_by_role("option", name="Beside: the original, coloured by OpenVINO's fusion").click()
    wait_idle(page, 300)
    layer_name = hits[0]["texts"][1]
    boxes.nth(1).click()
    page.get_by_role("option", name=f"Convolution {layer_name} ← 3 ONNX nodes").first.click()
    wait_idle(page, 300)
    body = page.inner_text("body")
    assert all(f"{o}" in body for o in ORIGINS)
    original = pane(page, "original")
    deadline = time.monotonic() + 30
    linked = 0
    while time.monotonic() < deadline and linked < 3:
        linked = int(original.evaluate("() => document.body.dataset.linked") or 0)
        page.wait_for_timeout(300)
    path = screenshot(page, "compiled_openvino")
    assert path.exists()
    assert linked >= 3, f"the layer's origins are not outlined in the original pane ({linked} outlined)"

    # Back to the passes view through the sidebar.
    page.get_by_text("Passes: before → after").click()
    page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
    wait_idle(page, 300)  # the address is written when the run has finished (the heading comes first)
    deadline = time.monotonic() + 10
    while "view=" in page.url and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert "view=" not in page.url
    assert_clean(page)
