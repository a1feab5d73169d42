"""The wild corpus on onnxruntime, OpenVINO and tune's confirmed winner, interleaved, 1 thread.

Per corpus model (inputs: fusionviz's own plan, probed on the original, as a user gets with no
flags; ``--hints`` gives the manifest's shapes/values as ``--shape``/``--input`` would):

1. ``fusionviz.tune.tune(model, backends=ort,openvino)``: search passes × onnxruntime level ×
   backend within ``--budget-s``, then tune's own confirmation run (which may replace the search
   winner by a single backend that beat it).
2. An independent final run, in ONE interleaved benchmark (fresh workers, 1 thread, verified
   against the original): ``ort_all`` = the original under onnxruntime level all (the baseline),
   ``openvino`` = the original on OpenVINO alone (default settings), and ``tuned`` = tune's
   recommendation under its settings. When the recommendation *is* one of the first two, it is
   not measured twice: its ratio is that variant's.

Every ratio is paired: the median over interleaved rounds of variant / baseline, with its 95%
interval. Printed per model: ORT all ms, OpenVINO / ORT all, tuned / ORT all, best single backend
(the faster of ORT all and OpenVINO alone in the final run) and tuned / best single; then the
geometric means, and the models where tuned / best single > 1.02. The load average is recorded
before and after each model.

Each model runs in a child process with a wall-clock limit (``--model-timeout``); a model that
fails or runs out of time is a row with its reason. Results are merged into
``artifacts/backends/bench_backends.json`` as each model finishes, so the script can run in
pieces: it skips models already there (``--fresh`` starts over, ``--redo NAME`` re-runs some),
``--first N`` stops after N corpus models. ``bench_backends.md`` holds the table.

``--hints --freeze sr`` also makes the named inputs' hinted *values* (silero's sample rate)
constants in tune's variants, as ``tune --freeze sr=16000`` does: the model is then specialized
to that value (the baseline and each backend alone keep the input).

``--light`` adds the onnx wheel's nine "light" CNN models (third-party ImageNet classifiers:
AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512;
weights made at load time by ConstantOfShape) as a second group, summarized on its own: the
done-when geomean is the wild corpus's alone.

    python benchmarks/bench_backends.py --first 10
    python benchmarks/bench_backends.py                   # the rest
    python benchmarks/bench_backends.py --light --only light_squeezenet --redo light_squeezenet
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_ORT = 0.75  # tuned / ORT all, geometric mean
GOAL_SINGLE = 1.02  # tuned / best single backend, every model


def _ratio(res, base) -> list | None:
    from fusionviz.bench.whatif import paired_ratio

    got = paired_ratio(res, base)
    return None if got is None else [round(x, 4) for x in got[:3]]


def one_model(name: str, path: str, hints: dict | None, args) -> dict:
    """Tune and the final interleaved run for one model (in a child process)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fusionviz import model_io
    from fusionviz.bench import Variant, run_benchmark
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.tune import TuneConfig, tune, tuned_model
    from fusionviz.verify import probe

    t0 = time.perf_counter()
    row: dict = {"model": name, "load_before": os.getloadavg()}
    loaded = model_io.load_path(path)
    spec = InputSpec()
    if hints:
        spec = InputSpec(shapes={k: tuple(v) for k, v in hints.get("shapes", {}).items()},
                         values=dict(hints.get("values", {})))
    plan = probe(loaded.proto, plan_inputs(loaded.proto, spec), isolated=False)
    shapes = plan.shapes()
    feeds = plan.feeds("normal")
    # --freeze NAME: that input's hinted value (a sample rate) becomes a constant, as tune --freeze does
    freeze = {k: feeds[k] for k in (hints or {}).get("values", {}) if k in args.freeze} or None
    row["frozen"] = sorted(freeze or {})
    row["nodes"] = len(loaded.proto.graph.node)
    row["inputs"] = plan.describe_lines()
    lines: list[str] = []
    tr = tune(loaded.proto, shapes=shapes, feeds=feeds, freeze=freeze, budget_s=args.budget_s, min_time_s=args.min_time,
              backends=("ort", "openvino"), progress=lines.append)
    row["tune"] = {k: v for k, v in tr.as_dict().items() if k != "steps"}
    row["tune_log"] = lines[-12:]
    best = tr.best
    ort_all = TuneConfig((), "all")
    ov_alone = TuneConfig((), backend="openvino")
    variants = [Variant("ort_all", loaded.proto, ort_all.settings()),
                Variant("openvino", loaded.proto, ov_alone.settings())]
    if best not in (ort_all, ov_alone):
        model = tuned_model(loaded.proto, tr, shapes=shapes, freeze=freeze)
        variants.append(Variant("tuned", model, best.settings(), best.passes))
    res = run_benchmark(variants, shapes=shapes, feeds=feeds, min_time_s=args.final_time,
                        verify_against=loaded.proto, max_rounds=400)
    by = {r.label: r for r in res}
    base = by["ort_all"]
    if base.stats is None:
        raise RuntimeError(f"the original under ORT all failed: {base.error}")
    tuned_label = "tuned" if "tuned" in by else ("ort_all" if best == ort_all else "openvino")
    row.update({
        "ort_all_ms": base.stats.median_ms,
        "openvino": _ratio(by["openvino"], base),
        "openvino_error": by["openvino"].error,
        "openvino_verified": bool(by["openvino"].verify and by["openvino"].verify.get("ok")),
        "tuned": _ratio(by[tuned_label], base),
        "tuned_error": by[tuned_label].error,
        "tuned_verified": bool(by[tuned_label].verify and by[tuned_label].verify.get("ok")),
        "tuned_label": best.label(),
        "tuned_config": best.as_dict(),
        "tuned_is": tuned_label,
        "memory_mb": {r.label: r.memory.get("rss_run_mb") for r in res},
        "applied": {r.label: r.backend_info for r in res},
    })
    singles = [1.0] + ([row["openvino"][0]] if row["openvino"] and row["openvino_verified"] else [])
    row["best_single"] = "openvino" if len(singles) > 1 and singles[1] < 1.0 else "ort_all"
    row["best_single_ratio"] = min(singles)
    if row["tuned"]:
        row["tuned_vs_single"] = round(row["tuned"][0] / row["best_single_ratio"], 4)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    row["load_after"] = os.getloadavg()
    return row


def _light() -> dict[str, Path]:
    from fusionviz.samples import light_models

    return {p.stem: p for p in light_models()}


def _child(args) -> int:
    """``--one NAME``: run one model and print its row as JSON on the last line."""
    from fusionviz.corpus import fetch_corpus, load_manifest, select

    light = _light()
    try:
        if args.one in light:
            row = one_model(args.one, str(light[args.one]), None, args)
            row["group"] = "light"
        else:
            entry = select(load_manifest(), only=[args.one])[0]
            path = fetch_corpus([entry])[entry.name]
            row = one_model(entry.name, str(path), dict(entry.hints) if args.hints else None, args)
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row = {"model": args.one, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    print("ROW " + json.dumps(row, default=str), flush=True)
    return 0


def _run_child(name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--one", name, "--budget-s", str(args.budget_s), "--min-time",
           str(args.min_time), "--final-time", str(args.final_time)] + (["--hints"] if args.hints else []) + (
               ["--freeze", *args.freeze] if args.freeze else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True, cwd=str(ROOT))
    try:
        out, _ = proc.communicate(timeout=args.model_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"model": name, "error": f"over the per-model time budget ({args.model_timeout:g} s)"}
    for line in reversed(out.splitlines()):
        if line.startswith("ROW "):
            return json.loads(line[4:])
    return {"model": name, "error": f"the child exited with status {proc.returncode} and no result"}


def _geo(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _fmt(r: list | None) -> str:
    return f"{r[0]:.3f} [{r[1]:.3f},{r[2]:.3f}]" if r else "-"


def table(rows: list[dict]) -> tuple[list[str], dict]:
    """The per-model table and the summary (geometric means, models over the single-backend goal)
    of one group of rows."""
    lines = [f"| {'model':<30} | {'ORT all ms':>10} | {'OpenVINO/ORT all':>22} | {'tuned/ORT all':>22} | "
             f"{'best single':>11} | {'tuned/single':>12} | tuned recommendation |",
             "|" + "|".join("-" * w for w in (32, 12, 24, 24, 13, 14, 22)) + "|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['model']:<30} | {'-':>10} | {'-':>22} | {'-':>22} | {'-':>11} | {'-':>12} | "
                         f"failed: {r['error'][:120]} |")
            continue
        ov = _fmt(r["openvino"]) if r["openvino"] else f"failed: {(r.get('openvino_error') or '')[:60]}"
        if r["openvino"] and not r["openvino_verified"]:
            ov += " (not verified)"
        ts = r.get("tuned_vs_single")
        lines.append(f"| {r['model']:<30} | {r['ort_all_ms']:>10.3f} | {ov:>22} | {_fmt(r['tuned']):>22} | "
                     f"{r['best_single']:>11} | {(f'{ts:.3f}' if ts else '-'):>12} | {r['tuned_label']} |")
    ok = [r for r in rows if not r.get("error") and r.get("tuned")]
    over = [r["model"] for r in ok if (r.get("tuned_vs_single") or 0) > GOAL_SINGLE]
    summary = {
        "models": len(rows), "measured": len(ok), "failed": [r["model"] for r in rows if r.get("error")],
        "geomean_tuned_vs_ort_all": _geo([r["tuned"][0] for r in ok]),
        "geomean_openvino_vs_ort_all": _geo([r["openvino"][0] for r in ok if r.get("openvino")]),
        "geomean_best_single_vs_ort_all": _geo([r["best_single_ratio"] for r in ok]),
        "geomean_tuned_vs_best_single": _geo([r["tuned_vs_single"] for r in ok if r.get("tuned_vs_single")]),
        "over_single_goal": over,
        "load_range": [min((min(r["load_before"][0], r["load_after"][0]) for r in ok), default=None),
                       max((max(r["load_before"][0], r["load_after"][0]) for r in ok), default=None)],
    }
    return lines, summary


def _summary_lines(s: dict) -> list[str]:
    def g(k: str) -> str:
        return f"{s[k]:.3f}" if s.get(k) else "-"

    return [
        f"models {s['models']}, measured {s['measured']}, failed {len(s['failed'])} {s['failed']}",
        f"geomean tuned / ORT all: {g('geomean_tuned_vs_ort_all')} (goal <= {GOAL_ORT})",
        f"geomean OpenVINO alone / ORT all: {g('geomean_openvino_vs_ort_all')} (models where it ran)",
        f"geomean best single backend / ORT all: {g('geomean_best_single_vs_ort_all')}",
        f"geomean tuned / best single: {g('geomean_tuned_vs_best_single')}; models over {GOAL_SINGLE}: "
        f"{len(s['over_single_goal'])} {s['over_single_goal']}",
        f"1-minute load average during the runs: {s['load_range'][0]}-{s['load_range'][1]} "
        f"(2 cores, shared)",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=None, help="stop after the first N corpus models")
    ap.add_argument("--only", nargs="*", default=None, help="model names")
    ap.add_argument("--ci", action="store_true", help="only the manifest's CI subset")
    ap.add_argument("--budget-s", type=float, default=30.0, help="tune's search budget per model (default 30)")
    ap.add_argument("--min-time", type=float, default=0.25, help="tune's timed seconds per variant (default 0.25)")
    ap.add_argument("--final-time", type=float, default=1.0,
                    help="timed seconds per variant in the final run (default 1)")
    ap.add_argument("--model-timeout", type=float, default=360.0,
                    help="wall-clock limit per model, everything included (default 360)")
    ap.add_argument("--hints", action="store_true", help="give the manifest's input hints as flags")
    ap.add_argument("--freeze", nargs="*", default=[], metavar="NAME",
                    help="with --hints: make these inputs' hinted values constants in tune's variants (--freeze)")
    ap.add_argument("--light", action="store_true", help="also the onnx wheel's light CNN models (own summary)")
    ap.add_argument("--fresh", action="store_true", help="forget saved results")
    ap.add_argument("--redo", nargs="*", default=[], help="re-run these models even if saved")
    ap.add_argument("--out", default="artifacts/backends", help="folder for bench_backends.json/.md")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        return _child(args)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    manifest = load_manifest()
    only = [n for n in args.only or [] if not n.startswith("light_")]
    entries = [] if args.only and not only else select(manifest, ci=args.ci, only=only)
    if args.first is not None:
        entries = entries[: args.first]
    fetched = fetch_corpus(entries)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "bench_backends.json"
    saved: dict[str, dict] = {}
    if store.exists() and not args.fresh:
        saved = {r["model"]: r for r in json.loads(store.read_text()).get("rows", [])}
    light = sorted(_light()) if args.light else []
    order = [e.name for e in manifest] + light
    names = [e.name for e in entries] + [n for n in light if not args.only or n in args.only]

    def report() -> str:
        rows = sorted(saved.values(), key=lambda r: order.index(r["model"]) if r["model"] in order else 1e9)
        text, summaries = [], {}
        for group, title in (("wild", "Wild corpus"), ("light", "onnx light models (not in the goal)")):
            mine = [r for r in rows if r.get("group", "wild") == group]
            if not mine:
                continue
            lines, summaries[group] = table(mine)
            text += [f"## {title}", ""] + lines + [""] + _summary_lines(summaries[group]) + [""]
        store.write_text(json.dumps({"rows": rows, "summary": summaries.get("wild"), "summaries": summaries,
                                     "settings": {k: v for k, v in vars(args).items() if k != "one"}},
                                    indent=1, default=str))
        (out / "bench_backends.md").write_text("\n".join(text))
        return "\n".join(text)

    for name in names:
        if name not in fetched and name not in light:
            saved[name] = {"model": name, "error": "not in the corpus cache (python -m fusionviz.corpus.fetch)"}
            continue
        if name in saved and name not in args.redo and not saved[name].get("error", "").startswith("over"):
            continue
        t0 = time.perf_counter()
        print(f"{name} ... load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        row = _run_child(name, args)
        saved[name] = row
        report()
        if row.get("error"):
            print(f"  {name}: failed: {row['error']}", file=sys.stderr, flush=True)
        else:
            print(f"  {name}: tuned {_fmt(row['tuned'])}, OpenVINO {_fmt(row['openvino'])}, "
                  f"tuned/single {row.get('tuned_vs_single')}, {row['tuned_label']} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
