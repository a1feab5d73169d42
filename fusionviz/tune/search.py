"""The tune search's steps (see :mod:`fusionviz.tune` for the method), one method each.

Every round's variants come from one :class:`fusionviz.experiment.build.Builder` (its pass lists
are run once for the whole search) in roles: the baseline is the ``original``, a pass set under
some settings a ``selection``, a greedy candidate a ``drop`` of its pass, the original on another
runtime a ``backend``; the greedy step reads the pass to drop from the role.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz.experiment.build import Builder
from fusionviz.experiment.variant import BACKEND, DROP, ORIGINAL, SELECTION, Role
from fusionviz.tune.records import Confirmed, TuneConfig, TuneStep

logger = logging.getLogger(__name__)

SKIP_LN_FUSION = "SkipLayerNormFusion"
#: One candidate of a round: (phase for the search path, configuration, role).
Candidate = tuple[str, TuneConfig, Role]


def levels_for(model: onnx.ModelProto) -> list[tuple[str, tuple[str, ...]]]:
    """The onnxruntime levels (and optimizer switches) step 3 tries on ``model``."""
    out: list[tuple[str, tuple[str, ...]]] = [("off", ()), ("basic", ()), ("extended", ()), ("all", ())]
    if any(n.op_type == "LayerNormalization" for n in model.graph.node):
        out.append(("all", (SKIP_LN_FUSION,)))
    return out


def ratio(r, ref) -> tuple[float | None, float | None, float | None]:
    """Paired ratio of ``r`` to ``ref`` (median over interleaved rounds) and its 95% interval.

    Rounds are interleaved, so a load change on the machine hits both sides of each ratio;
    this is far steadier than comparing overall medians on a busy machine."""
    from fusionviz.bench.whatif import paired_ratio

    got = paired_ratio(r, ref)
    return (None, None, None) if got is None else got[:3]


def verified(r) -> tuple[bool, str]:
    """(verified, why not) of one result."""
    ok = bool(r.ok and r.verify and r.verify.get("ok"))
    if ok:
        return True, ""
    if r.error:
        return False, r.error
    return False, (f"not verified: max rel {r.verify.get('max_rel_diff', 0):.2e}" if r.verify else "not verified")


def fastest(steps: Sequence[TuneStep]) -> TuneStep | None:
    """The verified step with the lowest ratio to its round's first variant."""
    ok = [s for s in steps if s.verified and s.median_ms is not None]
    return min(ok, key=lambda s: (s.ratio if s.ratio is not None else 1.0, s.median_ms)) if ok else None


def freeze_hint(model: onnx.ModelProto, freeze: Mapping[str, np.ndarray] | None) -> str:
    """For a backend that could not compile the model: the inputs an If switches on, which
    ``--freeze`` could make constants (the If then folds away)."""
    from fusionviz.inputs import if_switches

    names = [n for n in if_switches(model) if n not in (freeze or {})]
    if not names:
        return ""
    flags = " ".join(f"--freeze {n}=VALUE" for n in names)
    return (f" (an If picks its branch by {', '.join(repr(n) for n in names)}; {flags} specializes the "
            "model to one value and folds the If away)")


BASELINE = TuneConfig((), "all")


class Search:
    """One search's state: the builder, the time spent, the notes on backends.

    Args:
        model: the original model.
        shapes, feeds, freeze: as :func:`fusionviz.tune.tune`.
        budget_s, min_time_s, rtol: as :func:`fusionviz.tune.tune`.
        notes: {backend: why it is left out}, filled in as backends fail.
        say: progress lines.
    """

    def __init__(self, model: onnx.ModelProto, *, shapes, feeds, freeze, budget_s: float, min_time_s: float,
                 rtol: float, notes: dict[str, str], say: Callable[[str], None]) -> None:
        self.model = model
        self.shapes = shapes
        self.feeds = feeds
        self.freeze = freeze
        self.budget_s = budget_s
        self.min_time_s = min_time_s
        self.rtol = rtol
        self.notes = notes
        self.say = say
        self.builder = Builder(model, BASELINE.settings(), shapes=shapes, freeze=freeze)
        self.t0 = time.perf_counter()
        self.per_variant_s: float | None = None

    # ------------------------------------------------------------------ measuring

    def build(self, passes: Sequence[str]) -> onnx.ModelProto:
        return self.builder.model_for(passes)

    def bench(self, cands: Sequence[Candidate], seconds: float) -> list:
        """One interleaved run of ``cands`` (each distinct variant once); results in their order."""
        from fusionviz.experiment.run import measure

        t = time.perf_counter()
        b = self.builder.fresh()  # one pipeline run per pass list for the whole search
        for _, cfg, role in cands:
            b.add(role, self.build(cfg.passes), cfg.settings(), cfg.passes)
        res, _ = measure(b.variants(), shapes=self.shapes, feeds=self.feeds, min_time_s=seconds,
                         verify_against=self.model, verify_rtol=self.rtol, progress=lambda f, m: None)
        self.per_variant_s = (time.perf_counter() - t) / max(len(cands), 1)
        return res

    def measure(self, cands: Sequence[Candidate]) -> list[TuneStep]:
        res = self.bench(cands, self.min_time_s)
        out = []
        for (phase, cfg, _), r in zip(cands, res, strict=True):
            ok, note = verified(r)
            out.append(TuneStep(phase, cfg, r.stats.median_ms if r.stats else None, ok, note=note,
                                ratio=ratio(r, res[0])[0]))
        return out

    def time_left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def round_cost(self, n_variants: int) -> float:
        per = self.per_variant_s if self.per_variant_s is not None else self.min_time_s * 1.5 + 1.0
        return per * n_variants

    # ------------------------------------------------------------------ the steps

    def level_round(self, ps: list[str], phase_tag: str) -> list[TuneStep]:
        """Step 3: ``ps`` under each onnxruntime level and denormals-as-zero, beside the baseline."""
        m = self.build(ps)
        name = Role(SELECTION, f"{len(ps)} passes")
        cand: list[Candidate] = [("baseline", BASELINE, Role(ORIGINAL))]
        for level, disabled in levels_for(m):
            cand.append((f"level{phase_tag}", TuneConfig(tuple(ps), level, False, disabled), name))
        cand.append((f"denormal{phase_tag}", TuneConfig(tuple(ps), "all", True), name))
        self.say(f"tune: comparing onnxruntime levels and denormals-as-zero ({len(cand)} variants)")
        return self.measure(cand)

    def greedy(self, current: list[str], cfg: TuneConfig, min_gain: float, reserve_s: float) -> tuple[list[TuneStep], bool]:
        """Step 2b: drop the pass whose removal helps most, while one does and time is left.

        Returns:
            (the steps measured, whether the budget ran out); ``current`` loses the dropped passes.
        """
        steps: list[TuneStep] = []
        while current:
            if self.time_left() < self.round_cost(len(current) + 1) + reserve_s:  # keep time for steps 3-4
                return steps, True
            cand: list[Candidate] = [("current", dataclasses.replace(cfg, passes=tuple(current)),
                                      Role(SELECTION, "current"))]
            for p in current:
                rest = tuple(n for n in current if n != p)
                cand.append((f"drop {p}", dataclasses.replace(cfg, passes=rest), Role(DROP, p)))
            self.say(f"tune: measuring {len(cand)} variants ({len(current)} active passes, "
                     f"{self.time_left():.0f} s left)")
            results = self.measure(cand)
            bar = (1 - min_gain) if results[0].median_ms is not None and results[0].verified else None
            best_i = None
            for i, step in enumerate(results):
                if i and step.verified and step.ratio is not None and bar is not None and step.ratio < bar:
                    best_i, bar = i, step.ratio
            first = len(steps)
            steps += results
            if best_i is None:
                break
            dropped = cand[best_i][2].pass_name
            self.say(f"tune: dropping {dropped} (x{bar:.3f} of the current set, paired over rounds)")
            steps[first + best_i] = dataclasses.replace(steps[first + best_i], chosen=True)
            current.remove(dropped)
        return steps, False

    def backend_round(self, backend: str, pass_sets: list[list[str]]) -> list[TuneStep]:
        """Step 4: the original on ``backend`` (with and without flush-to-zero) and the pass sets on it."""
        from fusionviz.backends.registry import TITLES

        phase = f"backend {backend}"
        cand: list[Candidate] = [("baseline", BASELINE, Role(ORIGINAL)),
                                 (phase, TuneConfig((), backend=backend), Role(BACKEND, backend)),
                                 (phase, TuneConfig((), denormal_as_zero=True, backend=backend), Role(BACKEND, backend))]
        for ps in pass_sets:
            if ps:
                cand.append((phase, TuneConfig(tuple(ps), backend=backend), Role(SELECTION, f"{len(ps)} passes")))
        self.say(f"tune: {TITLES.get(backend, backend)}: the original and our passes ({len(cand)} variants)")
        out = self.measure(cand)
        if not any(s.median_ms is not None for s in out[1:]):
            failed = next((s.note for s in out[1:] if s.note), "no variant ran")
            self.notes[backend] = f"{TITLES.get(backend, backend)}: {failed}" + freeze_hint(self.model, self.freeze)
            self.say(f"tune: {self.notes[backend]}")
        return out

    def portable(self, ps: Sequence[str]) -> list[str]:
        """``ps`` without the passes that leave onnxruntime-only ops (com.microsoft*, NCHWc)
        in the model: other backends cannot read those."""
        from fusionviz.passes.provenance import PASSES_KEY, SEP

        ps = list(ps)
        for _ in range(4):
            foreign = {p for n in self.build(ps).graph.node if n.domain not in ("", "ai.onnx")
                       for kv in n.metadata_props if kv.key == PASSES_KEY for p in kv.value.split(SEP)}
            if not foreign & set(ps):
                return ps
            ps = [p for p in ps if p not in foreign]
        return ps

    def confirm(self, candidate: TuneConfig, singles: Sequence[str], seconds: float) -> list[Confirmed]:
        """Step 6: a fresh interleaved run of the baseline, every single backend and the candidate."""
        configs: list[Candidate] = [("baseline", BASELINE, Role(ORIGINAL))]
        configs += [("single", TuneConfig((), backend=b), Role(BACKEND, b)) for b in singles]
        if all(c != candidate for _, c, _ in configs):
            configs.append(("candidate", candidate, Role(SELECTION, "candidate")))
        res = self.bench(configs, seconds)
        out = []
        for (role, cfg, _), r in zip(configs, res, strict=True):
            ok, note = verified(r)
            lo_hi = ratio(r, res[0])
            out.append(Confirmed(role, cfg, r.stats.median_ms if r.stats else None, *lo_hi, ok, note,
                                 applied=r.backend_info, memory_mb=r.memory.get("rss_run_mb") if r.memory else None))
        return out
