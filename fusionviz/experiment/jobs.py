"""A benchmark or a tune search running in a background thread, for the app.

The app's pages lay out and call: :func:`start_bench` and :func:`start_tune` start the work in a
thread of this server and return a :class:`Job` that the page polls (fraction, message) and may
cancel; the bench engine itself starts one worker process per variant and queues runs
machine-wide. Nothing here imports Streamlit.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from fusionviz import errors
from fusionviz.experiment.plan import Plan, build_variants

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """Work running in a background thread (mutable: the thread fills it in)."""

    cancel: threading.Event
    kind: str = "bench"  # "bench" | "tune"
    thread: threading.Thread | None = None
    fraction: float = 0.0
    message: str = "starting"
    results: Any = None
    error: str | None = None
    context: dict = dataclasses.field(default_factory=dict)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def stop(self) -> None:
        """Ask the work to stop (a benchmark raises BenchCancelled at its next check)."""
        self.cancel.set()
        self.message = "cancelling..."


def run_bench(job: Job, plan: Plan, passes: list[str], result: Any, shapes: dict | None,
              feeds: dict | None = None) -> None:
    """The benchmark of ``plan`` over a pipeline ``result``, filling ``job`` (runs in the thread)."""
    from fusionviz.bench import BenchCancelled
    from fusionviz.experiment import run

    def progress(fraction: float, msg: str) -> None:
        job.fraction = max(0.0, min(1.0, float(fraction)))
        job.message = msg

    try:
        job.message = "building variants"
        variants, notes = build_variants(plan, passes, result, shapes)
        job.context["notes"] = notes
        if not variants:
            job.error = "Choose at least one variant (and select passes for the per-pass ones)."
            return
        measured = run.plan(variants)
        job.context["labels"] = [v.label for v in measured.requested]
        job.context["same_as"] = dict(measured.same_as)
        job.context["originals"] = measured.labels_of(result.original)
        if measured.same_as:
            notes["measured once"] = "; ".join(f"'{a}' is the same model and settings as '{b}'"
                                               for a, b in measured.same_as.items())
        job.results, _ = run.measure(measured, shapes=shapes or None, feeds=feeds, min_time_s=plan.min_time_s,
                                     profile=plan.profile, verify_against=result.original, progress=progress,
                                     cancel=job.cancel)
    except BenchCancelled:
        job.error = "Benchmark cancelled."
    except errors.FusionvizError as exc:
        job.error = str(exc)
    except Exception:  # noqa: BLE001 - the app must stay up
        logger.exception("benchmark failed")
        job.error = "The benchmark failed unexpectedly; the details are in the server log."


def run_tune(job: Job, proto: Any, shapes: dict | None, budget_s: float, min_time_s: float,
             feeds: dict | None = None, backends: tuple[str, ...] = ()) -> None:
    """:func:`fusionviz.tune.tune` on ``proto``, filling ``job`` (runs in the thread)."""
    from fusionviz import tune

    def progress(msg: str) -> None:
        job.message = msg
        job.fraction = min(0.99, (time.monotonic() - job.started) / max(budget_s, 1.0))

    try:
        job.results = tune.tune(proto, shapes=shapes or None, feeds=feeds, budget_s=budget_s, min_time_s=min_time_s,
                                backends=("ort", *backends), progress=progress)
    except errors.FusionvizError as exc:
        job.error = str(exc)
    except Exception:  # noqa: BLE001 - the app must stay up
        logger.exception("tune failed")
        job.error = "The search failed unexpectedly; the details are in the server log."


def _start(job: Job, target, args: tuple, name: str) -> Job:
    job.thread = threading.Thread(target=target, args=(job, *args), name=name, daemon=True)
    job.thread.start()
    return job


def start_bench(plan: Plan, passes: list[str], result: Any, shapes: dict | None, feeds: dict | None,
                context: dict) -> Job:
    """Start :func:`run_bench` in a background thread; ``context`` is kept with the results."""
    return _start(Job(cancel=threading.Event(), context=dict(context)), run_bench,
                  (plan, list(passes), result, shapes, feeds), "fusionviz-bench")


def start_tune(proto: Any, shapes: dict | None, budget_s: float, min_time_s: float, feeds: dict | None,
               backends: tuple[str, ...], context: dict) -> Job:
    """Start :func:`run_tune` in a background thread."""
    return _start(Job(cancel=threading.Event(), kind="tune", context=dict(context)), run_tune,
                  (proto, shapes, budget_s, min_time_s, feeds, backends), "fusionviz-tune")
