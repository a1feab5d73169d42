"""Browser-measured latency of toggling a pass on the Passes page.

Starts ``streamlit run app.py`` on a free port, opens the Passes page of a sample in Debian's
chromium (Playwright), and for each chosen pass clicks its toggle and measures, in the browser,
the time from the click until the drawn graph's node set has changed. Each pass is toggled off
("first": that selection was never shown; the app may have prefetched it while the person was
reading, ``--think`` seconds) and back on ("again": shown before), ``--repeat`` times,
interleaved across passes.

Usage::

    .venv/bin/python benchmarks/bench_toggle.py [--sample bert_ts] [--passes a,b] [--repeat 3]

Prints one line per measurement and a summary (median / max per kind) as JSON at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import CHROMIUM, CHROMIUM_ARGS, free_port, start_server, stop_server  # noqa: E402

SIGNATURE_JS = """
() => {
  const docs = [document];
  for (const f of document.querySelectorAll('iframe')) {
    try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
  }
  const t = [];
  for (const d of docs) for (const x of d.querySelectorAll('svg g.node')) t.push(x.textContent);
  return t.join('|');
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
    """(the app's first-screen selection, the passes in it that change this sample)."""
    from fusionviz import samples
    from fusionviz.passes import all_passes, run_pipeline

    names = [p.name for p in all_passes() if p.category.value in ("simplify", "fuse")]
    result = run_pipeline(samples.load_sample(sample).proto, names)
    active = [r.name for r in result.reports if r.changes and not r.error]
    return names, active


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default="bert_ts")
    ap.add_argument("--passes", default=None, help="passes to toggle (default: every pass that changes the sample)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--think", type=float, default=8.0,
                    help="seconds between toggles (a person reading the page; the app prefetches meanwhile)")
    ap.add_argument("--screenshot", default=str(ROOT / "artifacts" / "bench_toggle.png"))
    args = ap.parse_args(argv)

    selection, active = _default_passes(args.sample)
    targets = args.passes.split(",") if args.passes else active
    from fusionviz.passes import get_pass

    titles = {n: get_pass(n).title for n in targets}
    from playwright.sync_api import sync_playwright

    port = free_port()
    log = ROOT / "artifacts" / "bench_toggle_server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = start_server(port, log_path=log)
    rows: list[dict] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(120_000)
            t0 = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/passes?sample={args.sample}&passes={','.join(selection)}")
            page.wait_for_function(CHANGED_JS, arg="", polling="raf", timeout=120_000)
            print(f"first graph on the Passes page after {time.perf_counter() - t0:.2f} s (cold server)")
            time.sleep(max(2.0, args.think))  # the rest of the page, and the app's prefetch
            for rep in range(args.repeat):
                for name in targets:
                    for state in ("off", "on"):
                        prev = page.evaluate(SIGNATURE_JS)
                        toggle = page.get_by_text(titles[name], exact=True)
                        start = time.perf_counter()
                        toggle.click()
                        try:
                            page.wait_for_function(CHANGED_JS, arg=prev, polling="raf", timeout=30_000)
                        except Exception:  # noqa: BLE001 - the drawn node set did not change
                            print(f"round {rep} {name:<28} -> {state:<3} no visible change in 30 s")
                            time.sleep(args.think)
                            continue
                        dt = time.perf_counter() - start
                        kind = "first" if rep == 0 and state == "off" else "again"
                        rows.append({"pass": name, "to": state, "round": rep, "kind": kind, "seconds": dt})
                        print(f"round {rep} {name:<28} -> {state:<3} {dt * 1000:7.0f} ms  ({kind})")
                        time.sleep(args.think)
            page.screenshot(path=args.screenshot)
            browser.close()
    finally:
        stop_server(proc)
    summary = {}
    for kind in ("first", "again"):
        xs = [r["seconds"] for r in rows if r["kind"] == kind]
        if xs:
            summary[kind] = {"n": len(xs), "median_s": round(statistics.median(xs), 3),
                             "max_s": round(max(xs), 3)}
    print(json.dumps({"sample": args.sample, "toggled": targets, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
