"""Numerical equivalence of two models in onnxruntime, judged so that a user can believe it.

Both models run with graph optimizations disabled (so onnxruntime cannot hide or cause a
difference) on the same input sets from :mod:`fusionviz.inputs`: ``normal`` (seeded standard
normal), ``zeros`` (silence), ``edge`` (large magnitudes) and the user's data when given.

Per output and input set (:func:`compare`):

1. ``max_abs_diff`` and ``max_rel_diff`` (the largest absolute difference divided by the
   output's largest magnitude) and the cosine similarity, for reading.
2. The verdict, element by element: ``|a - b| <= atol + rtol * |b| + floor``, where ``b`` is
   the original's value, ``rtol`` defaults to 1e-4 and ``atol`` to 1e-5 (``--rtol``/``--atol``),
   and ``floor`` is the rounding noise of the output: the larger of ``NOISE_FLOOR * max|b|``
   (1e-5 of its largest magnitude: a near-zero element of a large output carries the absolute
   rounding error of the large ones, so relative error alone would fail correct results) and
   ``NOISE_MULT`` (4) times the largest difference onnxruntime's *own* optimizer (level all)
   makes to the original on the same inputs, capped at 1% of the scale, and ``ROUNDING_ULPS``
   (2) rounding steps of the output's own float type at its scale (a float16 output cannot be
   compared closer than its 1e-3 steps; for float32 this is below the first term). A rewrite that
   reorders float arithmetic is held to the noise of onnxruntime's own rewrites: on an OCR
   detector fed pixel-range inputs, onnxruntime's level all alone moves a sigmoid output by
   7e-5, beyond any fixed tolerance that still catches real bugs.
3. NaN and Inf: a NaN or Inf the original does not produce at that element is a failure
   (``new_nonfinite``); one both produce (same kind, same sign) is equal.
4. Integer and boolean outputs must be equal.

The verdict names the first input set and output that failed. Precision passes (fp16, int8)
report only.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.inputs import InputPlan, InputSpec, plan_inputs

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
NOISE_FLOOR = 1e-5
NOISE_MULT = 4.0
NOISE_CAP = 1e-2
ROUNDING_ULPS = 2.0
def _default_mem_mb() -> int:
    from fusionviz.model_io import machine_memory_bytes

    return max(4096, machine_memory_bytes() // 2 // (1 << 20))


def _env_mem_mb() -> int:
    text = os.environ.get("FUSIONVIZ_VERIFY_MEM_MB", "")
    try:
        return int(float(text)) if text.strip() else _default_mem_mb()
    except ValueError:
        return _default_mem_mb()


#: Memory cap (MB, address space) and time limit (s) of an isolated verification child process;
#: the cap defaults to half the machine's memory, at least 4 GB.
VERIFY_MEM_MB = _env_mem_mb()
def mem_cap_note() -> str:
    """How a message names the cap when it is what failed (the child cannot exceed this
    process's own address-space limit, which the note then names instead)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY and hard >> 20 < VERIFY_MEM_MB:
        return (f"this process's own address-space limit, {hard >> 20:,} MB (below the verification memory cap, "
                f"{VERIFY_MEM_MB:,} MB, FUSIONVIZ_VERIFY_MEM_MB)")
    return f"the verification memory cap, {VERIFY_MEM_MB:,} MB (set FUSIONVIZ_VERIFY_MEM_MB to raise it)"


_OOM_WORDS = ("bad_alloc", "MemoryError", "Failed to allocate", "out of memory", "Cannot allocate memory")


def out_of_memory(text: str) -> bool:
    """Whether an error text says an allocation failed."""
    return any(w in text for w in _OOM_WORDS)
VERIFY_TIMEOUT_S = float(os.environ.get("FUSIONVIZ_VERIFY_TIMEOUT_S", "300") or 300)


@dataclasses.dataclass(frozen=True)
class OutputDiff:
    """How one output of the optimized model compares with the original on one input set."""

    name: str
    shape: tuple[int, ...]
    max_abs_diff: float
    max_rel_diff: float
    cosine: float
    top1_agreement: float | None = None
    input_set: str = "normal"
    size: int = 0
    mismatches: int = 0  # elements beyond the tolerance (rule 2), or unequal (rule 4)
    new_nonfinite: int = 0  # NaN/Inf where the original is finite (rule 3)
    floor: float = 0.0  # the noise floor used (rule 2)
    ok: bool = True

    def describe(self) -> str:
        if self.new_nonfinite:
            return (f"{self.new_nonfinite} new NaN/Inf in output '{self.name}' on input set '{self.input_set}' "
                    "(the original gives finite values there)")
        if not self.ok:
            return (f"output '{self.name}' on input set '{self.input_set}': {self.mismatches} of {self.size} "
                    f"elements beyond tolerance (max abs {self.max_abs_diff:.3g}, max rel {self.max_rel_diff:.3g})")
        return f"output '{self.name}' on '{self.input_set}': equal"


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    ok: bool
    outputs: tuple[OutputDiff, ...]
    rtol: float
    error: str | None = None
    report_only: bool = False
    atol: float = DEFAULT_ATOL
    input_sets: tuple[str, ...] = ()
    skipped_sets: tuple[tuple[str, str], ...] = ()  # (set, why): the original itself fails on it
    optimized_failed: bool = False  # the error is the optimized model's: it fails or lacks an output

    @property
    def differs(self) -> bool:
        """The optimized model is at fault: outputs beyond tolerance, or it fails or lacks an
        output where the original runs (not a verification that could not run at all)."""
        return not self.ok and (self.error is None or self.optimized_failed)

    @property
    def max_abs_diff(self) -> float:
        return max((o.max_abs_diff for o in self.outputs), default=0.0)

    @property
    def max_rel_diff(self) -> float:
        return max((o.max_rel_diff for o in self.outputs), default=0.0)

    @property
    def min_cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=1.0)

    @property
    def new_nonfinite(self) -> int:
        return sum(o.new_nonfinite for o in self.outputs)

    @property
    def first_failure(self) -> OutputDiff | None:
        return next((o for o in self.outputs if not o.ok), None)

    def summary(self) -> str:
        if self.error:
            return f"not verified: {self.error}"
        sets = "/".join(self.input_sets) or "given inputs"
        figures = (f"max abs {self.max_abs_diff:.2e}, max rel {self.max_rel_diff:.2e}, "
                   f"cosine {self.min_cosine:.6f} on {sets}")
        if self.ok:
            return f"equal: {figures}"
        fail = self.first_failure
        word = "differs (report only)" if self.report_only else "DIFFERENT"
        return f"{word}: {fail.describe() if fail else figures}; {figures}"

    def as_dict(self) -> dict:
        fail = self.first_failure
        return {
            "ok": self.ok,
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "min_cosine": self.min_cosine,
            "new_nonfinite": self.new_nonfinite,
            "rtol": self.rtol,
            "atol": self.atol,
            "noise_floor": NOISE_FLOOR,
            "input_sets": list(self.input_sets),
            "skipped_sets": [list(s) for s in self.skipped_sets],
            "failure": fail.describe() if fail else None,
            "error": self.error,
            "report_only": self.report_only,
            "optimized_failed": self.optimized_failed,
            "outputs": [dataclasses.asdict(o) for o in self.outputs],
        }


def make_session(model: onnx.ModelProto | bytes | str, *, level: str = "off", threads: int = 1,
                 providers: Sequence[str] | None = None, weights_dir: str | None = None):
    """An onnxruntime session of a model, its bytes or its path; errors become RuntimeLoadError
    with one sentence.

    A model whose weights stay on disk (:func:`fusionviz.model_io.weights_dir`; for bytes,
    ``weights_dir``) has them read from there by onnxruntime; a path, from beside the file.
    """
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config
    from fusionviz.ortlevels import graph_optimization_level

    so = ort.SessionOptions()
    so.graph_optimization_level = graph_optimization_level(level)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # errors come back as exceptions; ORT's own log would repeat them
    given = isinstance(model, (bytes, str))
    config = ort_session_config(None if given else model, folder=weights_dir)
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    data = model if given else model.SerializeToString()
    try:
        return ort.InferenceSession(data, so, providers=list(providers or ["CPUExecutionProvider"]))
    except Exception as exc:  # noqa: BLE001 - ORT raises many types
        raise errors.RuntimeLoadError(f"onnxruntime cannot load the model: {_ort_sentence(exc)}") from None


def _ort_sentence(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    text = text.replace("[ONNXRuntimeError] : ", "")
    return text[:300]


def run_model(session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The session's outputs by name. Feeds the model does not take are left out: a model with
    an input frozen into it (``--freeze``) is compared on the original's feeds."""
    names = [o.name for o in session.get_outputs()]
    takes = {i.name for i in session.get_inputs()}
    try:
        outs = session.run(names, {k: v for k, v in feeds.items() if k in takes})
    except Exception as exc:  # noqa: BLE001
        raise errors.RuntimeLoadError(f"onnxruntime failed to run the model: {_ort_sentence(exc)}") from None
    return dict(zip(names, outs, strict=True))


def compare(ref: np.ndarray, got: np.ndarray, name: str, *, rtol: float = DEFAULT_RTOL,
            atol: float = DEFAULT_ATOL, input_set: str = "normal", noise: float = 0.0) -> OutputDiff:
    """Compare one output (``ref``: the original's) by the rules in the module docstring."""
    a = np.asarray(ref)
    b = np.asarray(got)
    if a.shape != b.shape:
        return OutputDiff(name, tuple(a.shape), float("inf"), float("inf"), 0.0, input_set=input_set,
                          size=int(a.size), mismatches=int(a.size), ok=False)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.number) or not np.issubdtype(a.dtype, np.inexact):
        if a.size == 0:
            return OutputDiff(name, tuple(a.shape), 0.0, 0.0, 1.0, input_set=input_set)
        neq = int(np.count_nonzero(a != b))
        eq = 1.0 - neq / a.size
        diff = 0.0
        if neq and np.issubdtype(a.dtype, np.number) and a.dtype != np.bool_:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        elif neq:
            diff = 1.0
        return OutputDiff(name, tuple(a.shape), diff, diff, eq, input_set=input_set, size=int(a.size),
                          mismatches=neq, ok=neq == 0)
    a64 = a.astype(np.float64).ravel()
    b64 = b.astype(np.float64).ravel()
    if a64.size == 0:
        return OutputDiff(name, tuple(a.shape), 0.0, 0.0, 1.0, input_set=input_set)
    fa, fb = np.isfinite(a64), np.isfinite(b64)
    both = fa & fb
    new_nonfinite = int(np.count_nonzero(fa & ~fb))
    # Non-finite in the original: equal only if the optimized gives the same NaN/Inf there.
    nf = ~fa
    same_nf = np.isnan(a64[nf]) & np.isnan(b64[nf]) | (a64[nf] == b64[nf])
    lost = int(np.count_nonzero(~same_nf))
    diff = np.abs(a64[both] - b64[both])
    max_abs = float(diff.max()) if diff.size else 0.0
    if new_nonfinite or lost:
        max_abs = float("inf")
    scale = float(np.abs(a64[both]).max()) if both.any() else 0.0
    eps = max(float(np.finfo(t).eps) for t in (a.dtype, b.dtype) if np.issubdtype(t, np.inexact))
    floor = max(NOISE_FLOOR * scale, ROUNDING_ULPS * eps * scale, min(NOISE_MULT * noise, NOISE_CAP * scale))
    beyond = int(np.count_nonzero(diff > atol + rtol * np.abs(a64[both]) + floor)) if diff.size else 0
    mismatches = beyond + new_nonfinite + lost
    max_rel = max_abs / max(scale, 1e-30) if max_abs else 0.0
    av, bv = a64[both], b64[both]
    na, nb = np.linalg.norm(av), np.linalg.norm(bv)
    cos = float(np.dot(av, bv) / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    top1 = None
    if a.ndim == 2 and a.shape[-1] >= 2:
        top1 = float(np.mean(np.argmax(a, -1) == np.argmax(b, -1)))
    return OutputDiff(name, tuple(a.shape), max_abs, max_rel, cos, top1, input_set, int(a.size), mismatches,
                      new_nonfinite, floor, mismatches == 0)


def judge(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], *, input_set: str = "normal",
          rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
          noise: Mapping[str, float] | None = None) -> tuple[list[OutputDiff], str | None]:
    """Compare every output of one input set; the error is a missing output."""
    diffs = []
    for name, a in ref.items():
        if name not in got:
            return diffs, f"output '{name}' is missing after optimization"
        diffs.append(compare(a, got[name], name, rtol=rtol, atol=atol, input_set=input_set,
                             noise=(noise or {}).get(name, 0.0)))
    return diffs, None


def judge_outputs(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], *, input_set: str = "given",
                  rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                  noise: Mapping[str, float] | None = None, report_only: bool = False) -> VerifyResult:
    """:func:`judge` over one input set's outputs, as a :class:`VerifyResult` (the benchmark's
    check of each variant: the same test and noise floor as :func:`verify`)."""
    diffs, missing = judge(ref, got, input_set=input_set, rtol=rtol, atol=atol, noise=noise)
    if missing:
        return VerifyResult(False, tuple(diffs), rtol, error=missing, report_only=report_only, atol=atol,
                            optimized_failed=True)
    return VerifyResult(all(d.ok for d in diffs), tuple(diffs), rtol, report_only=report_only, atol=atol,
                        input_sets=(input_set,))


def reference_noise(ref: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Per output: the largest finite difference between two runs of the original."""
    out = {}
    for name, a in ref.items():
        b = other.get(name)
        if b is None or a.shape != b.shape or not np.issubdtype(a.dtype, np.inexact):
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both = np.isfinite(a64) & np.isfinite(b64)
        out[name] = float(np.abs(a64[both] - b64[both]).max()) if both.any() else 0.0
    return out


def verify(
    original: onnx.ModelProto,
    optimized: onnx.ModelProto,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    plan: InputPlan | None = None,
    spec: InputSpec | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    report_only: bool = False,
    isolated: bool = False,
) -> VerifyResult:
    """Run both models (ORT optimizations off) on the same input sets and judge every output.

    Inputs: ``feeds`` (one given set), else ``plan`` (see :func:`fusionviz.inputs.plan_inputs`),
    else a plan made from ``spec`` or ``shapes``. ``isolated=True`` (the CLI and the app use it)
    runs onnxruntime in a child process with a memory cap and time limit
    (``FUSIONVIZ_VERIFY_MEM_MB``, ``FUSIONVIZ_VERIFY_TIMEOUT_S``), so a model that allocates
    gigabytes or never finishes costs an error line, not the process.
    """
    def fail(msg: str) -> VerifyResult:
        return VerifyResult(False, (), rtol, error=msg, report_only=report_only, atol=atol)

    try:
        if feeds is not None:
            sets = [("given", dict(feeds))]
        else:
            if plan is None:
                spec = spec or InputSpec(shapes={k: tuple(v) for k, v in (shapes or {}).items()})
                plan = plan_inputs(original, spec)
            sets = plan.input_sets()
        runs = _run_sets(original, optimized, sets, isolated=isolated)
    except errors.FusionvizError as exc:
        return fail(str(exc))
    diffs: list[OutputDiff] = []
    done: list[str] = []
    skipped: list[tuple[str, str]] = []
    for (label, _), (status, x, y, noise) in zip(sets, runs, strict=True):
        if status == "a":  # the original itself fails on this set
            if label in ("normal", "given", "user"):
                return fail(f"the original model does not run on input set '{label}': {x}")
            skipped.append((label, x))
            continue
        if status == "b":
            return VerifyResult(False, tuple(diffs), rtol, report_only=report_only, atol=atol,
                                error=f"the optimized model fails on input set '{label}' where the original runs: {x}",
                                input_sets=tuple(done), skipped_sets=tuple(skipped), optimized_failed=True)
        got, missing = judge(x, y, input_set=label, rtol=rtol, atol=atol, noise=noise)
        diffs.extend(got)
        if missing:
            return VerifyResult(False, tuple(diffs), rtol, error=missing, report_only=report_only, atol=atol,
                                optimized_failed=True)
        done.append(label)
    ok = all(d.ok for d in diffs)
    return VerifyResult(ok, tuple(diffs), rtol, report_only=report_only, atol=atol, input_sets=tuple(done),
                        skipped_sets=tuple(skipped))


def _run_sets(a: onnx.ModelProto, b: onnx.ModelProto, sets, *, isolated: bool) -> list[tuple]:
    """Per set: ("ok", outs_a, outs_b, noise), ("a", why, None, None) or ("b", why, None, None).

    The models go to the child as bytes; with weights on disk those hold the graph only and the
    child reads the weights from their folder (``model_io`` rule 9); a model too big for one
    protobuf message goes as the path of a copy saved with its weights beside."""
    import tempfile
    from pathlib import Path

    from fusionviz.model_io import for_runtime

    with tempfile.TemporaryDirectory(prefix="fusionviz_verify_") as tmp:
        da, fa = for_runtime(a, Path(tmp) / "a")
        db, fb = for_runtime(b, Path(tmp) / "b")
        if isolated:
            return _child(("verify", da, db, sets, (fa, fb)))
        return run_sets_here(da, db, sets, (fa, fb))


def run_sets_here(a: bytes | str, b: bytes | str, sets,
                  folders: tuple[str | None, str | None] = (None, None)) -> list[tuple]:
    """:func:`_run_sets` in this process (the child calls it too).

    One session at a time (the original, then the optimized model on the sets the original
    runs, then the original at onnxruntime's level all for the reference noise), each released
    before the next is made: the peak is one model's, not three.
    """
    sa = make_session(a, weights_dir=folders[0])
    ra: list = []
    for _, feeds in sets:
        try:
            ra.append(run_model(sa, feeds))
        except errors.FusionvizError as exc:
            ra.append(_strip(str(exc)))
    del sa
    sb = make_session(b, weights_dir=folders[1])
    rb: list = []
    for (_, feeds), x in zip(sets, ra, strict=True):
        if isinstance(x, str):
            rb.append(None)
            continue
        try:
            rb.append(run_model(sb, feeds))
        except errors.FusionvizError as exc:
            rb.append(_strip(str(exc)))
    del sb
    noise: list[dict] = [{} for _ in sets]
    if any(isinstance(y, dict) for y in rb):
        try:  # the original under onnxruntime's own optimizer: the reference noise (rule 2)
            sn = make_session(a, level="all", weights_dir=folders[0])
        except errors.FusionvizError:
            sn = None
        if sn is not None:
            for k, ((_, feeds), x, y) in enumerate(zip(sets, ra, rb, strict=True)):
                if isinstance(y, dict):
                    try:
                        noise[k] = reference_noise(x, run_model(sn, feeds))
                    except errors.FusionvizError:
                        noise[k] = {}
    out = []
    for x, y, n in zip(ra, rb, noise, strict=True):
        if isinstance(x, str):
            out.append(("a", x, None, None))
        elif isinstance(y, str):
            out.append(("b", y, None, None))
        else:
            out.append(("ok", x, y, n))
    return out


def _strip(text: str) -> str:
    return text.replace("onnxruntime failed to run the model: ", "")


def probe_here(model: bytes | str, candidates: Sequence[Mapping[str, np.ndarray]],
               folder: str | None = None) -> tuple[int, str]:
    """(index of the first feeds the model runs on, or -1; the first error)."""
    session = make_session(model, weights_dir=folder)
    first = ""
    for i, feeds in enumerate(candidates):
        try:
            run_model(session, feeds)
            return i, first
        except errors.FusionvizError as exc:
            first = first or _strip(str(exc))
    return -1, first


def probe(model: onnx.ModelProto, plan: InputPlan, *, isolated: bool = True) -> InputPlan:
    """The plan with the chosen dims the original model runs on (see :mod:`fusionviz.inputs`).

    A plan with nothing chosen is returned as it is (verification reports any failure).

    Raises:
        fusionviz.errors.InputSpecError: no candidate runs; the line names the chosen inputs
            and the flags that set them.
        fusionviz.errors.RuntimeLoadError: onnxruntime cannot load the model at all.
    """
    if not plan.has_choices:
        return plan
    plans = [plan.with_candidate(k) for k in range(plan.candidates())]
    candidates = [p.feeds("normal") for p in plans]
    import tempfile
    from pathlib import Path

    from fusionviz.model_io import for_runtime

    with tempfile.TemporaryDirectory(prefix="fusionviz_probe_") as tmp:
        data, folder = for_runtime(model, Path(tmp))
        index, err = (_child(("probe", data, candidates, folder)) if isolated
                      else probe_here(data, candidates, folder))
    if index >= 0:
        return dataclasses.replace(plans[index], probed=True)
    if isolated and out_of_memory(err):
        raise errors.RuntimeLoadError(
            f"onnxruntime ran out of memory running the model to check its inputs: {mem_cap_note()}.")
    chosen = "; ".join(c.describe() for c in plan.choices if c.chosen or c.value_note or c.is_free_scalar)
    scalars = [c.name for c in plan.choices if c.is_free_scalar]
    hint = "set them with --shape NAME=d1,d2,..." if any(c.chosen for c in plan.choices) else ""
    if scalars:
        hint += (" and " if hint else "") + (
            f"the model needs a specific value for '{scalars[0]}': give it with --input {scalars[0]}=VALUE")
    raise errors.InputSpecError(
        f"The model does not run on the inputs fusionviz chose ({chosen}): {err[:200]}; {hint}.")


def _child(payload: tuple, what: str = "run the model for verification"):
    """Run ``payload`` in ``python -m fusionviz.verify_worker`` under the memory and time caps;
    ``what`` says what onnxruntime could not do when the child dies."""
    data = pickle.dumps((payload, VERIFY_MEM_MB))
    try:
        proc = subprocess.run([sys.executable, "-m", "fusionviz.verify_worker"], input=data,
                              capture_output=True, timeout=VERIFY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise errors.RuntimeLoadError(
            f"onnxruntime took more than {VERIFY_TIMEOUT_S:g} s to {what} (FUSIONVIZ_VERIFY_TIMEOUT_S)"
        ) from None
    if proc.returncode != 0 or not proc.stdout:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = tail[-1] if tail else f"exit status {proc.returncode}"
        if -proc.returncode in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
            reason = f"onnxruntime crashed ({signal.Signals(-proc.returncode).name})"
        elif proc.returncode < 0 or out_of_memory(reason):
            reason = f"it ran out of memory under {mem_cap_note()}"
        raise errors.RuntimeLoadError(f"onnxruntime could not {what}: {reason}")
    result = pickle.loads(proc.stdout)  # our own child's output
    if result[0] == "error":
        msg = result[1]
        if out_of_memory(msg) and "FUSIONVIZ_VERIFY_MEM_MB" not in msg:
            msg = f"{msg} (out of memory under {mem_cap_note()})"
        raise errors.RuntimeLoadError(msg)
    return result[1]
