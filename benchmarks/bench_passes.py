"""Pass engine speed: our pipeline against onnxslim on the same models.

For every sample model and every onnx light model:

- ``optimize --all`` equivalent (``registry.default_passes()`` through ``run_pipeline``):
  node count before/after, pass errors, ``verify`` result (1e-4 relative);
- its wall time vs ``onnxslim.slim(model)`` on the same model, run alternately in this
  process (best of ``--repeat``, so a noisy neighbour hurts both alike): the CLI's pipeline
  (``keep_snapshots=False``) and the app's (a snapshot after every pass).

For resnet_dynamo additionally:

- node count after our ``--all`` (and after our passes without the hardware-specific NCHWc
  layout pass) vs the TorchScript export after ``onnxscript.optimizer.optimize``;
- onnxruntime ORT_ENABLE_ALL latency, 1 thread, of: the clean TorchScript export, the clean
  dynamo export, and our optimized dynamo export; runs interleaved (A B C A B C ...) in one
  process after warm-up; median and p10/p90 per variant, and the ratio to the clean export.

Usage::

    .venv/bin/python benchmarks/bench_passes.py [--repeat 2] [--runs 150] [--only NAME ...]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fusionviz import samples  # noqa: E402
from fusionviz.inputs import make_inputs  # noqa: E402
from fusionviz.passes import registry  # noqa: E402
from fusionviz.passes.pipeline import count_nodes, run_pipeline  # noqa: E402
from fusionviz.verify import make_session, verify  # noqa: E402

logger = logging.getLogger(__name__)

#: the passes of fuse_conv / fuse_matmul / fuse_norm_act (this script's owner's share of the time)
FUSION_PASSES = {"fold_batchnorm", "fuse_conv_affine", "fuse_conv_add_bias", "fuse_pad_into_conv",
                 "fuse_matmul_add", "fuse_conv_activation", "fuse_gelu", "fuse_layernorm"}


def _models(only: list[str] | None) -> list[tuple[str, onnx.ModelProto]]:
    out = [(name, samples.load_sample(name).proto) for name in samples.sample_names()]
    out += [(p.stem, onnx.load(str(p))) for p in samples.light_models()]
    return [(n, m) for n, m in out if not only or n in only]


def _slim(model: onnx.ModelProto) -> tuple[onnx.ModelProto | None, float, str]:
    import onnxslim

    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            out = onnxslim.slim(onnx.ModelProto.FromString(model.SerializeToString()))
        return out, time.perf_counter() - t, ""
    except Exception as exc:  # noqa: BLE001 - a reference tool failing is a result, not a crash
        return None, time.perf_counter() - t, f"{type(exc).__name__}: {exc}"[:80]


def pipeline_table(models, repeat: int) -> list[dict]:
    names = registry.default_passes()
    rows = []
    for name, model in models:
        ours_t, snap_t, slim_t = [], [], []
        result = None
        slim_model, slim_err = None, ""
        for _ in range(repeat):  # alternate ours (CLI) / onnxslim / ours with snapshots (app)
            t = time.perf_counter()
            result = run_pipeline(model, names, keep_snapshots=False)
            ours_t.append(time.perf_counter() - t)
            slim_model, dt, slim_err = _slim(model)
            slim_t.append(dt)
            t = time.perf_counter()
            run_pipeline(model, names)
            snap_t.append(time.perf_counter() - t)
        v = verify(result.original, result.final)
        per_pass = sorted(((r.seconds, r.name) for r in result.reports), reverse=True)
        fusion_s = sum(r.seconds for r in result.reports if r.name in FUSION_PASSES)
        errors = [f"{r.name}: {r.error}" for r in result.reports if r.error]
        rows.append({
            "model": name,
            "nodes_before": result.nodes_before,
            "nodes_after": result.nodes_after,
            "slim_nodes": count_nodes(slim_model) if slim_model is not None else None,
            "verify_ok": v.ok,
            "max_rel": v.max_rel_diff,
            "verify_error": v.error,
            "pass_errors": errors,
            "ours_s": min(ours_t),
            "ours_snapshots_s": min(snap_t),
            "slim_s": min(slim_t),
            "slim_error": slim_err,
            "fusion_passes_s": fusion_s,
            "passes_s": sum(r.seconds for r in result.reports),
            "slowest": [f"{n} {t:.2f}" for t, n in per_pass[:3]],
            "final": result.final,
        })
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return rows


def _latency(models: dict[str, onnx.ModelProto], runs: int) -> dict[str, list[float]]:
    sessions = {k: make_session(m, level="all", threads=1) for k, m in models.items()}
    feeds = make_inputs(next(iter(models.values())))
    names = {k: [o.name for o in s.get_outputs()] for k, s in sessions.items()}
    for k, s in sessions.items():  # warm-up, discarded
        for _ in range(10):
            s.run(names[k], feeds)
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):  # interleaved A B C A B C ...
        for k, s in sessions.items():
            t = time.perf_counter()
            s.run(names[k], feeds)
            times[k].append(time.perf_counter() - t)
    return times


def resnet_section(rows: list[dict], runs: int) -> dict:
    import onnxscript.optimizer

    names = set(samples.sample_names())
    if not {"resnet_ts", "resnet_dynamo"} <= names:
        return {"skipped": "resnet_ts / resnet_dynamo samples missing"}
    ts = samples.load_sample("resnet_ts").proto
    dyn = samples.load_sample("resnet_dynamo").proto
    ts_opt = onnxscript.optimizer.optimize(onnx.ModelProto.FromString(ts.SerializeToString()))
    ours = next((r["final"] for r in rows if r["model"] == "resnet_dynamo"), None)
    if ours is None:
        ours = run_pipeline(dyn, registry.default_passes()).final
    no_layout = [n for n in registry.default_passes() if registry.get_pass(n).category.value != "layout-memory"]
    ours_fusion_only = run_pipeline(dyn, no_layout).final
    times = _latency({"resnet_ts (clean)": ts, "resnet_dynamo (clean)": dyn,
                      "resnet_dynamo (ours --all)": ours,
                      "resnet_dynamo (ours, no layout pass)": ours_fusion_only}, runs)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["resnet_ts (clean)"]
    return {
        "nodes": {
            "resnet_ts after onnxscript.optimizer": count_nodes(ts_opt),
            "resnet_dynamo after ours --all": count_nodes(ours),
            "resnet_dynamo after ours without layout passes": count_nodes(ours_fusion_only),
            "resnet_dynamo clean": count_nodes(dyn),
        },
        "latency_ms": {k: {"median": 1e3 * med[k], "min": 1e3 * min(v), "p10": 1e3 * float(np.percentile(v, 10)),
                           "p90": 1e3 * float(np.percentile(v, 90)), "ratio_to_ts": med[k] / base}
                       for k, v in times.items()},
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="pipeline/onnxslim timings per model (best of)")
    ap.add_argument("--runs", type=int, default=150, help="interleaved latency runs per variant")
    ap.add_argument("--only", nargs="*", help="model names to include (default: all)")
    ap.add_argument("--json", type=Path, help="write the results as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    rows = pipeline_table(_models(args.only), args.repeat)
    print("\n## optimize --all on every sample and light model\n")
    print("| model | nodes before | after (ours) | after (onnxslim) | verify | max rel | pass errors "
          "| ours s | onnxslim s | ours/slim | ours with snapshots s (app) |")
    print("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        ver = "ok" if r["verify_ok"] else f"FAIL {r['verify_error'] or ''}"
        ratio = r["ours_s"] / r["slim_s"] if r["slim_s"] else float("nan")
        print(f"| {r['model']} | {r['nodes_before']} | {r['nodes_after']} | {r['slim_nodes']} | {ver} | "
              f"{r['max_rel']:.1e} | {len(r['pass_errors']) or '-'} | {r['ours_s']:.2f} | {r['slim_s']:.2f}"
              f"{' (' + r['slim_error'] + ')' if r['slim_error'] else ''} | {ratio:.2f} | {r['ours_snapshots_s']:.2f} |")
    print("\n'ours s' is what `optimize --all` runs (no per-pass snapshots); the app keeps a snapshot "
          "after every pass (last column). Best of --repeat, alternating with onnxslim.")
    print("\nWhere the pipeline's time goes (seconds; pass seconds include the shape inference before a pass):\n")
    print("| model | sum of pass seconds | fusion passes (this module) | slowest passes |")
    print("|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['model']} | {r['passes_s']:.2f} | {r['fusion_passes_s']:.2f} | {', '.join(r['slowest'])} |")
    for r in rows:
        for e in r["pass_errors"]:
            print(f"  pass error on {r['model']}: {e}")

    section = {}
    if not args.only or "resnet_dynamo" in args.only:
        section = resnet_section(rows, args.runs)
        print("\n## resnet_dynamo\n")
        for k, v in section.get("nodes", {}).items():
            print(f"- nodes, {k}: {v}")
        if "latency_ms" in section:
            print(f"\nORT_ENABLE_ALL, 1 thread, {section['runs']} interleaved runs each:\n")
            print("| variant | median ms | min | p10 | p90 | ratio to clean resnet_ts (medians) |")
            print("|---|---:|---:|---:|---:|---:|")
            for k, v in section["latency_ms"].items():
                print(f"| {k} | {v['median']:.2f} | {v['min']:.2f} | {v['p10']:.2f} | {v['p90']:.2f} "
                      f"| {v['ratio_to_ts']:.3f} |")
        if "skipped" in section:
            print(f"- skipped: {section['skipped']}")

    if args.json:
        data = {"pipeline": [{k: v for k, v in r.items() if k != "final"} for r in rows], "resnet": section}
        args.json.write_text(json.dumps(data, indent=2, default=str))
    ok = all(r["verify_ok"] and not r["pass_errors"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
