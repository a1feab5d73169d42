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
4. **Isolation**: every variant of one what-if shares the run's :class:`Settings` (the
   onnxruntime level included), so a step differs from its neighbour only by passes. The level
   is one fixed setting of the run (:meth:`WhatIf.title` names it); the onnxruntime levels are a
   separate comparison (:func:`level_variants`, :func:`level_effects`). Reading results back
   (:func:`cumulative_effects`, :func:`leave_one_out_effects`) refuses steps whose settings
   differ.
5. **Intervals**: an effect is the *paired ratio* of two variants: the median over interleaved
   rounds of (round median of one / round median of the other), so a load change on the
   machine hits both sides of each ratio. Its 95% interval is the distribution-free interval of
   that median (:func:`fusionviz.bench.stats.median_ci`); an effect whose interval contains 1 is
   *within noise*, and reads "no measurable difference" (:mod:`fusionviz.bench.claims`).
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
    """Variants plus the passes that were left out because they changed nothing.

    Attributes:
        variants: the variants to measure; all share ``settings`` (rule 4).
        skipped: passes that changed nothing (rule 3).
        settings: the one onnxruntime setting of the run.
        kind: ``"cumulative"`` or ``"leave-one-out"``.
    """

    variants: tuple[Variant, ...]
    skipped: tuple[str, ...]
    settings: Settings = DEFAULT_SETTINGS
    kind: str = "cumulative"

    def __post_init__(self) -> None:
        check_isolated(self.variants, self.settings)

    def title(self) -> str:
        """Chart title naming the fixed onnxruntime level (rule 4)."""
        return run_title(self.kind, self.settings)


def run_title(kind: str, settings: Settings) -> str:
    """The title of a what-if chart: what it shows and the one onnxruntime setting of the run.

    Args:
        kind: ``"cumulative"`` or ``"leave-one-out"``.
        settings: the settings every variant of the run shares.

    Returns:
        e.g. ``What each pass adds (every step at onnxruntime level 'off', 1 thread)``.
    """
    what = "What each pass adds" if kind == "cumulative" else "What the result loses without each pass"
    return f"{what} (every step at onnxruntime level '{settings.level}', {_threads(settings)})"


def _threads(settings: Settings) -> str:
    return f"{settings.threads} thread{'s' if settings.threads != 1 else ''}"


def check_isolated(variants: Sequence[Variant], settings: Settings | None = None) -> None:
    """Rule 4: every variant has the same settings (``settings`` when given).

    Raises:
        ValueError: a variant's settings differ; the message names it.
    """
    want = settings if settings is not None else (variants[0].settings if variants else None)
    for v in variants:
        if v.settings != want:
            raise ValueError(f"what-if variant '{v.label}' runs under {v.settings.describe()}, "
                             f"not the run's {want.describe() if want else '-'}: steps may differ only by passes")


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
    return WhatIf(tuple(variants), tuple(skipped), settings, "cumulative")


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
    return WhatIf(tuple(variants), tuple(skipped), settings, "leave-one-out")


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


# --------------------------------------------------------------------------- effects with intervals


@dataclasses.dataclass(frozen=True)
class Effect:
    """One bar of a what-if chart: a variant against its baseline as a paired ratio (rule 5).

    Attributes:
        label: the variant's label (``+fold_batchnorm``, ``-fuse_gelu``, ``original @ORT all``).
        name: what the bar is about (the pass name, or the label for other comparisons).
        baseline: the label of the variant it is compared with.
        ratio: median over rounds of variant / baseline (below 1: faster); None when either
            side failed or they share no round.
        ci_low: lower end of the ratio's 95% interval.
        ci_high: upper end of the ratio's 95% interval.
        pairs: rounds the ratio is taken over.
        median_ms: the variant's median latency.
        baseline_ms: the baseline's median latency.
        level: the onnxruntime level the variant ran under.
        error: why there is no ratio, else None.
    """

    label: str
    name: str
    baseline: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    median_ms: float | None
    baseline_ms: float | None
    level: str
    error: str | None = None

    @property
    def pct(self) -> float | None:
        """The change in percent (negative: faster)."""
        return None if self.ratio is None else 100.0 * (self.ratio - 1.0)

    @property
    def within_noise(self) -> bool:
        """True when the 95% interval contains 1 (no change can be told apart from noise)."""
        if self.ratio is None or self.ci_low is None or self.ci_high is None:
            return False
        return self.ci_low <= 1.0 <= self.ci_high

    def claim(self, with_figures: bool = True) -> str:
        """The words for this effect (:func:`fusionviz.bench.claims.speed_claim`), or the error."""
        from fusionviz.bench.claims import speed_claim

        if self.ratio is None:
            return self.error or "not measured"
        return speed_claim(self.ratio, self.ci_low, self.ci_high, with_figures=with_figures)

    def describe(self) -> str:
        """``1.14× faster (12% less time; ratio 0.877, 95% interval [0.860, 0.900])``,
        ``no measurable difference (ratio 1.004, 95% interval [0.988, 1.020])`` or the error."""
        return self.claim()

    def interval(self) -> str:
        """``0.877 [0.860, 0.900]``: the ratio and its 95% interval ("" when there is none)."""
        if self.ratio is None:
            return ""
        if self.ci_low is None or self.ci_high is None:
            return f"{self.ratio:.3f}"
        return f"{self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]"

    def as_dict(self) -> dict:
        """Plain data, with ``pct`` and ``within_noise``."""
        d = dataclasses.asdict(self)
        d["pct"] = self.pct
        d["within_noise"] = self.within_noise
        return d


def paired_ratio(result: BenchResult, baseline: BenchResult) -> tuple[float, float, float, int] | None:
    """Rule 5: (ratio, ci_low, ci_high, pairs) of ``result`` against ``baseline``, or None.

    Rounds are paired by index (both variants ran in every round of one interleaved run).
    """
    from fusionviz.bench.stats import median_ci

    if result.stats is None or baseline.stats is None:
        return None
    ratios = sorted(a / b for a, b in zip(result.round_medians_ms, baseline.round_medians_ms, strict=False)
                    if b > 0 and a > 0)
    if not ratios:
        if baseline.stats.median_ms <= 0:
            return None
        r = result.stats.median_ms / baseline.stats.median_ms
        return r, r, r, 0
    n = len(ratios)
    mid = ratios[n // 2] if n % 2 else 0.5 * (ratios[n // 2 - 1] + ratios[n // 2])
    lo, hi = median_ci(ratios)
    return mid, min(lo, mid), max(hi, mid), n


def effect(result: BenchResult, baseline: BenchResult, name: str | None = None) -> Effect:
    """The :class:`Effect` of ``result`` against ``baseline``."""
    got = paired_ratio(result, baseline)
    error = None
    if got is None:
        error = result.error or baseline.error or "not measured"
        got = (None, None, None, 0)
    ratio, lo, hi, n = got
    return Effect(result.label, name or result.label, baseline.label, ratio, lo, hi, n, _median(result),
                  _median(baseline), result.settings.level, error)


def _pass_of(label: str) -> str:
    return label.split(" @")[0].lstrip("+-")


def _same_run_settings(results: Sequence[BenchResult]) -> Settings:
    """Rule 4 on results: the one Settings they share (ValueError naming the odd one)."""
    want = results[0].settings
    for r in results[1:]:
        if r.settings != want:
            raise ValueError(f"what-if step '{r.label}' ran under {r.settings.describe()}, not the run's "
                             f"{want.describe()}: steps may differ only by passes")
    return want


def cumulative_results(results: Sequence[BenchResult]) -> list[BenchResult]:
    """The results of one cumulative what-if among others: ``original`` then the ``+pass`` steps.

    Other variants measured in the same run (references, onnxruntime levels, leave-one-out)
    are left out, so a chart of the steps shows passes only.
    """
    base = [r for r in results if r.label.split(" @")[0] == ORIGINAL and not r.passes]
    steps = [r for r in results if r.label.startswith("+")]
    if not steps:
        return []
    level = steps[0].settings
    # The baseline at the steps' setting; another one is kept so that rule 4 can refuse it.
    base = [r for r in base if r.settings == level][:1] or base[:1]
    return base + steps


def leave_one_out_results(results: Sequence[BenchResult]) -> list[BenchResult]:
    """The results of one leave-one-out what-if among others: ``all passes`` then ``-pass``."""
    full = [r for r in results if r.label.split(" @")[0] == ALL]
    rest = [r for r in results if r.label.startswith("-")]
    return (full[:1] + rest) if full and rest else []


def cumulative_effects(results: Sequence[BenchResult]) -> tuple[list[Effect], Settings | None]:
    """Each ``+pass`` step against the step before it (rules 4 and 5).

    Args:
        results: benchmark results that hold a cumulative what-if (others are ignored).

    Returns:
        (effects, settings): one effect per step, and the one setting of the run (None when
        there is no cumulative what-if among ``results``).

    Raises:
        ValueError: a step ran under other settings than the baseline.
    """
    chosen = cumulative_results(results)
    if len(chosen) < 2:
        return [], None
    settings = _same_run_settings(chosen)
    out = []
    prev = chosen[0]
    for r in chosen[1:]:
        out.append(effect(r, prev, _pass_of(r.label)))
        if r.stats is not None:
            prev = r
    return out, settings


def leave_one_out_effects(results: Sequence[BenchResult]) -> tuple[list[Effect], Settings | None]:
    """Each ``-pass`` variant against ``all passes`` (ratio above 1: the result is slower
    without the pass, i.e. the pass helps).

    Raises:
        ValueError: a variant ran under other settings than ``all passes``.
    """
    chosen = leave_one_out_results(results)
    if len(chosen) < 2:
        return [], None
    settings = _same_run_settings(chosen)
    base = chosen[0]
    return [effect(r, base, _pass_of(r.label)) for r in chosen[1:]], settings


def level_effects(results: Sequence[BenchResult], baseline_label: str = ORIGINAL) -> list[Effect]:
    """The onnxruntime levels as their own comparison: every ``<baseline_label> @...`` variant
    (same model, another level) against ``baseline_label``.

    Returns:
        One effect per level variant (empty when the baseline is missing).
    """
    base = next((r for r in results if r.label == baseline_label), None)
    if base is None:
        return []
    prefix = baseline_label + " @"
    return [effect(r, base, r.label[len(prefix):].strip()) for r in results if r.label.startswith(prefix)]


def effects_table(effects: Sequence[Effect], results: Sequence[BenchResult] = ()) -> list[dict]:
    """The table beside a what-if chart, made from the chart's own effects (the same numbers).

    Args:
        effects: the effects the chart draws (:func:`cumulative_effects`,
            :func:`leave_one_out_effects`, :func:`level_effects`).
        results: the benchmark results, for the static memory of each variant and its baseline.

    Returns:
        One dict per effect: ``variant``, ``vs`` (its baseline's label), ``median ms``,
        ``ratio [95% interval]``, ``claim`` (:func:`fusionviz.bench.claims.speed_claim`, the
        words the chart's bar is labelled with) and ``Δ static intermediates (bytes)`` against
        the same baseline (None when either side has tensors of unknown size).
    """
    by = {r.label: r for r in results}
    rows = []
    for e in effects:
        row = {"variant": e.label, "vs": e.baseline,
               "median ms": round(e.median_ms, 3) if e.median_ms is not None else None,
               "ratio [95% interval]": e.interval(), "claim": e.claim(with_figures=False),
               "Δ static intermediates (bytes)": None}
        a, b = by.get(e.label), by.get(e.baseline)
        if a is not None and b is not None and not (a.memory.get("static_unknown_tensors")
                                                    or b.memory.get("static_unknown_tensors")):
            x, y = _static(a, "static_sum_intermediate_bytes"), _static(b, "static_sum_intermediate_bytes")
            if x is not None and y is not None:
                row["Δ static intermediates (bytes)"] = x - y
        rows.append(row)
    return rows
