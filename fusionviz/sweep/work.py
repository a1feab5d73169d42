"""The work of one sweep cell, with no Ray in it: Ray tasks and the in-process engine call these.

Rules:

1. :func:`plan_model` loads a model and chooses its inputs once (:func:`fusionviz.inputs.plan_inputs`
   probed on the original); every check and timing of that model reuses the plan.
2. :func:`check_cell` audits one model × pass set (:func:`fusionviz.audit.audit`: optimize,
   write, re-check validity, verify on the normal/zeros/edge sets) and returns one row per
   backend. For a backend other than onnxruntime the optimized model is also compiled and run by
   that backend and compared with the *original on the same backend* (noise floor: how far that
   backend's original is from onnxruntime's); a pass set that is already invalid or an error
   in onnxruntime keeps that verdict.
3. :func:`time_cell` measures the variant against the original at onnxruntime level ``all``
   with :func:`fusionviz.experiment.run.measure` (isolated, interleaved workers; a pass set that
   leaves the model as it was is the original, measured once: ratio 1). The ratio
   is variant median / original median, and its interval is conservative: the variant's
   interval bounds over the original's opposite bounds.
4. Nothing here raises for a bad model or a failing pass: the failure is the row.
5. Loaded models stay cached in the process (a Ray worker checks many cells of one model).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from fusionviz import errors
from fusionviz.sweep.spec import ModelRef, PassSet, versions

logger = logging.getLogger(__name__)

#: Environment variable of the test-only crash hook: ``VARIANT@DIR`` makes the first attempt of
#: every check of that variant exit its process (a marker file in DIR records the attempt);
#: ``VARIANT@always`` exits on every attempt.
CRASH_ENV = "FUSIONVIZ_SWEEP_CRASH"
_CACHE_SIZE = 4
_models: collections.OrderedDict[str, Any] = collections.OrderedDict()


@dataclasses.dataclass(frozen=True)
class PlanResult:
    """The inputs chosen for one model, or why there are none.

    Attributes:
        model: the model's name.
        plan: the probed :class:`fusionviz.inputs.InputPlan`, or None.
        error: one sentence when the model cannot be loaded or run, else "".
        seconds: time taken.
    """

    model: str
    plan: Any
    error: str
    seconds: float


def load_model(ref: ModelRef, data: bytes | None = None):
    """The model of ``ref`` (from ``data`` when given, else its path), cached per process.

    Raises:
        fusionviz.errors.ModelLoadError: the file is not a loadable model.
    """
    from fusionviz import model_io

    key = ref.sha256 or ref.path
    if key in _models:
        _models.move_to_end(key)
        return _models[key]
    if data is not None:
        loaded = model_io.load_bytes(data, name=Path(ref.path).name or f"{ref.name}.onnx")
    else:
        loaded = model_io.load_path(ref.path)
    _models[key] = loaded
    while len(_models) > _CACHE_SIZE:
        _models.popitem(last=False)
    return loaded


def _sentence(exc: BaseException) -> str:
    if isinstance(exc, errors.FusionvizError):
        return str(exc)
    return errors.printable(" ".join(f"{type(exc).__name__}: {exc}".split()), 300)


def plan_model(ref: ModelRef, data: bytes | None = None) -> PlanResult:
    """Load ``ref`` and choose its inputs (rule 1); never raises (rule 4)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fusionviz.inputs import InputSpec, plan_inputs
    from fusionviz.verify import probe

    t0 = time.perf_counter()
    if ref.problem:
        return PlanResult(ref.name, None, ref.problem, 0.0)
    try:
        loaded = load_model(ref, data)
        plan = probe(loaded.proto, plan_inputs(loaded.proto, InputSpec()), isolated=False)
    except Exception as exc:  # noqa: BLE001 - a broken model is a row, not a crash
        if not isinstance(exc, errors.FusionvizError):
            logger.exception("planning inputs for %s crashed", ref.name)
        return PlanResult(ref.name, None, f"cannot load or run the model: {_sentence(exc)}",
                          time.perf_counter() - t0)
    return PlanResult(ref.name, plan, "", time.perf_counter() - t0)


def _maybe_crash(crash: str | None, variant: PassSet, ref: ModelRef) -> None:
    """The test-only hook of :data:`CRASH_ENV`: exit this process on the first attempt."""
    if not crash or "@" not in crash:
        return
    label, _, where = crash.rpartition("@")
    if label != variant.label:
        return
    if where == "always":
        os._exit(17)
    marker = Path(where) / f"crashed-{ref.sha256[:16] or ref.name}-{variant.label}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # a retry: carry on
    os.close(fd)
    os._exit(17)


def error_row(ref: ModelRef, variant: PassSet, backend: str, message: str, *,
              key: str = "") -> dict:
    """A check row for a cell that could not be checked at all."""
    return {
        "key": key, "model": ref.name, "model_path": ref.path, "model_sha256": ref.sha256,
        "variant": variant.label, "passes": list(variant.passes), "backend": backend,
        "versions": versions(backend), "status": "error", "valid": False, "verified": None,
        "new_nan": False, "nodes_before": None, "nodes_after": None, "optimize_s": None,
        "changes": 0, "declined": [], "max_abs_diff": None, "max_rel_diff": None,
        "error": errors.printable(" ".join(str(message).split()), 500), "detail": "",
    }


def _row(ref: ModelRef, variant: PassSet, backend: str, cell) -> dict:
    d = cell.as_dict()
    return {
        "key": "", "model": ref.name, "model_path": ref.path, "model_sha256": ref.sha256,
        "variant": variant.label, "passes": list(variant.passes), "backend": backend,
        "versions": versions(backend), "status": d["status"], "valid": d["valid"],
        "verified": d["verified"], "new_nan": d["new_nan"], "nodes_before": d["nodes_before"],
        "nodes_after": d["nodes_after"], "optimize_s": d["optimize_s"], "changes": d["changes"],
        "declined": d["declined"], "max_abs_diff": d["max_abs_diff"], "max_rel_diff": d["max_rel_diff"],
        "error": "" if d["status"] == "ok" else d["detail"], "detail": d["detail"],
    }


def check_cell(ref: ModelRef, data: bytes | None, plan: PlanResult | Any, variant: PassSet,
               backends: tuple[str, ...], crash: str | None = None) -> list[dict]:
    """Audit one model × pass set; one row per backend (rules 2 and 4).

    Args:
        ref: the model.
        data: its bytes (a cluster's workers may not see the path), or None to read the path.
        plan: the model's :class:`PlanResult` (or its plan).
        variant: the pass set.
        backends: backends to report, e.g. ``("ort", "openvino")``.
        crash: the test-only hook (:data:`CRASH_ENV`).

    Returns:
        One check row per backend, in the order of ``backends``.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _maybe_crash(crash, variant, ref)
    from fusionviz.audit import audit

    if isinstance(plan, PlanResult):
        if plan.plan is None:
            return [error_row(ref, variant, b, plan.error) for b in backends]
        plan = plan.plan
    try:
        loaded = load_model(ref, data)
        cell = audit(loaded.proto, ref.name, variant.label, list(variant.passes), plan)
    except Exception as exc:  # noqa: BLE001 - rule 4
        logger.exception("checking %s / %s crashed", ref.name, variant.label)
        return [error_row(ref, variant, b, f"the check crashed: {_sentence(exc)}") for b in backends]
    rows = []
    for b in backends:
        row = _row(ref, variant, b, cell)
        if b != "ort" and cell.status not in ("error", "invalid"):
            try:
                row.update(_backend_verdict(loaded.proto, plan, variant, b, cell))
            except Exception as exc:  # noqa: BLE001 - rule 4
                logger.exception("backend check %s on %s / %s crashed", b, ref.name, variant.label)
                row.update(status="error", verified=False, error=f"the {b} check crashed: {_sentence(exc)}")
        rows.append(row)
    return rows


def _optimized(model, passes: tuple[str, ...]):
    """The pass set's result as written to disk and read back (what a user would deploy)."""
    import onnx

    from fusionviz import model_io
    from fusionviz.passes.pipeline import run_pipeline

    if not passes:
        return model
    result = run_pipeline(model, list(passes), keep_snapshots=False)
    with tempfile.TemporaryDirectory(prefix="fusionviz-sweep-") as tmp:
        path = Path(tmp) / "out.onnx"
        model_io.save_model(result.final, str(path))
        return onnx.load(str(path))


def _backend_verdict(original, plan, variant: PassSet, backend: str, cell) -> dict:
    """Rule 2 for one non-onnxruntime backend: the fields of the row that change."""
    from fusionviz.backends.base import BackendSettings
    from fusionviz.backends.registry import TITLES, get_backend
    from fusionviz.passes import registry
    from fusionviz.verify import VerifyResult, judge, make_session, reference_noise, run_model

    title = TITLES.get(backend, backend)
    exact = all(p.exact for p in registry.resolve(variant.passes))
    optimized = _optimized(original, variant.passes)
    sets = plan.input_sets()
    settings = BackendSettings(input_shapes={k: list(v) for k, v in plan.shapes().items()})
    impl = get_backend(backend)

    def failed(message: str) -> dict:
        return {"status": "error", "verified": False, "error": message, "detail": message}

    from fusionviz.model_io import runtime_source

    with tempfile.TemporaryDirectory(prefix="fusionviz_sweep_") as tmp:  # weights on disk: files with their data
        try:
            comp_a = impl.compile(runtime_source(original, Path(tmp) / "a"), settings=settings)
        except Exception as exc:  # noqa: BLE001 - BackendError, or a runtime's own type
            return failed(f"{title} cannot run the original model: {_sentence(exc)}")
        try:
            comp_b = impl.compile(runtime_source(optimized, Path(tmp) / "b"), settings=settings)
        except Exception as exc:  # noqa: BLE001
            return failed(f"{title} cannot run the optimized model where it runs the original: {_sentence(exc)}")
    ort_ref = make_session(original)
    diffs = []
    done = []
    for label, feeds in sets:
        try:
            ra = comp_a.run(feeds)
        except Exception:  # noqa: BLE001 - the original fails on this set here: nothing to compare
            continue
        try:
            rb = comp_b.run(feeds)
        except Exception as exc:  # noqa: BLE001
            return failed(f"{title} fails on the optimized model on input set '{label}' "
                          f"where it runs the original: {_sentence(exc)}")
        try:
            noise = reference_noise(ra, run_model(ort_ref, feeds))
        except errors.FusionvizError:
            noise = {}
        got, missing = judge(ra, rb, input_set=label, noise=noise)
        if missing:
            return failed(f"{title}: {missing}")
        diffs.extend(got)
        done.append(label)
    v = VerifyResult(all(d.ok for d in diffs), tuple(diffs), 1e-4, report_only=not exact,
                     input_sets=tuple(done))
    fields: dict[str, Any] = {"max_abs_diff": v.max_abs_diff, "max_rel_diff": v.max_rel_diff,
                              "detail": f"{title}: {v.summary()}"}
    if not done:
        return failed(f"{title} cannot run the original model on any input set")
    if v.new_nonfinite:
        return {**fields, "status": "new_nan", "verified": False, "new_nan": True, "error": fields["detail"]}
    if exact and not v.ok:
        return {**fields, "status": "mismatch", "verified": False, "error": fields["detail"]}
    return {**fields, "status": cell.status, "verified": v.ok if exact else None,
            "error": "" if cell.status == "ok" else cell.detail}


# --------------------------------------------------------------------------- timing


def _bench_variants(original, optimized, variant: PassSet, backend: str) -> list:
    """The two benchmark variants (rule 3): the original at onnxruntime level ``all``, and the
    cell's pass set on its backend (made by :class:`fusionviz.experiment.build.Builder`)."""
    from fusionviz.experiment.build import Builder
    from fusionviz.experiment.variant import Settings

    base = Settings(level="all")
    b = Builder(original, base)
    b.original()
    b.selection(variant.label, variant.passes, dataclasses.replace(base, backend=backend), model=optimized)
    return b.variants()


def time_cell(ref: ModelRef, data: bytes | None, plan: PlanResult | Any, variant: PassSet, backend: str,
              *, min_time_s: float = 0.5) -> dict:
    """Time one cell against the original at onnxruntime level ``all`` (rules 3 and 4).

    Returns:
        A ``timings`` row without its key: ``latency_ratio``, ``latency_lo``, ``latency_hi``,
        ``peak_mb`` (the variant's peak RSS while running, above the worker's baseline),
        ``variant_ms``, ``original_ms``, ``error``, ``note``.
    """
    from fusionviz.experiment.run import measure

    row: dict[str, Any] = {"min_time_s": min_time_s, "latency_ratio": None, "latency_lo": None,
                           "latency_hi": None, "peak_mb": None, "variant_ms": None, "original_ms": None,
                           "error": "", "note": ""}
    if isinstance(plan, PlanResult):
        if plan.plan is None:
            return {**row, "error": f"not timed: {plan.error}"}
        plan = plan.plan
    try:
        loaded = load_model(ref, data)
        optimized = _optimized(loaded.proto, variant.passes)
        variants = _bench_variants(loaded.proto, optimized, variant, backend)
        results, _ = measure(variants, shapes=plan.shapes(), min_time_s=min_time_s, warmup=3)
    except Exception as exc:  # noqa: BLE001 - rule 4
        if not isinstance(exc, errors.FusionvizError):
            logger.exception("timing %s / %s crashed", ref.name, variant.label)
        return {**row, "error": f"not timed: {_sentence(exc)}"}
    orig, var = results[0], results[1]
    if orig.stats is None or var.stats is None:
        failed = orig if orig.stats is None else var
        return {**row, "error": f"not timed: the {failed.label} variant failed: {failed.error}"}
    o, v = orig.stats, var.stats
    row.update(latency_ratio=v.median_ms / o.median_ms, latency_lo=v.ci_low_ms / o.ci_high_ms,
               latency_hi=v.ci_high_ms / o.ci_low_ms, variant_ms=v.median_ms, original_ms=o.median_ms,
               peak_mb=var.memory.get("rss_run_mb"))
    return row
