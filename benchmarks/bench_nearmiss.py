"""What recording near misses costs: the ``--all`` pipeline with and without it, on every corpus model.

    python benchmarks/bench_nearmiss.py              # whole wild corpus, 3 rounds
    python benchmarks/bench_nearmiss.py --rounds 5 --only ppocr_v4_det,smart_turn_v3_2_qdq

Per model the two variants run interleaved in one process (A B B A A B ..., after one warm-up
run of each, which is discarded; a variant always run second measured up to 1.4x slower on a
small model), ``run_pipeline(model, every exact pass, keep_snapshots=False)`` as the
CLI's ``optimize`` runs it, without verification. Prints per model the median seconds of each,
their ratio and the near misses found, then the geometric mean of the ratios and the worst
model; writes ``artifacts/bench/nearmiss.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _time(model, names, near: bool) -> tuple[float, int]:
    from fusionviz.passes import run_pipeline

    t = time.perf_counter()
    result = run_pipeline(model, names, keep_snapshots=False, near_misses=near)
    return time.perf_counter() - t, sum(r.near_miss_total for r in result.reports)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of each variant per model (after a warm-up)")
    ap.add_argument("--only", default="", help="comma-separated corpus model names")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench" / "nearmiss.json"))
    args = ap.parse_args(argv)

    from fusionviz import errors, model_io
    from fusionviz.corpus import fetch_corpus, load_manifest, select
    from fusionviz.passes import registry

    only = [s for s in args.only.split(",") if s]
    entries = select(load_manifest(), only=only) if only else load_manifest()
    fetched = fetch_corpus(entries)
    names = registry.default_passes()
    rows = []
    print(f"{'model':<30} {'nodes':>6} {'off s':>8} {'on s':>8} {'on/off':>7} {'near misses':>11}")
    for e in entries:
        if e.name not in fetched:
            continue
        try:
            model = model_io.load_path(Path(fetched[e.name])).proto
        except errors.FusionvizError as exc:
            print(f"{e.name:<30} cannot load: {exc}")
            continue
        _time(model, names, False)
        _, found = _time(model, names, True)  # warm-up of each, discarded
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(args.rounds):  # A B, then B A: neither variant always runs second
            for near in ((False, True) if i % 2 == 0 else (True, False)):
                times[near].append(_time(model, names, near)[0])
        off, on = times[False], times[True]
        m_off, m_on = statistics.median(off), statistics.median(on)
        rows.append({"model": e.name, "nodes": len(model.graph.node), "off_s": m_off, "on_s": m_on,
                     "ratio": m_on / m_off, "near_misses": found})
        print(f"{e.name:<30} {len(model.graph.node):>6} {m_off:>8.3f} {m_on:>8.3f} {m_on / m_off:>7.3f} {found:>11}",
              flush=True)
    if not rows:
        print("no corpus model could be run")
        return 1
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    total_off = sum(r["off_s"] for r in rows)
    total_on = sum(r["on_s"] for r in rows)
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"\n{len(rows)} models, {args.rounds} rounds each: geomean on/off {geo:.3f}; total {total_off:.2f} s off, "
          f"{total_on:.2f} s on ({total_on / total_off:.3f}); worst {worst['model']} {worst['ratio']:.3f}; "
          f"near misses found {sum(r['near_misses'] for r in rows)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rounds": args.rounds, "geomean_ratio": geo, "total_ratio": total_on / total_off,
                               "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
