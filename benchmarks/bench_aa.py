"""A/A check: the same variant measured twice in one run must agree within 3% in median.

Usage: python benchmarks/bench_aa.py [--min-time S] [SAMPLE ...]
Prints one row per sample: the two medians, their ratio, and PASS/FAIL (|ratio - 1| <= 3%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusionviz import samples  # noqa: E402
from fusionviz.bench import Variant, run_benchmark  # noqa: E402

LIMIT = 0.03


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--min-time", type=float, default=2.0)
    args = ap.parse_args()
    names = args.names or samples.sample_names()
    print(f"{'sample':<14} {'A median ms':>12} {'A again ms':>12} {'ratio':>8} {'A CI±%':>7} {'n':>6}  verdict")
    worst = 0.0
    failed = 0
    for name in names:
        m = samples.load_sample(name).proto
        a, b = run_benchmark([Variant("A", m), Variant("A again", m)], min_time_s=args.min_time)
        if a.stats is None or b.stats is None:
            print(f"{name:<14} error: {a.error or b.error}")
            failed += 1
            continue
        ratio = b.stats.median_ms / a.stats.median_ms
        ok = abs(ratio - 1) <= LIMIT
        worst = max(worst, abs(ratio - 1))
        failed += not ok
        print(f"{name:<14} {a.stats.median_ms:12.3f} {b.stats.median_ms:12.3f} {ratio:8.4f} "
              f"{a.stats.ci_halfwidth_pct:6.2f}% {a.stats.n:6d}  {'PASS' if ok else 'FAIL'}")
    print(f"worst |ratio-1| = {100 * worst:.2f}% (limit {100 * LIMIT:.0f}%); {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
