"""Per-pass what-if on the ResNet and BERT samples, under ORT off and ORT all; and ORT's levels.

Usage: python benchmarks/bench_whatif.py [--min-time S] [--samples resnet_ts,bert_ts]

For each sample and level, one interleaved run holds the cumulative variants (original, +p1,
+p1+p2, ...) and the leave-one-out variants (all passes, all but p). Printed per pass:
incremental latency (cumulative delta vs the step before), its contribution given all others
(leave-one-out), and the static-memory effect (intermediate bytes, reuse peak). Then the
original under off/basic/extended/layout/all in one run: how much of ORT's gain is layout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusionviz import samples  # noqa: E402
from fusionviz.bench import Settings, run_benchmark  # noqa: E402
from fusionviz.bench.whatif import cumulative_steps, leave_one_out_table  # noqa: E402
from fusionviz.experiment.build import Builder  # noqa: E402
from fusionviz.ortlevels import LEVELS  # noqa: E402
from fusionviz.passes import registry  # noqa: E402


def _kb(x):
    return "n/a" if x is None else f"{x / 1024:+.0f}"


def whatif(name: str, level: str, min_time: float) -> None:
    m = samples.load_sample(name).proto
    passes = registry.default_passes()
    s = Settings(level=level)
    b = Builder(m, s)
    cum = b.cumulative(passes)
    loo = b.leave_one_out(passes)
    variants = list(cum.variants) + list(loo.variants)
    res = run_benchmark(variants, min_time_s=min_time, verify_against=m, verify_rtol=1e-3)
    by = {r.label: r for r in res}
    steps = cumulative_steps([by[v.label] for v in cum.variants])
    loo_rows = {row["pass"]: row for row in leave_one_out_table([by[v.label] for v in loo.variants])}
    base = steps[0]
    print(f"\n== {name}, ORT {level}: original {base['median_ms']:.3f} ms, static intermediates "
          f"{base['static_sum_bytes'] / 1024:.0f} KB, reuse peak {base['static_peak_bytes'] / 1024:.0f} KB")
    if cum.skipped:
        print("   passes that changed nothing (not measured): " + ", ".join(cum.skipped))
    print(f"   {'pass':<24} {'cum ms':>8} {'Δ ms':>8} {'Δ %':>7} {'LOO Δ%':>7} {'Δ interm KB':>11} "
          f"{'Δ peak KB':>9} {'verify':>8} {'unstable':>8}")
    for st, v in zip(steps[1:], cum.variants[1:], strict=True):
        p = v.passes[-1]
        lo = loo_rows.get(p, {})
        r = by[v.label]
        ver = "-" if not r.verify else ("ok" if r.verify["ok"] else f"{r.verify['max_rel_diff']:.0e}")
        lop = lo.get("contribution_pct")
        print(f"   {p:<24} {st['median_ms']:8.3f} {st['delta_ms']:+8.3f} {st['delta_pct']:+6.1f}% "
              f"{'-' if lop is None else f'{-lop:+6.1f}%':>7} {_kb(st['delta_static_sum_bytes']):>11} "
              f"{_kb(st['delta_static_peak_bytes']):>9} {ver:>8} {str(r.stats.unstable):>8}")
    allp = by[loo.variants[0].label]
    print("   (Δ interm/peak n/a: shape inference cannot size some tensors of that variant, e.g. NCHWc ops)")
    print(f"   all passes: {allp.stats.median_ms:.3f} ms = {allp.stats.median_ms / base['median_ms']:.3f}x original"
          "   (LOO Δ% = how much slower the result gets without that pass, given all others)")


def levels(name: str, min_time: float) -> None:
    m = samples.load_sample(name).proto
    b = Builder(m, None)
    for lv in LEVELS:
        b.level(lv)
    res = run_benchmark(b.variants(), min_time_s=min_time)
    off = res[0].stats.median_ms
    print(f"\n== {name}: original under each ORT level (one interleaved run)")
    print(f"   {'level':<10} {'median ms':>10} {'vs off':>8} {'CI±%':>6}")
    for r in res:
        print(f"   {r.settings.level:<10} {r.stats.median_ms:10.3f} {r.stats.median_ms / off:8.3f} "
              f"{r.stats.ci_halfwidth_pct:5.1f}%")
    by = {r.settings.level: r.stats.median_ms for r in res}
    gain_all = off - by["all"]
    if gain_all > 0:
        share = (by["extended"] - by["layout"]) / gain_all
        print(f"   share of ORT's total gain that comes from the layout step (extended -> layout): {100 * share:.0f}%")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--samples", default="resnet_ts,bert_ts")
    args = ap.parse_args()
    for name in args.samples.split(","):
        for level in ("off", "all"):
            whatif(name, level, args.min_time)
        levels(name, args.min_time)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
