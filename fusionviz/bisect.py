"""Which pass broke the numbers: bisection and delta debugging over a pass list.

When the result of an exact pass list fails verification, :func:`bisect` finds the smallest set
of those passes whose result alone still fails, and runs the list without that set to see that
it verifies. ``optimize`` delivers that result, naming the passes it declined.

1. **Candidates.** Only exact passes are bisected: a precision pass reports its error instead
   of failing, so it is left out of every probe and named in ``excluded``. Of the exact passes,
   only those that changed the model in the failing run are candidates: a pass that changed
   nothing there (skipped, unchanged, or rolled back as declined or failed) left that run as it
   would have been without it.
2. **Probes.** A probe runs a subset through :func:`fusionviz.passes.run_pipeline` (canonical
   order and the validity rule, as ``optimize`` runs it) and verifies the result with
   :func:`fusionviz.verify.verify` (``isolated=True``) on the same input plan and tolerances, so
   the same noise allowance applies. A probe *fails* when the outputs differ or the optimized
   model fails or lacks an output where the original runs (:attr:`VerifyResult.differs`); a
   verification that cannot run at all (time limit, memory) is not a failure. Probes are cached
   by the set of passes.
3. **The culprit, then what it needs.** Passes run in canonical order, so the candidates are
   bisected by prefix: a binary search keeps a prefix that verifies (at first none) and one that
   fails (at first all) until they differ by one pass, the *culprit*: the prefix before it
   verifies, with it the prefix fails, whatever the other passes do. If the culprit alone fails,
   the set is the culprit alone. Else it needs earlier passes (one often enables another:
   constant folding turns Paddle's Constant nodes into the initializers a later fusion
   rewrites), and ddmin (Zeller and Hildebrandt's delta debugging, :func:`ddmin`) finds the
   fewest of the prefix before it that, with the culprit, still fail: without any one of them,
   or without the culprit, the result verifies. One bad pass among ``k`` candidates costs
   ``log2(k)`` probes and one more for it alone (6 for 20); a culprit and its enabler about 8.
4. **Without it.** Only the culprit is declined (declining an enabler would lose its work for
   another pass's bug). The whole list less the passes declined is run and verified. When that
   still fails, another set is responsible: it is found the same way among the passes that
   changed the model in that run, until the rest verifies or no candidate is left (each round
   declines one pass more).
5. **Bound.** At most ``max_probes`` probes (:data:`MAX_PROBES`) in all, one of them kept for
   the check of rule 4. When the prefix search reaches the bound, the shortest failing prefix
   is the set, said not to be narrowed, and all of it is declined; when ddmin reaches it, the
   culprit is declined and its set said not minimal. The check of rule 4 still runs; when the
   bound stops it, nothing verified is delivered. Either way the report says the bound was
   reached.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz.inputs import InputPlan
from fusionviz.passes import registry
from fusionviz.passes.pipeline import PassReport, PipelineResult, run_pipeline
from fusionviz.verify import DEFAULT_ATOL, DEFAULT_RTOL, VerifyResult, verify

logger = logging.getLogger(__name__)

#: Rule 5: probes per bisection. One bad pass among 20 candidates takes 6, plus one for the rest.
MAX_PROBES = 24


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probe (rule 2): the passes run and how their result verified."""

    passes: tuple[str, ...]
    fails: bool
    verify: VerifyResult
    seconds: float

    def as_dict(self) -> dict:
        return {"passes": list(self.passes), "fails": self.fails, "seconds": round(self.seconds, 3),
                "verify": self.verify.summary()}


@dataclasses.dataclass(frozen=True)
class Finding:
    """A set of passes whose result alone fails verification (rule 3).

    Attributes:
        passes: the set, in canonical order.
        verify: the failing verification of the set alone.
        minimal: False when the probe bound stopped the search before the set was minimal.
        declined: the passes declined (rule 4): the culprit, or all of a set not narrowed.
    """

    passes: tuple[str, ...]
    verify: VerifyResult
    minimal: bool = True
    declined: tuple[str, ...] = ()  # () = all of them

    def __post_init__(self) -> None:
        if not self.declined:
            object.__setattr__(self, "declined", tuple(self.passes))

    def reason(self, name: str) -> str:
        """Why ``name`` (one of :attr:`passes`) was declined: one sentence."""
        others = [p for p in self.passes if p != name]
        head = f"together with {', '.join(others)}, its result" if others else "its result"
        v = self.verify
        fail = v.first_failure
        if v.error:
            return f"{head} fails verification: {v.error}"
        if fail is not None and fail.new_nonfinite:
            return (f"{head} has {fail.new_nonfinite} new NaN/Inf in output '{fail.name}' on input set "
                    f"'{fail.input_set}'")
        if fail is not None:
            return (f"{head} changed output '{fail.name}' on input set '{fail.input_set}' beyond tolerance: "
                    f"max rel {fail.max_rel_diff:.2g}, max abs {fail.max_abs_diff:.2g} "
                    f"({fail.mismatches} of {fail.size} elements)")
        return f"{head} fails verification: {v.summary()}"

    def describe(self) -> str:
        if not self.minimal:
            return f"fails with {', '.join(self.passes)} (not narrowed further: the probe bound was reached)"
        if len(self.passes) == 1:
            return f"fails with {self.passes[0]} alone"
        return f"fails with {' and '.join(self.passes)} together (not without any one of them)"

    def without(self) -> str:
        """"without it" / "without fuse_x" / "without them": what the list was run without."""
        if self.declined == self.passes:
            return "without it" if len(self.passes) == 1 else "without them"
        return f"without {', '.join(self.declined)}"

    def as_dict(self) -> dict:
        return {"passes": list(self.passes), "declined": list(self.declined), "minimal": self.minimal,
                "failure": self.verify.summary(), "reasons": {p: self.reason(p) for p in self.declined}}


@dataclasses.dataclass(frozen=True)
class BisectResult:
    """What :func:`bisect` found.

    Attributes:
        findings: the failing sets, in the order found (rule 4: usually one).
        rest: the pass list without every finding's passes.
        rest_verify: how the result of ``rest`` verified (None when the bound left no probe).
        rest_result: the pipeline result of ``rest`` (None when it was not run).
        probes: every probe run, in order.
        bound_hit: the probe bound stopped the search (rule 5).
        excluded: precision passes of the list, left out of bisection (rule 1).
        max_probes: the bound.
        seconds: wall time of the whole bisection.
    """

    findings: tuple[Finding, ...]
    rest: tuple[str, ...]
    rest_verify: VerifyResult | None
    rest_result: PipelineResult | None
    probes: tuple[Probe, ...]
    bound_hit: bool
    excluded: tuple[str, ...] = ()
    max_probes: int = MAX_PROBES
    seconds: float = 0.0

    @property
    def declined(self) -> tuple[str, ...]:
        """Every pass declined (rule 4), in canonical order."""
        names = {p for f in self.findings for p in f.declined}
        return tuple(p.name for p in registry.resolve(names))

    @property
    def delivered(self) -> bool:
        """The list without the declined passes verifies: its result can be delivered."""
        return bool(self.findings) and self.rest_verify is not None and self.rest_verify.ok

    def reasons(self) -> dict[str, str]:
        """Declined pass → why (one sentence each)."""
        return {p: f.reason(p) for f in self.findings for p in f.declined}

    def describe(self) -> str:
        """One line: "fails with fuse_x alone; passes without it (5 probes)"."""
        v = self.rest_verify
        if not self.findings:
            if v is not None and v.ok:
                text = "verifies with every pass: nothing to bisect"
            elif v is not None and not v.differs:
                text = f"verification could not run: {v.error}"
            else:
                text = "no pass is responsible: no pass changed the model in the failing run"
        else:
            parts = []
            for k, f in enumerate(self.findings):
                last = k == len(self.findings) - 1
                if not last:
                    parts.append(f"{f.describe()}; still fails {f.without()}")
                elif v is None:
                    parts.append(f"{f.describe()}; the list {f.without()} was not checked")
                elif v.ok:
                    parts.append(f"{f.describe()}; passes {f.without()}")
                elif v.differs:
                    parts.append(f"{f.describe()}; still fails {f.without()}")
                else:
                    parts.append(f"{f.describe()}; {f.without()} verification could not run: {v.error}")
            text = "; ".join(parts)
        n = len(self.probes)
        bound = f", the bound of {self.max_probes} was reached" if self.bound_hit else ""
        return f"{text} ({n} probe{'s' if n != 1 else ''}{bound})"

    def result_with_declined(self) -> PipelineResult:
        """:attr:`rest_result` with a ``declined`` report for each declined pass, in canonical order."""
        if self.rest_result is None:
            raise ValueError("the list without the declined passes was not run")
        return with_declined(self.rest_result, self.reasons())

    def as_dict(self) -> dict:
        return {
            "declined": list(self.declined),
            "findings": [f.as_dict() for f in self.findings],
            "rest": list(self.rest),
            "rest_verifies": None if self.rest_verify is None else self.rest_verify.ok,
            "delivered": self.delivered,
            "probes": [p.as_dict() for p in self.probes],
            "probe_count": len(self.probes),
            "max_probes": self.max_probes,
            "bound_hit": self.bound_hit,
            "excluded": list(self.excluded),
            "seconds": round(self.seconds, 3),
            "summary": self.describe(),
        }


def with_declined(result: PipelineResult, reasons: Mapping[str, str]) -> PipelineResult:
    """``result`` with a report of status ``declined`` (and the reason) for each pass in ``reasons``
    that it did not run, placed in canonical order."""
    by_name = {r.name: r for r in result.reports}
    names = [p.name for p in registry.resolve([*by_name, *reasons])]
    reports: list[PassReport] = []
    nodes = result.nodes_before
    for name in names:
        r = by_name.get(name)
        if r is None:
            p = registry.get_pass(name)
            r = PassReport(name, p.title, (), nodes, nodes, 0.0, declined=reasons[name],
                           after=tuple(x.name for x in reports))
        reports.append(r)
        nodes = r.nodes_after
    return dataclasses.replace(result, reports=tuple(reports))


def declined_so_far(findings: Sequence[Finding]) -> list[str]:
    return [p for f in findings for p in f.declined]


def changed_passes(result: PipelineResult) -> list[str]:
    """The passes that changed the model in ``result`` (rule 1's candidates)."""
    return [r.name for r in result.reports if r.status == "applied"]


class _Prober:
    """Runs and caches probes (rule 2) within the bound (rule 5)."""

    def __init__(self, model, plan, *, rtol, atol, shapes, freeze, reference, max_probes, progress):
        self.model, self.plan = model, plan
        self.rtol, self.atol = rtol, atol
        self.shapes, self.freeze, self.reference = shapes, freeze, reference
        self.max_probes = max_probes
        self.progress = progress
        self.cache: dict[frozenset[str], Probe] = {}
        self.probes: list[Probe] = []
        self.bound_hit = False

    def left(self) -> int:
        return self.max_probes - len(self.probes)

    def seed(self, names: Sequence[str], verify_result: VerifyResult) -> None:
        """A failing run already verified (the caller's): known without a probe."""
        key = frozenset(names)
        self.cache[key] = Probe(tuple(names), verify_result.differs, verify_result, 0.0)

    def run(self, names: Sequence[str], *, near_misses: bool = False,
            label: str = "") -> tuple[Probe, PipelineResult]:
        """Probe ``names`` (the bound is the caller's to check); ``label`` names them in progress."""
        t = time.perf_counter()
        result = run_pipeline(self.model, list(names), shapes=self.shapes, freeze=self.freeze,
                              keep_snapshots=False, near_misses=near_misses)
        reference = self.reference if self.reference is not None else result.original
        v = verify(reference, result.final, plan=self.plan, rtol=self.rtol, atol=self.atol, isolated=True)
        ordered = tuple(p.name for p in registry.resolve(names))
        probe = Probe(ordered, v.differs, v, time.perf_counter() - t)
        self.probes.append(probe)
        self.cache.setdefault(frozenset(names), probe)
        if self.progress:
            word = "fails" if probe.fails else ("verifies" if v.ok else f"not verified ({v.error})")
            self.progress(f"bisect probe {len(self.probes)}/{self.max_probes}: "
                          f"{label or ', '.join(ordered) or 'no pass'}: {word}")
        return probe, result

    def fails(self, names: Sequence[str], *, reserve: int) -> bool | None:
        """Whether ``names`` alone fails; None when the bound (keeping ``reserve`` probes) is reached."""
        key = frozenset(names)
        if key in self.cache:
            return self.cache[key].fails
        if self.left() <= reserve:
            self.bound_hit = True
            return None
        return self.run(names)[0].fails


def _split(items: list[str], n: int) -> list[list[str]]:
    """``items`` in ``n`` contiguous parts of nearly equal size."""
    size, extra = divmod(len(items), n)
    parts, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        parts.append(items[start:end])
        start = end
    return [p for p in parts if p]


def ddmin(items: Sequence[str], fails: Callable[[list[str]], bool | None]) -> tuple[list[str], bool]:
    """Rule 3: a 1-minimal failing subset of ``items`` (which must fail as a whole).

    ``fails`` returns None when it may probe no more. Returns the smallest failing set found
    and whether it is 1-minimal (False when ``fails`` gave out first).
    """
    items = list(items)
    n = 2
    while len(items) >= 2:
        parts = _split(items, n)
        nxt: tuple[list[str], int] | None = None
        for part in parts:  # a part alone
            got = fails(part)
            if got is None:
                return items, False
            if got:
                nxt = (part, 2)
                break
        if nxt is None and len(parts) > 2:  # the set without a part (for two parts: the other part)
            for part in parts:
                rest = [x for x in items if x not in part]
                got = fails(rest)
                if got is None:
                    return items, False
                if got:
                    nxt = (rest, max(len(parts) - 1, 2))
                    break
        if nxt is not None:
            items, n = nxt
            continue
        if len(parts) >= len(items):
            break
        n = min(len(items), 2 * len(parts))
    return items, True


def narrow(candidates: Sequence[str], fails: Callable[[list[str]], bool | None]
           ) -> tuple[list[str], str | None, bool]:
    """Rule 3: the culprit among ``candidates`` (canonical order; all of them must fail) and the
    fewest earlier candidates it needs.

    ``fails`` returns None when it may probe no more. Returns ``(set, culprit, minimal)``: the
    set in canonical order, its culprit (None when the bound stopped the prefix search: the set
    is then the shortest failing prefix) and whether the set is minimal.
    """
    items = list(candidates)
    lo, hi = 0, len(items)  # items[:lo] verifies (no pass at first), items[:hi] fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = fails(items[:mid])
        if got is None:
            return items[:hi], None, False
        lo, hi = (lo, mid) if got else (mid, hi)
    culprit, before = items[hi - 1], items[:hi - 1]
    if not before:
        return [culprit], culprit, True
    got = fails([culprit])
    if got is None:
        return [*before, culprit], culprit, False
    if got:
        return [culprit], culprit, True
    needed, minimal = ddmin(before, lambda sub: fails([*sub, culprit]))
    return [*needed, culprit], culprit, minimal


def bisect(
    model: onnx.ModelProto,
    names: Sequence[str],
    plan: InputPlan,
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    shapes: Mapping[str, Sequence[int]] | None = None,
    freeze: Mapping[str, np.ndarray] | None = None,
    reference: onnx.ModelProto | None = None,
    first: tuple[PipelineResult, VerifyResult] | None = None,
    max_probes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> BisectResult:
    """Find the passes of ``names`` whose result fails verification, and verify the rest.

    Args:
        model: the user's model (before any pass, as ``optimize`` loaded it).
        names: the pass list (any order; canonical order is used).
        plan: the input plan ``optimize`` verifies with.
        rtol, atol: the tolerances ``optimize`` verifies with.
        shapes, freeze: ``--shape`` and ``--freeze`` as ``run_pipeline`` takes them.
        reference: the model results are compared with (``optimize`` gives the user's model when
            an input is frozen); None: each run's own original snapshot.
        first: the full list's pipeline result and its failing verification, when the caller has
            them (saves a probe and gives rule 1's candidates).
        max_probes: rule 5's bound (None: :data:`MAX_PROBES`; at least 2).
        progress: called with one line per probe.

    Returns:
        A :class:`BisectResult`; ``delivered`` says whether the list without the declined passes
        verifies (its result is ``rest_result``).
    """
    t0 = time.perf_counter()
    max_probes = max(2, int(MAX_PROBES if max_probes is None else max_probes))
    passes = registry.resolve(names)
    excluded = tuple(p.name for p in passes if not p.exact)
    listed = [p.name for p in passes if p.exact]
    prober = _Prober(model, plan, rtol=rtol, atol=atol, shapes=shapes, freeze=freeze, reference=reference,
                     max_probes=max_probes, progress=progress)
    if first is not None and not excluded:
        run, verified = first
        prober.seed(listed, verified)
    else:
        probe, run = prober.run(listed, label="the whole list")
        verified = probe.verify
    findings: list[Finding] = []
    rest = list(listed)
    rest_verify: VerifyResult | None = verified
    rest_result: PipelineResult | None = run
    while rest_verify is not None and rest_verify.differs:
        candidates = changed_passes(run)
        if not candidates:
            break
        prober.seed(candidates, rest_verify)  # the run without the passes that changed nothing
        found, culprit, minimal = narrow(candidates, lambda s: prober.fails(s, reserve=1))
        failure = prober.cache[frozenset(found)].verify
        found = [p.name for p in registry.resolve(found)]
        drop = [culprit] if culprit else found  # rule 4 (rule 5: all of a set not narrowed)
        findings.append(Finding(tuple(found), failure, minimal, tuple(drop)))
        rest = [n for n in rest if n not in drop]
        rest_verify = rest_result = None
        if prober.left() <= 0:
            prober.bound_hit = True
            break
        probe, run = prober.run(rest, near_misses=True,
                                label=f"the list without {', '.join(declined_so_far(findings))}")
        rest_verify, rest_result = probe.verify, run
        if not minimal:
            break  # the bound: no second search
    out = BisectResult(tuple(findings), tuple(rest), rest_verify, rest_result, tuple(prober.probes),
                       prober.bound_hit, excluded, max_probes, time.perf_counter() - t0)
    logger.info("bisection: %s", out.describe())
    return out
