"""Screenshots of the graph view, saved to artifacts/screens/ (ignored by git).

Drives benchmarks/graph_viewer_app.py (the pan/zoom viewer component) with Debian's
/usr/bin/chromium via Playwright:

1. ResNet sample before all fusions (removed nodes red) and after (fused nodes green).
2. BERT sample focused on an attention Softmax (2 hops).
3. A generated ~3,000-node transformer, collapsed by scope.

    .venv/bin/python benchmarks/screens_graph.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
from bench_render import launch_browser, streamlit_app, viewer_frame  # noqa: E402

from fusionviz import samples  # noqa: E402
from fusionviz.graphview.synthetic import transformer_with_nodes  # noqa: E402
from fusionviz.passes import registry  # noqa: E402
from fusionviz.passes.pipeline import run_pipeline  # noqa: E402

OUT = ROOT / "artifacts" / "screens"


def fusion_passes() -> list[str]:
    """Every simplify and fuse pass (layout and precision passes rewrite whole graphs)."""
    return [p.name for p in registry.all_passes() if p.category.value in ("simplify", "fuse")]


def shoot(browser, env: dict[str, str], name: str, *, fit: bool = False, zoom_clicks: int = 0) -> Path:
    with streamlit_app(env) as url:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(url)
        fr = viewer_frame(page)
        if fit:
            fr.click("#fit")
        for _ in range(zoom_clicks):
            fr.click("#zin")
        time.sleep(0.5)
        path = OUT / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        page.close()
    print(f"saved {path}", flush=True)
    return path


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = launch_browser(p)
        try:
            names = samples.sample_names()
            if "resnet_ts" in names:
                model = samples.load_sample("resnet_ts").proto
                res = run_pipeline(model, fusion_passes())
                before, after = Path(tmp) / "resnet_before.onnx", Path(tmp) / "resnet_after.onnx"
                onnx.save(res.original, before)
                onnx.save(res.final, after)
                for side in ("before", "after"):
                    env = {"FV_BENCH_MODEL": str(before), "FV_BENCH_DIFF": str(after), "FV_BENCH_SIDE": side,
                           "FV_BENCH_COLLAPSE": "0", "FV_BENCH_HEIGHT": "900"}
                    shoot(browser, env, f"resnet_{side}")
                    shoot(browser, env, f"resnet_{side}_fit", fit=True)
            else:
                print("resnet_ts sample missing: skipped", flush=True)
            if "bert_ts" in names:
                model = samples.load_sample("bert_ts").proto
                path = Path(tmp) / "bert.onnx"
                onnx.save(model, path)
                softmax = next(n.name for n in model.graph.node if n.op_type == "Softmax")
                env = {"FV_BENCH_MODEL": str(path), "FV_BENCH_FOCUS": softmax, "FV_BENCH_HOPS": "4",
                       "FV_BENCH_COLLAPSE": "0", "FV_BENCH_HEIGHT": "900"}
                shoot(browser, env, "bert_attention_focus", fit=True)
                env = {"FV_BENCH_MODEL": str(path), "FV_BENCH_COLLAPSE": "1", "FV_BENCH_HEIGHT": "900"}
                shoot(browser, env, "bert_collapsed", fit=True)
            else:
                print("bert_ts sample missing: skipped", flush=True)
            big = Path(tmp) / "transformer_3000.onnx"
            onnx.save(transformer_with_nodes(3000), big)
            env = {"FV_BENCH_MODEL": str(big), "FV_BENCH_COLLAPSE": "1", "FV_BENCH_HEIGHT": "900"}
            shoot(browser, env, "transformer_3000_collapsed")
            shoot(browser, env, "transformer_3000_collapsed_fit", fit=True)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
