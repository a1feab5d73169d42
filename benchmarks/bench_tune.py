"""fusionviz's tuned variant vs ORT_ENABLE_ALL, OpenVINO alone and the ONNX optimizers.

Usage: python benchmarks/bench_tune.py [--models bert_ts,resnet_ts,light_squeezenet,...]
                                       [--budget-s 90] [--min-time 2] [--seq 128]
                                       [--backend ort,openvino]

Per model, in ONE interleaved benchmark run (fusionviz.bench: a worker per variant, rounds
rotate A B C.., 1 thread, verified against the original in each worker):

- ``orig@all``: the original under onnxruntime ORT_ENABLE_ALL (the baseline of every ratio);
- ``onnxslim@all``, ``onnxsim@all``, ``onnxscript@all``: each reference optimizer's output,
  also under ORT_ENABLE_ALL;
- ``openvino``: the original on OpenVINO alone (when ``--backend`` names it and it is installed);
- ``tuned``: fusionviz.tune's recommendation (pass subset × ORT level × backend × denormal
  setting, found by its own measurements within ``--budget-s`` and confirmed by its own fresh
  run), run with its chosen settings;
- ``--all@off``: every exact fusionviz pass with onnxruntime's optimizer switched off (the
  "passes only" claim; on CNNs the nchwc_layout pass carries onnxruntime's NCHWc layout).

Printed: medians, ratios vs orig@all (overall medians, and *paired*: the median over interleaved
rounds of round-median / orig@all's round-median, which cancels load changes on a busy machine;
the summary table uses the paired ratios), the best reference, whether tuned <= best reference, the
geometric-mean ratio of tuned vs orig@all over all models, and the BERT check (tuned at most 0.80 of
the time of orig@all, its paired ratio without an interval: a target, not a claim). BERT-like
samples get ``--shape input_ids=1,SEQ --shape attention_mask=1,SEQ``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from fusionviz import model_io, samples  # noqa: E402
from fusionviz.bench import Settings, Variant, run_benchmark  # noqa: E402
from fusionviz.passes import registry, run_pipeline  # noqa: E402
from fusionviz.passes.reference import reference_models  # noqa: E402
from fusionviz.tune import tune  # noqa: E402


def _models(names: list[str] | None) -> list[tuple[str, onnx.ModelProto]]:
    out = []
    for s in samples.list_samples():
        out.append((s.name, lambda s=s: samples.load_sample(s.name).proto))
    for p in samples.light_models():
        out.append((p.stem, lambda p=p: model_io.load_path(p).proto))
    if names:
        out = [(n, f) for n, f in out if n in names]
    return [(n, f()) for n, f in out]


def _shapes(model: onnx.ModelProto, seq: int) -> dict[str, list[int]] | None:
    names = {i.name for i in model.graph.input}
    if "input_ids" in names:
        return {n: [1, seq] for n in ("input_ids", "attention_mask", "token_type_ids") if n in names}
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="", help="comma-separated sample / light model names (default all)")
    ap.add_argument("--budget-s", type=float, default=90.0, help="tune budget per model")
    ap.add_argument("--min-time", type=float, default=2.0, help="timed seconds per variant in the final run")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--backend", default="ort,openvino", help="backends tune searches (default ort,openvino)")
    args = ap.parse_args()
    from fusionviz.backends.registry import parse_backends

    backends = parse_backends(args.backend)
    names = [n for n in args.models.split(",") if n] or None
    rows = []
    for name, model in _models(names):
        t0 = time.perf_counter()
        shapes = _shapes(model, args.seq)
        print(f"\n=== {name}  shapes={shapes}", flush=True)
        tr = tune(model, shapes=shapes, budget_s=args.budget_s, backends=backends,
                  progress=lambda m: print("   ", m, flush=True))
        tuned = run_pipeline(model, list(tr.best.passes), shapes=shapes).final
        all_off = run_pipeline(model, registry.default_passes(), shapes=shapes).final
        refs = reference_models(model, shapes=shapes, levels=[])
        variants = [Variant("orig@all", model, Settings("all"))]
        for label, m in refs.items():
            if isinstance(m, onnx.ModelProto):
                variants.append(Variant(f"{label}@all", m, Settings("all")))
            else:
                print(f"    {label}: failed ({m})")
        best = tr.best
        if "openvino" in tr.backends:
            variants.append(Variant("openvino", model, Settings("all", backend="openvino")))
        variants.append(Variant("tuned", tuned, best.settings(), best.passes))
        variants.append(Variant("--all@off", all_off, Settings("off")))
        res = run_benchmark(variants, shapes=shapes, min_time_s=args.min_time, verify_against=model,
                            verify_rtol=1e-4, max_rounds=200)
        base = res[0].stats.median_ms
        base_rounds = res[0].round_medians_ms
        print(f"    tuned config: {best.label()}; passes: {','.join(best.passes)}")
        by = {}
        for r in res:
            if r.stats is None:
                print(f"    {r.label:16} failed: {r.error}")
                continue
            ok = r.verify.get("ok") if r.verify else None
            spread = (r.stats.p90_ms - r.stats.p10_ms) / r.stats.median_ms if hasattr(r.stats, "p90_ms") else float("nan")
            pairs = [a / b for a, b in zip(r.round_medians_ms, base_rounds, strict=False) if b > 0]
            paired = statistics.median(pairs) if pairs else r.stats.median_ms / base
            by[r.label] = base * paired  # ratios below are the paired (per-round) ratios
            print(f"    {r.label:16} {r.stats.median_ms:9.3f} ms  ratio {r.stats.median_ms / base:6.3f}  "
                  f"paired ratio {paired:6.3f} ({len(pairs)} rounds)  p10-p90 spread {spread:5.1%}  verified={ok}")
        ref_ms = [v for k, v in by.items() if k.endswith("@all") and k != "orig@all"]
        best_ref = min(ref_ms) if ref_ms else base
        rows.append((name, base, by.get("tuned"), best_ref, by.get("--all@off"),
                     bool(res[-2].verify and res[-2].verify.get("ok")), by.get("openvino")))
        print(f"    ({time.perf_counter() - t0:.0f} s)", flush=True)

    print("\nmodel                    orig@all ms  tuned/orig  best-ref/orig  tuned<=best-ref  all@off/orig  tuned verified"
          "  openvino/orig")
    logs = []
    for name, base, tuned_ms, best_ref, off_ms, ok, ov_ms in rows:
        if tuned_ms is None:
            print(f"{name:24} tuned variant failed")
            continue
        logs.append(math.log(tuned_ms / base))
        print(f"{name:24} {base:11.3f}  {tuned_ms / base:10.3f}  {best_ref / base:13.3f}  "
              f"{'yes' if tuned_ms <= best_ref * 1.02 else 'NO':>15}  "
              f"{(off_ms / base) if off_ms else float('nan'):12.3f}  {ok!s:>14}  "
              f"{(ov_ms / base) if ov_ms else float('nan'):13.3f}")
    if logs:
        print(f"geometric-mean ratio tuned / ORT_ENABLE_ALL: {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} models")
    for name, base, tuned_ms, *_ in rows:
        if name.startswith("bert") and tuned_ms:
            ratio = tuned_ms / base
            print(f"{name}: tuned / ORT_ENABLE_ALL paired ratio {ratio:.3f} (target: at most 0.80 of the time, "
                  f"i.e. 20% less time): {'MET' if ratio <= 0.8 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
