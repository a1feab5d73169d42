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

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]
SKIP_LN_FUSION = "SkipLayerNormFusion"
#: Backends the CLI searches when none are named: the ones worth timing on a CPU (TVM untuned
#: is tens of times slower than onnxruntime; it is searched only when asked for).
DEFAULT_BACKENDS = ("ort", "openvino")
#: A search winner is recommended over the fastest single backend (the original on one backend,
#: default settings) only when the confirmation has it at least this much faster: two runs of one
#: variant differ by about 2% here, and a 1% "win" (OpenVINO with flush-to-zero over OpenVINO, on
#: a model without denormals) flipped in the next run.
CONFIRM_MARGIN = 0.02


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """One point of the search space.

    ``level`` and ``disabled_optimizers`` are onnxruntime settings; other backends run their own
    full pipeline and ignore them (``as_dict`` then gives ``level`` None).
    """

    passes: tuple[str, ...]
    level: str = "all"
    denormal_as_zero: bool = False
    disabled_optimizers: tuple[str, ...] = ()
    backend: str = "ort"

    def label(self) -> str:
        from fusionviz.backends.registry import TITLES

        if self.backend == "ort":
            where = self.level + (f" -{','.join(self.disabled_optimizers)}" if self.disabled_optimizers else "")
        else:
            where = TITLES.get(self.backend, self.backend)
        return f"{len(self.passes)} passes @ {where}" + (" +DAZ" if self.denormal_as_zero else "")

    def settings(self, threads: int = 1):
        """The :class:`fusionviz.bench.Settings` that run this configuration."""
        from fusionviz.bench import Settings

        ort = self.backend == "ort"
        return Settings(level=self.level if ort else "all", threads=threads, denormal_as_zero=self.denormal_as_zero,
                        disabled_optimizers=self.disabled_optimizers if ort else (), backend=self.backend)

    def as_dict(self) -> dict:
        ort = self.backend == "ort"
        return {"passes": list(self.passes), "backend": self.backend, "level": self.level if ort else None,
                "denormal_as_zero": self.denormal_as_zero,
                "disabled_optimizers": list(self.disabled_optimizers) if ort else []}


@dataclasses.dataclass(frozen=True)
class TuneStep:
    """One measured variant of the search."""

    phase: str  # "start", "drop <pass>", "level", "backend <name>"
    config: TuneConfig
    median_ms: float | None
    verified: bool
    chosen: bool = False
    note: str = ""
    ratio: float | None = None  # paired ratio vs the first variant of its round (1.0 = same)

    def as_dict(self) -> dict:
        return {"phase": self.phase, "config": self.config.as_dict(), "label": self.config.label(),
                "median_ms": self.median_ms, "ratio": self.ratio, "verified": self.verified, "chosen": self.chosen,
                "note": self.note}


@dataclasses.dataclass(frozen=True)
class Confirmed:
    """One variant of the confirmation run, against the original under onnxruntime level all.

    Attributes:
        role: "baseline" (original @ ORT all), "single" (the original on another backend alone)
            or "candidate" (the search's winner).
        ratio, ci_low, ci_high: paired ratio to the baseline and its 95% interval (below 1:
            faster); None when the variant failed.
        applied: the settings the backend applied, in its own words (flush-to-zero included).
    """

    role: str
    config: TuneConfig
    median_ms: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    verified: bool
    note: str = ""
    applied: dict | None = None
    memory_mb: float | None = None

    def as_dict(self) -> dict:
        return {"role": self.role, "label": self.config.label(), "config": self.config.as_dict(),
                "median_ms": self.median_ms, "ratio": self.ratio, "ci": [self.ci_low, self.ci_high],
                "verified": self.verified, "note": self.note, "applied": self.applied, "rss_run_mb": self.memory_mb}


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The search path, the confirmation and the recommendation.

    ``best_ms`` / ``baseline_ms`` / ``ratio`` come from the confirmation run when there is one
    (always, from :func:`tune`); ``candidate`` is the search's winner before it (``best`` differs
    from it only when a single backend beat it in the confirmation).
    """

    best: TuneConfig
    best_ms: float
    baseline_ms: float  # the original model under onnxruntime level "all", same run as best_ms
    steps: tuple[TuneStep, ...]
    seconds: float
    budget_s: float
    inactive_passes: tuple[str, ...]
    budget_exhausted: bool
    confirmation: tuple[Confirmed, ...] = ()
    candidate: TuneConfig | None = None
    backends: tuple[str, ...] = ("ort",)
    backend_notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    recommendation: str = ""
    #: Inputs made constants in every variant with passes (``--freeze``): name → value.
    frozen: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def _confirmed(self, config: TuneConfig | None) -> Confirmed | None:
        return next((c for c in self.confirmation if c.config == config and c.ratio is not None), None)

    @property
    def ratio(self) -> float:
        """Recommended / original @ ORT all (below 1: faster), from the confirmation run."""
        c = self._confirmed(self.best)
        if c is not None:
            return float(c.ratio)
        return self.best_ms / self.baseline_ms if self.baseline_ms > 0 else 1.0

    @property
    def ratio_ci(self) -> tuple[float | None, float | None]:
        """The 95% interval of :attr:`ratio` (None when there was no confirmation)."""
        c = self._confirmed(self.best)
        return (c.ci_low, c.ci_high) if c is not None else (None, None)

    @property
    def speedup(self) -> float:
        """Original @ ORT all / recommended (> 1 means faster than the original under ORT all).

        A number for JSON; in words, use :meth:`claim` (it checks the interval)."""
        return 1.0 / self.ratio if self.ratio > 0 else 0.0

    @property
    def established(self) -> bool:
        """True when the confirmation's 95% interval of :attr:`ratio` lies below 1 (rule 7)."""
        from fusionviz.bench.claims import FASTER, verdict

        return verdict(self.ratio, *self.ratio_ci) == FASTER

    def claim(self) -> str:
        """The recommendation against the original under onnxruntime level all, in words (rule 7).

        Returns:
            e.g. ``3 passes @ extended: 6.100 ms vs the original @ORT all 10.000 ms: 1.6× faster
            (39% less time; ratio 0.610, 95% interval [0.590, 0.640]), verified``, or for the
            baseline itself ``the original under onnxruntime level all (10.000 ms): nothing the
            search found beat it measurably in the confirmation``.
        """
        from fusionviz.bench.claims import speed_claim

        c = self._confirmed(self.best)
        if c is not None and c.role == "baseline":
            return (f"the original under onnxruntime level all ({self.best_ms:.3f} ms): nothing the search "
                    "found beat it measurably in the confirmation")
        lo, hi = self.ratio_ci
        ok = ", verified" if c is None or c.verified else ""
        return (f"{self.best.label()}: {self.best_ms:.3f} ms vs the original @ORT all {self.baseline_ms:.3f} ms: "
                f"{speed_claim(self.ratio, lo, hi)}{ok}")

    @property
    def best_single(self) -> Confirmed | None:
        """The verified single backend (the original alone) with the lowest ratio in the
        confirmation run; others may be tied with it (:meth:`claim` and the recommendation say)."""
        singles = [c for c in self.confirmation if c.role in ("baseline", "single") and c.ratio is not None
                   and c.verified]
        return min(singles, key=lambda c: c.ratio) if singles else None

    def as_dict(self) -> dict:
        single = self.best_single
        lo, hi = self.ratio_ci
        best = self._confirmed(self.best)
        return {
            "best": {**self.best.as_dict(), "applied": best.applied if best else None,
                     "frozen": dict(self.frozen) if self.best.passes else {}},
            "best_label": self.best.label(),
            "best_ms": self.best_ms,
            "baseline_ms": self.baseline_ms,
            "speedup_vs_ort_all": self.speedup,
            "claim": self.claim(),
            "established": self.established,
            "ratio_vs_ort_all": self.ratio,
            "ratio_ci": [lo, hi],
            "best_single_backend": single.as_dict() if single else None,
            "ratio_vs_best_single": (self.ratio / single.ratio) if single and single.ratio else None,
            "candidate": self.candidate.as_dict() if self.candidate else None,
            "recommendation": self.recommendation,
            "confirmation": [c.as_dict() for c in self.confirmation],
            "backends": list(self.backends),
            "backend_notes": dict(self.backend_notes),
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


def _ratio(r, ref) -> tuple[float | None, float | None, float | None]:
    """Paired ratio of ``r`` to ``ref`` (median over interleaved rounds) and its 95% interval.

    Rounds are interleaved, so a load change on the machine hits both sides of each ratio;
    this is far steadier than comparing overall medians on a busy machine."""
    from fusionviz.bench.whatif import paired_ratio

    got = paired_ratio(r, ref)
    return (None, None, None) if got is None else got[:3]


def _verified(r) -> tuple[bool, str]:
    ok = bool(r.ok and r.verify and r.verify.get("ok"))
    if ok:
        return True, ""
    if r.error:
        return False, r.error
    return False, (f"not verified: max rel {r.verify.get('max_rel_diff', 0):.2e}" if r.verify else "not verified")


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
    from fusionviz.backends.registry import TITLES
    from fusionviz.bench import Variant, run_benchmark
    from fusionviz.passes import registry, run_pipeline

    say = progress or (lambda m: None)
    t0 = time.perf_counter()
    shapes = {k: list(v) for k, v in (shapes or {}).items()} or None
    start = registry.resolve(passes if passes is not None else registry.default_passes())
    if any(not p.exact for p in start):
        raise errors.InputSpecError("tune searches exact passes only; leave out precision passes.")
    usable, notes = available_backends(backends)
    for line in notes.values():
        say(f"tune: {line}")
    others = [b for b in usable if b != "ort"]
    names = [p.name for p in start]
    built: dict[tuple[str, ...], onnx.ModelProto] = {(): model}

    def build(ps: Sequence[str]) -> onnx.ModelProto:
        key = tuple(ps)
        if key not in built:
            built[key] = run_pipeline(model, list(ps), shapes=shapes, freeze=freeze, keep_snapshots=False).final
        return built[key]

    say(f"tune: running {len(names)} passes")
    full = run_pipeline(model, names, shapes=shapes, freeze=freeze, keep_snapshots=False)
    active = [r.name for r in full.reports if r.changes and not r.error]
    inactive = tuple(n for n in names if n not in active)
    built[tuple(active)] = full.final
    steps: list[TuneStep] = []
    per_variant_s: float | None = None
    exhausted = False

    def bench(variants: list[tuple[str, TuneConfig, onnx.ModelProto]], seconds: float):
        nonlocal per_variant_s
        t = time.perf_counter()
        vs = [Variant(f"{i}:{phase}", m, c.settings(), c.passes) for i, (phase, c, m) in enumerate(variants)]
        res = run_benchmark(vs, shapes=shapes, feeds=feeds, min_time_s=seconds, verify_against=model,
                            verify_rtol=rtol, progress=lambda f, m: None)
        per_variant_s = (time.perf_counter() - t) / max(len(variants), 1)
        return res

    def measure(variants: list[tuple[str, TuneConfig, onnx.ModelProto]]) -> list[TuneStep]:
        res = bench(variants, min_time_s)
        out = []
        for (phase, cfg, _), r in zip(variants, res, strict=True):
            ok, note = _verified(r)
            out.append(TuneStep(phase, cfg, r.stats.median_ms if r.stats else None, ok, note=note,
                                ratio=_ratio(r, res[0])[0]))
        return out

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
        return measure(cand)

    def backend_round(backend: str, pass_sets: list[list[str]]) -> list[TuneStep]:
        cand = [("baseline", TuneConfig((), "all"), model),
                (f"backend {backend}", TuneConfig((), backend=backend), model),
                (f"backend {backend}", TuneConfig((), denormal_as_zero=True, backend=backend), model)]
        for ps in pass_sets:
            if ps:
                cand.append((f"backend {backend}", TuneConfig(tuple(ps), backend=backend), build(ps)))
        say(f"tune: {TITLES.get(backend, backend)}: the original and our passes ({len(cand)} variants)")
        out = measure(cand)
        if not any(s.median_ms is not None for s in out[1:]):
            failed = next((s.note for s in out[1:] if s.note), "no variant ran")
            notes[backend] = f"{TITLES.get(backend, backend)}: {failed}" + _freeze_hint(model, freeze)
            say(f"tune: {notes[backend]}")
        return out

    def portable(ps: Sequence[str]) -> list[str]:
        """``ps`` without the passes that leave onnxruntime-only ops (com.microsoft*, NCHWc)
        in the model: other backends cannot read those."""
        ps = list(ps)
        for _ in range(4):
            foreign = {p for n in build(ps).graph.node if n.domain not in ("", "ai.onnx")
                       for kv in n.metadata_props if kv.key == "fusionviz.passes" for p in kv.value.split(",")}
            if not foreign & set(ps):
                return ps
            ps = [p for p in ps if p not in foreign]
        return ps

    def fastest(level_steps: list[TuneStep]) -> TuneStep | None:
        ok = [s for s in level_steps if s.verified and s.median_ms is not None]
        return min(ok, key=lambda s: (s.ratio if s.ratio is not None else 1.0, s.median_ms)) if ok else None

    n_levels = len(_levels_for(full.final)) + 2
    reserve_rounds = round_cost(n_levels) + sum(round_cost(5) for _ in others)
    # Step 2a: the settings the greedy phase measures under (onnxruntime's own fusions interact
    # with ours: e.g. at "all" it re-creates SkipLayerNormalization when ours is dropped).
    current = list(active)
    greedy_cfg = TuneConfig(tuple(current))
    if current and time_left() > round_cost(n_levels) * 2 + reserve_rounds + round_cost(len(current) + 1):
        first_levels = level_round(current, " (all passes)")
        steps += first_levels
        top = fastest(first_levels[1:])
        if top is not None:
            greedy_cfg = top.config

    # Step 2b: greedy drop under those settings.
    while current:
        if time_left() < round_cost(len(current) + 1) + reserve_rounds:  # keep time for steps 3-4
            exhausted = True
            break
        cand = [("current", dataclasses.replace(greedy_cfg, passes=tuple(current)), build(current))]
        for p in current:
            rest = [n for n in current if n != p]
            cand.append((f"drop {p}", dataclasses.replace(greedy_cfg, passes=tuple(rest)), build(rest)))
        say(f"tune: measuring {len(cand)} variants ({len(current)} active passes, {time_left():.0f} s left)")
        results = measure(cand)
        bar = (1 - min_gain) if results[0].median_ms is not None and results[0].verified else None
        best_i = None
        for i, step in enumerate(results):
            if i and step.verified and step.ratio is not None and bar is not None and step.ratio < bar:
                best_i, bar = i, step.ratio
        first = len(steps)
        steps += results
        if best_i is None:
            break
        dropped = cand[best_i][0].split(" ", 1)[1]
        say(f"tune: dropping {dropped} (x{bar:.3f} of the current set, paired over rounds)")
        steps[first + best_i] = dataclasses.replace(steps[first + best_i], chosen=True)
        current.remove(dropped)

    # Step 3: levels and settings for the final pass set, with the baseline in the same run; the
    # baseline itself (no passes, ORT all) is a candidate, so the winner is never worse than it.
    pool = level_round(current, "")
    # Step 4: the other backends, each in its own round with the baseline.
    pass_sets: list[list[str]] = []
    for ps in (portable(active), portable(current)):
        if ps and ps not in pass_sets:
            pass_sets.append(ps)
    for b in others:
        pool += backend_round(b, pass_sets)
    winner = fastest(pool)
    if winner is None:
        raise errors.VerificationError("No tuned variant verified against the original; nothing to recommend.")
    candidate = winner.config
    steps += [dataclasses.replace(s, chosen=True) if s is winner else s for s in pool]
    say(f"tune: search winner {candidate.label()} (x{winner.ratio or 1.0:.3f} of the original @ORT all "
        f"in its round); confirming in a fresh run")

    # Step 6: confirmation.
    confirmation = _confirm(candidate, [b for b in others if b not in notes], build, bench,
                            confirm_time_s or 2 * min_time_s)
    best, recommendation = _recommend(candidate, confirmation)
    say(f"tune: {recommendation}")
    conf_best = next(c for c in confirmation if c.config == best)
    base = next(c for c in confirmation if c.role == "baseline")
    seconds = time.perf_counter() - t0
    return TuneResult(best, float(conf_best.median_ms or 0.0), float(base.median_ms or 0.0), tuple(steps), seconds,
                      budget_s, inactive, exhausted, confirmation=tuple(confirmation), candidate=candidate,
                      backends=usable, backend_notes=dict(notes), recommendation=recommendation,
                      frozen={k: np.asarray(v).tolist() for k, v in (freeze or {}).items()})


def _freeze_hint(model: onnx.ModelProto, freeze: Mapping[str, np.ndarray] | None) -> str:
    """For a backend that could not compile the model: the inputs an If switches on, which
    ``--freeze`` could make constants (the If then folds away)."""
    from fusionviz.inputs import if_switches

    names = [n for n in if_switches(model) if n not in (freeze or {})]
    if not names:
        return ""
    flags = " ".join(f"--freeze {n}=VALUE" for n in names)
    return (f" (an If picks its branch by {', '.join(repr(n) for n in names)}; {flags} specializes the "
            "model to one value and folds the If away)")


def _confirm(candidate: TuneConfig, singles: Sequence[str], build, bench, seconds: float) -> list[Confirmed]:
    """Step 6: a fresh interleaved run of the baseline, every single backend and the candidate."""
    configs = [("baseline", TuneConfig((), "all"))] + [("single", TuneConfig((), backend=b)) for b in singles]
    if all(c != candidate for _, c in configs):
        configs.append(("candidate", candidate))
    res = bench([(role, c, build(c.passes)) for role, c in configs], seconds)
    out = []
    for (role, cfg), r in zip(configs, res, strict=True):
        ok, note = _verified(r)
        ratio, lo, hi = _ratio(r, res[0])
        out.append(Confirmed(role, cfg, r.stats.median_ms if r.stats else None, ratio, lo, hi, ok, note,
                             applied=r.backend_info, memory_mb=r.memory.get("rss_run_mb") if r.memory else None))
    return out


def _entry(c: Confirmed):
    from fusionviz.bench.claims import Entry

    return Entry(c.config.label(), float(c.ratio), c.ci_low, c.ci_high)


def _beats(a: Confirmed, b: Confirmed) -> bool:
    """Step 6: ``a`` verified, at least :data:`CONFIRM_MARGIN` faster than ``b``, and their 95%
    intervals apart."""
    from fusionviz.bench.claims import overlap

    if not a.verified or a.ratio is None or b.ratio is None:
        return False
    return a.ratio <= b.ratio * (1 - CONFIRM_MARGIN) and not overlap(_entry(a), _entry(b))


def _against_baseline(c: Confirmed) -> str:
    """``c`` against the original @ORT all, in rule 7's words."""
    from fusionviz.bench.claims import FASTER, SLOWER, speed_claim, verdict

    if c.role == "baseline":
        return "is the original under onnxruntime level all"
    words = speed_claim(c.ratio, c.ci_low, c.ci_high)
    if verdict(c.ratio, c.ci_low, c.ci_high) in (FASTER, SLOWER):
        return f"runs {words} than the original @ORT all"
    return f"shows {words} against the original @ORT all"


def _interval(c: Confirmed) -> str:
    from fusionviz.bench.claims import figures

    return figures(float(c.ratio), c.ci_low, c.ci_high)


def _recommend(candidate: TuneConfig, confirmation: Sequence[Confirmed]) -> tuple[TuneConfig, str]:
    """Step 6's rule in rule 7's words: the candidate, when it beats the single backend to
    recommend (onnxruntime level all, unless another backend alone beats it); else that single
    backend."""
    from fusionviz.bench.claims import fastest, join_names

    cand = next(c for c in confirmation if c.config == candidate)
    singles = [c for c in confirmation if c.role in ("baseline", "single") and c.verified and c.ratio is not None]
    baseline = next((c for c in singles if c.role == "baseline"), None)
    tied_note = ""
    if baseline is not None:
        better = [c for c in singles if c is not baseline and _beats(c, baseline)]
        best_single = min(better, key=lambda c: c.ratio) if better else baseline
        if better:
            rank = fastest([_entry(c) for c in better])
            if rank.is_tie:
                others = [n for n in rank.names() if n != best_single.config.label()]
                tied_note = (f" (tied with {join_names(others)} alone: 95% intervals that overlap; "
                             f"{best_single.config.label()} has the lowest ratio)")
    else:
        best_single = min(singles, key=lambda c: c.ratio) if singles else None

    if best_single is None:  # nothing single ran verified: keep the candidate only if it did
        if cand.verified and cand.ratio is not None:
            return candidate, f"confirmed: {candidate.label()} {_against_baseline(cand)}"
        raise errors.VerificationError("The confirmation run verified nothing; nothing to recommend.")
    if best_single.role == "baseline":
        single, simpler = "the original under onnxruntime level all", "the original under onnxruntime level all"
    else:
        single = f"{best_single.config.label()} alone, which {_against_baseline(best_single)}{tied_note}"
        simpler = "the single backend"
    if cand.config == best_single.config or _beats(cand, best_single):
        return candidate, f"confirmed: {candidate.label()} {_against_baseline(cand)}"
    if cand.verified and cand.ratio is not None and cand.ratio <= best_single.ratio:
        if cand.ratio > best_single.ratio * (1 - CONFIRM_MARGIN):
            return best_single.config, (
                f"the search's winner {candidate.label()} ran at ratio {cand.ratio:.3f}, within "
                f"{CONFIRM_MARGIN:.0%} of {single}: recommending {simpler} (the simpler deployment; "
                "the difference is within the noise of two runs)")
        return best_single.config, (
            f"the search's winner {candidate.label()} ({_interval(cand)}) shows no measurable difference from "
            f"{single}: their 95% intervals overlap; recommending {simpler} (the simpler deployment)")
    if cand.verified and cand.ratio is not None:
        slower = cand.ci_low is not None and best_single.ci_high is not None and cand.ci_low > best_single.ci_high
        why = (f"was slower ({_interval(cand)}) in the confirmation than" if slower else
               f"shows no measurable difference ({_interval(cand)}) in the confirmation from")
    else:
        why = (f"did not verify ({cand.note}) in the confirmation, unlike" if cand.note
               else "did not run in the confirmation, unlike")
    return best_single.config, f"the search's winner {candidate.label()} {why} {single}: recommending that"


def tuned_model(model: onnx.ModelProto, result: TuneResult,
                shapes: Mapping[str, Sequence[int]] | None = None,
                freeze: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """The winner's model (its passes applied, ``freeze``'s inputs made constants when it has
    passes); run it with ``result.best.settings()``."""
    from fusionviz.passes import run_pipeline

    if not result.best.passes:
        return model
    return run_pipeline(model, list(result.best.passes), shapes=shapes, freeze=freeze, keep_snapshots=False).final
