"""Is the graph diff exact? ``--all`` on every wild-corpus model, then every diff claim re-checked.

    python benchmarks/bench_diff_exact.py                 # whole corpus
    python benchmarks/bench_diff_exact.py --only ppocr_v4_det ppocr_v3_det_en
    python benchmarks/bench_diff_exact.py --jobs 1 --out artifacts/diff_exact

For each model of the wild corpus (fetched into the cache first, as ``wild.py`` does) the
``--all`` pipeline runs (``run_pipeline`` with every exact pass, no flags) and the original is
diffed against the result (:func:`fusionviz.graphview.diff_models`). Then, with code of its own
(numpy arrays, not the diff's hashes), the script re-checks:

- **spurious**: nodes reported ``changed`` whose op, domain, attributes (a missing attribute
  counts as its schema default), input producers (by name, mapped through provenance: the after
  producer's ``fusionviz.sources`` name the before producer) and read constant values (dtype,
  shape and bytes, whether an initializer or a ``Constant`` output) are all equal, compared with
  the node itself or, for a node that replaced one other node, with that node. Must be 0.
- **missed**: nodes reported ``unchanged`` whose op, domain, attributes or read constant values
  differ (rewired activation inputs are no change, as in the diff). Must be 0.
- **bad lifted**: ``lifted`` Constant nodes whose value does not reach each of their consumers,
  at the same input, as an initializer holding equal values. Must be 0.

Prints one row per model (the diff's counts, the three re-check counts, seconds) and the totals,
and writes ``<out>/bench_diff_exact.{txt,json}``. Exit status 1 if any re-check count is not 0.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COUNTS = ("fused", "removed", "added", "changed", "lifted", "unchanged")
CHECKS = ("spurious", "missed", "bad_lifted")


# ------------------------------------------------------------------ the independent re-check


def _constants(graph) -> dict:
    """Name → numpy array of every initializer and Constant-node output of ``graph``."""
    import numpy as np
    from onnx import helper, numpy_helper

    out = {}
    for n in graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if a.name == "value":
                out[n.output[0]] = numpy_helper.to_array(v)
            elif a.name in ("value_float", "value_floats"):
                out[n.output[0]] = np.array(v, dtype=np.float32)
            elif a.name in ("value_int", "value_ints"):
                out[n.output[0]] = np.array(v, dtype=np.int64)
            elif a.name in ("value_string", "value_strings"):
                out[n.output[0]] = np.array(v, dtype=object)
    for t in graph.initializer:
        out[t.name] = numpy_helper.to_array(t)
    return out


def _equal_arrays(x, y) -> bool:
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype == object:
        return x.tolist() == y.tolist()
    return x.tobytes() == y.tobytes()


def _opset(model, domain: str) -> int:
    for o in model.opset_import:
        if (o.domain or "ai.onnx") == (domain or "ai.onnx"):
            return o.version
    return 1


def _defaults(node, model) -> dict:
    import onnx
    from onnx import helper

    try:
        schema = onnx.defs.get_schema(node.op_type, _opset(model, node.domain),
                                      "" if node.domain == "ai.onnx" else node.domain)
    except Exception:  # noqa: BLE001 - no schema (custom op)
        return {}
    return {name: helper.get_attribute_value(spec.default_value)
            for name, spec in schema.attributes.items() if spec.default_value.type}


def _attr_value(a, model):
    import onnx
    from onnx import helper, numpy_helper

    if a.type == onnx.AttributeProto.GRAPH:
        return _graph_value(a.g, model)
    if a.type == onnx.AttributeProto.GRAPHS:
        return tuple(_graph_value(g, model) for g in a.graphs)
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        arr = numpy_helper.to_array(v)
        return ("tensor", str(arr.dtype), arr.shape, arr.tobytes())
    return v


def _attrs(node, model, other, other_model) -> dict:
    """Attribute name → value, schema defaults filled in (the other node's schema when this op has none)."""
    vals = {a.name: _attr_value(a, model) for a in node.attribute}
    defaults = _defaults(node, model) or _defaults(other, other_model)
    return {**defaults, **vals}


def _graph_value(g, model) -> tuple:
    """A subgraph as what it computes: nodes in order with their inputs (constants as their
    arrays, other values by name), outputs and attributes; node names, shape annotations and
    where a constant is stored (Constant node or initializer) left out."""
    consts = _constants(g)

    def ref(x):
        if x in consts:
            arr = consts[x]
            return ("c", str(arr.dtype), arr.shape, arr.tolist() if arr.dtype == object else arr.tobytes())
        return ("v", x)

    nodes = tuple((n.op_type, n.domain or "ai.onnx", tuple(ref(x) for x in n.input), tuple(n.output),
                   sorted(_attrs(n, model, n, model).items(), key=lambda kv: kv[0]))
                  for n in g.node if not (n.op_type == "Constant" and n.output[0] in consts))
    return nodes, tuple(i.name for i in g.input if i.name not in consts), tuple(ref(o.name) for o in g.output)


def _subgraph_reads(node) -> set[str]:
    """Names read by the nodes of ``node``'s subgraphs, at any depth."""
    import onnx

    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        for at in n.attribute:
            for g in ([at.g] if at.type == onnx.AttributeProto.GRAPH else at.graphs):
                for m in g.node:
                    out.update(x for x in m.input if x)
                    stack.append(m)
    return out


def _meta(node, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == key:
            return [s for s in p.value.split(",") if s]
    return []


class _Snapshot:
    def __init__(self, model) -> None:
        from fusionviz.graphview.model_graph import node_keys

        self.model = model
        nodes = list(model.graph.node)
        self.by_key = dict(zip(node_keys(nodes), nodes, strict=True))
        self.producer = {o: k for k, n in self.by_key.items() for o in n.output if o}
        self.consts = _constants(model.graph)
        self.sources = {k: set(_meta(n, "fusionviz.sources")) | {k} for k, n in self.by_key.items()}


def _same_producer(x: str, y: str, b: _Snapshot, a: _Snapshot) -> bool:
    pb, pa = b.producer.get(x), a.producer.get(y)
    if pb is None or pa is None:
        return pb is None and pa is None and x == y  # the same graph input
    return pb == pa or bool(b.sources[pb] & a.sources[pa])


def _differences(bn, an, b: _Snapshot, a: _Snapshot, *, producers: bool) -> list[str]:
    """What differs between before node ``bn`` and after node ``an`` (empty: nothing)."""
    out = []
    if bn.op_type != an.op_type:
        out.append("op")
    if (bn.domain or "ai.onnx") != (an.domain or "ai.onnx"):
        out.append("domain")
    if bn.op_type == an.op_type == "Constant" and bn.output[0] in b.consts and an.output[0] in a.consts:
        if not _equal_arrays(b.consts[bn.output[0]], a.consts[an.output[0]]):
            out.append("value")
        return out
    if _attrs(bn, b.model, an, a.model) != _attrs(an, a.model, bn, b.model):
        out.append("attributes")
    for i in range(max(len(bn.input), len(an.input))):
        x = bn.input[i] if i < len(bn.input) else ""
        y = an.input[i] if i < len(an.input) else ""
        if not x and not y:
            continue
        if not x or not y:
            out.append(f"input {i} arity")
        elif (x in b.consts) != (y in a.consts):
            out.append(f"input {i} constant vs computed")
        elif x in b.consts:
            if not _equal_arrays(b.consts[x], a.consts[y]):
                out.append(f"input {i} values")
        elif producers and not _same_producer(x, y, b, a):
            out.append(f"input {i} producer")
    return out


def recheck(before, after, diff) -> dict:
    """The three re-check counts of the module docstring, with a few examples of each."""
    b, a = _Snapshot(before), _Snapshot(after)
    bad = {c: [] for c in CHECKS}
    for k, status in diff.status_after.items():
        an = a.by_key[k]
        if status == "changed":
            bk = k if k in b.by_key else diff.contributors[k][0]
            if not _differences(b.by_key[bk], an, b, a, producers=True):
                bad["spurious"].append(k)
        elif status == "unchanged":
            diffs = _differences(b.by_key[k], an, b, a, producers=False)
            if diffs:
                bad["missed"].append(f"{k}: {', '.join(diffs)}")
    uses: dict[str, list[str]] = {}  # value -> the after names that must hold it
    for k, n in b.by_key.items():
        an = a.by_key.get(k)
        for i, x in enumerate(n.input):
            uses.setdefault(x, []).append(an.input[i] if an is not None and i < len(an.input) else "")
        for x in _subgraph_reads(n):
            uses.setdefault(x, []).append(x)  # read by name from inside a subgraph
    aouts = [o.name for o in after.graph.output]
    for j, o in enumerate(before.graph.output):
        uses.setdefault(o.name, []).append(aouts[j] if j < len(aouts) else "")
    inits = {t.name for t in after.graph.initializer}
    for k, status in diff.status_before.items():
        if status != "lifted":
            continue
        n = b.by_key[k]
        value = b.consts.get(n.output[0]) if n.op_type == "Constant" else None
        reads = uses.get(n.output[0], [])
        ok = value is not None and bool(reads) and all(y in inits and _equal_arrays(value, a.consts[y])
                                                        for y in reads)
        if not ok:
            bad["bad_lifted"].append(k)
    return {c: len(v) for c, v in bad.items()} | {"examples": {c: v[:5] for c, v in bad.items() if v}}


# ------------------------------------------------------------------ one model, the corpus


def run_model(name: str, path: str) -> dict:
    """The pipeline, the diff and the re-check for one model (runs in a worker process)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fusionviz import model_io
    from fusionviz.graphview import diff_models
    from fusionviz.passes import registry
    from fusionviz.passes.pipeline import run_pipeline

    t0 = time.perf_counter()
    try:
        model = model_io.load_path(path).proto
        res = run_pipeline(model, registry.default_passes(), keep_snapshots=False)
        before, after = res.snapshots[0].model, res.snapshots[-1].model
        t1 = time.perf_counter()
        diff = diff_models(before, after)
        diff_s = time.perf_counter() - t1
        check = recheck(before, after, diff)
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        return {"model": name, "error": f"{type(exc).__name__}: {exc}"[:300], "seconds": time.perf_counter() - t0}
    return {"model": name, "nodes": [len(before.graph.node), len(after.graph.node)],
            "counts": {k: diff.counts.get(k, 0) for k in COUNTS}, **check,
            "diff_s": diff_s, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="model names")
    ap.add_argument("--jobs", type=int, default=2, help="models in parallel (processes)")
    ap.add_argument("--out", default="artifacts/diff_exact", help="folder for bench_diff_exact.{txt,json}")
    args = ap.parse_args(argv)

    from fusionviz.corpus import fetch_corpus, load_manifest, select

    entries = select(load_manifest(), only=args.only) if args.only else load_manifest()
    fetched = fetch_corpus(entries)
    for f in fetched.failures:
        print(f"fetch failed: {f.name}: {f.reason}", file=sys.stderr)
    t0 = time.perf_counter()
    rows: list[dict] = []
    with cf.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_model, e.name, str(fetched[e.name])): e.name for e in entries if e.name in fetched}
        for fut in cf.as_completed(futs):
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (memory, segfault)
                row = {"model": futs[fut], "error": f"worker died: {exc}", "seconds": 0.0}
            rows.append(row)
            print(f"  {row['model']:<28} {row['seconds']:6.1f} s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: r["model"])

    cols = (*COUNTS, *CHECKS)
    heads = {"bad_lifted": "badlift"}
    lines = [f"{'model':<28} {'nodes':>11} " + " ".join(f"{heads.get(c, c):>9}" for c in cols) + f" {'diff s':>7}"]
    totals = dict.fromkeys(cols, 0)
    for row in rows:
        if "error" in row:
            lines.append(f"{row['model']:<28} ERROR {row['error'][:200]}")
            continue
        vals = {**row["counts"], **{c: row[c] for c in CHECKS}}
        for c in cols:
            totals[c] += vals[c]
        nodes = f"{row['nodes'][0]}→{row['nodes'][1]}"
        lines.append(f"{row['model']:<28} {nodes:>11} " + " ".join(f"{vals[c]:>9,}" for c in cols)
                     + f" {row['diff_s']:>7.3f}")
    errors = sum(1 for r in rows if "error" in r)
    lines.append(f"{'total':<28} {'':>11} " + " ".join(f"{totals[c]:>9,}" for c in cols))
    lines.append(f"{len(rows)} models ({errors} errors) in {time.perf_counter() - t0:.0f} s; "
                 f"spurious {totals['spurious']}, missed {totals['missed']}, bad lifted {totals['bad_lifted']} "
                 "(each must be 0)")
    for row in rows:
        for c, ex in (row.get("examples") or {}).items():
            lines.append(f"{c} {row['model']}: {'; '.join(ex)[:300]}")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_diff_exact.txt").write_text(text + "\n")
    (out / "bench_diff_exact.json").write_text(json.dumps({"rows": rows, "totals": totals}, indent=1))
    failed = errors or any(totals[c] for c in CHECKS)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
