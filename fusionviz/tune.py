"""Automatic what-if: the fastest pass subset × onnxruntime level × denormal setting that verifies.

Search (every measurement is one interleaved :func:`fusionviz.bench.run_benchmark` call, each
variant verified against the original in its worker at the fp32 tolerance):

1. **Start** from every exact pass (``--all``). Passes that change nothing on this model are set
   aside: dropping them gives the same model, so measuring that only adds noise.
2. **Greedy drop**: first the settings round of step 3 on the full set picks the onnxruntime
   settings to measure under (onnxruntime's own fusions interact with ours), then measure the
   current set beside "current minus p" for every active p under those settings; drop the pass
   whose removal helps most, if it verifies and its *paired ratio* to the current set (median
   over interleaved rounds of round-median / round-median, so load changes on a busy machine
   cancel) is below ``1 - min_gain``. Repeat until nothing helps, or the
   budget is spent. (A fusion can hurt: e.g. onnxruntime 1.32's CPU SkipLayerNormalization is
   slower than LayerNormalization + Add at hidden size 128.)
3. **Level and settings**: the winning pass set under each onnxruntime level (off, basic,
   extended, all), "all without SkipLayerNormFusion" when the model has LayerNormalization, and
   "all" with denormals-as-zero; the original under ``all`` is measured in the same run as the
   baseline.
4. The winner is the *verified* variant of step 3 with the lowest paired ratio to the baseline (never one that failed to verify);
   the baseline (no passes, ``all``) is a candidate too, so the winner is never slower than it
   as measured in that round.

Time is bounded by ``budget_s``: a greedy round is not started when the estimate (per-variant
cost of the previous round) says it and step 3 would not fit; step 3 always runs (one round).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]
SKIP_LN_FUSION = "SkipLayerNormFusion"


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """One point of the search space."""

    passes: tuple[str, ...]
    level: str = "all"
    denormal_as_zero: bool = False
    disabled_optimizers: tuple[str, ...] = ()

    def label(self) -> str:
        lvl = self.level + (f" -{','.join(self.disabled_optimizers)}" if self.disabled_optimizers else "")
        return f"{len(self.passes)} passes @ {lvl}" + (" +DAZ" if self.denormal_as_zero else "")

    def as_dict(self) -> dict:
        return {"passes": list(self.passes), "level": self.level, "denormal_as_zero": self.denormal_as_zero,
                "disabled_optimizers": list(self.disabled_optimizers)}


@dataclasses.dataclass(frozen=True)
class TuneStep:
    """One measured variant of the search."""

    phase: str  # "start", "drop <pass>", "level"
    config: TuneConfig
    median_ms: float | None
    verified: bool
    chosen: bool = False
    note: str = ""
    ratio: float | None = None  # paired ratio vs the first variant of its round (1.0 = same)

    def as_dict(self) -> dict:
        return {"phase": self.phase, "config": self.config.as_dict(), "label": self.config.label(),
                "median_ms": self.median_ms, "ratio": self.ratio, "verified": self.verified, "chosen": self.chosen, "note": self.note}


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The search path and the winner."""

    best: TuneConfig
    best_ms: float
    baseline_ms: float  # the original model under onnxruntime level "all", same run as the winner
    steps: tuple[TuneStep, ...]
    seconds: float
    budget_s: float
    inactive_passes: tuple[str, ...]
    budget_exhausted: bool

    @property
    def speedup(self) -> float:
        """Baseline / winner (> 1 means the winner is faster than the original under ORT all)."""
        return self.baseline_ms / self.best_ms if self.best_ms > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "best": self.best.as_dict(),
            "best_label": self.best.label(),
            "best_ms": self.best_ms,
            "baseline_ms": self.baseline_ms,
            "speedup_vs_ort_all": self.speedup,
            "steps": [s.as_dict() for s in self.steps],
            "seconds": round(self.seconds, 2),
            "budget_s": self.budget_s,
            "inactive_passes": list(self.inactive_passes),
            "budget_exhausted": self.budget_exhausted,
        }


def _levels_for(model: onnx.ModelProto) -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = [("off", ()), ("basic", ()), ("extended", ()), ("all", ())]
    if any(n.op_type == "LayerNormalization" for n in model.graph.node):
        out.append(("all", (SKIP_LN_FUSION,)))
    return out


def tune(
    model: onnx.ModelProto,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    budget_s: float = 120.0,
    min_time_s: float = 0.5,
    min_gain: float = 0.03,
    rtol: float = 1e-4,
    passes: Sequence[str] | None = None,
    progress: ProgressFn | None = None,
) -> TuneResult:
    """Search for the fastest verified configuration (see the module docstring).

    Args:
        model: the original model.
        shapes: concrete input shapes (``--shape``), used by passes and the benchmark.
        feeds: the inputs to time and verify with (an InputPlan's set); default from ``shapes``.
        budget_s: wall-clock budget for the whole search.
        min_time_s: timed seconds per variant per measurement.
        min_gain: a drop must be at least this much faster (fraction) to be taken.
        rtol: verification tolerance (fp32).
        passes: the starting set (default: every exact pass).
        progress: called with one-line messages.

    Raises:
        fusionviz.errors.FusionvizError: the model cannot be loaded, fed or run.
    """
    from fusionviz.bench import Settings, Variant, run_benchmark
    from fusionviz.passes import registry, run_pipeline

    say = progress or (lambda m: None)
    t0 = time.perf_counter()
    shapes = {k: list(v) for k, v in (shapes or {}).items()} or None
    start = registry.resolve(passes if passes is not None else registry.default_passes())
    if any(not p.exact for p in start):
        raise errors.InputSpecError("tune searches exact passes only; leave out precision passes.")
    names = [p.name for p in start]
    built: dict[tuple[str, ...], onnx.ModelProto] = {}

    def build(ps: Sequence[str]) -> onnx.ModelProto:
        key = tuple(ps)
        if key not in built:
            built[key] = run_pipeline(model, list(ps), shapes=shapes, keep_snapshots=False).final
        return built[key]

    say(f"tune: running {len(names)} passes")
    full = run_pipeline(model, names, shapes=shapes, keep_snapshots=False)
    active = [r.name for r in full.reports if r.changes and not r.error]
    inactive = tuple(n for n in names if n not in active)
    built[tuple(active)] = full.final
    steps: list[TuneStep] = []
    per_variant_s: float | None = None
    exhausted = False

    def measure(variants: list[tuple[str, TuneConfig, onnx.ModelProto]]
                ) -> list[tuple[float | None, bool, str, float | None]]:
        nonlocal per_variant_s
        t = time.perf_counter()
        vs = [Variant(f"{i}:{phase}", m, Settings(level=c.level, denormal_as_zero=c.denormal_as_zero,
                                                   disabled_optimizers=c.disabled_optimizers), c.passes)
              for i, (phase, c, m) in enumerate(variants)]
        res = run_benchmark(vs, shapes=shapes, feeds=feeds, min_time_s=min_time_s, verify_against=model, verify_rtol=rtol,
                            progress=lambda f, m: None)
        per_variant_s = (time.perf_counter() - t) / max(len(variants), 1)
        out = []
        for r in res:
            ok = bool(r.ok and r.verify and r.verify.get("ok"))
            note = r.error or ("" if ok else f"not verified: max rel {r.verify.get('max_rel_diff', 0):.2e}"
                               if r.verify else "not verified")
            out.append((r.stats.median_ms if r.stats else None, ok, note, paired_ratio(r, res[0])))
        return out

    def paired_ratio(r, ref) -> float | None:
        """Median over rounds of (variant's round median / reference's round median).

        Rounds are interleaved, so a load change on the machine hits both sides of each ratio;
        this is far steadier than comparing overall medians on a busy machine."""
        if r.stats is None or ref.stats is None:
            return None
        pairs = [a / b for a, b in zip(r.round_medians_ms, ref.round_medians_ms, strict=False) if b > 0]
        if pairs:
            return float(statistics.median(pairs))
        return r.stats.median_ms / ref.stats.median_ms if ref.stats.median_ms > 0 else None

    def time_left() -> float:
        return budget_s - (time.perf_counter() - t0)

    def round_cost(n_variants: int) -> float:
        per = per_variant_s if per_variant_s is not None else min_time_s * 1.5 + 1.0
        return per * n_variants

    def level_round(ps: list[str], phase_tag: str) -> list[TuneStep]:
        m = build(ps)
        cand = [("baseline", TuneConfig((), "all"), model)]
        for level, disabled in _levels_for(m):
            cand.append((f"level{phase_tag}", TuneConfig(tuple(ps), level, False, disabled), m))
        cand.append((f"denormal{phase_tag}", TuneConfig(tuple(ps), "all", True), m))
        say(f"tune: comparing onnxruntime levels and denormals-as-zero ({len(cand)} variants)")
        results = measure(cand)
        return [TuneStep(ph, c, ms, ok, note=note, ratio=rel)
                for (ph, c, _), (ms, ok, note, rel) in zip(cand, results, strict=True)]

    def fastest(level_steps: list[TuneStep]) -> TuneStep | None:
        ok = [s for s in level_steps if s.verified and s.median_ms is not None]
        return min(ok, key=lambda s: (s.ratio if s.ratio is not None else 1.0, s.median_ms)) if ok else None

    # Step 2a: the settings the greedy phase measures under (onnxruntime's own fusions interact
    # with ours: e.g. at "all" it re-creates SkipLayerNormalization when ours is dropped).
    current = list(active)
    n_levels = len(_levels_for(full.final)) + 2
    greedy_cfg = TuneConfig(tuple(current))
    if current and time_left() > round_cost(n_levels) * 2 + round_cost(len(current) + 1):
        first_levels = level_round(current, " (all passes)")
        steps += first_levels
        top = fastest(first_levels[1:])
        if top is not None:
            greedy_cfg = top.config

    def with_passes(ps: Sequence[str]) -> TuneConfig:
        return dataclasses.replace(greedy_cfg, passes=tuple(ps))

    # Step 2b: greedy drop under those settings.
    while current:
        if time_left() < round_cost(len(current) + 1) + round_cost(n_levels):  # keep time for step 3
            exhausted = True
            break
        cand: list[tuple[str, TuneConfig, onnx.ModelProto]] = [
            ("current", with_passes(current), build(current))]
        for p in current:
            rest = [n for n in current if n != p]
            cand.append((f"drop {p}", with_passes(rest), build(rest)))
        say(f"tune: measuring {len(cand)} variants ({len(current)} active passes, {time_left():.0f} s left)")
        results = measure(cand)
        base_ms = results[0][0]
        bar = (1 - min_gain) if base_ms is not None and results[0][1] else None
        best_i = None
        first = len(steps)
        for i, ((phase, cfg, _), (ms, ok, note, rel)) in enumerate(zip(cand, results, strict=True)):
            steps.append(TuneStep(phase, cfg, ms, ok, note=note, ratio=rel))
            if i and ok and rel is not None and bar is not None and rel < bar:
                best_i, bar = i, rel
        if best_i is None:
            break
        dropped = cand[best_i][0].split(" ", 1)[1]
        say(f"tune: dropping {dropped} (x{bar:.3f} of the current set, paired over rounds)")
        steps[first + best_i] = dataclasses.replace(steps[first + best_i], chosen=True)
        current.remove(dropped)

    # Step 3: levels and settings for the final pass set, with the baseline in the same run; the
    # baseline itself (no passes, ORT all) is a candidate, so the winner is never worse than it.
    level_steps = level_round(current, "")
    winner = fastest(level_steps)
    if winner is None:
        raise errors.VerificationError("No tuned variant verified against the original; nothing to recommend.")
    baseline_ms = level_steps[0].median_ms or 0.0
    steps += [dataclasses.replace(s, chosen=True) if s is winner else s for s in level_steps]
    seconds = time.perf_counter() - t0
    say(f"tune: best {winner.config.label()}: {winner.median_ms:.3f} ms vs original @all {baseline_ms:.3f} ms "
        f"({baseline_ms / winner.median_ms:.2f}x) in {seconds:.0f} s")
    return TuneResult(winner.config, float(winner.median_ms), float(baseline_ms), tuple(steps), seconds, budget_s,
                      inactive, exhausted)


def tuned_model(model: onnx.ModelProto, result: TuneResult,
                shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """The winner's model (its passes applied); run it with ``result.best``'s settings."""
    from fusionviz.passes import run_pipeline

    return run_pipeline(model, list(result.best.passes), shapes=shapes, keep_snapshots=False).final
