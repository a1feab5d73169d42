"""``optimize --all`` with verification on every wild-corpus model: does it verify, which passes
did bisection decline, how many probes, how long; then one constructed failure bisected.

    python benchmarks/bench_bisect.py                      # whole corpus, then the constructed failure
    python benchmarks/bench_bisect.py --only ppocr_v4_det,silero_vad_v6
    python benchmarks/bench_bisect.py --hints              # give the manifest's shapes/values as flags
    python benchmarks/bench_bisect.py --skip-corpus        # only the constructed failure

Each model runs ``python -m fusionviz optimize MODEL -o OUT --all --report R.json`` in its own
process, as a user would (no flags unless ``--hints``). The constructed failure runs the same
command on ``--failure-model`` (a corpus model) with one broken test pass registered
(``--broken``, from ``tests/fv_broken_passes.py``; ``test_scale_weight`` scales the first float
weight, so outputs differ) and prints the bisection lines of its stderr. Writes ``artifacts/bench/bisect.json``.
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

#: The CLI with one test-only broken pass registered (the constructed failure).
WITH_BROKEN = ("import sys; sys.path.insert(0, {tests!r}); from fusionviz.passes import registry; "
               "registry._MODULES = (*registry._MODULES, 'fv_broken_passes'); "
               "registry._CACHE = [p for p in registry.all_passes() "
               "if not p.name.startswith('test_') or p.name == {broken!r}]; "
               "from fusionviz import cli; sys.exit(cli.main(sys.argv[1:]))")


def optimize(model: Path, flags: list[str], *, broken: str = "", timeout: float = 1800) -> dict:
    """One ``optimize --all`` run: exit code, seconds, the report's verdict and bisection, stderr."""
    with tempfile.TemporaryDirectory(prefix="fv-bisect-") as tmp:
        out, report = Path(tmp) / "out.onnx", Path(tmp) / "report.json"
        args = ["optimize", str(model), "-o", str(out), "--all", "--report", str(report), *flags]
        if broken:
            cmd = [sys.executable, "-c", WITH_BROKEN.format(tests=str(ROOT / "tests"), broken=broken), *args]
        else:
            cmd = [sys.executable, "-m", "fusionviz", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                                  check=False)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            code, err = -1, f"timed out after {timeout:g} s"
        seconds = time.perf_counter() - t
        data = json.loads(report.read_text()) if report.exists() else {}
    b = data.get("bisect") or {}
    return {
        "code": code,
        "seconds": round(seconds, 2),
        "verified": bool((data.get("verify") or {}).get("ok")),
        "declined": b.get("declined", []),
        "probes": b.get("probe_count", 0),
        "bisect_s": b.get("seconds", 0.0),
        "bound_hit": b.get("bound_hit", False),
        "bisect": b.get("summary", ""),
        "last_line": err.strip().splitlines()[-1] if err.strip() else "",
        "stderr": err,
    }


def _flags(hints: dict | None) -> list[str]:
    flags: list[str] = []
    for name, dims in (hints or {}).get("shapes", {}).items():
        flags += ["--shape", f"{name}={','.join(str(d) for d in dims)}"]
    for name, value in (hints or {}).get("values", {}).items():
        flags += ["--input", f"{name}={value}"]
    return flags


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated corpus model names")
    ap.add_argument("--hints", action="store_true", help="give the manifest's input hints as --shape/--input")
    ap.add_argument("--skip-corpus", action="store_true", help="only the constructed failure")
    ap.add_argument("--failure-model", default="nudenet_320n", help="corpus model for the constructed failure")
    ap.add_argument("--broken", default="test_scale_weight", choices=["test_scale_weight", "test_shift_weight"],
                    help="the broken test pass registered for the constructed failure")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench" / "bisect.json"))
    args = ap.parse_args(argv)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    only = [s for s in args.only.split(",") if s]
    entries = select(load_manifest(), only=only) if only else load_manifest()
    wanted = entries if not args.skip_corpus else []
    extra = [e for e in load_manifest() if e.name == args.failure_model]
    fetched = fetch_corpus(list({e.name: e for e in [*wanted, *extra]}.values()))
    rows = []
    if wanted:
        print(f"{'model':<30} {'exit':>4} {'verified':>8} {'probes':>6} {'seconds':>8}  declined by bisection")
    for e in wanted:
        if e.name not in fetched:
            print(f"{e.name:<30} not fetched")
            continue
        r = optimize(Path(fetched[e.name]), _flags(dict(e.hints)) if args.hints else [])
        rows.append({"model": e.name, **{k: v for k, v in r.items() if k != "stderr"}})
        declined = ", ".join(r["declined"]) or "-"
        print(f"{e.name:<30} {r['code']:>4} {'yes' if r['verified'] else 'no':>8} {r['probes']:>6} "
              f"{r['seconds']:>8.1f}  {declined}", flush=True)
        if r["code"] not in (0,) or r["bisect"]:
            print(f"    {r['bisect'] or r['last_line']}", flush=True)
    if rows:
        ok = sum(r["verified"] for r in rows)
        bisected = [r for r in rows if r["probes"]]
        print(f"\n{len(rows)} models: {ok} verified, {len(rows) - ok} not; bisection ran on {len(bisected)} "
              f"({sum(r['probes'] for r in bisected)} probes); total {sum(r['seconds'] for r in rows):.0f} s")

    failure = None
    if args.failure_model in fetched:
        print(f"\nconstructed failure: {args.failure_model}, optimize --all with {args.broken} registered")
        r = optimize(Path(fetched[args.failure_model]), [], broken=args.broken)
        for line in r["stderr"].splitlines():
            if line.startswith(("verify:", "bisect", "note:", "nodes ", "fusionviz:")):
                print(f"    {line}")
        print(f"    exit {r['code']}, verified {'yes' if r['verified'] else 'no'}, declined "
              f"{', '.join(r['declined']) or '-'}, {r['probes']} probes, bisection {r['bisect_s']:.1f} s, "
              f"whole run {r['seconds']:.1f} s")
        failure = {"model": args.failure_model, "broken": args.broken,
                   **{k: v for k, v in r.items() if k != "stderr"}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"hints": args.hints, "rows": rows, "constructed_failure": failure},
                                         indent=2))
    bad = [r for r in rows if r["code"] != 0]
    return 1 if bad or (failure and failure["code"] != 0) else 0


if __name__ == "__main__":
    raise SystemExit(main())
