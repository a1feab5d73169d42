"""Issue 7 §4: precision variants, speed beside error, in one interleaved run per model.

Per model (fusionviz.bench: a worker per variant, rotating rounds, 1 thread, every variant's
outputs compared with the original fp32 model on the same inputs):

- ``orig@all``: the original under ORT_ENABLE_ALL (the baseline of every ratio);
- ``fp32 --all@all``: every exact pass (fp32);
- ``fp16``, ``int8_dynamic``, ``int8_static``: every exact pass plus that precision pass (which
  runs after the fusions and before the layout capture).

Printed: median ms, paired ratio vs orig@all (median over rounds of round-median ratios),
max abs / max rel error, cosine, and top-1 agreement for outputs that look like class scores.
The speed-vs-error scatter (the chart the app's Benchmark page shows) is written per model to
``artifacts/precision/<model>.html``.

Usage: python benchmarks/bench_precision.py [--models resnet_ts,mobilenet,bert_ts] [--min-time 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusionviz import charts, samples  # noqa: E402
from fusionviz.bench import Settings, Variant, run_benchmark  # noqa: E402
from fusionviz.passes import registry, run_pipeline  # noqa: E402

PRECISION = ("fp16", "int8_dynamic", "int8_static")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet_ts,mobilenet,bert_ts,bert_dynamo")
    ap.add_argument("--min-time", type=float, default=1.5)
    ap.add_argument("--seq", type=int, default=128, help="sequence length for the BERT samples")
    args = ap.parse_args()
    out_dir = ROOT / "artifacts" / "precision"
    out_dir.mkdir(parents=True, exist_ok=True)
    exact = registry.default_passes()
    print("| model | variant | median ms | paired ratio vs orig@all | max abs | max rel | cosine | top-1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        model = samples.load_sample(name).proto
        names = {i.name for i in model.graph.input}
        shapes = {n: [1, args.seq] for n in names} if "input_ids" in names else None
        fp32 = run_pipeline(model, exact, shapes=shapes, keep_snapshots=False)
        variants = [Variant("orig@all", model, Settings("all")),
                    Variant("fp32 --all@all", fp32.final, Settings("all"), tuple(exact))]
        for p in PRECISION:
            # one pipeline, canonical order: the precision pass runs on the fused graph, before
            # the NCHWc layout capture (quantization cannot read onnxruntime's nchwc kernels)
            res = run_pipeline(model, [*exact, p], shapes=shapes, keep_snapshots=False)
            err = next((r.error for r in res.reports if r.error), None)
            if err:
                print(f"| {name} | {p} | pass failed: {err} | | | | | |")
                continue
            variants.append(Variant(p, res.final, Settings("all"), (*exact, p)))
        results = run_benchmark(variants, shapes=shapes, min_time_s=args.min_time, verify_against=model,
                                verify_rtol=1e-4, max_rounds=200)
        base_rounds = results[0].round_medians_ms
        points = []
        for r in results:
            if r.stats is None:
                print(f"| {name} | {r.label} | failed: {r.error} | | | | | |")
                continue
            pairs = [a / b for a, b in zip(r.round_medians_ms, base_rounds, strict=False) if b > 0]
            paired = statistics.median(pairs) if pairs else float("nan")
            v = r.verify or {}
            top1s = [o.get("top1_agreement") for o in v.get("outputs", []) if o.get("top1_agreement") is not None]
            top1 = f"{min(top1s):.3f}" if top1s else "-"
            print(f"| {name} | {r.label} | {r.stats.median_ms:.3f} | {paired:.3f} | {v.get('max_abs_diff', float('nan')):.2e} "
                  f"| {v.get('max_rel_diff', float('nan')):.2e} | {v.get('min_cosine', float('nan')):.6f} | {top1} |",
                  flush=True)
            points.append({"label": r.label, "median_ms": r.stats.median_ms, "max_rel_diff": v.get("max_rel_diff")})
        charts.speed_vs_error(points, title=f"{name}: speed vs error").write_html(
            str(out_dir / f"{name}.html"), include_plotlyjs=True)
    print(f"\ncharts: {out_dir.relative_to(ROOT)}/<model>.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
