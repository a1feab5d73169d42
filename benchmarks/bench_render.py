"""Graph-view render timings.

Part 1 (in-process): DOT build (``render_graph``) and Graphviz layout to SVG (``render_svg``,
pygraphviz) for generated transformer-like models of 1k/3k/5k nodes (a hub attention-mask tensor
feeds every layer), collapsed, capped (default 400 items), and full. Variants are interleaved over
``--repeats`` rounds; medians are reported.

Part 2 (browser): a tiny Streamlit app (benchmarks/graph_viewer_app.py) started on a free port,
driven by Playwright with Debian's /usr/bin/chromium (never a downloaded browser). Time from
navigation until the viewer shows the SVG (all node shapes in the DOM), for a ~3,000-node model,
collapsed and capped; also st.graphviz_chart for comparison; and a click round trip.

    .venv/bin/python benchmarks/bench_render.py [--sizes 1000,3000,5000] [--repeats 3] [--no-browser]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from fusionviz.graphview import RenderOptions, render_graph, render_svg  # noqa: E402
from fusionviz.graphview.synthetic import transformer_with_nodes  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
APP = Path(__file__).resolve().parent / "graph_viewer_app.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_app(env_extra: dict[str, str]):
    """Start graph_viewer_app.py on a free port; yield its URL; stop it (by its own pid)."""
    port = free_port()
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless=true",
           f"--server.port={port}", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false",
           "--server.fileWatcherType=none"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if proc.poll() is not None:
                raise RuntimeError("streamlit exited: " + proc.stderr.read().decode()[-500:])
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def launch_browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


VIEWER_IFRAME = 'iframe[title*="fusionviz_graph_viewer"]'


def viewer_frame(page, timeout_s: float = 90):
    """The viewer component's iframe once its SVG is shown."""
    page.frame_locator(VIEWER_IFRAME).locator('body[data-ready="1"]').wait_for(timeout=timeout_s * 1000)
    return page.locator(VIEWER_IFRAME).element_handle().content_frame()


def time_viewer(url: str, browser, expect_nodes: int) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    page.goto(url)
    fr = viewer_frame(page)
    t_ready = time.perf_counter() - t0
    n = fr.evaluate("document.querySelectorAll('g.node').length")
    # Click round trip: click the first op node, wait for the app to print it.
    t1 = time.perf_counter()
    name = fr.evaluate("""() => { for (const g of document.querySelectorAll("g.node[id^='fv-n-']")) {
        const r = g.getBoundingClientRect();
        if (r.x > 0 && r.y > 40 && r.right < innerWidth && r.bottom < innerHeight)
            return [g.id, r.x + r.width / 2, r.y + r.height / 2]; } return null; }""")
    clicked_ok = False
    if name:
        el = fr.frame_element()
        box = el.bounding_box()
        page.mouse.click(box["x"] + name[1], box["y"] + name[2])
        try:
            page.get_by_text("clicked:", exact=False).first.wait_for(timeout=20000)
            page.wait_for_function("() => document.body.innerText.includes('clicked:') && "
                                   "!document.body.innerText.includes('clicked: None')", timeout=20000)
            clicked_ok = True
        except Exception:  # noqa: BLE001
            clicked_ok = False
    t_click = time.perf_counter() - t1
    page.close()
    return {"ready_s": round(t_ready, 2), "shapes": n, "click_roundtrip_s": round(t_click, 2),
            "click_ok": clicked_ok, "expected_items": expect_nodes}


def time_graphviz_chart(url: str, browser, expect_nodes: int) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_function(f"() => document.querySelectorAll('svg g.node').length >= {expect_nodes}",
                           timeout=120000)
    dt = time.perf_counter() - t0
    page.close()
    return {"ready_s": round(dt, 2)}


def part1(sizes: list[int], repeats: int) -> list[dict]:
    variants = [("collapsed", RenderOptions(collapse=True)),
                ("capped-400", RenderOptions()),
                ("full", RenderOptions(max_nodes=100_000))]
    rows = []
    models = {n: transformer_with_nodes(n) for n in sizes}
    times: dict[tuple[int, str], list[tuple[float, float]]] = {}
    drawn: dict[tuple[int, str], int] = {}
    for _ in range(repeats):
        for n, m in models.items():
            for label, opts in variants:
                if label == "full" and n > 3000 and repeats > 1 and times.get((n, label)):
                    continue  # one run of the 5k full layout is enough (~10-40 s)
                t0 = time.perf_counter()
                r = render_graph(m, options=opts)
                t1 = time.perf_counter()
                render_svg(r.dot)
                t2 = time.perf_counter()
                times.setdefault((n, label), []).append((t1 - t0, t2 - t1))
                drawn[(n, label)] = r.drawn
    for (n, label), ts in times.items():
        row = {"nodes": len(models[n].graph.node), "variant": label, "drawn": drawn[(n, label)],
               "dot_s": round(statistics.median(t[0] for t in ts), 3),
               "layout_svg_s": round(statistics.median(t[1] for t in ts), 3), "runs": len(ts)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def part2(n: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"transformer_{n}.onnx"
        model = transformer_with_nodes(n)
        onnx.save(model, path)
        total = len(model.graph.node)
        cases = [("viewer collapsed", {"FV_BENCH_COLLAPSE": "1"}, "viewer"),
                 ("viewer capped-400", {"FV_BENCH_COLLAPSE": "0"}, "viewer"),
                 ("graphviz_chart collapsed", {"FV_BENCH_COLLAPSE": "1", "FV_BENCH_MODE": "graphviz_chart"},
                  "chart")]
        with sync_playwright() as p:
            browser = launch_browser(p)
            try:
                for label, env, kind in cases:
                    env = {"FV_BENCH_MODEL": str(path), **env}
                    opts = RenderOptions(collapse=env.get("FV_BENCH_COLLAPSE") == "1")
                    items = render_graph(model, options=opts).drawn
                    with streamlit_app(env) as url:
                        # first load includes streamlit start-up costs; measure a warm load too
                        if kind == "viewer":
                            cold = time_viewer(url, browser, items)
                            warm = time_viewer(url, browser, items)
                        else:
                            cold = time_graphviz_chart(url, browser, items)
                            warm = time_graphviz_chart(url, browser, items)
                    row = {"case": label, "model_nodes": total, "items": items, "cold": cold, "warm": warm}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,5000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--browser-nodes", type=int, default=3000)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-layout", action="store_true")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    out = {}
    if not args.no_layout:
        out["layout"] = part1([int(s) for s in args.sizes.split(",") if s], args.repeats)
    if not args.no_browser:
        out["browser"] = part2(args.browser_nodes)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
