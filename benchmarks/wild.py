"""Every pass alone and ``--all`` on every model of the wild corpus, each written model checked.

    python benchmarks/wild.py                    # whole corpus, every pass alone + --all
    python benchmarks/wild.py --ci               # the fast CI subset
    python benchmarks/wild.py --only silero_vad_v6 --passes fp16,all
    python benchmarks/wild.py --hints            # also give the manifest's input hints
    python benchmarks/wild.py --fix-shapes --passes all --out artifacts/wild_fixed
                                                 # input shapes fixed in the model, as tune does

Models are fetched into the corpus cache first (``python -m fusionviz.corpus.fetch``). Inputs
are what a user gets with no flags (fusionviz's own input plan, probed on the original); with
``--hints`` the manifest's shapes/values are given as ``--shape``/``--input`` would. A model
whose inputs cannot be planned is a "cannot invoke" row.

Each cell (:mod:`fusionviz.audit`): ``.`` ok (changed something), ``-`` ok (nothing to do),
``d`` ok with a pass declined by the validity rule, ``I`` invalid, ``M`` mismatch, ``N`` new
NaN/Inf, ``E`` error, ``C`` cannot invoke. Prints the model × pass table and totals; writes
``artifacts/wild/wild.{json,md,csv}``. Exit status 1 if any cell is I/M/N/E/C.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CODE = {"ok": ".", "invalid": "I", "mismatch": "M", "new_nan": "N", "error": "E", "cannot_invoke": "C"}
FAIL = {"I", "M", "N", "E", "C"}


def _variants(spec: str) -> list[tuple[str, list[str]]]:
    from fusionviz.passes import registry

    out: list[tuple[str, list[str]]] = []
    for item in spec.split(","):
        item = item.strip()
        if item == "each":
            out += [(n, [n]) for n in registry.pass_names()]
        elif item == "all":
            out.append(("all", registry.default_passes()))
        elif item:
            out.append((item, [registry.get_pass(item).name]))
    return out


def run_model(name: str, path: str, variants: list[tuple[str, list[str]]], hints: dict | None,
              fix_shapes: bool = False) -> dict:
    """All variants of one model (runs in a worker process)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fusionviz import model_io
    from fusionviz.audit import audit
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.verify import probe

    t0 = time.perf_counter()
    try:
        loaded = model_io.load_path(path)
        spec = InputSpec()
        if hints:
            spec = InputSpec(shapes={k: tuple(v) for k, v in hints.get("shapes", {}).items()},
                             values=dict(hints.get("values", {})))
        plan = probe(loaded.proto, plan_inputs(loaded.proto, spec), isolated=False)
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        return {"model": name, "cannot_invoke": f"{type(exc).__name__}: {exc}", "cells": [],
                "seconds": time.perf_counter() - t0}
    cells = []
    for label, passes in variants:
        cell = audit(loaded.proto, name, label, passes, plan, shapes=plan.shapes() if fix_shapes else None)
        cells.append(cell.as_dict())
    return {"model": name, "inputs": plan.describe_lines(), "cells": cells, "seconds": time.perf_counter() - t0}


def code_of(cell: dict) -> str:
    c = CODE.get(cell["status"], "E")
    if c == ".":
        if cell["declined"]:
            return "d"
        if not cell["changes"]:
            return "-"
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ci", action="store_true", help="only the manifest's CI subset")
    ap.add_argument("--only", nargs="*", default=None, help="model names")
    ap.add_argument("--passes", default="all,each", help="all, each, or pass names (comma-separated)")
    ap.add_argument("--jobs", type=int, default=2, help="models checked in parallel (processes)")
    ap.add_argument("--hints", action="store_true", help="give the manifest's input hints as flags")
    ap.add_argument("--fix-shapes", action="store_true",
                    help="fix every input's shape in the model to the plan's, as --shape does (tune and bench do)")
    ap.add_argument("--out", default="artifacts/wild", help="folder for wild.json/.md/.csv")
    args = ap.parse_args(argv)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    entries = select(load_manifest(), ci=args.ci, only=args.only) if args.only or args.ci else load_manifest()
    fetched = fetch_corpus(entries)
    for f in fetched.failures:
        print(f"fetch failed: {f.name}: {f.reason}", file=sys.stderr)
    variants = _variants(args.passes)
    t0 = time.perf_counter()
    rows: list[dict] = []
    with cf.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_model, e.name, str(fetched[e.name]), variants,
                            dict(e.hints) if args.hints else None, args.fix_shapes): e.name
                for e in entries if e.name in fetched}
        for fut in cf.as_completed(futs):
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (memory, segfault)
                row = {"model": futs[fut], "cannot_invoke": f"worker died: {exc}", "cells": [], "seconds": 0}
            rows.append(row)
            print(f"  {row['model']:<28} {row['seconds']:6.1f} s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: r["model"])
    labels = [label for label, _ in variants]
    totals = {c: 0 for c in (".", "-", "d", "I", "M", "N", "E", "C")}
    lines = []
    header = f"{'model':<28} " + " ".join(f"{i % 100:>2}" for i in range(len(labels)))
    lines.append(header)
    for row in rows:
        if row.get("cannot_invoke"):
            codes = ["C"] * len(labels)
        else:
            by = {c["variant"]: c for c in row["cells"]}
            codes = [code_of(by[label]) if label in by else "?" for label in labels]
        for c in codes:
            totals[c] = totals.get(c, 0) + 1
        lines.append(f"{row['model']:<28} " + " ".join(f"{c:>2}" for c in codes))
    legend = "  ".join(f"{i}={label}" for i, label in enumerate(labels))
    summary = (f"cells {sum(totals.values())}: ok {totals['.'] + totals['-'] + totals['d']} "
               f"(changed {totals['.']}, nothing to do {totals['-']}, with a declined pass {totals['d']}); "
               f"invalid {totals['I']}, mismatch {totals['M']}, new NaN {totals['N']}, error {totals['E']}, "
               f"cannot invoke {totals['C']}; {len(rows)} models in {time.perf_counter() - t0:.0f} s")
    print("\n".join(lines))
    print(legend)
    print(summary)
    failures = [(row["model"], c) for row in rows for c in row["cells"] if code_of(c) in FAIL]
    for model, c in failures:
        print(f"FAIL {model} / {c['variant']}: {c['status']}: {c['detail'][:300]}")
    for row in rows:
        if row.get("cannot_invoke"):
            print(f"CANNOT INVOKE {row['model']}: {row['cannot_invoke'][:300]}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "wild.json").write_text(json.dumps({"variants": labels, "rows": rows, "totals": totals,
                                               "summary": summary}, indent=1, default=str))
    (out / "wild.md").write_text("```\n" + "\n".join(lines) + "\n" + legend + "\n" + summary + "\n```\n")
    with open(out / "wild.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "variant", "status", "valid", "verified", "new_nan", "nodes_before", "nodes_after",
                    "optimize_s", "declined", "detail"])
        for row in rows:
            for c in row["cells"]:
                w.writerow([row["model"], c["variant"], c["status"], c["valid"], c["verified"], c["new_nan"],
                            c["nodes_before"], c["nodes_after"], f"{c['optimize_s']:.3f}", ";".join(c["declined"]),
                            c["detail"][:300]])
    return 1 if failures or any(r.get("cannot_invoke") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
