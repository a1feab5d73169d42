"""onnxruntime's own optimizers on the wild corpus: which level changes which model's outputs,
and which transformer is responsible.

    python benchmarks/bench_ort_bisect.py                       # whole corpus, level all
    python benchmarks/bench_ort_bisect.py --only smart_turn_v3_2_qdq --level extended
    python benchmarks/bench_ort_bisect.py --constructed          # also the constructed QDQ model

Per model, in a fresh process: ``python -m fusionviz bisect PATH --ort LEVEL --json -`` with the
manifest's input hints (its shapes and values) — the transformers onnxruntime's verbose log
says changed the graph, whether the level's outputs differ from level off beyond verify's
tolerance (no noise allowance), the transformer set found and whether disabling it restores the
outputs, the sessions used and the wall time. ``--constructed`` adds
``tests/ortbisect_models.py``'s QDQ Conv whose float bias onnxruntime quantizes at level 1
(``WeightBiasQuantization``), the model the tests bisect. Writes
``artifacts/bench/ort_bisect.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_one(path: Path, hints: dict, level: str, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "fusionviz", "bisect", str(path), "--ort", level, "--json", "-"]
    for name, dims in (hints.get("shapes") or {}).items():
        cmd += ["--shape", f"{name}={','.join(str(d) for d in dims)}"]
    for name, value in (hints.get("values") or {}).items():
        cmd += ["--input", f"{name}={value}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "total_s": round(time.perf_counter() - t, 1)}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"error": tail[:300], "total_s": round(time.perf_counter() - t, 1)}
    got = json.loads(proc.stdout)
    got["total_s"] = round(time.perf_counter() - t, 1)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated corpus model names")
    ap.add_argument("--level", default="all", help="onnxruntime level to bisect against off (default all)")
    ap.add_argument("--constructed", action="store_true", help="also the constructed QDQ model of the tests")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per model")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench" / "ort_bisect.json"))
    args = ap.parse_args(argv)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    only = [s for s in args.only.split(",") if s]
    entries = select(load_manifest(), only=only) if only else load_manifest()
    fetched = fetch_corpus(entries)
    jobs = [(e.name, Path(fetched[e.name]), dict(e.hints)) for e in entries if e.name in fetched]
    tmp = tempfile.TemporaryDirectory(prefix="fusionviz-ortbisect-bench-")
    if args.constructed:
        sys.path.insert(0, str(ROOT / "tests"))
        import onnx
        from ortbisect_models import qdq_conv_with_float_bias

        path = Path(tmp.name) / "qdq_conv_float_bias.onnx"
        onnx.save(qdq_conv_with_float_bias(), path)
        jobs.append(("(constructed) qdq_conv_float_bias", path, {}))
    rows = []
    print(f"{'model':<36} {'cand':>4} {'differs':>7} {'max rel':>8} {'sessions':>8} {'s':>6}  culprits -> restored")
    for name, path, hints in jobs:
        r = run_one(path, hints, args.level, args.timeout)
        rows.append({"model": name, **r})
        if r.get("error") and not r.get("probes"):
            print(f"{name:<36} error: {r['error']}", flush=True)
            continue
        culprits = " | ".join("+".join(c) for c in r["culprits"]) or "-"
        restored = "restored" if r["differs"] and r["restored"] else ("NOT restored" if r["differs"] else "")
        first = ((r.get("probes") or [{}])[0].get("first_failure") or {})
        rel = f"{first['max_rel_diff']:.1e}" if isinstance(first.get("max_rel_diff"), float) else "-"
        print(f"{name:<36} {len(r['candidates']):>4} {'yes' if r['differs'] else 'no':>7} {rel:>8} {r['probe_count']:>8} "
              f"{r['total_s']:>6.1f}  {culprits} {restored}", flush=True)
    ok = [r for r in rows if not (r.get("error") and not r.get("probes"))]
    differs = [r for r in ok if r["differs"]]
    restored = [r for r in differs if r["restored"]]
    print(f"\n{len(rows)} models at level {args.level}: {len(ok)} bisected, {len(rows) - len(ok)} errors; "
          f"{len(differs)} where the level changes the outputs beyond tolerance, {len(restored)} of them restored by "
          f"disabling the transformers found; {sum(r.get('total_s', 0) for r in rows):.0f} s in all")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
