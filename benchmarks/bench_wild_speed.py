"""Pipeline time on the wild corpus: ours (with the validity rule) against onnxslim, side by side.

For every corpus model, in one process, alternating (ours+rule, ours without the rule,
onnxslim) ``--repeat`` times after one untimed warm-up of each, keeping the best of each, so a
noisy neighbour hurts all alike:

- ``ours``: ``run_pipeline(model, --all, keep_snapshots=False)`` as ``optimize --all`` runs it,
  validity rule included (one final check; a pass-by-pass re-run only when it fails);
- ``no rule``: the same with ``validate=False``: the rule's cost is the difference;
- ``onnxslim``: ``onnxslim.slim(model)`` with its defaults.

Prints per model the times and ratios, the geomean of ours / onnxslim, and every model of up to
1,000 nodes whose pipeline took more than 2 s. Writes ``artifacts/wild/speed.json``.

    python benchmarks/bench_wild_speed.py [--repeat 3] [--ci] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusionviz.corpus import fetch_corpus, load_manifest, select  # noqa: E402
from fusionviz.passes import registry  # noqa: E402
from fusionviz.passes.pipeline import count_nodes, run_pipeline  # noqa: E402


def _ours(model: onnx.ModelProto, validate: bool) -> tuple[float, int, int]:
    t = time.perf_counter()
    r = run_pipeline(model, registry.default_passes(), keep_snapshots=False, validate=validate)
    return time.perf_counter() - t, r.nodes_after, sum(1 for x in r.reports if x.declined)


def _slim(model: onnx.ModelProto) -> tuple[float, int | None]:
    import onnxslim

    copy = onnx.ModelProto.FromString(model.SerializeToString())
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            out = onnxslim.slim(copy)
        return time.perf_counter() - t, count_nodes(out) if out is not None else None
    except Exception:  # noqa: BLE001 - a failing reference is a result
        return time.perf_counter() - t, None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ci", action="store_true")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    entries = select(load_manifest(), ci=args.ci, only=args.only)
    paths = fetch_corpus(entries)
    rows = []
    print(f"{'model':<28} {'nodes':>6} {'ours s':>7} {'no rule':>7} {'slim s':>7} {'ours/slim':>9} "
          f"{'rule cost':>9} {'after ours/slim':>15}")
    for e in entries:
        if e.name not in paths:
            continue
        model = onnx.load(str(paths[e.name]))
        n = count_nodes(model)
        ours, bare, slim = [], [], []
        after = slim_after = None
        declined = 0
        _ours(model, True), _ours(model, False), _slim(model)  # warm-up: imports, rule caches
        for _ in range(args.repeat):
            t, after, declined = _ours(model, True)
            ours.append(t)
            bare.append(_ours(model, False)[0])
            t, slim_after = _slim(model)
            slim.append(t)
        row = {"model": e.name, "nodes": n, "ours_s": min(ours), "no_rule_s": min(bare), "slim_s": min(slim),
               "nodes_after": after, "slim_nodes_after": slim_after, "declined": declined}
        row["ratio"] = row["ours_s"] / row["slim_s"]
        row["rule_cost_s"] = row["ours_s"] - row["no_rule_s"]
        rows.append(row)
        print(f"{e.name:<28} {n:>6} {row['ours_s']:>7.3f} {row['no_rule_s']:>7.3f} {row['slim_s']:>7.3f} "
              f"{row['ratio']:>9.2f} {row['rule_cost_s']:>9.3f} {after!s:>7}/{slim_after!s:<7}", flush=True)
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / max(len(rows), 1))
    slow = [r for r in rows if r["nodes"] <= 1000 and r["ours_s"] > 2.0]
    print(f"geomean ours/onnxslim over {len(rows)} models: {geo:.3f}; "
          f"models <= 1000 nodes over 2 s: {len(slow)} {[r['model'] for r in slow]}")
    out = Path("artifacts/wild")
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.json").write_text(json.dumps({"rows": rows, "geomean": geo}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
