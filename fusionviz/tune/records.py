"""What a tune search found: the configurations it measured, the confirmation and the
recommendation (plain records; :mod:`fusionviz.tune.search` fills them in)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

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
        """``3 passes @ extended`` (:func:`fusionviz.experiment.labels.config_label`)."""
        from fusionviz.experiment.labels import config_label

        return config_label(len(self.passes), self.settings())

    def settings(self, threads: int = 1):
        """The :class:`fusionviz.experiment.variant.Settings` that run this configuration."""
        from fusionviz.experiment.variant import Settings

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

