"""Scheduling (pyperf's ``_runner`` loop): start, warm up and calibrate each variant's worker,
then interleave the timed rounds.

1. **Workers stay alive across rounds.** The session is created once per variant, warmed up
   (``warmup`` runs, discarded), and the loop count per round is calibrated from the warm-up so a
   variant's turn lasts about :data:`ROUND_S` (at least one run, and at most
   ``min_time_s / MIN_ROUNDS``), and calibrated again after every turn from its median (a
   warm-up slowed by a burst of load would otherwise leave every later turn too short). Short
   turns matter on a shared machine: a burst of load from another process lasting a second then
   hits every variant, not one. Spawning a worker per round was rejected: it re-creates the
   session each round, so a round would measure cold caches and a fresh arena instead of
   steady-state inference, and session creation would dominate for small models.
2. **Rounds** go A B C, B C A, C A B... (the start rotates so no variant always follows the same
   neighbour or the pause between rounds) until every variant has ``min_time_s`` of timed runs
   and :data:`MIN_ROUNDS` rounds, or ``max_rounds``. Idle workers sleep on a pipe read, so only
   one variant runs at a time and each round sees the same machine state.
3. **Several processes per variant** (:data:`PROCESSES`, pyperf's lesson): one process can sit
   3-5% off another for its whole life (memory placement, page alignment), so each variant's
   timed runs are split across fresh processes, spawned in turn as its measured time passes
   k/PROCESSES.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fusionviz.bench.manager import WorkerFailed, WorkerHandle
from fusionviz.bench.records import BenchCancelled, Settings, Variant

logger = logging.getLogger(__name__)

MIN_ROUNDS = 5
#: Worker processes per variant (rule 3).
PROCESSES = 3
ROUND_S = 0.1  # target length of one variant's turn in a round

Say = Callable[[float, str], None]


@dataclasses.dataclass
class Job:
    """One variant's state during a run (mutable: the scheduler fills it in)."""

    variant: Variant
    index: int
    model_path: Path
    worker: WorkerHandle | None = None
    error: str | None = None
    init: dict = dataclasses.field(default_factory=dict)
    loops: int = 1
    round_ms: float = 0.0  # target length of this variant's turn
    samples: list[float] = dataclasses.field(default_factory=list)
    round_medians: list[float] = dataclasses.field(default_factory=list)
    peak_run_mb: float | None = None
    profile: dict | None = None
    verify: dict | None = None
    plan: dict | None = None
    processes: int = 1  # worker processes used so far (see PROCESSES)
    output_names: list[str] = dataclasses.field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.error is None and self.worker is not None

    def measured_s(self) -> float:
        return sum(self.samples) / 1000.0

    def fail(self, exc: WorkerFailed) -> None:
        """The variant failed: its error is ``exc``'s sentence; its worker is closed."""
        self.error = str(exc)
        logger.info("variant %s failed: %s", self.variant.label, self.error)
        if self.worker is not None:
            self.worker.close()


@dataclasses.dataclass
class Pool:
    """Where a run's workers start: the temporary folder, the saved inputs, the limits."""

    tmpdir: Path
    inputs_path: Path
    input_names: dict
    timeout_s: float
    mem_limit_mb: int
    cancel: threading.Event | None

    def worker(self, label: str, backend: str = "ort") -> WorkerHandle:
        from fusionviz.backends.registry import TITLES

        return WorkerHandle(label, self.tmpdir, timeout_s=self.timeout_s, mem_limit_mb=self.mem_limit_mb,
                            cancel=self.cancel, title=TITLES.get(backend, backend))

    def init_msg(self, model_path: Path, settings: Settings, output_names: list[str] | None = None) -> dict:
        return {"cmd": "init", "model": str(model_path), "inputs": str(self.inputs_path),
                "input_names": self.input_names, "settings": settings.as_dict(), "backend": settings.backend,
                "output_names": output_names}

    def start(self, job: Job, warmup: int) -> tuple[dict, dict]:
        """A fresh worker for ``job``: session created, ``warmup`` runs done.

        Returns:
            (the init reply, the warm-up reply).
        """
        job.worker = self.worker(job.variant.label, job.variant.settings.backend)
        init = job.worker.request(self.init_msg(job.model_path, job.variant.settings, list(job.output_names)))
        return init, job.worker.request({"cmd": "run", "n": warmup})


def loops_for(round_ms: float, run_ms: float) -> int:
    """Runs per turn so that a turn lasts about ``round_ms`` (at least one)."""
    return max(1, int(math.ceil(round_ms / max(run_ms, 1e-3))))


def start_all(jobs: list[Job], pool: Pool, *, warmup: int, min_time_s: float, say: Say) -> None:
    """Rule 1: start each worker, create its session, warm up and calibrate (one at a time)."""
    n = len(jobs)
    for k, job in enumerate(jobs):
        if job.error is not None:
            continue
        say(0.02 + 0.18 * k / n, f"starting '{job.variant.label}' ({job.variant.settings.describe()})")
        try:
            job.init, reply = pool.start(job, warmup)
            times = reply["times_ms"]
            est = float(np.median(times[1:] if len(times) > 1 else times))
            job.round_ms = 1000.0 * min(ROUND_S, min_time_s / MIN_ROUNDS)
            job.loops = loops_for(job.round_ms, est)
            job.peak_run_mb = reply["peak_rss_mb"]
        except WorkerFailed as exc:
            job.fail(exc)


def interleave(jobs: list[Job], pool: Pool, *, warmup: int, min_time_s: float, max_rounds: int, say: Say,
               cancel: threading.Event | None) -> None:
    """Rules 2 and 3: the timed rounds."""
    min_rounds = min(MIN_ROUNDS, max_rounds)
    for r in range(max_rounds):
        alive = [j for j in jobs if j.alive]
        if not alive:
            break
        if r >= min_rounds and all(j.measured_s() >= min_time_s for j in alive):
            break
        order = alive[r % len(alive):] + alive[: r % len(alive)]
        for job in order:
            if cancel is not None and cancel.is_set():
                raise BenchCancelled("The benchmark was cancelled.")
            done = min(1.0, min(j.measured_s() for j in alive) / min_time_s)
            say(0.2 + 0.65 * max(done, r / max_rounds), f"round {r + 1}: '{job.variant.label}'")
            try:
                reply = job.worker.request({"cmd": "run", "n": job.loops})
            except WorkerFailed as exc:
                job.fail(exc)
                continue
            times = reply["times_ms"]
            job.samples.extend(times)
            job.round_medians.append(float(np.median(times)))
            # re-calibrated every round: a warm-up slowed by a burst of load would otherwise
            # leave turns far shorter than planned for the whole run (at most 4x per round)
            job.loops = min(4 * job.loops, loops_for(job.round_ms, job.round_medians[-1]))
            job.peak_run_mb = max(job.peak_run_mb or 0.0, reply["peak_rss_mb"])
            if job.processes < PROCESSES and job.measured_s() >= job.processes * min_time_s / PROCESSES:
                try:  # hand the rest of this variant's runs to a fresh process
                    job.worker.close()
                    pool.start(job, warmup)  # the first process's init figures are kept
                    job.processes += 1
                except WorkerFailed as exc:
                    job.fail(exc)
