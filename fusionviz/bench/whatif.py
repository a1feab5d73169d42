"""Per-pass what-if, read back from results: each pass's effect as a paired ratio with its interval.

The variants are built by :class:`fusionviz.experiment.build.Builder` (``cumulative``,
``leave_one_out``, ``levels``); this module reads their results back by **role**, never by label:

1. **Cumulative**: the ``original`` then the ``step`` results: the difference between neighbours
   is what each pass adds *given the ones before it* (canonical order).
2. **Leave-one-out**: ``all`` and the ``drop`` results: the difference is what the result loses
   without p *given all the others* (a pass whose work another pass would also do shows ~0 here
   even when it matters cumulatively).
3. A pass that changed nothing was not measured (its delta is zero by construction).
4. **Isolation**: every step of one what-if shares the run's settings (the onnxruntime level
   included), so a step differs from its neighbour only by passes; :func:`cumulative_effects`
   and :func:`leave_one_out_effects` refuse steps whose settings differ. The onnxruntime levels
   are a separate comparison (:func:`level_effects`: the ``level`` results against the original).
5. **Intervals**: an effect is the *paired ratio* of two variants: the median over interleaved
   rounds of (round median of one / round median of the other), so a load change on the
   machine hits both sides of each ratio. Its 95% interval is the distribution-free interval of
   that median (:func:`fusionviz.bench.stats.median_ci`); an effect whose interval contains 1 is
   *within noise*, and reads "no measurable difference" (:mod:`fusionviz.bench.claims`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from fusionviz.bench.records import BenchResult, Settings
from fusionviz.experiment.labels import runtime
from fusionviz.experiment.variant import ALL, DROP, LEVEL, ORIGINAL, STEP

logger = logging.getLogger(__name__)


def run_title(kind: str, settings: Settings) -> str:
    """The title of a what-if chart: what it shows and the one onnxruntime setting of the run.

    Args:
        kind: ``"cumulative"`` or ``"leave-one-out"``.
        settings: the settings every variant of the run shares.

    Returns:
        e.g. ``What each pass adds (every step at onnxruntime level 'off', 1 thread)``.
    """
    what = "What each pass adds" if kind == "cumulative" else "What the result loses without each pass"
    threads = f"{settings.threads} thread{'s' if settings.threads != 1 else ''}"
    return f"{what} (every step at onnxruntime level '{settings.level}', {threads})"


# --------------------------------------------------------------------------- reading results back


def _median(r: BenchResult) -> float | None:
    return r.stats.median_ms if r.stats is not None else None


def _static(r: BenchResult, key: str = "static_peak_reuse_bytes") -> int | None:
    v = r.memory.get(key)
    return int(v) if v is not None else None


def cumulative_steps(results: Sequence[BenchResult]) -> list[dict]:
    """Incremental effect of each step of a cumulative run (input of :func:`fusionviz.charts.waterfall`).

    Args:
        results: the results of a cumulative what-if in order (the first is the baseline).

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
        results: the results of a leave-one-out what-if (the first is ``all passes``).

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
        row = {"pass": r.role.pass_name, "label": r.label, "median_ms": med,
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
        label: the variant's display label (``+fold_batchnorm``, ``-fuse_gelu``, ``original @ORT all``).
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


def _same_run_settings(results: Sequence[BenchResult]) -> Settings:
    """Rule 4 on results: the one Settings they share (ValueError naming the odd one)."""
    want = results[0].settings
    for r in results[1:]:
        if r.settings != want:
            raise ValueError(f"what-if step '{r.label}' ran under {r.settings.describe()}, not the run's "
                             f"{want.describe()}: steps may differ only by passes")
    return want


def cumulative_results(results: Sequence[BenchResult]) -> list[BenchResult]:
    """The results of one cumulative what-if among others: ``original`` then the ``step`` results.

    Other variants measured in the same run (references, onnxruntime levels, leave-one-out)
    are left out, so a chart of the steps shows passes only.
    """
    base = [r for r in results if r.role.kind == ORIGINAL]
    steps = [r for r in results if r.role.kind == STEP]
    if not steps:
        return []
    level = steps[0].settings
    # The baseline at the steps' setting; another one is kept so that rule 4 can refuse it.
    base = [r for r in base if r.settings == level][:1] or base[:1]
    return base + steps


def leave_one_out_results(results: Sequence[BenchResult]) -> list[BenchResult]:
    """The results of one leave-one-out what-if among others: ``all`` then the ``drop`` results."""
    full = [r for r in results if r.role.kind == ALL]
    rest = [r for r in results if r.role.kind == DROP]
    return (full[:1] + rest) if full and rest else []


def cumulative_effects(results: Sequence[BenchResult]) -> tuple[list[Effect], Settings | None]:
    """Each ``step`` against the step before it (rules 4 and 5).

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
        out.append(effect(r, prev, r.role.pass_name))
        if r.stats is not None:
            prev = r
    return out, settings


def leave_one_out_effects(results: Sequence[BenchResult]) -> tuple[list[Effect], Settings | None]:
    """Each ``drop`` variant against ``all`` (ratio above 1: the result is slower
    without the pass, i.e. the pass helps).

    Raises:
        ValueError: a variant ran under other settings than ``all passes``.
    """
    chosen = leave_one_out_results(results)
    if len(chosen) < 2:
        return [], None
    settings = _same_run_settings(chosen)
    base = chosen[0]
    return [effect(r, base, r.role.pass_name) for r in chosen[1:]], settings


def level_effects(results: Sequence[BenchResult]) -> list[Effect]:
    """The onnxruntime levels as their own comparison: every ``level`` result (the original under
    another level) against the ``original`` result at the run's settings.

    Returns:
        One effect per level variant, named ``ORT <level>`` (empty when the original is missing).
    """
    base = next((r for r in results if r.role.kind == ORIGINAL), None)
    if base is None:
        return []
    return [effect(r, base, runtime(r.settings)) for r in results if r.role.kind == LEVEL]


def reference_result(results: Sequence[BenchResult], level: str = "all") -> BenchResult | None:
    """The original measured on onnxruntime under ``level`` (the Benchmark page's reference:
    what onnxruntime alone gives), whether it is the run's original or a ``level`` variant."""
    return next((r for r in results if r.role.kind in (ORIGINAL, LEVEL) and r.settings.backend == "ort"
                 and r.settings.level == level and r.stats is not None), None)


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
