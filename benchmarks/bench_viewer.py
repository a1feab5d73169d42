"""Graph viewer timings in a real browser: first readable screen, synced pan/zoom frames, search.

For each model, ``streamlit run app.py -- --model M`` on a free port (as tests/e2e do), driven by
Playwright with Debian's /usr/bin/chromium (never a downloaded browser), window 1600×1000, the
Graph page with the app's default passes:

* ``cold_s``: a fresh server, the Graph page opened: pipeline, diff, layout, transfer, drawing,
  until both panes show their first view with at least 20 label lines 9 px or taller each
  (``data-legible``, counted by the viewer when its first view is on screen).
* ``open_s`` (median of ``--opens``): the same page opened again in a new tab, the server warm
  (pipeline and layout cached, as for a second visit or a link): navigation start to the later
  of the two panes' readable first views (``data-shown-at``, epoch ms). ``show_ms``: of that, the
  viewer's own part (unpack, read and put in the page, first view), the slower pane.
* ``frame_ms`` (median, p90, max): a scripted sequence in the before pane with the panes linked —
  wheel zoom out and in, a drag of 12 moves, the same zoomed out to "fit" — each event dispatched
  in the page and timed with performance.now from the event to a task posted from the next
  requestAnimationFrame callback, i.e. after that frame's style, layout and paint of both panes
  (the other pane follows in the same frame). ``work_ms``: the part after the frame began (the
  rest is waiting for the display's next frame).
* ``search_ms`` (median of 3): Enter in the search box (a node both panes have) until both panes
  have centred it (``data-found-at``: the viewer finds and centres the match in the page, rule 9
  of frontend/index.html). ``search_selected_ms``: until the page's rerun has come back and both
  panes show its selection, centred (``data-centred-at``): the Streamlit rerun, the transfer of
  both panes' arguments and the marks.

Targets: open_s ≤ 2 s, frame_ms median ≤ 50 ms, search_ms ≤ 300 ms.

    .venv/bin/python benchmarks/bench_viewer.py [--models ppocr_v4_det,flat3000] [--opens 3] [--json OUT]

Models: a wild-corpus name (``python -m fusionviz.corpus.fetch`` caches them; one not cached is
skipped) or ``flatN`` (``graphview.synthetic.transformer_with_nodes(N, scoped=False)``).
"""

from __future__ import annotations

import argparse
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

from fusionviz.graphview.synthetic import transformer_with_nodes  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
WILD = Path.home() / ".cache" / "fusionviz" / "wild" / "models"
VIEWER = 'iframe[title*="fusionviz_graph_viewer"]'
MIN_LEGIBLE = 20

# Both panes' first views, once both are readable: {before: {...}, after: {...}} else null.
READABLE_JS = """
(min) => {
  const out = {};
  for (const f of document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')) {
    const d = f.contentDocument;
    if (!d || !d.body) continue;
    const b = d.body.dataset;
    if (!b.pane || b.shownAt === undefined || Number(b.legible || 0) < min) continue;
    out[b.pane] = {at: Number(b.shownAt), legible: Number(b.legible), show_ms: Number(b.showMs || 0),
                   k: Number(b.k)};
  }
  return out.before && out.after ? out : null;
}
"""

FRAMES_JS = """
async () => {
  const fs = [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')];
  const f = fs.find(x => x.contentDocument.body.dataset.pane === "before");
  const win = f.contentWindow, doc = f.contentDocument, view = doc.getElementById("view");
  const r = view.getBoundingClientRect();
  const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
  const ch = new win.MessageChannel();
  let wake = null;
  ch.port1.onmessage = () => { const w = wake; wake = null; w(); };
  // one event, then: the next frame's rAF callback, then a task after that frame's rendering
  const timed = (fire) => new Promise(res => {
    const t0 = win.performance.now();
    fire();
    win.requestAnimationFrame(() => {
      const tf = win.performance.now();
      wake = () => { const t1 = win.performance.now(); res([t1 - t0, t1 - tf]); };
      ch.port2.postMessage(0);
    });
  });
  const settle = () => new Promise(res => win.requestAnimationFrame(() => win.requestAnimationFrame(res)));
  const wheel = (dy) => () => view.dispatchEvent(new win.WheelEvent("wheel", {deltaY: dy, deltaMode: 0,
      clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
  const ptr = (type, x, y) => () => view.dispatchEvent(new win.PointerEvent(type, {pointerId: 1, button: 0,
      buttons: type === "pointerup" ? 0 : 1, clientX: x, clientY: y, bubbles: true, cancelable: true,
      isPrimary: true, pointerType: "mouse"}));
  const out = [];
  const run = async (fire) => { out.push(await timed(fire)); await settle(); };
  const sequence = async () => {
    for (let i = 0; i < 6; i++) await run(wheel(100));
    for (let i = 0; i < 6; i++) await run(wheel(-100));
    await run(ptr("pointerdown", cx, cy));
    for (let i = 1; i <= 12; i++) await run(ptr("pointermove", cx + 9 * i, cy - 40 * i));
    await run(ptr("pointerup", cx + 108, cy - 480));
  };
  await sequence();
  doc.getElementById("fit").click();  // zoomed out: everything in the page
  await settle(); await settle();
  await sequence();
  const synced = fs.find(x => x.contentDocument.body.dataset.pane === "after").contentDocument.body.dataset.k
      === doc.body.dataset.k;
  return {frames: out, synced: synced};
}
"""


def model_path(name: str, folder: Path) -> Path | None:
    """``flatN``: a generated transformer of about N nodes; else a wild-corpus model if cached."""
    if name.startswith("flat") and name[4:].isdigit():
        path = folder / f"{name}.onnx"
        onnx.save(transformer_with_nodes(int(name[4:]), scoped=False), path)
        return path
    found = sorted(glob.glob(str(WILD / name / "*.onnx")))
    return Path(found[0]) if found else None


def _wait_readable(page, timeout_s: float) -> dict:
    handle = page.wait_for_function(READABLE_JS, arg=MIN_LEGIBLE, polling=50, timeout=timeout_s * 1000)
    return handle.json_value()


def _idle(page, timeout_s: float = 120) -> None:
    from conftest import wait_idle

    wait_idle(page, timeout_s)


def _pane(page, side: str):
    for el in page.locator(VIEWER).element_handles():
        fr = el.content_frame()
        if fr is not None and fr.evaluate("() => document.body.dataset.pane") == side:
            return fr
    raise RuntimeError(f"no {side} pane")


def _search_targets(page, n: int = 3) -> list[str]:
    """Names of nodes both panes have, spread over the model (the last ones first)."""
    before = set(_pane(page, "before").evaluate("() => window.fvViewer.ids()"))
    common = [i for i in _pane(page, "after").evaluate("() => window.fvViewer.ids()") if i in before]
    # whole names that match no other node (a search for them selects exactly that node)
    names = [i[len("fv-n-"):] for i in common if i.startswith("fv-n-")]
    unique = [a for a in names if sum(a.lower() in b.lower() for b in names) == 1]
    if not unique:
        return []
    picks = [unique[len(unique) * (n - i) // (n + 1)] for i in range(n)]
    return list(dict.fromkeys(picks))


def _search_ms(page, name: str, timeout_s: float) -> tuple[float, float]:
    box = page.get_by_placeholder("Search: name or op type", exact=False)
    box.fill(name)
    # stamped on the window in the capture phase: before any listener of the page or the panes
    page.evaluate("""() => { window.__fvEnter = null;
        window.addEventListener('keydown', e => { if (e.key === 'Enter') window.__fvEnter = performance.timeOrigin + performance.now(); },
                                {once: true, capture: true}); }""")
    box.press("Enter")
    waited = """(attr) => {
        const t = window.__fvEnter; if (!t) return null;
        const at = [...document.querySelectorAll('iframe[title*="fusionviz_graph_viewer"]')].map(
            f => Number((f.contentDocument && f.contentDocument.body && f.contentDocument.body.dataset[attr]) || 0));
        // the panes stamp whole milliseconds
        return at.length === 2 && at.every(a => a >= Math.floor(t)) ? Math.max(0, Math.max(...at) - t) : null; }"""
    found = page.wait_for_function(waited, arg="foundAt", polling=5, timeout=timeout_s * 1000).json_value()
    centred = page.wait_for_function(waited, arg="centredAt", polling=10, timeout=timeout_s * 1000).json_value()
    _idle(page)
    return float(found), float(centred)


def measure(browser, base: str, opens: int, timeout_s: float, query: str = "") -> dict:
    row: dict = {}
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        page = ctx.new_page()
        page.set_default_timeout(timeout_s * 1000)
        t0 = time.perf_counter()
        page.goto(base + "/graph" + query)
        first = _wait_readable(page, timeout_s)
        row["cold_s"] = round(time.perf_counter() - t0, 2)
        row["legible"] = [first["before"]["legible"], first["after"]["legible"]]
        _idle(page, timeout_s)
        row["nodes"] = [_pane(page, s).evaluate("() => window.fvViewer.nodes()") for s in ("before", "after")]
    finally:
        ctx.close()
    opens_s, show_ms = [], []
    for _ in range(opens):
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        try:
            page = ctx.new_page()
            page.set_default_timeout(timeout_s * 1000)
            page.goto(base + "/graph" + query)
            got = _wait_readable(page, timeout_s)
            nav = page.evaluate("() => performance.timeOrigin")
            opens_s.append((max(got["before"]["at"], got["after"]["at"]) - nav) / 1000)
            show_ms.append(max(got["before"]["show_ms"], got["after"]["show_ms"]))
            row["k"] = got["before"]["k"]
            _idle(page, timeout_s)
            last = page
        finally:
            if _ < opens - 1:
                ctx.close()
    try:
        row["open_s"] = round(statistics.median(opens_s), 2)
        row["open_s_all"] = [round(x, 2) for x in opens_s]
        row["show_ms"] = round(statistics.median(show_ms))
        res = last.evaluate(FRAMES_JS)
        total = [f[0] for f in res["frames"]]
        work = [f[1] for f in res["frames"]]
        q = statistics.quantiles(total, n=10)
        row["frame_ms"] = {"median": round(statistics.median(total), 1), "p90": round(q[-1], 1),
                           "max": round(max(total), 1), "n": len(total)}
        row["work_ms_median"] = round(statistics.median(work), 1)
        row["frames_synced"] = res["synced"]
        _idle(last, timeout_s)
        found, confirmed = [], []
        for name in _search_targets(last):
            f_ms, c_ms = _search_ms(last, name, timeout_s)
            found.append(f_ms)
            confirmed.append(c_ms)
        row["search_ms"] = round(statistics.median(found)) if found else None
        row["search_ms_all"] = [round(x) for x in found]
        row["search_selected_ms"] = round(statistics.median(confirmed)) if confirmed else None
        row["search_selected_ms_all"] = [round(x) for x in confirmed]
    finally:
        ctx.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ppocr_v4_det,flat3000",
                    help="wild-corpus names or flatN (comma-separated); ppocr_v4_det: 330 nodes")
    ap.add_argument("--opens", type=int, default=3, help="warm openings in a new tab per model")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=Path, default=ROOT / "artifacts" / "bench_viewer.json")
    args = ap.parse_args()
    from conftest import fresh_server
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        sys.exit(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in [m for m in args.models.split(",") if m]:
                path = model_path(name, Path(tmp))
                if path is None:
                    print(json.dumps({"model": name, "skipped": "not in the local corpus cache"}), flush=True)
                    continue
                # A flat synthetic model is drawn node by node (collapsed, its first screen holds a few
                # blocks, fewer than MIN_LEGIBLE labels): the case of drawing 3,000 nodes at once.
                query = "?g.collapse=off" if name.startswith("flat") else ""
                with fresh_server("--model", str(path), name=f"bench-viewer-{name}") as base:
                    row = {"model": name, "query": query, **measure(browser, base, args.opens, args.timeout, query)}
                row["load_avg_1min"] = round(os.getloadavg()[0], 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            browser.close()
    print()
    print(f"{'model':<16}{'nodes b/a':>12}{'cold s':>8}{'open s':>8}{'show ms':>9}{'frame ms med/p90/max':>24}"
          f"{'work ms':>9}{'search ms':>11}{'selected ms':>13}")
    for r in rows:
        f = r["frame_ms"]
        frames = f"{f['median']}/{f['p90']}/{f['max']}"
        nodes = "/".join(map(str, r["nodes"]))
        print(f"{r['model']:<16}{nodes:>12}{r['cold_s']:>8}{r['open_s']:>8}{r['show_ms']:>9}{frames:>24}"
              f"{r['work_ms_median']:>9}{r['search_ms']!s:>11}{r['search_selected_ms']!s:>13}")
    print("targets: open ≤ 2 s, frame median ≤ 50 ms, search ≤ 300 ms")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
