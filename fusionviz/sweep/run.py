"""The sweep driver: schedule checks and timings, store each cell as it finishes, export at the end.

Rules:

1. Pending work only: a cell whose key is in the store is not run again (checks and timings
   separately), so a rerun resumes a killed sweep and an extended one adds only the new cells.
2. Engine ``ray`` (the default): one input-plan task per model, then one check task per model ×
   pass set (all backends of it) as soon as that model's plan is ready, at most ``workers``
   at a time locally (``ray.init(num_cpus=workers)``) or as many as the cluster's CPUs allow
   (``address``). Engine ``inline`` runs the same work one cell at a time in this process (the
   app's small sweeps: no Ray start-up).
3. Timing (``time=True``) starts once every check is done, so checks never disturb a
   measurement; only cells whose check is ``ok`` are timed, one at a time per node (the
   ``fusionviz_bench`` resource, :mod:`fusionviz.sweep.tasks`).
4. The driver writes each row to the store when ``ray.wait`` returns its task. A task whose
   worker died more than ``max_retries`` times, or that raised, becomes an error row for its
   cells; the sweep goes on.
5. Local Ray is started and stopped here (no dashboard, no worker logs on the console); an
   already connected Ray (e.g. a test's) is used as it is and left running.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from fusionviz import errors
from fusionviz.sweep import work
from fusionviz.sweep.spec import Cell, ModelRef, PassSet, SweepError, build_cells
from fusionviz.sweep.store import SweepStore, totals

logger = logging.getLogger(__name__)

ENGINES = ("ray", "inline")
_PKG_ROOT = str(Path(__file__).resolve().parents[2])


@dataclasses.dataclass
class Progress:
    """Where a sweep stands (given to the progress callback).

    Attributes:
        phase: ``start`` (Ray starting), ``check``, ``time`` or ``done``.
        done: cells finished in this phase (checks, or timings).
        total: cells to do in this phase.
        skipped: cells already in the store (not run again).
        elapsed_s: seconds since the phase started.
        counts: rows per status written so far in this run.
    """

    phase: str
    done: int
    total: int
    skipped: int
    elapsed_s: float
    counts: dict[str, int]

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far, or None before the first cell."""
        if self.done <= 0 or self.total <= self.done:
            return None if self.done <= 0 else 0.0
        return self.elapsed_s / self.done * (self.total - self.done)


ProgressFn = Callable[[Progress], None]


@dataclasses.dataclass(frozen=True)
class SweepSummary:
    """What one :func:`run_sweep` call did.

    Attributes:
        cells: cells of the sweep (models × variants × backends).
        executed: check rows written by this run (0 when everything was in the store).
        skipped: cells already in the store.
        timed: timing rows written by this run.
        rows: the export rows, in model-major order.
        totals: rows per status.
        seconds: wall time.
    """

    cells: int
    executed: int
    skipped: int
    timed: int
    rows: list[dict]
    totals: dict[str, int]
    seconds: float


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "--:--"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class ProgressBar:
    """A one-line text progress bar with an ETA, redrawn in place with ``\\r``.

    Args:
        stream: where to draw (default stderr).
        width: characters of the bar itself.
        min_interval_s: least time between redraws (the last state is always drawn).
    """

    def __init__(self, stream: TextIO | None = None, *, width: int = 24, min_interval_s: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._len = 0
        self._phase = ""

    def line(self, p: Progress) -> str:
        """The text of one state."""
        if p.phase == "start":
            return f"sweep: starting Ray ({p.total} cells to check, {p.skipped} already stored)"
        frac = p.done / p.total if p.total else 1.0
        fill = int(round(self.width * frac))
        bar = "#" * fill + "." * (self.width - fill)
        bad = {k: v for k, v in p.counts.items() if k != "ok" and v}
        tail = f"ok {p.counts.get('ok', 0)}" + "".join(f", {k} {v}" for k, v in sorted(bad.items()))
        what = {"check": "checks", "time": "timings"}.get(p.phase, p.phase)
        return (f"sweep {what} [{bar}] {p.done}/{p.total} {100 * frac:3.0f}%  "
                f"{_fmt_s(p.elapsed_s)} elapsed, ETA {_fmt_s(p.eta_s)}  ({tail})")

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.phase == "done" or p.done >= p.total
        if p.phase != self._phase and self._phase not in ("", "start") and self._len:
            self.stream.write("\n")
            self._len = 0
        self._phase = p.phase
        if p.phase == "done":
            if self._len:
                self.stream.write("\n")
                self.stream.flush()
            self._len = 0
            return
        if not final and now - self._last < self.min_interval_s:
            return
        self._last = now
        text = self.line(p)
        pad = max(0, self._len - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._len = len(text)


# --------------------------------------------------------------------------- Ray set-up


@contextlib.contextmanager
def ray_session(address: str | None, workers: int, *, timing: bool) -> Iterator[Any]:
    """Ray for the sweep (rule 5): yields the ``ray`` module.

    Args:
        address: None for a local Ray, else ``auto`` or ``ray://HOST:PORT``.
        workers: CPUs of the local Ray (checks running at once).
        timing: the sweep times cells: the cluster must offer the benchmark resource.

    Raises:
        SweepError: Ray is missing, cannot start or connect, or the cluster lacks the resource.
    """
    try:
        import ray
    except ImportError:
        raise SweepError("Ray is not installed: pip install -r requirements.txt "
                         "(or run a small sweep in-process with --engine inline).") from None
    from fusionviz.sweep.tasks import BENCH_RESOURCE

    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    env_vars = {"OMP_NUM_THREADS": "1"}
    if not address:  # local workers import this checkout even when fusionviz is not installed
        env_vars["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = {"env_vars": env_vars}
    common = dict(log_to_driver=False, logging_level=logging.ERROR, runtime_env=runtime_env)
    try:
        if address:
            ray.init(address=address, **common)
        else:
            ray.init(num_cpus=int(workers), resources={BENCH_RESOURCE: 1}, include_dashboard=False,
                     **common)
    except ImportError as exc:
        raise SweepError(f"Connecting to {errors.printable(address, 100)} needs Ray's client "
                         f"(pip install 'ray[client]'): {exc}.") from None
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError...
        where = f"connect to the Ray cluster at {errors.printable(address, 100)}" if address else "start a local Ray"
        raise SweepError(f"Cannot {where}: {' '.join(str(exc).split())[:300].rstrip('.')}.") from None
    try:
        if timing and address and not ray.cluster_resources().get(BENCH_RESOURCE):
            raise SweepError(
                f"The Ray cluster offers no '{BENCH_RESOURCE}' resource, so timings would never start; "
                f"start each node with: ray start --resources '{{\"{BENCH_RESOURCE}\": 1}}'.")
        yield ray
    finally:
        ray.shutdown()


# --------------------------------------------------------------------------- the driver


class _Driver:
    """State shared by both engines: the store, the counts and the progress callback."""

    def __init__(self, cells: Sequence[Cell], store: SweepStore, progress: ProgressFn | None) -> None:
        self.cells = list(cells)
        self.store = store
        self.progress = progress
        self.counts: dict[str, int] = collections.Counter()
        self.executed = 0
        self.timed = 0
        self.phase = "check"
        self.done = 0
        self.total = 0
        self.skipped = 0
        self.t0 = time.monotonic()
        by_unit: dict[tuple[str, str], list[Cell]] = collections.OrderedDict()
        for c in self.cells:
            by_unit.setdefault((c.model.name, c.variant.label), []).append(c)
        self.units = by_unit

    def start_phase(self, phase: str, total: int, skipped: int) -> None:
        self.phase, self.total, self.skipped, self.done = phase, total, skipped, 0
        self.t0 = time.monotonic()
        self.tick()

    def tick(self) -> None:
        if self.progress:
            self.progress(Progress(self.phase, self.done, self.total, self.skipped,
                                   time.monotonic() - self.t0, dict(self.counts)))

    def write_checks(self, cells: Sequence[Cell], rows: Sequence[dict]) -> None:
        by_backend = {r["backend"]: r for r in rows}
        for c in cells:
            row = by_backend.get(c.backend) or work.error_row(
                c.model, c.variant, c.backend, "the check returned no row for this backend")
            self.store.put_cell({**row, "key": c.key})
            self.counts[row["status"]] += 1
            self.executed += 1
            self.done += 1
        self.tick()

    def write_timing(self, cell: Cell, row: dict) -> None:
        self.store.put_timing({**row, "key": cell.key})
        self.timed += 1
        self.done += 1
        self.tick()


def _pending_units(driver: _Driver) -> tuple[list[list[Cell]], int]:
    """(model × variant units with cells not in the store, number of cells skipped)."""
    done = driver.store.done_keys(c.key for c in driver.cells)
    units = []
    seen: set[str] = set()
    skipped = 0
    for cells in driver.units.values():
        todo = [c for c in cells if c.key not in done and c.key not in seen]
        skipped += len(cells) - len(todo)
        seen.update(c.key for c in todo)
        if todo:
            units.append(todo)
    return units, skipped


def _to_time(driver: _Driver) -> list[Cell]:
    """Cells whose check is ``ok`` and that have no timing yet (rule 3), one per key."""
    timed = driver.store.timed_keys(c.key for c in driver.cells)
    out, seen = [], set()
    for c in driver.cells:
        if c.key in timed or c.key in seen:
            continue
        stored = driver.store.cell(c.key)
        if stored and stored["status"] == "ok":
            seen.add(c.key)
            out.append(c)
    return out


def _run_inline(driver: _Driver, units: list[list[Cell]], *, timing: bool, min_time_s: float) -> None:
    plans: dict[str, work.PlanResult] = {}

    def plan_of(ref: ModelRef) -> work.PlanResult:
        if ref.name not in plans:
            plans[ref.name] = work.plan_model(ref)
        return plans[ref.name]

    for cells in units:
        first = cells[0]
        rows = work.check_cell(first.model, None, plan_of(first.model), first.variant,
                               tuple(c.backend for c in cells))
        driver.write_checks(cells, rows)
    if timing:
        todo = _to_time(driver)
        driver.start_phase("time", len(todo), 0)
        for c in todo:
            driver.write_timing(c, work.time_cell(c.model, None, plan_of(c.model), c.variant, c.backend,
                                                  min_time_s=min_time_s))


def _died(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    if "WorkerCrashed" in name or "died" in text.lower() or "exited" in text.lower():
        return "the worker process died on every attempt (killed, crashed or out of memory)"
    return f"the task failed: {name}: {text[:300]}"


def _model_bytes(ref: ModelRef) -> bytes:
    """The model for a remote worker: external data inlined, or the raw file when it does not load
    (the worker then reports the same load error)."""
    from fusionviz import model_io

    try:
        return model_io.load_path(ref.path).proto.SerializeToString()
    except (errors.FusionvizError, ValueError):
        return Path(ref.path).read_bytes()


def _run_ray(driver: _Driver, units: list[list[Cell]], *, address: str | None, workers: int,
             timing: bool, min_time_s: float, max_retries: int) -> None:
    total, skipped = driver.total, driver.skipped
    driver.start_phase("start", total, skipped)
    with ray_session(address, workers, timing=timing) as ray:
        from fusionviz.sweep import tasks

        driver.start_phase("check", total, skipped)

        opts = {"max_retries": max_retries}
        crash = os.environ.get(work.CRASH_ENV) or None
        need_models: dict[str, ModelRef] = collections.OrderedDict()
        for cells in units:
            need_models.setdefault(cells[0].model.name, cells[0].model)
        timing_cells = _to_time(driver) if timing else []
        for c in timing_cells:
            need_models.setdefault(c.model.name, c.model)
        data_refs: dict[str, Any] = {}
        if address:  # a cluster's workers may not see our files: ship the bytes
            for name, ref in need_models.items():
                data_refs[name] = ray.put(_model_bytes(ref)) if ref.path else None
        capacity = max(1, int(ray.cluster_resources().get("CPU", workers)))
        window = 2 * capacity + 2
        plan_refs: dict[str, Any] = {}
        inflight: dict[Any, tuple[str, Any]] = {}
        for name, ref in need_models.items():
            r = tasks.plan_task.options(**opts).remote(ref, data_refs.get(name))
            plan_refs[name] = r
            inflight[r] = ("plan", name)
        ready_units: collections.deque[list[Cell]] = collections.deque()
        by_model: dict[str, list[list[Cell]]] = collections.defaultdict(list)
        for cells in units:
            by_model[cells[0].model.name].append(cells)
        plan_errors: dict[str, str] = {}
        checks_inflight = 0

        def submit_checks() -> None:
            nonlocal checks_inflight
            while ready_units and checks_inflight < window:
                cells = ready_units.popleft()
                first = cells[0]
                r = tasks.check_task.options(**opts).remote(
                    first.model, data_refs.get(first.model.name), plan_refs[first.model.name],
                    first.variant, tuple(c.backend for c in cells), crash)
                inflight[r] = ("check", cells)
                checks_inflight += 1

        for r, (kind, what) in _as_finished(ray, inflight, driver, then=submit_checks):
            if kind == "plan":
                try:
                    plan = ray.get(r)
                    error = plan.error
                except Exception as exc:  # noqa: BLE001 - rule 4
                    error = f"cannot plan the model's inputs: {_died(exc)}"
                if error:
                    plan_errors[what] = error
                    for cells in by_model.pop(what, []):
                        first = cells[0]
                        driver.write_checks(cells, [work.error_row(first.model, first.variant, c.backend, error)
                                                    for c in cells])
                else:
                    ready_units.extend(by_model.pop(what, []))
            else:
                checks_inflight -= 1
                cells = what
                first = cells[0]
                try:
                    rows = ray.get(r)
                except Exception as exc:  # noqa: BLE001 - rule 4
                    logger.warning("check of %s / %s failed: %s", first.model.name, first.variant.label, exc)
                    rows = [work.error_row(first.model, first.variant, c.backend, _died(exc)) for c in cells]
                driver.write_checks(cells, rows)
        if not timing:
            return
        todo = _to_time(driver)
        driver.start_phase("time", len(todo), 0)
        for c in todo:
            if c.model.name not in plan_refs:  # checked by an earlier run: plan it now
                plan_refs[c.model.name] = tasks.plan_task.options(**opts).remote(c.model, data_refs.get(c.model.name))
            r = tasks.time_task.options(**opts).remote(c.model, data_refs.get(c.model.name),
                                                       plan_refs[c.model.name], c.variant, c.backend, min_time_s)
            inflight[r] = ("time", c)
        for r, (_, c) in _as_finished(ray, inflight, driver):
            try:
                row = ray.get(r)
            except Exception as exc:  # noqa: BLE001 - rule 4
                row = {"error": f"not timed: {_died(exc)}", "min_time_s": min_time_s}
            driver.write_timing(c, row)


def _as_finished(ray, inflight: dict, driver, then: Callable[[], None] | None = None):
    """Yield ``(ref, what)`` for each task of ``inflight`` as it finishes (popped from it),
    ticking the driver's progress while none does; ``then()`` after each batch (it may add
    tasks)."""
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
        if not ready:
            driver.tick()
            continue
        for r in ready:
            yield r, inflight.pop(r)
        if then is not None:
            then()


def run_sweep(models: Sequence[ModelRef], variants: Sequence[PassSet], *, store: SweepStore,
              backends: Sequence[str] = ("ort",), engine: str = "ray", address: str | None = None,
              workers: int = 2, time_cells: bool = False, min_time_s: float = 0.5, max_retries: int = 2,
              progress: ProgressFn | None = None) -> SweepSummary:
    """Check (and with ``time_cells`` time) every model × variant × backend not yet in ``store``.

    Args:
        models: the models (:func:`fusionviz.sweep.spec.resolve_models`).
        variants: the pass sets (:func:`fusionviz.sweep.spec.parse_passes`).
        store: where each finished cell is written (rule 4).
        backends: backend names (:func:`fusionviz.sweep.spec.parse_backends`).
        engine: ``ray`` or ``inline`` (rule 2).
        address: a Ray cluster (``auto`` or ``ray://HOST:PORT``); None starts a local Ray.
        workers: checks running at once on the local Ray.
        time_cells: also time every cell whose check is ``ok`` (rule 3).
        min_time_s: timed seconds per benchmark variant.
        max_retries: retries of a task whose worker died.
        progress: called as cells finish (e.g. a :class:`ProgressBar`).

    Returns:
        A :class:`SweepSummary` whose ``rows`` cover every cell of this sweep.

    Raises:
        SweepError: a bad engine or worker count, or Ray cannot start.
    """
    if engine not in ENGINES:
        raise SweepError(f"Unknown sweep engine '{errors.printable(engine, 40)}'; use {' or '.join(ENGINES)}.")
    if int(workers) < 1:
        raise SweepError("--workers must be at least 1.")
    if min_time_s <= 0:
        raise SweepError("--min-time must be positive.")
    t0 = time.monotonic()
    cells = build_cells(models, variants, tuple(backends))
    driver = _Driver(cells, store, progress)
    units, skipped = _pending_units(driver)
    driver.total, driver.skipped = sum(len(u) for u in units), skipped
    need_ray = bool(units) or (time_cells and bool(_to_time(driver)))
    if engine == "ray" and need_ray:
        _run_ray(driver, units, address=address, workers=int(workers), timing=time_cells,
                 min_time_s=min_time_s, max_retries=max(0, int(max_retries)))
    elif need_ray:
        driver.start_phase("check", driver.total, skipped)
        _run_inline(driver, units, timing=time_cells, min_time_s=min_time_s)
    driver.phase = "done"
    driver.tick()
    rows = store.rows(cells)
    return SweepSummary(cells=len(cells), executed=driver.executed, skipped=skipped, timed=driver.timed,
                        rows=rows, totals=totals(rows), seconds=time.monotonic() - t0)
