"""The seed article's three case studies, measured here: what it claims, what this machine gives.

Each case names a sample and the article's claim; :func:`run_case` measures, in ONE interleaved
benchmark (fresh workers, 1 thread, each variant verified against the original):

- the original under onnxruntime ``off`` (no graph optimization: the article's "before"),
  ``basic`` and ``all``;
- every exact fusionviz pass (``--all``) with onnxruntime ``off`` (our rewrites alone) and
  ``all``;
- the original on OpenVINO (CPU, f32);
- TVM (untuned Relax, tens of times slower than onnxruntime on a CPU) only when asked;
- TensorRT when a GPU and onnxruntime-gpu are there, else one line saying why not.

Memory beside latency: the worker's peak RSS while running (above its baseline), onnxruntime's
arena peak where its profiler gives it, and the static activation plan of the variant's graph
with and without buffer reuse (the "in-place" figure). Ratios are paired (median over
interleaved rounds of variant / the original under ORT off) with their 95% intervals, and are
put in words by :mod:`fusionviz.bench.claims` ("faster" only when the interval excludes 1; the
fastest variant named only when its interval overlaps no other's, else the tied set).

Nothing here imports Streamlit: ``benchmarks/case_studies.py`` runs it from the command line, the
Learn page shows the last saved results and can start a run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
#: Where a run saves its results (the newest run) ...
SAVED = ROOT / "artifacts" / "case_studies" / "case_studies.json"
#: ... and the copy committed with the code (``--keep`` of the script), shown when there is none.
COMMITTED = ROOT / "sample_models" / "case_studies.json"
#: The variants' display labels (:mod:`fusionviz.experiment.labels`, no run settings).
OURS = "our passes"
BASELINE = "original @ORT off"
ORT_ALL = "original @ORT all"
OURS_OFF = f"{OURS} @ORT off"
OURS_ALL = f"{OURS} @ORT all"


@dataclasses.dataclass(frozen=True)
class Case:
    """One case study of the article."""

    key: str
    title: str
    sample: str
    technique: str
    claim: str  # the article's words, short
    claim_speedup: float  # fraction faster the article reports (0.30 = 30%)
    claim_memory: float | None  # fraction less memory, when it reports one
    claim_backend: str  # where the article's number comes from
    shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)


CASES: tuple[Case, ...] = (
    Case("resnet", "ResNet: kernel fusion and graph optimization", "resnet_ts",
         "Conv+BN folding, Conv+activation fusion, layout", "about 30% faster with TensorRT", 0.30, None,
         "TensorRT (GPU)"),
    Case("bert", "BERT: graph optimization", "bert_ts", "constant folding, attention / GELU / LayerNorm fusion",
         "about 20% faster and about 25% less memory with TVM", 0.20, 0.25, "TVM",
         {"input_ids": [1, 128], "attention_mask": [1, 128]}),
    Case("efficientnet", "EfficientNet: fusion and in-place operations", "efficientnet",
         "BN folding, Conv+SiLU fusion, buffer reuse", "about 15% faster", 0.15, None, "unnamed runtime"),
)


def case(key: str) -> Case:
    """The case called ``key``."""
    for c in CASES:
        if c.key == key:
            return c
    raise KeyError(f"unknown case study '{key}'; use one of {', '.join(c.key for c in CASES)}")


def _variants(model, shapes, *, tvm: bool) -> tuple[list, dict[str, str]]:
    from fusionviz.backends.registry import TITLES, get_backend
    from fusionviz.experiment.build import Builder
    from fusionviz.experiment.variant import Settings
    from fusionviz.passes import registry

    names = registry.default_passes()
    b = Builder(model, None, shapes=shapes or None)  # no run settings: every label says its own
    b.original(Settings("off"))
    b.level("basic")
    b.level("all")
    b.selection(OURS, names, Settings("off"))
    b.selection(OURS, names, Settings("all"))
    notes: dict[str, str] = {}
    for backend, wanted in (("openvino", True), ("tvm", tvm), ("trt", True)):
        why = get_backend(backend).quick_check()
        if why is not None:
            notes[backend] = f"{TITLES[backend]} is not available here: {why}"
        elif not wanted:
            notes[backend] = (f"{TITLES[backend]} not timed (untuned it is tens of times slower than "
                              "onnxruntime on a CPU; ask with --tvm)")
        else:
            b.backend(backend, Settings("all"))
    return b.variants(), notes


def _row(r, base) -> dict:
    from fusionviz.bench.whatif import paired_ratio

    got = paired_ratio(r, base) if r.stats is not None else None
    mem = r.memory or {}
    mb = 1024 * 1024

    def static(key: str) -> float | None:
        v = mem.get(key)
        if v is None or mem.get("static_unknown_tensors"):  # ops whose shapes the plan cannot know (NCHWc)
            return None
        return v / mb

    return {"label": r.label, "role": r.role.as_dict(), "backend": r.backend, "passes": len(r.passes), "error": r.error,
            "median_ms": r.stats.median_ms if r.stats else None,
            "ratio": got[0] if got else None, "ci": [got[1], got[2]] if got else None,
            "verified": bool(r.verify and r.verify.get("ok")),
            "rss_run_mb": mem.get("rss_run_mb"), "arena_peak_mb": mem.get("arena_in_use_peak_mb"),
            "static_peak_mb": static("static_peak_reuse_bytes"),
            "static_peak_no_reuse_mb": static("static_peak_no_reuse_bytes"),
            "applied": r.backend_info}


def row_claim(r: dict | None) -> str:
    """A row against ORT off in words (``1.3× faster (23% less time)``, ``no measurable
    difference``), or ``no figure``."""
    from fusionviz.bench.claims import speed_claim

    if not r or r.get("ratio") is None:
        return "no figure"
    lo, hi = (r.get("ci") or [None, None])[:2]
    return speed_claim(r["ratio"], lo, hi, with_figures=False)


def fastest_sentence(rows: Sequence[dict]) -> str:
    """Which verified variant is fastest against ORT off, or which are tied (their 95% intervals
    overlap), in words."""
    from fusionviz.bench.claims import Entry, fastest, join_names

    ok = [r for r in rows if r.get("ratio") is not None and r.get("verified") and r.get("label") != BASELINE]
    rank = fastest([Entry(r["label"], r["ratio"], *((r.get("ci") or [None, None])[:2])) for r in ok])
    if rank.best is None:
        return "nothing ran"
    by = {r["label"]: r for r in ok}
    if rank.is_tie:
        return (f"{join_names(rank.names())} are tied for fastest here (their 95% intervals overlap); the lowest "
                f"ratio, {rank.best.name}, is {row_claim(by[rank.best.name])} than ORT off")
    words = row_claim(by[rank.best.name])
    if words == "no measurable difference":
        return f"nothing is measurably faster than ORT off here (the lowest ratio is {rank.best.name}'s)"
    return f"the fastest here is {rank.best.name}, {words} than ORT off"


def explain(c: Case, rows: Sequence[dict], notes: dict[str, str]) -> str:
    """One or two sentences on why this machine's figures differ from the article's, from ``rows``."""
    by = {r["label"]: r for r in rows}
    openvino = next((r for r in rows if r.get("backend") == "openvino" and not r.get("passes")), None)

    def pct(label: str) -> str:
        return row_claim(by.get(label))

    best_txt = fastest_sentence(rows)
    gpu = " (not available here: see the TensorRT line)" if c.claim_backend.startswith("TensorRT") and "trt" in notes else ""
    where = f"The article's figure comes from {c.claim_backend}{gpu}; on one CPU thread {best_txt}."
    if c.key == "resnet":
        why = (f" Against ORT off, onnxruntime's own optimizer: {pct(ORT_ALL)}; our passes alone: "
               f"{pct(OURS_OFF)}. On a CPU most of the gain is the blocked (NCHWc) layout and "
               "fewer passes over activations, while on a GPU every unfused op is also a kernel launch and a "
               "round trip through device memory, which is where fusion pays most.")
    elif c.key == "bert":
        base = by.get(BASELINE, {})
        ours = by.get(OURS_ALL, {})
        mem = ""
        if base.get("static_peak_mb") and ours.get("static_peak_mb"):
            mem = (f" Activation peak (static plan) {base['static_peak_mb']:.2f} → {ours['static_peak_mb']:.2f} MB; "
                   f"peak RSS while running {base.get('rss_run_mb') or 0:.1f} → {ours.get('rss_run_mb') or 0:.1f} MB: "
                   "at hidden 128 and sequence 128 the activations are small next to the weights and the "
                   "runtime itself, so removing intermediates saves little of the total.")
        why = (f" Against ORT off, ORT all: {pct(ORT_ALL)}; our passes with ORT all: "
               f"{pct(OURS_ALL)}; OpenVINO: {row_claim(openvino)}. The article's TVM "
               "number needs tuned kernels; untuned TVM here is tens of times slower." + mem)
    else:
        base = by.get(BASELINE, {})
        mem = ""
        if base.get("static_peak_no_reuse_mb") and base.get("static_peak_mb"):
            mem = (f" In-place reuse alone takes the activation peak from {base['static_peak_no_reuse_mb']:.1f} MB "
                   f"(every tensor its own buffer) to {base['static_peak_mb']:.1f} MB.")
        why = (f" Against ORT off, our passes alone: {pct(OURS_OFF)}; with ORT all: "
               f"{pct(OURS_ALL)}. Depthwise convolutions and SiLU are memory-bound, so folding BN and fusing the activation "
               "saves whole passes over the tensors." + mem)
    return where + why


def run_case(c: Case, *, min_time_s: float = 1.0, tvm: bool = False,
             progress: Callable[[str], None] | None = None) -> dict:
    """Measure one case study (module docstring); returns a JSON-ready record."""
    from fusionviz import samples
    from fusionviz.experiment.run import measure
    from fusionviz.inputs import make_inputs

    say = progress or (lambda m: None)
    model = samples.load_sample(c.sample).proto
    shapes = {k: list(v) for k, v in c.shapes.items()}
    variants, notes = _variants(model, shapes, tvm=tvm)
    for line in notes.values():
        say(f"{c.key}: {line}")
    say(f"{c.key}: measuring {len(variants)} variants of {c.sample}, interleaved, 1 thread")
    t0 = time.perf_counter()
    load = os.getloadavg()
    results, _ = measure(variants, shapes=shapes or None, feeds=make_inputs(model, shapes or None),
                         min_time_s=min_time_s, verify_against=model, max_rounds=300,
                         timeout_s=900 if tvm else 120)
    rows = [_row(r, results[0]) for r in results]
    return {"key": c.key, "title": c.title, "sample": c.sample, "technique": c.technique, "claim": c.claim,
            "claim_speedup": c.claim_speedup, "claim_memory": c.claim_memory, "claim_backend": c.claim_backend,
            "shapes": shapes, "rows": rows, "notes": notes, "why": explain(c, rows, notes),
            "load": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(time.perf_counter() - t0, 1), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def save(records: Sequence[dict], path: Path = SAVED) -> Path:
    """Merge ``records`` into the saved results (by case key) and write them."""
    old = {r["key"]: r for r in load(path)}
    old.update({r["key"]: r for r in records})
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = [old[c.key] for c in CASES if c.key in old]
    path.write_text(json.dumps({"cases": ordered}, indent=1, default=str) + "\n")
    return path


def load(path: Path | None = None) -> list[dict]:
    """The saved results: ``path``, else the newest run's, else the committed copy ([] if none)."""
    for p in ([path] if path is not None else [SAVED, COMMITTED]):
        try:
            return list(json.loads(p.read_text()).get("cases", []))
        except (OSError, ValueError):
            continue
    return []
