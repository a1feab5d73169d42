"""What a benchmark measured (pyperf's ``_bench``): :class:`BenchResult`, one per variant.

What it measures (:class:`~fusionviz.experiment.variant.Variant`,
:class:`~fusionviz.experiment.variant.Settings`) is the experiment layer's; they are
re-exported here for the engine's callers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fusionviz import errors
from fusionviz.bench.stats import LatencyStats, compute_stats
from fusionviz.experiment.variant import Role, Settings, Variant

__all__ = ["BenchCancelled", "BenchResult", "ProgressFn", "Role", "Settings", "Variant", "compute_stats"]

ProgressFn = Callable[[float, str], None]


class BenchCancelled(errors.BenchError):
    """The user cancelled the benchmark."""


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """What one variant measured.

    Attributes:
        label, passes, settings: from the variant.
        stats: latency statistics, or None when the variant failed.
        memory: ``baseline_rss_mb``, ``rss_session_mb``, ``rss_run_mb``, ``rss_run_delta_mb``
            (run peak above the RSS after session creation), ``arena_held_mb`` and
            ``arena_in_use_peak_mb`` (None when unavailable), and the static plan's
            ``static_*`` figures (bytes).
        profile: ``{"runs", "run_ms", "by_op_type": {op: ms}, "by_node": {node: {op_type, ms}}}``
            when profiling was asked for.
        verify: :meth:`fusionviz.verify.VerifyResult.as_dict` when a reference was given.
        error: one sentence when the variant failed, else None.
        samples_ms: every timed run, in order.
        round_medians_ms: the median of each round (drift shows here).
        session_s: seconds to create the session (compile the model, for other backends).
        backend_info: the backend's name, version and the settings it applied in its own
            words (e.g. ``CPU_DENORMALS_OPTIMIZATION``), when its worker started.
        role: the variant's :class:`~fusionviz.experiment.variant.Role` (what the what-if
            effects and the tables read; the label is for display).
    """

    label: str
    passes: tuple[str, ...]
    settings: Settings
    stats: LatencyStats | None
    memory: dict
    profile: dict | None = None
    verify: dict | None = None
    error: str | None = None
    samples_ms: tuple[float, ...] = ()
    round_medians_ms: tuple[float, ...] = ()
    session_s: float | None = None
    backend_info: dict | None = None
    role: Role | None = None

    @property
    def backend(self) -> str:
        """The variant's backend name."""
        return self.settings.backend

    def __post_init__(self) -> None:
        if self.stats is None and self.error is None:
            raise ValueError("BenchResult needs stats or an error")
        if self.role is None:
            object.__setattr__(self, "role", Role("selection", self.label))

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self, *, samples: bool = False) -> dict:
        d = {
            "label": self.label,
            "passes": list(self.passes),
            "settings": self.settings.as_dict(),
            "latency": self.stats.as_dict() if self.stats else None,
            "memory": dict(self.memory),
            "profile": self.profile,
            "verify": self.verify,
            "error": self.error,
            "session_s": self.session_s,
            "round_medians_ms": list(self.round_medians_ms),
            "backend": self.backend,
            "backend_info": self.backend_info,
            "role": self.role.as_dict() if self.role is not None else None,
        }
        if samples:
            d["samples_ms"] = list(self.samples_ms)
        return d

