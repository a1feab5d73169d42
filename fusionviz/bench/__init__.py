"""Benchmark engine: isolated, interleaved onnxruntime latency and memory per variant.

The modules, pyperf-like: :mod:`~fusionviz.bench.records` (what was measured),
:mod:`~fusionviz.bench.manager` (the machine-wide lock, worker handles),
:mod:`~fusionviz.bench.worker` (the in-worker loop), :mod:`~fusionviz.bench.schedule` (warm-up,
calibration, interleaved rounds), :mod:`~fusionviz.bench.verification`,
:mod:`~fusionviz.bench.memory`, and :mod:`~fusionviz.bench.runner`, which orders them. What to
measure (variants, their roles and labels) is :mod:`fusionviz.experiment`'s.

Names are imported lazily so that the worker process (``python -m fusionviz.bench.worker``) does
not pay for onnx and the runner when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "BenchCancelled",
    "BenchResult",
    "LatencyStats",
    "Settings",
    "Variant",
    "compute_stats",
    "run_benchmark",
]

if TYPE_CHECKING:  # pragma: no cover
    from fusionviz.bench.records import BenchCancelled, BenchResult, Settings, Variant
    from fusionviz.bench.runner import run_benchmark
    from fusionviz.bench.stats import LatencyStats, compute_stats


def __getattr__(name: str) -> Any:
    if name in ("LatencyStats", "compute_stats"):
        from fusionviz.bench import stats

        return getattr(stats, name)
    if name == "run_benchmark":
        from fusionviz.bench import runner

        return runner.run_benchmark
    if name in __all__:
        from fusionviz.bench import records

        return getattr(records, name)
    raise AttributeError(f"module 'fusionviz.bench' has no attribute {name!r}")
