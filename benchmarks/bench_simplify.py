"""Node counts before/after the simplification passes, and verification, per model.

Runs every simplify pass (canonical order) on each onnx light model and each sample model,
then checks the result in onnxruntime (optimizations off) against the original.

    .venv/bin/python benchmarks/bench_simplify.py [--json OUT.json] [--rtol 1e-4] [MODEL.onnx ...]

Prints one Markdown table row per model: nodes before -> after, which passes removed how many,
pipeline seconds, verification. For dynamo-style models it also reports whether every
BatchNormalization now sits directly after a Conv whose parameters are all initializers
(what Conv+BN folding needs).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fusionviz import samples  # noqa: E402
from fusionviz.passes import run_pipeline  # noqa: E402
from fusionviz.passes.base import Category  # noqa: E402
from fusionviz.passes.registry import all_passes  # noqa: E402
from fusionviz.verify import verify  # noqa: E402

logger = logging.getLogger(__name__)


def bn_ready(model: onnx.ModelProto) -> tuple[int, int]:
    """(BatchNorms directly after a Conv with constant params, all BatchNorms)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    total = ready = 0
    for n in model.graph.node:
        if n.op_type != "BatchNormalization":
            continue
        total += 1
        conv = producer.get(n.input[0])
        if (conv is not None and conv.op_type == "Conv" and all(i in inits for i in n.input[1:])
                and all(i in inits for i in conv.input[1:] if i)):
            ready += 1
    return ready, total


def measure(path: Path, rtol: float) -> dict:
    model = onnx.load(str(path))
    names = [p.name for p in all_passes() if p.category is Category.SIMPLIFY]
    result = run_pipeline(model, names)
    v = verify(result.original, result.final, rtol=rtol)
    ready, total = bn_ready(result.final)
    return {
        "model": path.name,
        "nodes_before": result.nodes_before,
        "nodes_after": result.nodes_after,
        "per_pass": {r.name: r.nodes_before - r.nodes_after for r in result.reports
                     if r.nodes_before != r.nodes_after},
        "errors": {r.name: r.error for r in result.reports if r.error},
        "seconds": round(result.seconds, 3),
        "verify_ok": v.ok,
        "verify": v.summary(),
        "bn_after_conv_const": f"{ready}/{total}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    paths = args.models or [*samples.light_models(), *(samples.sample_path(n) for n in samples.sample_names())]
    rows = []
    print("| model | nodes before | after | removed by | s | BN ready | verify |")
    print("|---|---:|---:|---|---:|---:|---|")
    for p in paths:
        row = measure(p, args.rtol)
        rows.append(row)
        per = ", ".join(f"{k} {v}" for k, v in row["per_pass"].items()) or "-"
        if row["errors"]:
            per += f" ERRORS {row['errors']}"
        print(f"| {row['model']} | {row['nodes_before']} | {row['nodes_after']} | {per} | {row['seconds']} "
              f"| {row['bn_after_conv_const']} | {row['verify']} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["verify_ok"] and not r["errors"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
