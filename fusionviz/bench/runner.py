"""Run variants in isolated, interleaved workers and collect latency and memory.

Method (DESIGN.md "Benchmark", pyperf-like), one module a concern:

1. **One machine-wide queue** and **one worker process per variant**, killed at its memory cap
   or time limit (:mod:`fusionviz.bench.manager`); the in-worker loop is
   :mod:`fusionviz.bench.worker`.
2. **Warm-up, calibration and interleaved rounds** over several processes per variant
   (:mod:`fusionviz.bench.schedule`).
3. **Identical inputs**: :func:`fusionviz.inputs.make_inputs` on ``verify_against`` (or the first
   variant), saved once and loaded by every worker (cast to the dtype a variant's input declares).
4. **Memory**: :mod:`fusionviz.bench.memory`.
5. **Verification**: the reference model in its own worker, every variant judged by
   :func:`fusionviz.verify.judge_outputs` with the reference's noise floor
   (:mod:`fusionviz.bench.verification`).
6. **Records**: :class:`fusionviz.bench.records.BenchResult`, one per variant, in the order given.

This module only orders those steps (:func:`run_benchmark`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from fusionviz import errors, model_io
from fusionviz.bench import memory, schedule, verification
from fusionviz.bench.manager import WorkerFailed, machine_lock
from fusionviz.bench.records import BenchCancelled, BenchResult, ProgressFn, Settings, Variant
from fusionviz.bench.schedule import Job, Pool
from fusionviz.bench.stats import compute_stats

__all__ = ["BenchCancelled", "BenchResult", "Settings", "Variant", "run_benchmark"]

logger = logging.getLogger(__name__)


def _validate(variants: Sequence[Variant]) -> None:
    if not variants:
        raise errors.InputSpecError("Nothing to benchmark: give at least one variant.")
    labels = [v.label for v in variants]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise errors.InputSpecError(f"Variant labels must be unique; repeated: {', '.join(dupes)}.")
    try:
        import onnxruntime as ort

        available = ort.get_available_providers()
    except Exception:  # noqa: BLE001
        available = ["CPUExecutionProvider"]
    for v in variants:
        if not isinstance(v, Variant):
            raise errors.InputSpecError("run_benchmark takes Variant objects.")
        if v.settings.backend == "ort" and v.settings.provider not in available:
            raise errors.InputSpecError(
                f"Execution provider '{v.settings.provider}' is not available here; "
                f"available: {', '.join(available)}."
            )



def run_benchmark(
    variants: Sequence[Variant],
    *,
    shapes: dict[str, list[int]] | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    min_time_s: float = 1.0,
    warmup: int = 3,
    max_rounds: int = 500,
    timeout_s: float = 120,
    mem_limit_mb: int = 4096,
    profile: bool = False,
    verify_against: onnx.ModelProto | None = None,
    verify_rtol: float = 1e-4,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> list[BenchResult]:
    """Measure every variant in its own worker, interleaved in rounds (see the module docstring).

    Args:
        variants: what to measure; labels must be unique.
        shapes: concrete shapes for inputs with symbolic dims (as ``--shape``).
        feeds: the inputs to time with (an :class:`fusionviz.inputs.InputPlan`'s set, the same
            inputs verification used); by default made from ``shapes``.
        min_time_s: timed seconds each variant must accumulate (warm-up excluded).
        warmup: runs discarded before timing (at least 1).
        max_rounds: upper bound on interleaved rounds.
        timeout_s: wall-time budget of each worker's own work (session creation included).
        mem_limit_mb: memory cap of each worker (RLIMIT_AS and polled RSS).
        profile: also run onnxruntime's profiler and aggregate by op type and node.
        verify_against: reference model; each variant's outputs are compared with it.
        verify_rtol: relative tolerance for ``verify``.
        progress: called with (fraction 0..1, message).
        cancel: set it to stop; the run raises :class:`BenchCancelled`.

    Returns:
        One :class:`BenchResult` per variant, in the order given. A variant that failed has
        ``error`` set and no stats; the others are unaffected.

    Raises:
        fusionviz.errors.InputSpecError: bad variants, settings, shapes or inputs.
        BenchCancelled: ``cancel`` was set.
    """
    _validate(variants)
    if min_time_s <= 0 or timeout_s <= 0 or mem_limit_mb <= 0:
        raise errors.InputSpecError("min_time_s, timeout_s and mem_limit_mb must be positive.")
    last = [0.0]

    def say(fraction: float, message: str) -> None:
        # Monotonic and rounded: accumulated float steps must never make a bar go backwards.
        last[0] = max(last[0], min(1.0, round(fraction, 6)))
        if progress:
            progress(last[0], message)

    protos = [v.model_proto() for v in variants]
    ref_model = verify_against if verify_against is not None else protos[0]
    from fusionviz.inputs import make_inputs

    if feeds is None:
        feeds = make_inputs(ref_model, shapes)  # InputSpecError for the user, before any process starts
    feeds = dict(feeds)
    with machine_lock(progress, cancel):
        tmpdir = Path(tempfile.mkdtemp(prefix="fusionviz-bench-"))
        jobs: list[Job] = []
        try:
            return _run_locked(variants, protos, feeds, tmpdir, jobs, shapes=shapes, min_time_s=min_time_s,
                               warmup=max(1, int(warmup)), max_rounds=max(1, int(max_rounds)),
                               timeout_s=timeout_s, mem_limit_mb=mem_limit_mb, profile=profile,
                               verify_against=verify_against, verify_rtol=verify_rtol, say=say,
                               cancel=cancel)
        finally:
            for j in jobs:
                if j.worker is not None:
                    j.worker.close()
            shutil.rmtree(tmpdir, ignore_errors=True)



def _run_locked(variants, protos, feeds, tmpdir: Path, jobs: list[Job], *, shapes, min_time_s, warmup,
                max_rounds, timeout_s, mem_limit_mb, profile, verify_against, verify_rtol, say,
                cancel) -> list[BenchResult]:
    from fusionviz.backends.registry import TITLES, get_backend

    names = {f"i{k}": name for k, name in enumerate(feeds)}
    inputs_path = tmpdir / "inputs.npz"
    np.savez(inputs_path, **{f"i{k}": arr for k, arr in enumerate(feeds.values())})
    pool = Pool(tmpdir, inputs_path, names, timeout_s, mem_limit_mb, cancel)

    # A backend that cannot run here fails its variants with its reason; the others go on.
    unavailable: dict[str, str | None] = {}
    for v in variants:
        b = v.settings.backend
        if b not in unavailable:
            why = get_backend(b).quick_check()
            unavailable[b] = None if why is None else f"{TITLES.get(b, b)} is not available here: {why}"
    for i, (v, proto) in enumerate(zip(variants, protos, strict=False)):
        path = tmpdir / f"model{i}.onnx"
        model_io.write_for_child(v.model, path)  # weights on disk: with its data file beside
        jobs.append(Job(v, i, path, plan=memory.static_plan(proto, shapes), error=unavailable.get(v.settings.backend),
                        output_names=[o.name for o in proto.graph.output]))

    ref = None
    if verify_against is not None:
        say(0.01, "running the reference model for verification")
        ref = verification.reference(pool, verify_against)
    schedule.start_all(jobs, pool, warmup=warmup, min_time_s=min_time_s, say=say)
    schedule.interleave(jobs, pool, warmup=warmup, min_time_s=min_time_s, max_rounds=max_rounds, say=say,
                        cancel=cancel)

    # Verification, then the profiled session (arena figures; op/node times when asked).
    n = len(jobs)
    for k, job in enumerate(jobs):
        if not job.alive:
            continue
        say(0.85 + 0.14 * k / n, f"checking outputs and profiling '{job.variant.label}'")
        if ref is not None:
            job.verify = verification.check(job, pool, ref, verify_rtol)
            if not job.alive:
                continue
        # onnxruntime's arena figures come from its profiler, so it always runs once there;
        # other backends profile only when asked (a second compiled copy).
        if profile or job.variant.settings.backend == "ort":
            try:
                runs = max(3, min(20, job.loops)) if profile else 1
                job.profile = job.worker.request({"cmd": "profile", "n": runs,
                                                  "prefix": str(tmpdir / f"prof{job.index}")})
            except WorkerFailed as exc:
                logger.info("profiling '%s' failed: %s", job.variant.label, exc)
                job.profile = None
        job.worker.close()
    say(1.0, "done")
    return [_result(job, profile) for job in jobs]


def _result(job: Job, profile: bool) -> BenchResult:
    v = job.variant
    stats = None
    error = job.error
    if error is None:
        if job.samples:
            stats = compute_stats(job.samples)
        else:
            error = "no timed runs completed"
    prof = None
    if profile and job.profile:
        prof = {k: job.profile.get(k) for k in ("runs", "run_ms", "by_op_type", "by_node")}
    return BenchResult(
        label=v.label,
        passes=v.passes,
        settings=v.settings,
        stats=stats,
        memory=memory.memory_of(job),
        profile=prof,
        verify=job.verify,
        error=error,
        samples_ms=tuple(job.samples),
        round_medians_ms=tuple(job.round_medians),
        session_s=job.init.get("session_s"),
        backend_info=job.init.get("backend_info"),
        role=v.role,
    )
