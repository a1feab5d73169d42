"""Several users at once: four browser sessions toggling passes on different samples, one server.

Starts ``streamlit run app.py`` on a free port and opens the Passes page in four separate
browser contexts of Debian's chromium (Playwright; separate cookies and sessions), each on its
own sample. For ``--seconds`` they all toggle passes at the same time (passes whose toggle
changes that sample's graph, off and back on, with ``--think`` seconds between toggles) and
measure, in the browser, the time from the click until the drawn graph has changed. After every toggle each session
checks its page: no exception box or traceback text, its own model in the sidebar and no
other session's model name anywhere. Meanwhile the server's RSS (psutil; its own process, and
with its children: verification and benchmark workers) is sampled every second. Before it
starts, every ``st.cache_data`` / ``st.cache_resource`` in the app must have ``max_entries``.

Usage::

    .venv/bin/python benchmarks/bench_sessions.py [--seconds 120] [--think 1.0]
        [--samples textbook,mobilenet,resnet_ts,resnet_dynamo] [--json OUT.json]

Prints one line per session, then toggle latency p50/p95 (all sessions), the RSS min/max and
the check failures; exits 1 when a check failed or a cache is unbounded.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import statistics
import sys
import threading
import time
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

TOGGLE_TIMEOUT_S = 60.0

IDLE_JS = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0;
}
"""


def unbounded_caches() -> list[str]:
    """``file:line`` of every ``st.cache_data`` / ``st.cache_resource`` without ``max_entries``."""
    out = []
    for path in [ROOT / "app.py", *sorted((ROOT / "fusionviz" / "ui").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("cache_data", "cache_resource"):
                if "max_entries" not in {k.arg for k in node.keywords}:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def _active_passes(sample: str) -> tuple[str, list[tuple[str, str]]]:
    """(the model's file name, [(pass name, title)] of first-screen passes whose toggle changes
    the drawn graph of the sample: the final model without the pass has other nodes)."""
    from fusionviz import samples
    from fusionviz.passes import all_passes, run_pipeline

    ps = [p for p in all_passes() if p.category.value in ("simplify", "fuse")]
    names = [p.name for p in ps]
    loaded = samples.load_sample(sample)

    def nodes(selection: list[str]) -> list[tuple[str, str]]:
        final = run_pipeline(loaded.proto, selection, keep_snapshots=False).final
        return sorted((n.op_type, n.name) for n in final.graph.node)

    full = run_pipeline(loaded.proto, names)
    active = [r.name for r in full.reports if r.changes and not r.error]
    want = nodes(names)
    visible = {p for p in active if nodes([n for n in names if n != p]) != want}
    return loaded.name, [(p.name, p.title) for p in ps if p.name in visible]


class RssSampler(threading.Thread):
    """Samples the server's RSS (MB), alone and with its children, every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        import psutil

        self.proc = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []  # (t, server MB, with children MB)
        self._halt = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._halt.is_set():
            try:
                own = self.proc.memory_info().rss
                kids = 0
                for c in self.proc.children(recursive=True):
                    try:
                        kids += c.memory_info().rss
                    except Exception:  # noqa: BLE001 - a child that just exited
                        pass
                self.samples.append((time.monotonic() - t0, own / 2**20, (own + kids) / 2**20))
            except Exception:  # noqa: BLE001 - the server is gone
                return
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()


async def _wait_idle(page, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    calm = 0
    while time.monotonic() < deadline:
        calm = calm + 1 if await page.evaluate(IDLE_JS) else 0
        if calm >= 2:
            return
        await asyncio.sleep(0.25)
    raise TimeoutError("the app did not finish its run")


async def _check(page, own: str, others: list[str], problems: list[str], sid: int) -> None:
    if await page.locator('[data-testid="stException"]').count():
        problems.append(f"session {sid}: an exception box is on the page")
    text = await page.inner_text("body")
    if "Traceback" in text:
        problems.append(f"session {sid}: traceback text on the page")
    if "Something went wrong" in text:
        problems.append(f"session {sid}: an internal error line on the page")
    side = await page.locator('[data-testid="stSidebar"]').inner_text()
    if own not in side:
        problems.append(f"session {sid}: the sidebar does not name its model {own}")
    for name in others:
        if name in text:
            problems.append(f"session {sid}: sees another session's model {name}")


async def session(browser, base: str, sid: int, sample: str, model_name: str, passes: list[tuple[str, str]],
                  others: list[str], deadline: float, think: float, problems: list[str],
                  shots: Path) -> dict:
    """One user: toggle passes until ``deadline``; returns its latencies and counts."""
    ctx = await browser.new_context(viewport={"width": 1500, "height": 950})
    page = await ctx.new_page()
    page.set_default_timeout(180_000)
    latencies: list[float] = []
    timeouts = 0
    try:
        await page.goto(f"{base}/passes?sample={sample}")
        await page.get_by_role("heading", name="Passes: what if?").first.wait_for()
        await _wait_idle(page)
        await _check(page, model_name, others, problems, sid)
        k = 0
        while time.monotonic() < deadline and passes:
            # Each pass off, then back on: the selection is always one toggle from the first
            # screen, where every chosen pass changes the drawn graph.
            name, title = passes[(k // 2) % len(passes)]
            k += 1
            before = "|".join(await page.evaluate(DRAWN_NODES_JS, "text"))
            t0 = time.perf_counter()
            await page.get_by_text(title, exact=True).first.click()
            changed = False
            while time.perf_counter() - t0 < TOGGLE_TIMEOUT_S:
                sig = "|".join(await page.evaluate(DRAWN_NODES_JS, "text"))
                if sig and sig != before:
                    changed = True
                    break
                await asyncio.sleep(0.02)
            if changed:
                latencies.append(time.perf_counter() - t0)
            else:
                timeouts += 1
                problems.append(f"session {sid}: toggling {name} did not redraw the graph within "
                                f"{TOGGLE_TIMEOUT_S:.0f} s")
            await _wait_idle(page)
            await _check(page, model_name, others, problems, sid)
            await asyncio.sleep(think)
        shots.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(shots / f"bench_sessions_{sid}_{sample}.png"))
    except Exception as exc:  # noqa: BLE001 - reported as a failed check
        problems.append(f"session {sid}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    finally:
        await ctx.close()
    return {"session": sid, "sample": sample, "toggles": len(latencies), "timeouts": timeouts,
            "latencies_s": latencies}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


async def run(base: str, samples_: list[str], seconds: float, think: float, problems: list[str]) -> list[dict]:
    from playwright.async_api import async_playwright

    info = {s: _active_passes(s) for s in samples_}
    names = {s: info[s][0] for s in samples_}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        deadline = time.monotonic() + seconds
        shots = ROOT / "artifacts" / "screens"
        tasks = [session(browser, base, i, s, names[s], info[s][1], [n for t, n in names.items() if t != s],
                         deadline, think, problems, shots) for i, s in enumerate(samples_)]
        out = await asyncio.gather(*tasks)
        await browser.close()
    return list(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--think", type=float, default=1.0, help="seconds between one session's toggles")
    ap.add_argument("--samples", default="textbook,mobilenet,resnet_ts,resnet_dynamo")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)

    unbounded = unbounded_caches()
    if unbounded:
        print("unbounded caches (no max_entries): " + ", ".join(unbounded))
        return 1
    print("caches: every st.cache_* in app.py and fusionviz/ui has max_entries")
    if not Path(CHROMIUM).exists():
        print(f"chromium not found at {CHROMIUM}")
        return 1
    samples_ = [s for s in args.samples.split(",") if s]
    log = ROOT / "artifacts" / "bench_sessions_server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_server(port, "--sample", "resnet_ts", log_path=log)
    sampler = RssSampler(proc.pid)
    sampler.start()
    problems: list[str] = []
    t0 = time.monotonic()
    try:
        results = asyncio.run(run(f"http://127.0.0.1:{port}", samples_, args.seconds, args.think, problems))
    finally:
        sampler.stop()
        sampler.join(timeout=5)
        stop_server(proc)
    wall = time.monotonic() - t0
    lat = [x for r in results for x in r["latencies_s"]]
    for r in results:
        xs = r["latencies_s"]
        print(f"session {r['session']} {r['sample']:<14} toggles {r['toggles']:>3}  timeouts {r['timeouts']}  "
              f"p50 {_pct(xs, 0.5):6.2f} s  p95 {_pct(xs, 0.95):6.2f} s  max {max(xs, default=float('nan')):6.2f} s")
    own = [s[1] for s in sampler.samples]
    total = [s[2] for s in sampler.samples]
    figures = {
        "sessions": len(results), "seconds": round(wall, 1), "toggles": len(lat),
        "timeouts": sum(r["timeouts"] for r in results),
        "toggle_p50_s": round(_pct(lat, 0.5), 3), "toggle_p95_s": round(_pct(lat, 0.95), 3),
        "toggle_mean_s": round(statistics.fmean(lat), 3) if lat else None,
        "rss_server_min_mb": round(min(own), 1) if own else None,
        "rss_server_max_mb": round(max(own), 1) if own else None,
        "rss_server_last_mb": round(own[-1], 1) if own else None,
        "rss_with_children_max_mb": round(max(total), 1) if total else None,
        "rss_samples": len(own), "problems": problems,
    }
    print(f"toggle -> graph redrawn, all sessions: n={len(lat)}  p50 {figures['toggle_p50_s']} s  "
          f"p95 {figures['toggle_p95_s']} s")
    print(f"server RSS: min {figures['rss_server_min_mb']} MB  max {figures['rss_server_max_mb']} MB  "
          f"last {figures['rss_server_last_mb']} MB  (with children max {figures['rss_with_children_max_mb']} MB)")
    if own:
        step = max(1, len(sampler.samples) // 12)
        print("RSS over time (s: MB): " + "  ".join(f"{t:.0f}: {m:.0f}" for t, m, _ in sampler.samples[::step]))
    print("checks: " + ("all passed" if not problems else f"{len(problems)} failed"))
    for p in problems[:20]:
        print(f"  {p}")
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "per_session": results}, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
