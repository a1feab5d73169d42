"""The Benchmark page's choices as plain data, and its variants (made by the one builder).

Rules (the page's):

1. The onnxruntime level is one setting of the run: the current selection, the original and
   every per-pass what-if step run under it, so a what-if step differs from its neighbour only
   by passes.
2. Comparisons across onnxruntime levels are their own variants (role ``level``): the reference
   (the original under level 'all', what a user gets from onnxruntime alone) and, when asked,
   the original under every level.
3. Other runtimes: the original (role ``backend``) and the current selection on each, in the
   same interleaved run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fusionviz.experiment import labels
from fusionviz.experiment.variant import LEVEL, Role, Settings
from fusionviz.ortlevels import LEVELS

REFERENCE_LEVEL = "all"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to measure (plain data, so a background thread never touches Streamlit)."""

    current: bool
    original: bool
    reference: bool
    levels: bool
    references: bool
    cumulative: bool
    leave_one_out: bool
    level: str
    threads: int
    provider: str
    denormal: bool
    min_time_s: float
    profile: bool
    backends: tuple[str, ...] = ()  # compilers besides onnxruntime: the original and the selection on each

    def settings(self) -> Settings:
        """The run's settings."""
        return Settings(level=self.level, threads=self.threads, provider=self.provider, denormal_as_zero=self.denormal)


def reference_label(plan_level: str) -> str:
    """The label of the variant every other is compared with: the reference, or the original
    when the run itself is at the reference level."""
    run = Settings(level=plan_level)
    if plan_level == REFERENCE_LEVEL:
        return labels.words(Role(LEVEL))
    return labels.label(Role(LEVEL, REFERENCE_LEVEL), Settings(level=REFERENCE_LEVEL), run)


def build_variants(plan: Plan, passes: list[str], result: Any, shapes: dict | None) -> tuple[list, dict]:
    """Variants for ``plan`` over a pipeline ``result`` of ``passes``; returns (variants, notes)
    where notes explain anything left out.

    A variant may come twice, under one label or two (the current selection and the last
    cumulative step, say): :func:`fusionviz.experiment.run.measure` measures it once.
    """
    from fusionviz.experiment.build import Builder

    run = plan.settings()
    b = Builder(result.original, run, shapes=shapes or None)
    notes: dict[str, str] = {}
    if plan.current and passes:
        b.selection(labels.selection_name(passes), passes, model=result.final)
    if plan.original:
        b.original()
    for backend in plan.backends:  # same models, compiled by another runtime (its own full pipeline)
        on = dataclasses.replace(run, backend=backend, level="all")
        if plan.current and passes:
            b.selection(labels.selection_name(passes), passes, on, model=result.final)
        if plan.original or not passes:
            b.backend(backend)
    if plan.reference:
        if plan.level == REFERENCE_LEVEL and plan.original:
            notes["reference"] = f"the original already runs under level '{REFERENCE_LEVEL}' in this run"
        else:
            b.level(REFERENCE_LEVEL)
    if plan.levels:
        for lv in LEVELS:
            if lv != plan.level and not (plan.reference and lv == REFERENCE_LEVEL):
                b.level(lv)
    if plan.references:
        try:
            notes.update({k: f"left out: {v}" for k, v in b.references(settings=run).items()})
        except ImportError as exc:
            notes["references"] = f"not available ({exc})"
    if plan.cumulative and passes:
        w = b.cumulative(passes)
        if w.skipped:
            notes["cumulative"] = f"{len(w.skipped)} passes changed nothing and were not measured"
    if plan.leave_one_out and passes:
        b.leave_one_out(passes)
    return b.variants(), notes
