"""Per-pass what-if: build variants that isolate each pass, and read their effects back.

1. **Cumulative**: ``original``, ``+p1``, ``+p1+p2``, ... — one pipeline run, its snapshots are
   the variants. The difference between neighbours is what each pass adds *given the ones before
   it* (canonical order).
2. **Leave-one-out**: ``all passes`` and ``all but p`` for each p — the difference is what the
   result loses without p *given all the others* (a pass whose work another pass would also do
   shows ~0 here even when it matters cumulatively).
3. A pass that changed nothing produces a model identical to its predecessor, so it is skipped
   (``skip_unchanged``): its delta is exactly zero by construction and measuring it only adds noise
   and time. Skipped pass names are in :attr:`WhatIf.skipped`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import onnx

from fusionviz.bench.runner import BenchResult, Settings, Variant
from fusionviz.ortlevels import LEVELS

logger = logging.getLogger(__name__)

ORIGINAL = "original"
ALL = "all passes"
DEFAULT_SETTINGS = Settings()


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """Variants plus the passes that were left out because they changed nothing."""

    variants: tuple[Variant, ...]
    skipped: tuple[str, ...]


def _suffix(settings: Settings, tag: bool) -> str:
    return f" @{settings.level}" if tag else ""


def cumulative(model: onnx.ModelProto, passes: Sequence[str], settings: Settings = DEFAULT_SETTINGS, *,
               shapes: Mapping[str, Sequence[int]] | None = None, skip_unchanged: bool = True,
               tag_level: bool = False) -> WhatIf:
    """Cumulative variants (rule 1); see :func:`cumulative_variants`."""
    from fusionviz.passes import run_pipeline

    result = run_pipeline(model, list(passes), shapes=shapes)
    sfx = _suffix(settings, tag_level)
    variants = [Variant(ORIGINAL + sfx, result.original, settings, ())]
    done: list[str] = []
    skipped: list[str] = []
    for snap, rep in zip(result.snapshots[1:], result.reports, strict=False):
        if skip_unchanged and (not rep.changes or rep.error):
            skipped.append(rep.name)
            continue
        done.append(rep.name)
        variants.append(Variant(f"+{rep.name}{sfx}", snap.model, settings, tuple(done)))
    return WhatIf(tuple(variants), tuple(skipped))


def cumulative_variants(model: onnx.ModelProto, passes: Sequence[str], settings: Settings = DEFAULT_SETTINGS,
                        *, shapes: Mapping[str, Sequence[int]] | None = None,
                        skip_unchanged: bool = True) -> list[Variant]:
    """``original``, then one variant per pass with it and every earlier pass applied.

    Args:
        model: the original model.
        passes: pass names (run in canonical order).
        settings: onnxruntime settings for every variant.
        shapes: input shape overrides for the pipeline.
        skip_unchanged: leave out passes that changed nothing (rule 3).

    Returns:
        Variants labelled ``original``, ``+<pass>``, ...; ``passes`` holds the applied passes.
    """
    return list(cumulative(model, passes, settings, shapes=shapes, skip_unchanged=skip_unchanged).variants)


def leave_one_out(model: onnx.ModelProto, passes: Sequence[str], settings: Settings = DEFAULT_SETTINGS, *,
                  shapes: Mapping[str, Sequence[int]] | None = None, skip_unchanged: bool = True,
                  tag_level: bool = False) -> WhatIf:
    """Leave-one-out variants (rule 2); see :func:`leave_one_out_variants`."""
    from fusionviz.passes import registry, run_pipeline

    names = [p.name for p in registry.resolve(passes)]
    sfx = _suffix(settings, tag_level)
    full = run_pipeline(model, names, shapes=shapes, keep_snapshots=False)
    active = [r.name for r in full.reports if r.changes and not r.error]
    skipped = [n for n in names if n not in active] if skip_unchanged else []
    variants = [Variant(ALL + sfx, full.final, settings, tuple(active if skip_unchanged else names))]
    for p in names:
        if p in skipped:
            continue
        rest = [n for n in (active if skip_unchanged else names) if n != p]
        res = run_pipeline(model, rest, shapes=shapes, keep_snapshots=False)
        variants.append(Variant(f"-{p}{sfx}", res.final, settings, tuple(rest)))
    return WhatIf(tuple(variants), tuple(skipped))


def leave_one_out_variants(model: onnx.ModelProto, passes: Sequence[str], settings: Settings = DEFAULT_SETTINGS,
                           *, shapes: Mapping[str, Sequence[int]] | None = None,
                           skip_unchanged: bool = True) -> list[Variant]:
    """``all passes``, then ``-<pass>`` (every pass but that one) for each pass.

    Args:
        model: the original model.
        passes: pass names.
        settings: onnxruntime settings for every variant.
        shapes: input shape overrides for the pipeline.
        skip_unchanged: leave out passes that changed nothing in the full run (rule 3).

    Returns:
        Variants labelled ``all passes``, ``-<pass>``, ...
    """
    return list(leave_one_out(model, passes, settings, shapes=shapes, skip_unchanged=skip_unchanged).variants)


def level_variants(model: onnx.ModelProto, levels: Sequence[str] = LEVELS,
                   settings: Settings = DEFAULT_SETTINGS, label: str = ORIGINAL) -> list[Variant]:
    """The same model under several onnxruntime levels (labels ``<label> @<level>``)."""
    return [Variant(f"{label} @{lv}", model, dataclasses.replace(settings, level=lv), ()) for lv in levels]


def reference_variants(model: onnx.ModelProto, settings: Settings = DEFAULT_SETTINGS, *,
                       shapes: Mapping[str, Sequence[int]] | None = None,
                       tools: Sequence[str] | None = None) -> tuple[list[Variant], dict[str, str]]:
    """Other optimizers' whole-pipeline results as variants (measured under ``settings``).

    Returns:
        (variants, failures): a tool that failed is left out and its one-sentence error is in
        ``failures``.
    """
    from fusionviz.passes.reference import reference_models

    refs = reference_models(model, shapes=shapes, tools=tools)
    variants, failures = [], {}
    for label, m in refs.items():
        if isinstance(m, onnx.ModelProto):
            variants.append(Variant(label, m, settings, ()))
        else:
            failures[label] = str(m)
    return variants, failures


# --------------------------------------------------------------------------- reading results back


def _median(r: BenchResult) -> float | None:
    return r.stats.median_ms if r.stats is not None else None


def _static(r: BenchResult, key: str = "static_peak_reuse_bytes") -> int | None:
    v = r.memory.get(key)
    return int(v) if v is not None else None


def cumulative_steps(results: Sequence[BenchResult]) -> list[dict]:
    """Incremental effect of each step of a cumulative run (input of :func:`fusionviz.charts.waterfall`).

    Args:
        results: results of :func:`cumulative_variants` in order (the first is the baseline).

    Returns:
        One dict per result: ``label``, ``median_ms``, ``delta_ms``, ``delta_pct`` (vs the step
        before), ``static_sum_bytes``, ``delta_static_sum_bytes``, ``static_peak_bytes``,
        ``delta_static_peak_bytes``, ``rss_run_mb``, ``delta_rss_mb``, ``static_unknown_tensors``,
        ``error``. Deltas are None when either side failed, and static deltas are None when
        either side has tensors of unknown size.
    """
    steps: list[dict] = []
    prev: BenchResult | None = None
    for r in results:
        med = _median(r)
        row = {"label": r.label, "median_ms": med, "error": r.error,
               "static_sum_bytes": _static(r, "static_sum_intermediate_bytes"),
               "static_peak_bytes": _static(r), "rss_run_mb": r.memory.get("rss_run_mb"),
               "static_unknown_tensors": r.memory.get("static_unknown_tensors") or 0,
               "delta_ms": None, "delta_pct": None, "delta_static_sum_bytes": None,
               "delta_static_peak_bytes": None, "delta_rss_mb": None}
        if prev is not None:
            pm = _median(prev)
            if med is not None and pm is not None:
                row["delta_ms"] = med - pm
                row["delta_pct"] = 100.0 * (med - pm) / pm if pm else None
            for key, dkey in (("static_sum_bytes", "delta_static_sum_bytes"),
                              ("static_peak_bytes", "delta_static_peak_bytes")):
                a, b = steps[-1][key], row[key]
                # A tensor of unknown size counts 0 bytes: a delta across unknowns is not a saving.
                if a is not None and b is not None and not (row["static_unknown_tensors"]
                                                            or steps[-1]["static_unknown_tensors"]):
                    row[dkey] = b - a
            a, b = prev.memory.get("rss_run_mb"), r.memory.get("rss_run_mb")
            if a is not None and b is not None:
                row["delta_rss_mb"] = b - a
        steps.append(row)
        prev = r
    return steps


def leave_one_out_table(results: Sequence[BenchResult]) -> list[dict]:
    """What each pass contributes given all others: ``(all but p) - (all)``.

    Args:
        results: results of :func:`leave_one_out_variants` (the first is ``all passes``).

    Returns:
        One dict per left-out pass: ``pass``, ``median_ms``, ``contribution_ms`` (positive: the
        pass saves that much), ``contribution_pct``, ``static_sum_bytes_saved``, ``error``.
    """
    if not results:
        return []
    base = results[0]
    bm = _median(base)
    rows = []
    for r in results[1:]:
        med = _median(r)
        row = {"pass": r.label.split(" @")[0].lstrip("-"), "label": r.label, "median_ms": med,
               "contribution_ms": None, "contribution_pct": None, "static_sum_bytes_saved": None,
               "error": r.error}
        if med is not None and bm is not None:
            row["contribution_ms"] = med - bm
            row["contribution_pct"] = 100.0 * (med - bm) / bm if bm else None
        a, b = _static(r, "static_sum_intermediate_bytes"), _static(base, "static_sum_intermediate_bytes")
        if a is not None and b is not None:
            row["static_sum_bytes_saved"] = a - b
        rows.append(row)
    return rows
