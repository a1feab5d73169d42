"""Which of onnxruntime's own optimizers changed the outputs: bisection over the graph
transformers onnxruntime applies at a level.

onnxruntime's level ``all`` (or ``extended``, ``basic``) runs dozens of graph transformers; when
the model's outputs at that level differ from level ``off`` beyond tolerance, this finds the
transformer(s) responsible, so the user can switch exactly those off
(``SessionOptions.add_session_config_entry`` / ``disabled_optimizers``) instead of the level.

1. **Names from onnxruntime itself.** ``disabled_optimizers`` ignores a wrong name silently, so
   no name is guessed: a session at the level is created with onnxruntime's verbose log on, and
   every ``GraphTransformer NAME modified: 1`` line names a candidate, in the order it first
   changed the graph. A rule-based transformer (``Level1_RuleBasedTransformer``) is one
   candidate: onnxruntime does not log which of its rules fired. A name that disabling does not
   switch off would show here as a probe that still fails; every probe re-reads the log, and a
   probe whose disabled names still appear as modifying is reported (``ignored``).
2. **The judgement.** Reference: the model at level ``off``; each probe: the model at the level
   with some candidates disabled. Outputs are judged by :func:`fusionviz.verify.judge` on every
   input set of the plan with the fixed tolerances and no noise allowance (the allowance *is*
   onnxruntime's rewrites: here they are what is judged).
3. **Search.** ddmin (:func:`fusionviz.bisect.ddmin`) over the candidates finds the fewest that,
   enabled with every other candidate disabled, still fail: one bad transformer among ``k``
   costs about ``2 log2(k)`` probes. Then the level with only that set disabled is run: when it
   verifies, the set is *the* cause ("disable X and the outputs are restored"); else another
   set is looked for among the candidates still enabled, until the rest verifies or the bound
   (:data:`MAX_PROBES`) is reached.
4. **Rewrite rules.** A rule-based transformer (``Level1_RuleBasedTransformer``) found
   responsible is narrowed the same way to its rewrite rules (:data:`REWRITE_RULES`;
   ``disabled_optimizers`` takes rule names too): with the rest of its set enabled and only some
   of its rules, ddmin finds the rules that still fail, and the answer names them when disabling
   them (instead of the whole transformer) restores the outputs.
5. **Isolation.** Every session runs in one child process (``python -m fusionviz.ortbisect``,
   fed requests through a pipe), so a crash of onnxruntime costs an error line, and the parent
   never imports a session; the model is handed over as a file path.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.bisect import ddmin
from fusionviz.inputs import InputPlan
from fusionviz.ortlevels import LEVELS
from fusionviz.verify import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff, judge

#: Rule 3's bound on probes (each is one session at the level and one run per input set).
MAX_PROBES = 32

#: Rule 4: the rewrite rules of onnxruntime's rule-based transformers, as its source names them
#: (``GenerateRewriteRules`` in ``core/optimizer/graph_transformer_utils.cc``). Only a rule whose
#: removal is seen to restore the outputs is ever reported; a rule missing here leaves the
#: transformer's own name in the answer.
REWRITE_RULES = {
    "Level1_RuleBasedTransformer": (
        "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
        "CastElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion", "FuseReluClip",
        "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion", "ConvBNFusion",
        "ClipQuantFusion", "ReluQuantFusion", "LabelEncoderFusion",
    ),
}

_MODIFIED = re.compile(r"GraphTransformer (\S+) modified: (\d+)")


def modifying_transformers(log: str) -> list[str]:
    """Rule 1: the transformers a verbose onnxruntime log says changed the graph, first-change order."""
    names: list[str] = []
    for name, count in _MODIFIED.findall(log):
        if int(count) > 0 and name not in names:
            names.append(name)
    return names


# -- the child process (rule 5) -------------------------------------------------------------

def _session_run(path: str, level: str, disabled: Sequence[str], sets: Sequence[tuple[str, dict]]
                 ) -> tuple[str, list[str], list[dict[str, np.ndarray]]]:
    """In the child: one session, its verbose log's modifying transformers, and the outputs per set.

    Returns ``("ok", names, outs)`` or ``("error", message, [])``.
    """
    import onnxruntime as ort

    from fusionviz.ortlevels import graph_optimization_level

    so = ort.SessionOptions()
    so.graph_optimization_level = graph_optimization_level(level)
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 0
    so.log_verbosity_level = 0
    kwargs = {"disabled_optimizers": list(disabled)} if disabled else {}
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"], **kwargs)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
            return "error", str(exc).strip().splitlines()[-1][:300], []
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    names = modifying_transformers(text) if level != "off" else []
    outs: list[dict[str, np.ndarray] | str] = []  # per set: the outputs, or why it failed
    out_names = [o.name for o in session.get_outputs()]
    for _label, feeds in sets:
        try:
            values = session.run(None, feeds)
        except Exception as exc:  # noqa: BLE001
            outs.append(str(exc).strip().splitlines()[-1][:300])
            continue
        outs.append(dict(zip(out_names, values, strict=True)))
    return "ok", names, outs


@dataclasses.dataclass(frozen=True)
class OrtProbe:
    """One probe: the transformers disabled, those onnxruntime logged as modifying, the verdict."""

    disabled: tuple[str, ...]
    modified: tuple[str, ...]
    fails: bool
    first: OutputDiff | None
    error: str | None  # the session could not be made at all
    seconds: float
    failure: str | None = None  # runs where level off runs no more, or lacks an output

    @property
    def ignored(self) -> tuple[str, ...]:
        """Disabled names onnxruntime still applied (rule 1): a name it does not know."""
        return tuple(n for n in self.disabled if n in self.modified)

    def as_dict(self) -> dict:
        d = {"disabled": list(self.disabled), "modified": list(self.modified), "fails": self.fails,
             "seconds": round(self.seconds, 3), "error": self.error, "failure": self.failure}
        if self.first is not None:
            f = self.first
            d["first_failure"] = {"output": f.name, "input_set": f.input_set, "max_abs_diff": _num(f.max_abs_diff),
                                  "max_rel_diff": _num(f.max_rel_diff), "mismatches": f.mismatches, "size": f.size,
                                  "new_nonfinite": f.new_nonfinite, "text": f.describe()}
        if self.ignored:
            d["ignored"] = list(self.ignored)
        return d


@dataclasses.dataclass(frozen=True)
class OrtBisectResult:
    """What :func:`bisect_ort` found.

    Attributes:
        level: the onnxruntime level judged against level off.
        candidates: rule 1's names, in first-change order.
        baseline: the level with nothing disabled (None when it could not run).
        culprits: the sets found (rule 3), each the fewest transformers that still fail alone.
        restored: the level with every culprit disabled verifies.
        probes: every probe run, in order.
        bound_hit: rule 3's bound stopped the search.
        error: why no bisection could run (the model fails at level off, ...).
    """

    level: str
    candidates: tuple[str, ...]
    baseline: OrtProbe | None
    culprits: tuple[tuple[str, ...], ...]
    restored: bool
    probes: tuple[OrtProbe, ...]
    bound_hit: bool
    error: str | None = None
    seconds: float = 0.0

    @property
    def differs(self) -> bool:
        """The level changes the outputs beyond tolerance (before anything is disabled)."""
        return self.baseline is not None and self.baseline.fails

    @property
    def disabled(self) -> tuple[str, ...]:
        return tuple(n for c in self.culprits for n in c)

    def describe(self) -> str:
        """One line: what changed the outputs and what restores them."""
        n = len(self.probes)
        tail = f" ({n} session{'s' if n != 1 else ''}{', the bound was reached' if self.bound_hit else ''})"
        if self.error:
            return f"cannot bisect onnxruntime's optimizers: {self.error}"
        if not self.differs:
            return (f"onnxruntime level {self.level} gives the same outputs as level off within tolerance: "
                    f"nothing to bisect{tail}")
        if not self.culprits:
            return f"level {self.level} changes the outputs, but no set of its transformers was narrowed{tail}"
        sets = "; ".join(" + ".join(c) + (" alone" if len(c) == 1 else " together") for c in self.culprits)
        names = ",".join(self.disabled)
        if self.restored:
            return (f"level {self.level} changes the outputs through {sets}; with disabled_optimizers=[{names}] "
                    f"level {self.level} gives level off's outputs{tail}")
        return (f"level {self.level} changes the outputs through {sets}; disabling [{names}] does not restore "
                f"them{tail}")

    def as_dict(self) -> dict:
        return {"level": self.level, "candidates": list(self.candidates), "differs": self.differs,
                "culprits": [list(c) for c in self.culprits], "disabled_optimizers": list(self.disabled),
                "restored": self.restored, "bound_hit": self.bound_hit, "error": self.error,
                "probe_count": len(self.probes), "probes": [p.as_dict() for p in self.probes],
                "seconds": round(self.seconds, 3), "summary": self.describe()}


def _num(x: float) -> float | str:
    """JSON has no inf/NaN: they are written as strings."""
    return float(x) if x == x and abs(x) != float("inf") else str(x)


def _first_failure(diffs: Sequence[OutputDiff]) -> OutputDiff | None:
    return next((d for d in diffs if not d.ok), None)


def bisect_ort(
    model: onnx.ModelProto | str | os.PathLike,
    plan: InputPlan,
    *,
    level: str = "all",
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    max_probes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> OrtBisectResult:
    """Find the onnxruntime transformers at ``level`` that change ``model``'s outputs (rules 1-4).

    Args:
        model: a model or the path of one (a path is handed to the child as it is: external data
            stays on disk).
        plan: the input plan; every input set of it is judged.
        level: one of :data:`fusionviz.ortlevels.LEVELS` other than ``off``.
        rtol, atol: ``verify``'s tolerances (no noise allowance: rule 2).
        max_probes: rule 3's bound (None: :data:`MAX_PROBES`).
        progress: called with one line per probe.
    """
    if level not in LEVELS or level == "off":
        raise errors.InputSpecError(f"Bisect a level other than off: one of {', '.join(LEVELS[1:])}.")
    t0 = time.perf_counter()
    bound = max(2, int(MAX_PROBES if max_probes is None else max_probes))
    sets = plan.input_sets()
    with tempfile.TemporaryDirectory(prefix="fusionviz-ortbisect-") as tmp:
        if isinstance(model, onnx.ModelProto):
            path = os.path.join(tmp, "model.onnx")
            onnx.save(model, path)
        else:
            path = os.fspath(model)
        with _Child() as child:
            return _search(child, path, sets, level, rtol, atol, bound, progress, t0)


class _Child:
    """Rule 5: one child process answering :func:`_session_run` requests over a pipe."""

    def __enter__(self) -> _Child:
        self.proc = subprocess.Popen([sys.executable, "-m", "fusionviz.ortbisect"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()

    def call(self, *args) -> tuple:
        if self.proc.poll() is not None:
            self.__enter__()
        try:
            _send(self.proc.stdin, args)
            return _recv(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            code = self.proc.wait()
            sig = f" (signal {-code})" if code and code < 0 else ""
            return "error", f"onnxruntime crashed{sig}", []


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)  # noqa: S301 - our own child's answer


def _serve() -> None:
    """The child's loop: one request (``_session_run``'s arguments) in, one answer out."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            args = _recv(stdin)
        except EOFError:
            return
        _send(stdout, _session_run(*args))


def _search(child: _Child, path, sets, level, rtol, atol, bound, progress, t0) -> OrtBisectResult:
    probes: list[OrtProbe] = []

    def session(lvl: str, disabled: Sequence[str]):
        return child.call(path, lvl, tuple(disabled), sets)

    status, why, ref = session("off", ())
    if status == "ok":  # like verify: a set the model itself fails on is left out, unless it is the main one
        bad = next(((lab, r) for (lab, _), r in zip(sets, ref, strict=True)
                    if isinstance(r, str) and lab in ("normal", "given", "user")), None)
        if bad is not None:
            status, why = "error", f"on input set '{bad[0]}': {bad[1]}"
        else:
            kept = [k for k, r in enumerate(ref) if not isinstance(r, str)]
            sets, ref = [sets[k] for k in kept], [ref[k] for k in kept]
    if status != "ok":
        return OrtBisectResult(level, (), None, (), False, (), False,
                               error=f"the model does not run at level off: {why}",
                               seconds=time.perf_counter() - t0)

    cache: dict[frozenset, OrtProbe] = {}

    def probe(disabled: Sequence[str], label: str) -> OrtProbe:
        key = frozenset(disabled)
        if key in cache:
            return cache[key]
        s0 = time.perf_counter()
        st, names, outs = session(level, sorted(disabled))
        if st != "ok":
            p = OrtProbe(tuple(sorted(disabled)), (), True, None, names, time.perf_counter() - s0)
        else:
            diffs: list[OutputDiff] = []
            failed = None
            for (lab, _), a, b in zip(sets, ref, outs, strict=True):
                if isinstance(b, str):
                    failed = f"fails on input set '{lab}' where level off runs: {b}"
                    break
                got, missing = judge(a, b, input_set=lab, rtol=rtol, atol=atol)
                diffs.extend(got)
                if missing:
                    failed = missing
                    break
            first = _first_failure(diffs)
            p = OrtProbe(tuple(sorted(disabled)), tuple(names), first is not None or failed is not None, first,
                         None, time.perf_counter() - s0, failed)
        cache[key] = p
        probes.append(p)
        if progress:
            verdict = "fails" if p.fails else "verifies"
            progress(f"ort-bisect: {label}: {verdict} ({p.seconds:.1f} s)")
        return p

    base = probe((), f"level {level}")
    candidates = tuple(base.modified)
    if base.error:
        return OrtBisectResult(level, candidates, base, (), False, tuple(probes), False,
                               error=f"the model does not load at level {level}: {base.error}",
                               seconds=time.perf_counter() - t0)
    culprits: list[tuple[str, ...]] = []
    restored = not base.fails
    bound_hit = False
    enabled = list(candidates)
    while not restored and enabled:
        off = [n for n in candidates if n not in enabled]  # disabled already: earlier culprits

        def fails(keep: list[str], off=off, enabled=enabled) -> bool | None:
            if len(probes) >= bound:
                return None
            rest = [n for n in enabled if n not in keep]
            return probe([*off, *rest], "only " + ", ".join(keep) if keep else "none").fails

        if fails([]):  # the level fails with every candidate off: they are not the cause
            break
        found, minimal = ddmin(enabled, fails)
        if not minimal:
            bound_hit = True
        found = [n for n in candidates if n in found]
        culprits.append(tuple(found))
        if len(probes) >= bound:
            bound_hit = True
            break
        after = probe([*off, *found], "without " + ", ".join(found))
        restored = not after.fails
        enabled = [n for n in enabled if n not in found and n in after.modified]
        if not minimal:
            break
    if restored and not bound_hit and any(n in REWRITE_RULES for c in culprits for n in c):
        culprits, bound_hit = _rules(culprits, candidates, probe, probes, bound)
    return OrtBisectResult(level, candidates, base, tuple(culprits), restored, tuple(probes), bound_hit,
                           seconds=time.perf_counter() - t0)


def _rules(culprits, candidates, probe, probes, bound) -> tuple[list[tuple[str, ...]], bool]:
    """Rule 4: a rule-based transformer among the culprits narrowed to its rewrite rules."""
    out: list[tuple[str, ...]] = []
    hit = False
    for k, found in enumerate(culprits):
        refined = list(found)
        for name in found:
            rules = list(REWRITE_RULES.get(name, ()))
            if not rules or hit:
                continue
            others = [n for n in candidates if n not in found]  # only this set enabled
            earlier = [r for c in out for r in c] + [n for c in culprits[k + 1:] for n in c]

            def fails(keep: list[str], others=others, earlier=earlier, rules=rules) -> bool | None:
                if len(probes) >= bound:
                    return None
                off = [r for r in rules if r not in keep]
                return probe([*others, *earlier, *off], "rules " + (", ".join(keep) or "none")).fails

            none = fails([])
            if none is None:
                hit = True
                continue
            if none:  # the responsible rule is not one of those listed: keep the transformer's name
                continue
            got, minimal = ddmin(rules, fails)
            if not minimal:
                hit = True
                continue
            refined = [r for n in refined for r in ([*got] if n == name else [n])]
        out.append(tuple(refined))
    if out != list(culprits) and len(probes) < bound:
        names = sorted({n for c in out for n in c})
        final = probe(names, "without " + ", ".join(names))
        if not final.fails:
            return out, hit
    return list(culprits), hit or len(probes) >= bound



if __name__ == "__main__":
    _serve()
