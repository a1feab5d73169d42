"""Zoo sweeps: every model × pass set × backend checked (and optionally timed), on Ray.

::

    from fusionviz.sweep import SweepStore, parse_passes, resolve_models, run_sweep

    with SweepStore("artifacts/sweep/zoo.sqlite") as store:
        summary = run_sweep(resolve_models(["wild"]), parse_passes("each"), store=store, workers=2)

:mod:`fusionviz.sweep.spec` says what a sweep covers and how a cell is keyed,
:mod:`fusionviz.sweep.work` does one cell's work, :mod:`fusionviz.sweep.tasks` wraps it in Ray
tasks, :mod:`fusionviz.sweep.run` schedules them and :mod:`fusionviz.sweep.store` keeps the
results (SQLite) and writes CSV/JSON. Ray is imported only when a sweep runs on it.
"""

from __future__ import annotations

from fusionviz.sweep.run import ENGINES, Progress, ProgressBar, SweepSummary, run_sweep
from fusionviz.sweep.spec import (
    WILD,
    Cell,
    ModelRef,
    PassSet,
    SweepError,
    build_cells,
    cell_key,
    parse_backends,
    parse_passes,
    resolve_models,
)
from fusionviz.sweep.store import COLUMNS, SweepStore, read_results, totals, write_results

__all__ = [
    "COLUMNS", "ENGINES", "WILD", "Cell", "ModelRef", "PassSet", "Progress", "ProgressBar",
    "SweepError", "SweepStore", "SweepSummary", "build_cells", "cell_key", "parse_backends",
    "parse_passes", "read_results", "resolve_models", "run_sweep", "totals", "write_results",
]
