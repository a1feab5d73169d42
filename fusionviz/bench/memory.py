"""A variant's memory figures: the worker's RSS, onnxruntime's arena (from its profiler) and the
static plan (:func:`fusionviz.analysis.memory_plan`).

Worker-measured peak RSS during session creation and during runs, each minus the worker's
baseline (interpreter + numpy + onnxruntime + inputs); onnxruntime's arena figures from a short
profiled session (the Python API has no allocator-statistics call; the profiler records
``mem_arena_held`` and ``mem_in_use_peak`` per node).
"""

from __future__ import annotations

import logging

import onnx

from fusionviz.bench.schedule import Job

logger = logging.getLogger(__name__)


def static_plan(model: onnx.ModelProto, shapes) -> dict:
    """The static plan's ``static_*`` figures (bytes); {} when it cannot be made."""
    try:
        from fusionviz.analysis import memory_plan

        plan = memory_plan(model, shapes)
        return {
            "static_sum_intermediate_bytes": plan.sum_intermediate_bytes,
            "static_peak_no_reuse_bytes": plan.peak_bytes_no_reuse,
            "static_peak_reuse_bytes": plan.peak_bytes_reuse,
            "static_weight_bytes": plan.weight_bytes,
            "static_unknown_tensors": plan.unknown_tensors,
        }
    except Exception as exc:  # noqa: BLE001 - the plan is a view; never fail a benchmark for it
        logger.info("static plan failed: %s", exc)
        return {}


def memory_of(job: Job) -> dict:
    """The :attr:`fusionviz.bench.BenchResult.memory` figures of ``job``."""
    init = job.init
    base = init.get("baseline_rss_mb")
    mem: dict = {"baseline_rss_mb": base, "rss_session_mb": None, "rss_run_mb": None,
                 "rss_run_delta_mb": None, "arena_held_mb": None, "arena_in_use_peak_mb": None}
    if base is not None:
        mem["rss_session_mb"] = max(0.0, init["session_peak_rss_mb"] - base)
        if job.peak_run_mb is not None:
            if init.get("peak_resettable"):
                mem["rss_run_mb"] = max(0.0, job.peak_run_mb - base)
                mem["rss_run_delta_mb"] = max(0.0, job.peak_run_mb - init["after_session_rss_mb"])
            else:  # ru_maxrss cannot be reset: the run figure includes session creation
                mem["rss_run_mb"] = max(0.0, job.peak_run_mb - base)
    arena = (job.profile or {}).get("arena") if job.profile else None
    if arena:
        if arena.get("arena_held_bytes") is not None:
            mem["arena_held_mb"] = arena["arena_held_bytes"] / 1024 / 1024
        if arena.get("in_use_peak_bytes") is not None:
            mem["arena_in_use_peak_mb"] = arena["in_use_peak_bytes"] / 1024 / 1024
    mem.update(job.plan or {})
    return mem

