"""Browser-measured latency of toggling a pass on the Passes page.

Starts ``streamlit run app.py`` on a free port, opens the Passes page of a sample in Debian's
chromium (Playwright), and for each chosen pass clicks its toggle and measures the time from the
click until the drawn graph's node set has changed. Each pass is toggled off ("first": that
selection was never shown; the app may have prefetched it while the person was reading,
``--think`` seconds) and back on ("again": shown before), ``--repeat`` times, interleaved across
passes.

Two clocks: ``browser`` is taken inside the page (the toggle's pointerdown event to the first
animation frame that shows the new node set: what the person waits for); ``wall`` is taken in
this script around Playwright's click and wait (adds Playwright's own round trips; the figure
earlier versions of this script reported). Per toggle the page also records when the app's script
run started and ended (``run_start``/``run_end``, browser clock, from the click), which tells the
server's share from the browser's.

Usage::

    .venv/bin/python benchmarks/bench_toggle.py [--sample bert_ts] [--passes a,b] [--repeat 3]
        [--against OTHER_CHECKOUT]

With ``--against``, a second server runs from another checkout (the code before a change) and
every toggle is made on both, alternating which goes first: a before/after comparison under the
same machine load (on a shared machine, runs minutes apart are not comparable).

Prints one line per measurement and a summary (median / max per kind and clock) as JSON at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    DRAWN_NODES_JS,
    free_port,
    start_server,
    stop_server,
)

# Arms the in-page clock before a click: the toggle's pointerdown, the app's script run starting
# and ending, and the first frame whose node set differs from ``prev``.
ARM_JS = """
(prev) => {
  const rec = window.__fvToggle = {};
  const docsOf = () => {
    const docs = [document];
    for (const f of document.querySelectorAll('iframe')) {
      try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
    }
    return docs;
  };
  const sig = () => {
    const t = [];
    for (const d of docsOf()) for (const x of d.querySelectorAll('svg g.node')) t.push(x.textContent);
    return t.join('|');
  };
  document.addEventListener('pointerdown', () => { if (rec.click === undefined) rec.click = performance.now(); },
                            { capture: true, once: true });
  const tick = () => {
    if (rec.click !== undefined) {
      const st = document.querySelector('[data-testid="stApp"]').getAttribute('data-test-script-state');
      if (st === 'running' && rec.run_start === undefined) rec.run_start = performance.now();
      if (rec.run_start !== undefined && st === 'notRunning' && rec.run_end === undefined) rec.run_end = performance.now();
      const s = sig();
      if (s.length && s !== prev) { rec.graph = performance.now(); return; }
    }
    if (!rec.stop) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  return true;
}
"""

CHANGED_JS = """
(prev) => {
  const docs = [document];
  for (const f of document.querySelectorAll('iframe')) {
    try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
  }
  const t = [];
  for (const d of docs) for (const x of d.querySelectorAll('svg g.node')) t.push(x.textContent);
  const s = t.join('|');
  return t.length > 0 && s !== prev;
}
"""


def _default_passes(sample: str) -> tuple[list[str], list[str]]:
    """(the app's first-screen selection, the passes in it whose toggle changes the final graph).

    A pass can report changes and still leave the final graph as it is when switched off (a later
    pass does the same job): toggling it redraws nothing, so it is not timed.
    """
    from fusionviz import samples
    from fusionviz.passes import all_passes, run_pipeline

    names = [p.name for p in all_passes() if p.category.value in ("simplify", "fuse")]
    proto = samples.load_sample(sample).proto
    result = run_pipeline(proto, names)

    def shape(model) -> list[tuple[str, str]]:
        return sorted((n.name, n.op_type) for n in model.graph.node)

    final = shape(result.final)
    active = [r.name for r in result.reports if r.changes and not r.error]
    return names, [n for n in active if shape(run_pipeline(proto, [x for x in names if x != n]).final) != final]


def _start_other(tree: Path, port: int, log: Path) -> subprocess.Popen:
    """``streamlit run app.py`` from another checkout ``tree`` (its own code), in its own group."""
    streamlit = Path(sys.executable).with_name("streamlit")
    cmd = [str(streamlit), "run", "app.py", "--server.port", str(port), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server in {tree} exited; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise RuntimeError(f"the server in {tree} did not become healthy")


def _toggle(page, title: str) -> dict | None:
    """Click a pass's toggle; the in-page and wall-clock latencies, or None when nothing redrew."""
    prev = "|".join(page.evaluate(DRAWN_NODES_JS, "text"))  # ARM_JS's signature
    toggle = page.get_by_text(title, exact=True)
    toggle.wait_for()
    page.evaluate(ARM_JS, prev)
    start = time.perf_counter()
    toggle.click()
    try:
        page.wait_for_function("() => window.__fvToggle && window.__fvToggle.graph !== undefined",
                               polling="raf", timeout=30_000)
    except Exception:  # noqa: BLE001 - the drawn node set did not change
        page.evaluate("() => { if (window.__fvToggle) window.__fvToggle.stop = true; }")
        return None
    wall = time.perf_counter() - start
    rec = page.evaluate("() => window.__fvToggle")
    run = {k: round((rec[k] - rec["click"]) / 1000, 3) for k in ("run_start", "run_end") if k in rec}
    return {"seconds": (rec["graph"] - rec["click"]) / 1000, "wall_seconds": wall, **run}


def _summary(rows: list[dict]) -> dict:
    out = {}
    for kind in ("first", "again", "all"):
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        if sel:
            xs = [r["seconds"] for r in sel]
            ws = [r["wall_seconds"] for r in sel]
            out[kind] = {"n": len(xs), "median_s": round(statistics.median(xs), 3), "max_s": round(max(xs), 3),
                         "wall_median_s": round(statistics.median(ws), 3), "wall_max_s": round(max(ws), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default="bert_ts")
    ap.add_argument("--passes", default=None, help="passes to toggle (default: every pass that changes the sample)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--think", type=float, default=8.0,
                    help="seconds between toggles (a person reading the page; the app prefetches meanwhile)")
    ap.add_argument("--against", default=None, metavar="DIR",
                    help="another checkout of the app (e.g. the code before a change): both servers run at "
                         "once and every toggle is made on both, alternating which goes first, so the two "
                         "are compared under the same machine load")
    ap.add_argument("--screenshot", default=str(ROOT / "artifacts" / "bench_toggle.png"))
    args = ap.parse_args(argv)

    selection, active = _default_passes(args.sample)
    targets = args.passes.split(",") if args.passes else active
    from fusionviz.passes import get_pass

    titles = {n: get_pass(n).title for n in targets}
    from playwright.sync_api import sync_playwright

    log_dir = ROOT / "artifacts"
    log_dir.mkdir(parents=True, exist_ok=True)
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    rows: list[dict] = []
    try:
        port = free_port()
        servers["this"] = (start_server(port, log_path=log_dir / "bench_toggle_server.log"), port)
        if args.against:
            port = free_port()
            servers["against"] = (_start_other(Path(args.against).resolve(), port,
                                               log_dir / "bench_toggle_server_against.log"), port)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            pages = {}
            for label, (_, port) in servers.items():
                page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
                page.set_default_timeout(120_000)
                t0 = time.perf_counter()
                page.goto(f"http://127.0.0.1:{port}/passes?sample={args.sample}&passes={','.join(selection)}")
                page.wait_for_function(CHANGED_JS, arg="", polling="raf", timeout=120_000)
                print(f"[{label}] first graph on the Passes page after {time.perf_counter() - t0:.2f} s (cold server)")
                pages[label] = page
            time.sleep(max(2.0, args.think))  # the rest of the page, and the app's prefetch
            step = 0
            for rep in range(args.repeat):
                for name in targets:
                    for state in ("off", "on"):
                        order = list(pages) if step % 2 == 0 else list(reversed(pages))
                        step += 1
                        for label in order:
                            got = _toggle(pages[label], titles[name])
                            if got is None:
                                print(f"[{label}] round {rep} {name:<28} -> {state:<3} no visible change in 30 s")
                            else:
                                kind = "first" if rep == 0 and state == "off" else "again"
                                rows.append({"side": label, "pass": name, "to": state, "round": rep, "kind": kind,
                                             **got})
                                run = {k: got[k] for k in ("run_start", "run_end") if k in got}
                                print(f"[{label}] round {rep} {name:<28} -> {state:<3} {got['seconds'] * 1000:7.0f} ms "
                                      f"browser {got['wall_seconds'] * 1000:7.0f} ms wall  run {run}  ({kind})",
                                      flush=True)
                            time.sleep(args.think / len(pages))
            pages["this"].screenshot(path=args.screenshot)
            browser.close()
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    result = {"sample": args.sample, "toggled": targets, "load_average_at_end": load}
    for label in servers:
        result["summary" if label == "this" else "summary_against"] = _summary([r for r in rows if r["side"] == label])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
