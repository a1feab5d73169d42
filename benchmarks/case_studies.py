"""The seed article's case studies reproduced on this machine (ResNet, BERT, EfficientNet).

For each case (see :mod:`fusionviz.casestudies`): the article's claim, then ONE interleaved run
(1 thread, verified) of the original under onnxruntime off / basic / all, every exact fusionviz
pass under off and all, OpenVINO, TVM with ``--tvm`` (untuned: slow), TensorRT when a GPU is
there (else one line why not). Prints latency, the paired ratio to the original under ORT off
with its 95% interval, peak RSS while running, onnxruntime's arena peak and the static
activation plan (with / without buffer reuse), then why the figures differ from the article's.
Results go to ``artifacts/case_studies/case_studies.json`` (the Learn page shows them);
``--keep`` also writes the committed copy ``sample_models/case_studies.json``.

    python benchmarks/case_studies.py [--only resnet,bert,efficientnet] [--min-time 1] [--tvm] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusionviz import casestudies  # noqa: E402


def _fmt(x, spec: str) -> str:
    return format(x, spec) if x is not None else "-"


def table(record: dict) -> list[str]:
    """The printed block of one case."""
    lines = [f"== {record['title']} ({record['sample']}{', ' + str(record['shapes']) if record['shapes'] else ''})",
             f"   article: {record['claim']} ({record['technique']})",
             f"   {'variant':<26} {'median ms':>9} {'vs ORT off [95% CI]':>24} {'RSS run MB':>10} "
             f"{'arena MB':>8} {'act. peak MB':>12} {'no reuse MB':>11}  verified"]
    for r in record["rows"]:
        if r["error"]:
            lines.append(f"   {r['label']:<26} failed: {r['error']}")
            continue
        ci = f"{r['ratio']:.3f} [{r['ci'][0]:.3f},{r['ci'][1]:.3f}]" if r["ratio"] is not None else "-"
        lines.append(f"   {r['label']:<26} {_fmt(r['median_ms'], '9.3f')} {ci:>24} {_fmt(r['rss_run_mb'], '10.1f')} "
                     f"{_fmt(r['arena_peak_mb'], '8.2f')} {_fmt(r['static_peak_mb'], '12.2f')} "
                     f"{_fmt(r['static_peak_no_reuse_mb'], '11.2f')}  {r['verified']}")
    lines += [f"   {n}" for n in record["notes"].values()]
    lines.append(f"   why: {record['why']}")
    lines.append(f"   load average {record['load'][0]} -> {record['load_after'][0]} (2 cores, shared); "
                 f"{record['seconds']} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated case keys (resnet, bert, efficientnet)")
    ap.add_argument("--min-time", type=float, default=1.0, help="timed seconds per variant (default 1)")
    ap.add_argument("--tvm", action="store_true", help="also time TVM (untuned: slow)")
    ap.add_argument("--keep", action="store_true", help="also write the committed copy in sample_models/")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    keys = [k for k in args.only.split(",") if k] or [c.key for c in casestudies.CASES]
    records = []
    for key in keys:
        rec = casestudies.run_case(casestudies.case(key), min_time_s=args.min_time, tvm=args.tvm,
                                   progress=lambda m: print(m, file=sys.stderr, flush=True))
        records.append(rec)
        print("\n".join(table(rec)), flush=True)
    path = casestudies.save(records)
    print(f"wrote {path}")
    if args.keep:
        print(f"wrote {casestudies.save(records, casestudies.COMMITTED)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
