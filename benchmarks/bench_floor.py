"""How much of each wild-corpus model's time any graph change could remove: the call floor.

Per corpus model (inputs: fusionviz's own plan, as ``bench_backends.py`` makes them), one
interleaved run (1 thread, fresh workers) of

* ``ort_all``: the original under onnxruntime level all (the baseline of ``bench_backends.py``);
* ``floor``: a model with the same inputs and one ``Identity`` of the smallest input as its only
  output, also under level all. Its time is what one ``InferenceSession.run`` call costs with
  these feeds before any operator runs (binding the inputs, the executor, returning an output):
  no rewrite of the graph can go below it on onnxruntime.

Printed per model: ORT all ms, floor ms, floor / ORT all, and, when ``bench_backends.json`` holds
the model, tune's confirmed ratio beside ``(floor + (t - floor) / 2) / t``: the ratio a variant
would reach if it halved every operator's time. The geometric mean of that bound says how far a
corpus of small models is from a given speed-up goal however good the passes are.

    python benchmarks/bench_floor.py [--only NAME ...] [--min-time 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def floor_model(proto):
    """The same graph inputs, one ``Identity`` of the smallest one as the only output."""
    import onnx
    from onnx import helper

    init = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in init]

    def size(vi) -> int:
        dims = vi.type.tensor_type.shape.dim
        return math.prod(d.dim_value if d.HasField("dim_value") else 1 << 20 for d in dims)

    src = min(inputs, key=size)
    out = onnx.ValueInfoProto()
    out.CopyFrom(src)
    out.name = "floor_out"
    graph = helper.make_graph([helper.make_node("Identity", [src.name], ["floor_out"])], "floor", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def one(name: str, path: str, min_time: float) -> dict:
    from fusionviz import model_io
    from fusionviz.bench import Variant, run_benchmark
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.tune import TuneConfig
    from fusionviz.verify import probe

    loaded = model_io.load_path(path)
    plan = probe(loaded.proto, plan_inputs(loaded.proto, InputSpec()), isolated=False)
    settings = TuneConfig((), "all").settings()
    res = run_benchmark([Variant("ort_all", loaded.proto, settings), Variant("floor", floor_model(loaded.proto), settings)],
                        shapes=plan.shapes(), feeds=plan.feeds("normal"), min_time_s=min_time, max_rounds=400)
    by = {r.label: r for r in res}
    if by["ort_all"].stats is None or by["floor"].stats is None:
        return {"model": name, "error": by["ort_all"].error or by["floor"].error}
    t, f = by["ort_all"].stats.median_ms, by["floor"].stats.median_ms
    return {"model": name, "ort_all_ms": t, "floor_ms": f}


def _geo(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="model names")
    ap.add_argument("--min-time", type=float, default=0.5, help="timed seconds per variant (default 0.5)")
    ap.add_argument("--backends", default="artifacts/backends/bench_backends.json",
                    help="bench_backends.py's results, for tune's ratio beside the bound")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    entries = select(load_manifest(), only=args.only)
    paths = fetch_corpus(entries)
    tuned: dict[str, float] = {}
    store = ROOT / args.backends
    if store.exists():
        for r in json.loads(store.read_text()).get("rows", []):
            if r.get("tuned") and r.get("group", "wild") == "wild":
                tuned[r["model"]] = r["tuned"][0]
    rows = []
    print(f"| {'model':<30} | {'ORT all ms':>10} | {'floor ms':>9} | {'floor/ORT':>9} | "
          f"{'halved ops':>10} | {'tuned':>6} |")
    print("|" + "|".join("-" * w for w in (32, 12, 11, 11, 12, 8)) + "|")
    for e in entries:
        if e.name not in paths:
            continue
        try:
            row = one(e.name, str(paths[e.name]), args.min_time)
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            row = {"model": e.name, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        if row.get("error"):
            print(f"| {e.name:<30} | failed: {' '.join(str(row['error']).split())[:100]} |", flush=True)
            continue
        t, f = row["ort_all_ms"], min(row["floor_ms"], row["ort_all_ms"])
        row["floor_share"] = f / t
        row["halved_bound"] = (f + (t - f) / 2) / t
        tr = tuned.get(e.name)
        print(f"| {e.name:<30} | {t:>10.3f} | {f:>9.4f} | {row['floor_share']:>9.3f} | "
              f"{row['halved_bound']:>10.3f} | {(f'{tr:.3f}' if tr else '-'):>6} |", flush=True)
    ok = [r for r in rows if not r.get("error")]
    print()
    print(f"models {len(ok)}; floor / ORT all over 0.25 on {sum(r['floor_share'] > 0.25 for r in ok)}, "
          f"over 0.5 on {sum(r['floor_share'] > 0.5 for r in ok)}")
    print(f"geomean of the bound 'every operator twice as fast': {_geo([r['halved_bound'] for r in ok]):.3f}")
    both = [r for r in ok if r["model"] in tuned]
    if both:
        print(f"geomean tuned / ORT all on the same models: {_geo([tuned[r['model']] for r in both]):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
