"""Control-flow bodies on the Graph page, in a real browser (Debian chromium via Playwright).

A small model with an If (whose then_branch identity elimination changes) and a Loop holding a
nested If: clicking the If offers its branches, opening one draws it in both panes with the
pass's change coloured, the open body lives in the URL (a link opens a nested body), and the
breadcrumbs lead back to the main graph. Screenshots: artifacts/screens/graph_body_*.png.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

import onnx
import pytest
from conftest import app_page, assert_clean, fresh_server, screenshot, wait_idle
from test_graph_daily import NODES_JS, attr, pane, params

from fusionviz.graphview.dot import STATUS_STYLE
from fusionviz.graphview.synthetic import control_flow_model

pytestmark = [pytest.mark.e2e]


#: First word of each drawn node's label -> the stroke of its shape.
STROKES_JS = """
() => Object.fromEntries([...document.querySelectorAll('g.node')].filter(g => g.id.startsWith('fv-n-'))
    .map(g => [((g.querySelector('text') || {}).textContent || '').split(' ')[0],
               (g.querySelector('path, polygon') || {getAttribute: () => ''}).getAttribute('stroke')]))
"""


@pytest.fixture(scope="module")
def cf_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("bodies") / "vad_like.onnx"
    onnx.save(control_flow_model(), path)
    return path


def ops_drawn(page, side: str) -> list[str]:
    return sorted(n["op"].split()[0] for n in pane(page, side).evaluate(NODES_JS) if n["id"].startswith("fv-n-"))


def wait_ops(page, side: str, want: list[str], timeout_s: float = 90) -> None:
    """Wait until the pane draws exactly the op nodes ``want`` (sorted)."""
    deadline = time.monotonic() + timeout_s
    got = None
    while time.monotonic() < deadline:
        try:
            got = ops_drawn(page, side)
            if got == sorted(want):
                return
        except Exception:  # noqa: BLE001 - the frame is being replaced by a rerun
            pass
        page.wait_for_timeout(250)
    raise AssertionError(f"{side} pane draws {got}, not {sorted(want)}")


def test_open_a_body_in_both_panes_and_come_back(browser, cf_model):
    with fresh_server("--model", str(cf_model), name="graph-bodies") as base:
        with app_page(browser, 120_000) as page:
            page.goto(base + "/graph")
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 300)
            wait_ops(page, "before", ["Equal", "If", "Loop"])
            page.get_by_text("3 If/Loop/Scan bodies inside (5 with nested ones)", exact=False).first.wait_for()

            # Clicking the If offers its branches; opening one draws it in both panes.
            before = pane(page, "before")
            node = next(n for n in before.evaluate(NODES_JS) if n["op"].startswith("If"))
            before.locator(f'g.node[id="{node["id"]}"]').click()
            wait_idle(page)
            page.get_by_role("button", name="Open then_branch").first.click()
            wait_idle(page)
            wait_ops(page, "before", ["Identity", "MatMul", "Add", "Relu"])
            wait_ops(page, "after", ["MatMul", "Add", "Relu"])  # identity elimination, in the body
            assert params(page)["body"] == "If_2/then_branch"
            strokes = pane(page, "before").evaluate(STROKES_JS)
            assert strokes["Identity"] == STATUS_STYLE["removed"][1], strokes  # drawn as removed
            assert "4 of 4 nodes drawn" in pane(page, "before").inner_text("#pane")
            page.get_by_role("button", name="Main graph").first.wait_for()
            assert_clean(page)
            shot = screenshot(page, "graph_body_then_branch")
            assert shot.exists()

            # A link opens a nested body; its breadcrumbs lead back up.
            p = params(page)
            p["body"] = "Loop_5/body/steps/If_2/then_branch"
            page.goto(base + "/graph?" + urlencode(p))
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 300)
            wait_ops(page, "before", ["Relu"])
            wait_ops(page, "after", ["Relu"])
            assert attr(pane(page, "after"), "ready") == "1"
            screenshot(page, "graph_body_nested")
            page.get_by_role("button", name="Loop_5 · body").first.click()
            wait_idle(page)
            wait_ops(page, "before", ["Identity", "Add", "If"])
            assert params(page)["body"] == "Loop_5/body"
            page.get_by_role("button", name="Main graph").first.click()
            wait_idle(page)
            wait_ops(page, "before", ["Equal", "If", "Loop"])
            assert "body" not in params(page)
            assert_clean(page)


def test_silero_vad_branch_opens_from_a_link(browser):
    from fusionviz.corpus import load_manifest
    from fusionviz.corpus.fetch import path_of, select

    path = path_of(select(load_manifest(), only=["silero_vad_v6"])[0])
    if path is None:
        pytest.skip("silero_vad_v6 is not in the corpus cache (python -m fusionviz.corpus.fetch)")
    with fresh_server("--model", str(path), name="graph-bodies-silero") as base:
        with app_page(browser, 180_000) as page:
            page.goto(base + "/graph?body=If_0/then_branch")
            page.get_by_role("heading", name="Graph: before and after", exact=True).first.wait_for()
            wait_idle(page, 300)
            label = pane(page, "before", 300).inner_text("#pane")
            drawn = int(label.split(" of ", 1)[1].split(" ", 1)[0].replace(",", ""))
            assert drawn > 40, label  # the branch, not the 4-node main graph
            assert "If" in ops_drawn(page, "before") and "Conv" in ops_drawn(page, "after")
            assert params(page)["body"] == "If_0/then_branch"
            assert_clean(page)
            screenshot(page, "graph_body_silero_then_branch")
