"""How fast can an *exact* (fp32, same math) rewrite of the BERT sample get on this CPU?

Issue 7 asks for the tuned fp32 BERT variant to be >= 20% faster than the original under
ORT_ENABLE_ALL. This script measures the floor any exact graph rewrite faces:

1. ``model_cost`` gives the MatMul MACs of the model (fusion cannot remove them: the attention,
   projection and FFN products are the same numbers whatever kernel computes them).
2. onnxruntime's profiler (1 thread, ORT_ENABLE_ALL, the original) gives each op type's kernel
   time; the GEMM rate this CPU reaches is MatMul-family FLOPs / MatMul-family kernel time.
3. The floor is: GEMM FLOPs at that rate + the kernels every exact variant keeps (Softmax, the
   GELU and LayerNorm families: already one kernel each after onnxruntime's own fusions).
   Everything else (Add, Transpose, Reshape, per-node overhead) is what fusion can remove.
4. Beside it, one interleaved run (plain ``session.run`` timings, 1 thread): the original under
   ORT_ENABLE_ALL and the best configuration tune finds on this CPU (every exact pass except
   skip_layernorm_fusion, onnxruntime at ``basic`` so it does not fuse SkipLayerNormalization
   itself), so the floor can be compared with what is reached.

Usage: python benchmarks/bench_bert_floor.py [--models bert_ts,bert_dynamo] [--seq 32,128] [--runs 300]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fusionviz import samples  # noqa: E402
from fusionviz.analysis import model_cost  # noqa: E402
from fusionviz.inputs import make_inputs  # noqa: E402
from fusionviz.passes import registry, run_pipeline  # noqa: E402
from fusionviz.verify import make_session, verify  # noqa: E402

GEMM_OPS = {"MatMul", "FusedMatMul", "Gemm"}
KEPT_OPS = {"Softmax", "Gelu", "BiasGelu", "FastGelu", "LayerNormalization", "SkipLayerNormalization"}


def _profile(model, feeds, runs: int) -> dict[str, float]:
    """Kernel milliseconds per run, by op type (onnxruntime profiler, ORT_ENABLE_ALL, 1 thread)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    tmp = tempfile.mkdtemp(prefix="fv-floor-")
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "p")
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        s.run(None, feeds)
    path = s.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    os.rmdir(tmp)
    per_op: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / 1000.0 / runs
    return dict(per_op)


def _interleaved(sessions: dict, feeds, runs: int) -> dict[str, float]:
    for s in sessions.values():
        for _ in range(20):
            s.run(None, feeds)
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):
        for k, s in sessions.items():
            t = time.perf_counter()
            s.run(None, feeds)
            times[k].append(time.perf_counter() - t)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert_ts,bert_dynamo")
    ap.add_argument("--seq", default="32,128")
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    best_passes = [p for p in registry.default_passes() if p != "skip_layernorm_fusion"]
    print("| model | seq | MatMul MFLOP | GEMM rate GFLOP/s | GEMM ms at that rate | kept kernels ms "
          "| floor ms | orig@all ms | floor / orig@all | tuned-like ms | tuned-like / orig@all |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        model = samples.load_sample(name).proto
        for seq in (int(s) for s in args.seq.split(",")):
            shapes = {i.name: [1, seq] for i in model.graph.input}
            feeds = make_inputs(model, shapes)
            cost = model_cost(model, shapes)
            mm_flops = sum(n["flops"] for n in cost.per_node if n["op_type"] in GEMM_OPS)
            prof = _profile(model, feeds, args.runs)
            gemm_ms = sum(v for k, v in prof.items() if k in GEMM_OPS)
            rate = mm_flops / (gemm_ms * 1e-3) / 1e9
            kept_ms = sum(v for k, v in prof.items() if k in KEPT_OPS)
            floor_ms = gemm_ms + kept_ms
            tuned = run_pipeline(model, best_passes, shapes=shapes, keep_snapshots=False).final
            ok = verify(model, tuned, shapes=shapes).ok
            med = _interleaved({"orig": make_session(model, level="all"),
                                "tuned": make_session(tuned, level="basic")}, feeds, args.runs)
            print(f"| {name} | {seq} | {mm_flops / 1e6:.1f} | {rate:.0f} | {gemm_ms:.3f} | {kept_ms:.3f} | "
                  f"{floor_ms:.3f} | {med['orig']:.3f} | {floor_ms / med['orig']:.3f} | {med['tuned']:.3f}"
                  f"{'' if ok else ' (NOT VERIFIED)'} | {med['tuned'] / med['orig']:.3f} |", flush=True)
    print("\nfloor = MatMul-family kernel time of the original under ORT_ENABLE_ALL (its GEMMs already "
          "run at the rate shown) + Softmax/GELU/LayerNorm kernels; it leaves out every Add, "
          "Transpose, Reshape and the per-node and per-run overhead, so it is a lower bound.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
