"""Automatic what-if: the fastest pass subset × onnxruntime level × backend × denormal setting
that verifies, confirmed by a fresh run.

Search (every measurement is one interleaved :func:`fusionviz.bench.run_benchmark` call, each
variant verified against the original in its worker at the fp32 tolerance):

1. **Start** from every exact pass (``--all``). Passes that change nothing on this model are set
   aside: dropping them gives the same model, so measuring that only adds noise.
2. **Greedy drop** (onnxruntime): first the settings round of step 3 on the full set picks the
   onnxruntime settings to measure under (onnxruntime's own fusions interact with ours), then
   measure the current set beside "current minus p" for every active p under those settings;
   drop the pass whose removal helps most, if it verifies and its *paired ratio* to the current
   set (median over interleaved rounds of round-median / round-median, so load changes on a busy
   machine cancel) is below ``1 - min_gain``. Repeat until nothing helps, or the budget is spent.
   (A fusion can hurt: e.g. onnxruntime 1.32's CPU SkipLayerNormalization is slower than
   LayerNormalization + Add at hidden size 128.)
3. **Level and settings**: the winning pass set under each onnxruntime level (off, basic,
   extended, all), "all without SkipLayerNormFusion" when the model has LayerNormalization, and
   "all" with denormals-as-zero; the original under ``all`` is measured in the same run as the
   baseline.
4. **Other backends** (``backends`` beyond "ort"; OpenVINO by default on the CLI, TVM and
   TensorRT only when asked): one round per backend with the baseline, the original on the
   backend with and without flush-to-zero, and the pass sets of steps 1 and 2 on it (without
   the passes that leave onnxruntime-only ops such as NCHWc or FusedConv, which other backends
   cannot read). A backend
   that is not available here, or cannot compile the model, is one line in ``backend_notes``;
   the others go on.
5. **Candidate**: the verified variant of steps 3-4 with the lowest paired ratio to its round's
   baseline (never one that failed to verify).
6. **Confirmation**: picking the best of many noisy measurements is biased towards luck, so the
   candidate is measured again in a fresh interleaved run beside the original under onnxruntime
   level all and the original on every other backend alone ("single backends"). The reported
   speed-up is this run's paired ratio with its 95% interval. A variant *beats* another when
   its ratio is at least ``CONFIRM_MARGIN`` (2%) lower and their 95% intervals do not overlap
   (the baseline's interval is [1, 1]: beating it means an interval below 1). The single
   backend to recommend is onnxruntime level all unless another backend alone beats it (the
   lowest ratio of those that do; any whose interval overlaps it is named as tied). The
   candidate is recommended only when it verifies and beats that single backend; else the
   single backend is: tune never recommends a variant slower than the best single backend, nor
   a more complex one that is not clearly faster.
7. **Words**: the recommendation and :meth:`TuneResult.claim` say "faster" only when the
   confirmation's interval of the ratio excludes 1, else "no measurable difference (ratio X,
   95% interval [a, b])" (:mod:`fusionviz.bench.claims`); "slower" likewise.

Time is bounded by ``budget_s``: a greedy round is not started when the estimate (per-variant
cost of the previous round) says it and steps 3-6 would not fit; steps 3, 4 and 6 always run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.tune.recommend import recommend
from fusionviz.tune.records import CONFIRM_MARGIN, Confirmed, TuneConfig, TuneResult, TuneStep
from fusionviz.tune.search import SKIP_LN_FUSION, Search, fastest, levels_for

__all__ = ["CONFIRM_MARGIN", "DEFAULT_BACKENDS", "SKIP_LN_FUSION", "Confirmed", "TuneConfig", "TuneResult",
           "TuneStep", "available_backends", "recommend", "tune", "tuned_model"]

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]
#: Backends the CLI searches when none are named: the ones worth timing on a CPU (TVM untuned
#: is tens of times slower than onnxruntime; it is searched only when asked for).
DEFAULT_BACKENDS = ("ort", "openvino")


def available_backends(names: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``names`` split into the usable ones and {name: one line why not} (never raises)."""
    from fusionviz.backends.registry import TITLES, canonical, get_backend

    usable: list[str] = []
    notes: dict[str, str] = {}
    for name in names:
        key = canonical(name)
        why = get_backend(key).quick_check()
        if why is None:
            if key not in usable:
                usable.append(key)
        else:
            notes[key] = f"{TITLES.get(key, key)} is not available here: {why}"
    if "ort" not in usable:
        usable.insert(0, "ort")  # the baseline of every ratio
    return tuple(usable), notes



def tune(
    model: onnx.ModelProto,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    freeze: Mapping[str, np.ndarray] | None = None,
    budget_s: float = 120.0,
    min_time_s: float = 0.5,
    min_gain: float = 0.03,
    rtol: float = 1e-4,
    passes: Sequence[str] | None = None,
    backends: Sequence[str] = ("ort",),
    confirm_time_s: float | None = None,
    progress: ProgressFn | None = None,
) -> TuneResult:
    """Search for the fastest verified configuration and confirm it (see the module docstring).

    Args:
        model: the original model.
        shapes: concrete input shapes (``--shape``), used by passes and the benchmark.
        feeds: the inputs to time and verify with (an InputPlan's set); default from ``shapes``.
        freeze: inputs made constants (``--freeze``) in every variant with passes; the
            original (no passes: the baseline and each backend alone) keeps them as inputs.
        budget_s: wall-clock budget for the search (the confirmation comes on top).
        min_time_s: timed seconds per variant per measurement.
        min_gain: a drop must be at least this much faster (fraction) to be taken.
        rtol: verification tolerance (fp32).
        passes: the starting set (default: every exact pass).
        backends: backends to search ("ort" is always included: it is the baseline).
        confirm_time_s: timed seconds per variant in the confirmation (default 2 × min_time_s).
        progress: called with one-line messages.

    Raises:
        fusionviz.errors.FusionvizError: the model cannot be loaded, fed or run.
    """
    from fusionviz.passes import registry

    say = progress or (lambda m: None)
    shapes = {k: list(v) for k, v in (shapes or {}).items()} or None
    start = registry.resolve(passes if passes is not None else registry.default_passes())
    if any(not p.exact for p in start):
        raise errors.InputSpecError("tune searches exact passes only; leave out precision passes.")
    usable, notes = available_backends(backends)
    for line in notes.values():
        say(f"tune: {line}")
    others = [b for b in usable if b != "ort"]
    s = Search(model, shapes=shapes, feeds=feeds, freeze=freeze, budget_s=budget_s, min_time_s=min_time_s,
               rtol=rtol, notes=notes, say=say)
    names = [p.name for p in start]
    say(f"tune: running {len(names)} passes")
    full = s.builder.pipeline(names)
    active = [r.name for r in full.reports if r.changes and not r.error]
    inactive = tuple(n for n in names if n not in active)
    s.builder.remember(active, full.final)
    steps: list[TuneStep] = []

    n_levels = len(levels_for(full.final)) + 2
    reserve_s = s.round_cost(n_levels) + sum(s.round_cost(5) for _ in others)
    # Step 2a: the settings the greedy phase measures under (onnxruntime's own fusions interact
    # with ours: e.g. at "all" it re-creates SkipLayerNormalization when ours is dropped).
    current = list(active)
    greedy_cfg = TuneConfig(tuple(current))
    if current and s.time_left() > s.round_cost(n_levels) * 2 + reserve_s + s.round_cost(len(current) + 1):
        first_levels = s.level_round(current, " (all passes)")
        steps += first_levels
        top = fastest(first_levels[1:])
        if top is not None:
            greedy_cfg = top.config
    # Step 2b: greedy drop under those settings.
    dropped, exhausted = s.greedy(current, greedy_cfg, min_gain, reserve_s)
    steps += dropped
    # Step 3: levels and settings for the final pass set, with the baseline in the same run; the
    # baseline itself (no passes, ORT all) is a candidate, so the winner is never worse than it.
    pool = s.level_round(current, "")
    # Step 4: the other backends, each in its own round with the baseline.
    pass_sets: list[list[str]] = []
    for ps in (s.portable(active), s.portable(current)):
        if ps and ps not in pass_sets:
            pass_sets.append(ps)
    for b in others:
        pool += s.backend_round(b, pass_sets)
    winner = fastest(pool)
    if winner is None:
        raise errors.VerificationError("No tuned variant verified against the original; nothing to recommend.")
    candidate = winner.config
    steps += [dataclasses.replace(step, chosen=True) if step is winner else step for step in pool]
    say(f"tune: search winner {candidate.label()} (x{winner.ratio or 1.0:.3f} of the original @ORT all "
        f"in its round); confirming in a fresh run")

    # Step 6: confirmation.
    confirmation = s.confirm(candidate, [b for b in others if b not in notes], confirm_time_s or 2 * min_time_s)
    best, recommendation = recommend(candidate, confirmation)
    say(f"tune: {recommendation}")
    conf_best = next(c for c in confirmation if c.config == best)
    base = next(c for c in confirmation if c.role == "baseline")
    seconds = time.perf_counter() - s.t0
    return TuneResult(best, float(conf_best.median_ms or 0.0), float(base.median_ms or 0.0), tuple(steps), seconds,
                      budget_s, inactive, exhausted, confirmation=tuple(confirmation), candidate=candidate,
                      backends=usable, backend_notes=dict(notes), recommendation=recommendation,
                      frozen={k: np.asarray(v).tolist() for k, v in (freeze or {}).items()})


def tuned_model(model: onnx.ModelProto, result: TuneResult,
                shapes: Mapping[str, Sequence[int]] | None = None,
                freeze: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """The winner's model (its passes applied, ``freeze``'s inputs made constants when it has
    passes); run it with ``result.best.settings()``."""
    from fusionviz.passes import run_pipeline

    if not result.best.passes:
        return model
    return run_pipeline(model, list(result.best.passes), shapes=shapes, freeze=freeze, keep_snapshots=False).final
