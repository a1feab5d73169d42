"""Killed and failing workers: timeout, memory cap, a model onnxruntime rejects.

Usage: python benchmarks/bench_failures.py
Each failing variant must report one clear sentence; the good variant must still be measured and
the run must finish.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx.parser  # noqa: E402

from fusionviz.bench import Variant, run_benchmark  # noqa: E402

H = '<ir_version: 8, opset_import: ["" : 17]>'
GOOD = H + "g (float[1,64] x) => (float[1,64] y) { a = Relu(x) y = Sigmoid(a) }"
HOG = H + """g (float[1,64] x) => (float[1,64] y) {
  s = Constant<value = int64[1] {700000000}>()
  big = ConstantOfShape<value = float[1] {1.0}>(s)
  r = ReduceSum<keepdims=0>(big)
  y = Add(x, r) }"""
HANG = H + """g (float[1,64] x) => (float[1,64] y) {
  m = Constant<value = int64 {1000000000000}>()
  c = Constant<value = bool {1}>()
  y = Loop(m, c, x) <body = body (int64 i, bool cin, float[1,64] v) => (bool cout, float[1,64] w) {
    cout = Identity(cin) w = Relu(v) }> }"""
BAD = ('<ir_version: 8, opset_import: ["" : 17, "custom.x": 1]>'
       "g (float[1,64] x) => (float[1,64] y) { y = custom.x.Foo(x) }")


def main() -> int:
    variants = [Variant("good", onnx.parser.parse_model(GOOD)),
                Variant("memory hog (2.8 GB)", onnx.parser.parse_model(HOG)),
                Variant("endless loop", onnx.parser.parse_model(HANG)),
                Variant("unknown op", onnx.parser.parse_model(BAD))]
    t0 = time.perf_counter()
    res = run_benchmark(variants, min_time_s=0.2, timeout_s=5, mem_limit_mb=1024)
    dt = time.perf_counter() - t0
    print(f"{'variant':<22} result")
    for r in res:
        print(f"{r.label:<22} " + (f"ERROR: {r.error}" if r.error else f"median {r.stats.median_ms:.4f} ms, n={r.stats.n}"))
    print(f"run finished in {dt:.1f} s (timeout 5 s, memory cap 1024 MB)")
    ok = res[0].error is None and all(r.error for r in res[1:])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
