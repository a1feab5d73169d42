"""Wall time of a zoo sweep on local Ray with 1 worker vs 2 (correctness only), end to end.

    python benchmarks/bench_sweep.py                 # the wild corpus, --passes each
    python benchmarks/bench_sweep.py --ci --passes all,eliminate_common_subexpressions
    python benchmarks/bench_sweep.py --workers 2,1   # another order
    python benchmarks/bench_sweep.py --first 12 --workers 1,2,1,2,1,2   # alternating, on a subset

Each run is the real command line, ``python -m fusionviz sweep wild --passes each --workers N``,
with a fresh store (nothing is skipped), so its time includes Ray's start-up and the input
planning of every model. The machine is shared, so each run also reports the load average
before and after it and the CPU seconds it used (its whole process tree: driver, raylet,
workers), and ``cores`` = CPU seconds / wall seconds, the cores it actually got: a 2-worker run
that got 1.3 cores because neighbours took the rest cannot show a 2x speed-up. With repeated
worker counts (``1,2,1,2``) the runs alternate, so both counts see the same neighbours, and
the speed-up is the ratio of the median wall times. Prints each run, the speed-up over one
worker, and the totals per status;
writes ``artifacts/sweep/bench_sweep.json`` and keeps each run's results as
``artifacts/sweep/wild_<passes>_w<N>.csv``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _tree_cpu(proc: subprocess.Popen, every_s: float = 0.5) -> float:
    """Wait for ``proc``; return the CPU seconds of its whole process tree (the Ray workers are
    grandchildren that the parent never reaps, so ``RUSAGE_CHILDREN`` misses them): each
    process's last sampled user+system time, summed."""
    import psutil

    seen: dict[tuple[int, float], float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                seen[(p.pid, p.create_time())] = t.user + t.system
            except psutil.NoSuchProcess:
                continue
        time.sleep(every_s)
    return sum(seen.values())


def run_once(models: list[str], passes: str, workers: int, out: Path, tmp: Path) -> dict:
    """One sweep through the CLI with a fresh store; returns its wall time and totals."""
    from fusionviz.sweep import read_results, totals

    db = tmp / f"w{workers}.sqlite"
    cmd = [sys.executable, "-m", "fusionviz", "sweep", *models, "--passes", passes, "--workers", str(workers),
           "--out", str(out), "--db", str(db), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load0 = _load()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env, cwd=ROOT)
        cpu = _tree_cpu(proc)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read().decode(), err_f.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"sweep with {workers} worker(s) failed ({proc.returncode}): {stderr.strip()[-500:]}")
    rows = read_results(out)
    return {"workers": workers, "wall_s": wall, "cpu_s": cpu, "cores": cpu / wall, "cells": len(rows),
            "totals": totals(rows), "load_before": load0, "load_after": _load(), "stdout": stdout.strip()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ci", action="store_true", help="only the corpus's CI subset (a quick check)")
    ap.add_argument("--first", type=int, default=0, metavar="N", help="only the manifest's first N models")
    ap.add_argument("--passes", default="each", help="the sweep's --passes (default each)")
    ap.add_argument("--workers", default="1,2", help="worker counts to run, in order (default 1,2)")
    ap.add_argument("--out", default="artifacts/sweep", help="folder for the results and the JSON")
    args = ap.parse_args(argv)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    entries = select(load_manifest(), ci=True) if args.ci else load_manifest()
    if args.first > 0:
        entries = entries[:args.first]
    fetched = fetch_corpus(entries)  # before timing: downloads are not part of a sweep's time
    for f in fetched.failures:
        print(f"fetch failed: {f.name}: {f.reason}", file=sys.stderr)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.ci or args.first > 0:
        manifest = out / "subset_manifest.json"
        names = {e.name for e in entries}
        raw = json.loads((ROOT / "fusionviz" / "corpus" / "manifest.json").read_text())
        manifest.write_text(json.dumps([e for e in raw if e["name"] in names], indent=1))
        models = [str(manifest)]
        corpus = f"{len(entries)} corpus models"
    else:
        models = ["wild"]
        corpus = "wild"
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    label = args.passes.replace(",", "_").replace("+", "-")
    runs = []
    with tempfile.TemporaryDirectory(prefix="fusionviz-bench-sweep-") as tmp:
        for k, n in enumerate(counts):
            print(f"sweep {corpus} --passes {args.passes} --workers {n} ...", file=sys.stderr, flush=True)
            r = run_once(models, args.passes, n, out / f"wild_{label}_w{n}.csv", Path(tmp) / str(k))
            runs.append(r)
            print(f"  {n} worker(s): {r['wall_s']:.1f} s for {r['cells']} cells, {r['cores']:.2f} cores "
                  f"(load avg {r['load_before']:.1f} -> {r['load_after']:.1f})", file=sys.stderr, flush=True)
    medians = {n: statistics.median(r["wall_s"] for r in runs if r["workers"] == n) for n in dict.fromkeys(counts)}
    base = medians.get(1, next(iter(medians.values())))
    print(f"{'workers':>7}  {'wall s':>8}  {'CPU s':>8}  {'cores':>5}  {'cells':>5}  load before/after")
    for r in runs:
        print(f"{r['workers']:>7}  {r['wall_s']:8.1f}  {r['cpu_s']:8.1f}  {r['cores']:5.2f}  {r['cells']:>5}  "
              f"{r['load_before']:.1f}/{r['load_after']:.1f}")
    speedups = {n: base / m for n, m in medians.items()}
    print("speed-up (median wall of 1 worker / median wall of N): "
          + ", ".join(f"{n} workers {s:.2f}x" for n, s in speedups.items()))
    last = runs[-1]
    print("totals (last run): " + ", ".join(f"{k} {v}" for k, v in last["totals"].items()))
    (out / "bench_sweep.json").write_text(json.dumps({"passes": args.passes, "corpus": corpus, "runs": runs,
                                                      "median_wall_s": medians, "speedup": speedups,
                                                      "cpus": os.cpu_count()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
