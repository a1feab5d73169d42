"""Per-tensor comparison on the wild corpus: every model's original against its ``--all`` result.

    python benchmarks/bench_compare.py                      # whole corpus
    python benchmarks/bench_compare.py --only ppocr_v4_det,silero_vad_v6
    python benchmarks/bench_compare.py --hints              # the manifest's shapes/values as the plan's spec
    python benchmarks/bench_compare.py --chunk 50           # smaller runs: more of them, less memory

Each model runs in a fresh process (``--one``): it is loaded, its inputs planned and probed as
``optimize`` does (no flags unless ``--hints``), ``run_pipeline(model, registry.default_passes())``
optimizes it, then :func:`fusionviz.compare.compare_models` compares the original with the result
in that process (not in the verification child, so the process's memory is the comparison's),
on the ``normal`` input set. A thread samples the process's RSS (psutil) every 10 ms while the
comparison runs.

Per model: nodes before → after; tensors compared (by name / through provenance), of A's tensors
how many have no counterpart in B, and how many were skipped or incomparable; runs (chunks); the
largest per-tensor error (max rel, and the tensor); the first divergence if any; the
comparison's seconds; its peak RSS (MB) and the rise over the RSS before it. Then the totals.
Writes ``artifacts/bench/compare.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(path: str, hints: dict | None, chunk: int | None, chunk_mb: float | None) -> dict:
    """In this process: plan, optimize, compare; the figures as a dict."""
    import psutil

    from fusionviz import errors, model_io
    from fusionviz.compare import DEFAULT_CHUNK_MB, DEFAULT_CHUNK_TENSORS, compare_models
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.passes import registry, run_pipeline
    from fusionviz.verify import probe

    model = model_io.load_path(path).proto
    spec = InputSpec(shapes={k: tuple(v) for k, v in ((hints or {}).get("shapes") or {}).items()},
                     values=dict((hints or {}).get("values") or {}))
    try:
        plan = probe(model, plan_inputs(model, spec))
    except errors.FusionvizError as exc:
        return {"error": f"inputs: {exc}"}
    result = run_pipeline(model, registry.default_passes(), keep_snapshots=False)
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    try:
        res = compare_models(result.original, result.final, plan=plan, input_set="normal",
                             chunk_tensors=chunk or DEFAULT_CHUNK_TENSORS, chunk_mb=chunk_mb or DEFAULT_CHUNK_MB)
    except errors.FusionvizError as exc:
        return {"error": str(exc)}
    finally:
        stop.set()
        sampler.join()
    seconds = time.perf_counter() - t
    largest = res.largest()
    first = res.first_divergence
    return {
        "nodes": [len(result.original.graph.node), len(result.final.graph.node)],
        "counts": res.counts(),
        "runs": res.runs,
        "largest": None if largest is None else {"tensor": largest.pair.name, "max_rel": _num(largest.max_rel),
                                                 "where": largest.where()},
        "first": None if first is None else {"tensor": first.pair.name, "where": first.where(),
                                             "figures": first.figures()},
        "notes": list(res.notes),
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak[0] / 2**20, 1),
        "rise_rss_mb": round((peak[0] - base) / 2**20, 1),
    }


def _num(x: float):
    return x if x == x and abs(x) != float("inf") else str(x)


def run_child(path: Path, hints: dict | None, chunk: int | None, chunk_mb: float | None, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(path),
           "--hints-json", json.dumps(hints or {})]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    if chunk_mb:
        cmd += ["--chunk-mb", str(chunk_mb)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "total_s": round(time.perf_counter() - t, 1)}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"error": tail[:300], "total_s": round(time.perf_counter() - t, 1)}
    got = json.loads(lines[-1])
    got["total_s"] = round(time.perf_counter() - t, 1)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated corpus model names")
    ap.add_argument("--hints", action="store_true", help="give the manifest's input hints (shapes, values)")
    ap.add_argument("--chunk", type=int, default=None, help="tensors per run (default: compare's)")
    ap.add_argument("--chunk-mb", type=float, default=None, help="MB per run (default: compare's)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench" / "compare.json"))
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hints-json", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, json.loads(args.hints_json), args.chunk, args.chunk_mb)))
        return 0

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    only = [s for s in args.only.split(",") if s]
    entries = select(load_manifest(), only=only) if only else load_manifest()
    fetched = fetch_corpus(entries)
    rows = []
    print(f"{'model':<30} {'nodes':>11} {'compared':>8} {'name/prov':>9} {'unmatched':>9} {'skip/inc':>8} "
          f"{'runs':>4} {'largest max rel':>15} {'s':>6} {'peak MB':>7} {'rise MB':>7}  first divergence / largest at")
    for e in entries:
        if e.name not in fetched:
            print(f"{e.name:<30} not fetched")
            continue
        r = run_child(Path(fetched[e.name]), dict(e.hints) if args.hints else None, args.chunk, args.chunk_mb,
                      args.timeout)
        rows.append({"model": e.name, **r})
        if "error" in r:
            print(f"{e.name:<30} error: {r['error']}", flush=True)
            continue
        c = r["counts"]
        largest = r["largest"] or {}
        rel = largest.get("max_rel", 0.0)
        rel_text = f"{rel:.2e}" if isinstance(rel, float) else str(rel)
        nodes = f"{r['nodes'][0]}→{r['nodes'][1]}"
        where = (f"FIRST {r['first']['tensor']} ({r['first']['where']}): {r['first']['figures']}" if r["first"]
                 else f"largest at {largest.get('tensor', '-')}")
        print(f"{e.name:<30} {nodes:>11} {c['compared']:>8} {c['by_name']:>4}/{c['through_provenance']:<4} "
              f"{c['unmatched']:>9} {c['skipped']:>3}/{c['incomparable']:<4} {r['runs']:>4} {rel_text:>15} "
              f"{r['seconds']:>6.1f} {r['peak_rss_mb']:>7.0f} {r['rise_rss_mb']:>7.0f}  {where}", flush=True)
    done = [r for r in rows if "error" not in r]
    if done:
        diverged = [r for r in done if r["first"]]
        compared = sum(r["counts"]["compared"] for r in done)
        prov = sum(r["counts"]["through_provenance"] for r in done)
        print(f"\n{len(rows)} models: {len(done)} compared, {len(rows) - len(done)} errors; {compared:,} tensors "
              f"compared ({prov:,} through provenance), {sum(r['counts']['unmatched'] for r in done):,} without a "
              f"counterpart, {sum(r['counts']['skipped'] for r in done):,} skipped, "
              f"{sum(r['counts']['incomparable'] for r in done):,} incomparable; {len(diverged)} with a tensor beyond "
              f"tolerance; comparison time {sum(r['seconds'] for r in done):.0f} s (largest "
              f"{max(r['seconds'] for r in done):.1f} s); peak RSS {max(r['peak_rss_mb'] for r in done):.0f} MB "
              f"(largest rise {max(r['rise_rss_mb'] for r in done):.0f} MB)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
