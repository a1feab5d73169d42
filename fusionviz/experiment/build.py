"""The one variant builder: the CLI bench, the Benchmark page, tune, sweep and the case studies
all make their variants here.

Rules:

1. A :class:`Builder` is made for one model and the run's settings; each method adds variants in
   one role (:mod:`fusionviz.experiment.variant`), labelled by
   :func:`fusionviz.experiment.labels.label` against the run's settings.
2. A pass list is run once per builder (:meth:`Builder.model_for` caches the pipeline's result by
   pass list); ``freeze`` (``--freeze``) makes inputs constants in every variant with passes.
3. **Cumulative** (:meth:`Builder.cumulative`): ``original``, ``+p1``, ``+p1+p2``, ... from one
   pipeline run; **leave-one-out** (:meth:`Builder.leave_one_out`): ``all passes`` and ``-p``
   for each active p. A pass that changed nothing gives its predecessor's model and is left out
   (:attr:`WhatIf.skipped`): its delta is zero by construction.
4. **Isolation**: every variant of one what-if shares the run's settings (the onnxruntime level
   included), so a step differs from its neighbour only by passes (:func:`check_isolated`).
5. Labels are unique in a builder (:meth:`Builder.variants` raises otherwise); the same model
   and settings under two labels is measured once by :func:`fusionviz.experiment.run.measure`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.experiment import labels
from fusionviz.experiment.variant import (
    ALL,
    BACKEND,
    DROP,
    LEVEL,
    ORIGINAL,
    REFERENCE,
    SELECTION,
    STEP,
    Role,
    Settings,
    Variant,
)

logger = logging.getLogger(__name__)

DEFAULT_SETTINGS = Settings()


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """One what-if's variants plus the passes left out because they changed nothing.

    Attributes:
        variants: the variants to measure; all share ``settings`` (rule 4).
        skipped: passes that changed nothing (rule 3).
        settings: the one setting of the run.
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
        from fusionviz.bench.whatif import run_title

        return run_title(self.kind, self.settings)


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


class Builder:
    """Variants of one model for one run (rules 1-5).

    Args:
        model: the original model.
        run: the run's settings (labels say what differs from them); None: every label says
            its settings in full.
        shapes: input shape overrides for the pass pipeline.
        freeze: inputs made constants in every variant with passes (``--freeze``).
        say: called with one line per thing worth telling (a pass that failed, a tool left out).
    """

    def __init__(self, model: onnx.ModelProto, run: Settings | None = DEFAULT_SETTINGS, *,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 freeze: Mapping[str, np.ndarray] | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.model = model
        self.run = run
        self.shapes = {k: list(v) for k, v in (shapes or {}).items()} or None
        self.freeze = freeze
        self.say = say or (lambda line: None)
        self.notes: dict[str, str] = {}
        self._variants: list[Variant] = []
        self._built: dict[tuple[str, ...], onnx.ModelProto] = {(): model}

    # ------------------------------------------------------------------ models

    def pipeline(self, passes: Sequence[str], *, keep_snapshots: bool = False):
        """:func:`fusionviz.passes.run_pipeline` over the original with this builder's shapes
        and freeze; the result's final model is remembered for :meth:`model_for`."""
        from fusionviz.passes import run_pipeline

        res = run_pipeline(self.model, list(passes), shapes=self.shapes, freeze=self.freeze,
                           keep_snapshots=keep_snapshots)
        self._built.setdefault(tuple(passes), res.final)
        return res

    def model_for(self, passes: Sequence[str]) -> onnx.ModelProto:
        """The original with ``passes`` applied (rule 2: each pass list runs once)."""
        key = tuple(passes)
        if key not in self._built:
            res = self.pipeline(key)
            for r in res.reports:
                if r.error:
                    self.say(f"  pass {r.name} failed: {r.error}")
        return self._built[key]

    def remember(self, passes: Sequence[str], model: onnx.ModelProto) -> None:
        """Take ``model`` as the result of ``passes`` (e.g. the active passes of a full run,
        which give the same model as the full list)."""
        self._built[tuple(passes)] = model

    def fresh(self) -> Builder:
        """A builder for another run of the same model and settings, without variants, sharing
        this one's models (rule 2 across runs: tune's rounds)."""
        other = Builder(self.model, self.run, shapes=self.shapes, freeze=self.freeze, say=self.say)
        other._built = self._built
        return other

    # ------------------------------------------------------------------ variants

    def add(self, role: Role, model: onnx.ModelProto | bytes, settings: Settings | None = None,
            passes: Sequence[str] = ()) -> Variant:
        """One variant in ``role`` (its label from :func:`fusionviz.experiment.labels.label`)."""
        s = settings if settings is not None else (self.run or Settings())
        v = Variant(labels.label(role, s, self.run), model, s, tuple(passes), role)
        self._variants.append(v)
        return v

    def original(self, settings: Settings | None = None) -> Variant:
        """The original model (under ``settings``, by default the run's)."""
        return self.add(Role(ORIGINAL), self.model, settings)

    def selection(self, name: str, passes: Sequence[str], settings: Settings | None = None,
                  model: onnx.ModelProto | None = None) -> Variant:
        """A pass selection called ``name`` (its model from :meth:`model_for` unless given);
        no passes is the original under another name."""
        m = model if model is not None else self.model_for(passes)
        return self.add(Role(SELECTION, name), m, settings, passes)

    def level(self, level: str, settings: Settings | None = None) -> Variant:
        """The original under another onnxruntime level (a comparison of onnxruntime's levels)."""
        base = settings if settings is not None else (self.run or Settings())
        return self.add(Role(LEVEL, level), self.model, dataclasses.replace(base, level=level, backend="ort"))

    def levels(self, levels: Sequence[str], settings: Settings | None = None) -> list[Variant]:
        """:meth:`level` for each of ``levels`` but the run's own."""
        run_level = (settings or self.run or Settings()).level
        return [self.level(lv, settings) for lv in levels if lv != run_level]

    def backend(self, backend: str, settings: Settings | None = None) -> Variant:
        """The original on another backend (its own full pipeline; onnxruntime's level does not apply)."""
        base = settings if settings is not None else (self.run or Settings())
        return self.add(Role(BACKEND, backend), self.model, dataclasses.replace(base, backend=backend, level="all"))

    def references(self, tools: Sequence[str] | None = None, settings: Settings | None = None,
                   levels: Sequence[str] | None = None) -> dict[str, str]:
        """Other optimizers' whole-pipeline results (onnxslim, onnxsim, onnxscript, onnxruntime's
        saved graphs), measured under ``settings``.

        Returns:
            {tool: one sentence why it is left out} for the tools that failed.
        """
        from fusionviz.passes.reference import reference_models

        failures: dict[str, str] = {}
        for tool, m in reference_models(self.model, shapes=self.shapes, tools=tools, levels=levels).items():
            if isinstance(m, onnx.ModelProto):
                self.add(Role(REFERENCE, tool), m, settings)
            else:
                failures[tool] = str(m)
        return failures

    def cumulative(self, passes: Sequence[str], settings: Settings | None = None, *,
                   skip_unchanged: bool = True) -> WhatIf:
        """Rule 3's cumulative what-if: ``original``, then one step per pass that changed something."""
        s = settings if settings is not None else (self.run or Settings())
        result = self.pipeline(passes, keep_snapshots=True)
        out = [Variant(labels.label(Role(ORIGINAL), s, self.run), result.original, s, (), Role(ORIGINAL))]
        done: list[str] = []
        skipped: list[str] = []
        for snap, rep in zip(result.snapshots[1:], result.reports, strict=False):
            if skip_unchanged and (not rep.changes or rep.error):
                skipped.append(rep.name)
                continue
            done.append(rep.name)
            role = Role(STEP, rep.name)
            out.append(Variant(labels.label(role, s, self.run), snap.model, s, tuple(done), role))
        self._variants.extend(out)
        return WhatIf(tuple(out), tuple(skipped), s, "cumulative")

    def leave_one_out(self, passes: Sequence[str], settings: Settings | None = None, *,
                      skip_unchanged: bool = True) -> WhatIf:
        """Rule 3's leave-one-out: ``all passes``, then ``-p`` for each pass that changed something."""
        from fusionviz.passes import registry

        s = settings if settings is not None else (self.run or Settings())
        names = [p.name for p in registry.resolve(passes)]
        full = self.pipeline(names)
        active = [r.name for r in full.reports if r.changes and not r.error]
        skipped = [n for n in names if n not in active] if skip_unchanged else []
        kept = active if skip_unchanged else names
        out = [Variant(labels.label(Role(ALL), s, self.run), full.final, s, tuple(kept), Role(ALL))]
        for p in names:
            if p in skipped:
                continue
            rest = [n for n in kept if n != p]
            role = Role(DROP, p)
            out.append(Variant(labels.label(role, s, self.run), self.model_for(rest), s, tuple(rest), role))
        self._variants.extend(out)
        return WhatIf(tuple(out), tuple(skipped), s, "leave-one-out")

    def variants(self) -> list[Variant]:
        """Every variant added, in order (rule 5).

        Raises:
            fusionviz.errors.InputSpecError: one label names two different things.
        """
        seen: dict[str, Variant] = {}
        for v in self._variants:
            other = seen.setdefault(v.label, v)
            if other is not v and (other.settings != v.settings or other.model_bytes() != v.model_bytes()):
                raise errors.InputSpecError(f"Variant labels must be unique; repeated: {v.label}.")
        return list(self._variants)


def on_backends(variants: Sequence[Variant], backends: Sequence[str], run: Settings | None) -> list[Variant]:
    """Each of ``variants`` on every backend of ``backends`` (the CLI's ``--backend a,b``)."""
    out: list[Variant] = []
    for v in variants:
        for b in backends:
            s = dataclasses.replace(v.settings, backend=b)
            out.append(dataclasses.replace(v, label=labels.label(v.role, s, run), settings=s))
    return out
