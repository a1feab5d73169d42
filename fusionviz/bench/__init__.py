"""Benchmark engine: isolated, interleaved onnxruntime latency and memory per variant.

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
    from fusionviz.bench.runner import BenchCancelled, BenchResult, Settings, Variant, run_benchmark
    from fusionviz.bench.stats import LatencyStats, compute_stats


def __getattr__(name: str) -> Any:
    if name in ("LatencyStats", "compute_stats"):
        from fusionviz.bench import stats

        return getattr(stats, name)
    if name in __all__:
        from fusionviz.bench import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'fusionviz.bench' has no attribute {name!r}")
