"""Run variants in isolated, interleaved workers and collect latency and memory.

Method (DESIGN.md "Benchmark", pyperf-like):

1. **One machine-wide queue.** A benchmark holds an exclusive ``fcntl.flock`` on
   ``<tempdir>/fusionviz-bench.lock`` for its whole run; another benchmark (another app session,
   another user, the CLI) waits and says so through ``progress``.
2. **One fresh worker process per variant** (:mod:`fusionviz.bench.worker`), started in its own
   process group with ``RLIMIT_AS`` set to the memory cap; the parent also polls the worker's RSS
   (psutil) and kills the group when it passes the cap or when the worker's own busy time passes
   ``timeout_s``. A crash, hang or allocation failure becomes that variant's ``error``; the other
   variants go on.
3. **Workers stay alive across rounds.** The session is created once per variant, warmed up
   (``warmup`` runs, discarded), and the loop count per round is calibrated from the warm-up so a
   variant's turn lasts about ``ROUND_S`` (0.1 s; at least one run, and at most
   ``min_time_s / MIN_ROUNDS``), and calibrated again after every turn from its median (a
   warm-up slowed by a burst of load would otherwise leave every later turn too short). Short turns matter on a shared machine: a burst of load from
   another process lasting a second then hits every variant, not one. Rounds then go A B C, B C A, C A B... (the
   start rotates so no variant always follows the same neighbour or the pause between rounds)
   until every variant has ``min_time_s`` of timed runs and ``MIN_ROUNDS`` rounds, or
   ``max_rounds``. Spawning a worker per round was rejected: it re-creates the session each
   round, so a round would measure cold caches and a fresh arena instead of steady-state
   inference, and session creation would dominate for small models. Idle workers sleep on a
   pipe read, so only one variant runs at a time and each round sees the same machine state.
4. **Identical inputs**: :func:`fusionviz.inputs.make_inputs` on ``verify_against`` (or the first
   variant), saved once and loaded by every worker (cast to the dtype a variant's input declares).
5. **Memory**: worker-measured peak RSS during session creation and during runs, each minus the
   worker's baseline (interpreter + numpy + onnxruntime + inputs); onnxruntime's arena figures
   from a short profiled session (the Python API has no allocator-statistics call; the profiler
   records ``mem_arena_held`` and ``mem_in_use_peak`` per node); the static plan from
   :func:`fusionviz.analysis.memory_plan`.
6. **Verification**: the reference model runs in its own worker (ORT off, one thread; then at
   level all, for the noise floor); every variant's outputs (under its own settings) are judged
   by :func:`fusionviz.verify.judge` with that floor, the test ``optimize`` uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.bench.stats import LatencyStats, compute_stats
from fusionviz.ortlevels import LEVELS

logger = logging.getLogger(__name__)

MIN_ROUNDS = 5
#: Worker processes per variant (pyperf's lesson): one process can sit 3-5% off another for
#: its whole life (memory placement, page alignment), so each variant's timed runs are split
#: across this many fresh processes, spawned in turn as its measured time passes k/PROCESSES.
PROCESSES = 3
ROUND_S = 0.1  # target length of one variant's turn in a round
LOCK_NAME = "fusionviz-bench.lock"
_POLL_S = 0.02
_PKG_ROOT = str(Path(__file__).resolve().parents[2])

ProgressFn = Callable[[float, str], None]


class BenchCancelled(errors.BenchError):
    """The user cancelled the benchmark."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Runtime settings for one variant.

    Attributes:
        level: onnxruntime graph optimization level, one of ``fusionviz.ortlevels.LEVELS``
            (the ``ort`` backend; the others run their own full pipeline).
        threads: intra-op threads.
        provider: onnxruntime execution provider (one of ``onnxruntime.get_available_providers()``).
        disabled_optimizers: onnxruntime optimizer names to switch off (unknown names are
            ignored by onnxruntime).
        denormal_as_zero: flush denormals to zero, in each backend's own way
            (``session.set_denormal_as_zero``; OpenVINO ``CPU_DENORMALS_OPTIMIZATION``).
        backend: the runtime (``fusionviz.backends.backend_names()``); "ort" is onnxruntime.
    """

    level: str = "off"
    threads: int = 1
    provider: str = "CPUExecutionProvider"
    disabled_optimizers: tuple[str, ...] = ()
    denormal_as_zero: bool = False
    backend: str = "ort"

    def __post_init__(self) -> None:
        from fusionviz.backends.registry import canonical

        object.__setattr__(self, "backend", canonical(self.backend))
        if self.level not in LEVELS:
            raise errors.InputSpecError(
                f"Unknown onnxruntime level '{self.level}'; use one of {', '.join(LEVELS)}."
            )
        if not isinstance(self.threads, int) or self.threads < 1 or self.threads > 256:
            raise errors.InputSpecError(f"Threads must be an integer from 1 to 256, not {self.threads!r}.")
        object.__setattr__(self, "disabled_optimizers", tuple(self.disabled_optimizers))

    def describe(self) -> str:
        from fusionviz.backends.registry import TITLES

        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        if self.backend == "ort":
            parts = [f"ORT {self.level}", threads]
        elif self.backend == "trt":
            parts = [TITLES[self.backend], threads]
        else:
            parts = [f"{TITLES[self.backend]} CPU f32", threads]
        if self.backend == "ort" and self.provider != "CPUExecutionProvider":
            parts.append(self.provider.replace("ExecutionProvider", ""))
        if self.backend == "ort" and self.disabled_optimizers:
            parts.append("without " + ", ".join(self.disabled_optimizers))
        if self.denormal_as_zero:
            parts.append("denormals as zero")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["disabled_optimizers"] = list(self.disabled_optimizers)
        return d


@dataclasses.dataclass(frozen=True)
class Variant:
    """One thing to measure: a model plus session settings.

    Attributes:
        label: unique display name.
        model: the model (proto or serialized bytes).
        settings: onnxruntime settings.
        passes: the fusionviz passes that produced ``model`` (for display and reports).
    """

    label: str
    model: onnx.ModelProto | bytes
    settings: Settings = Settings()
    passes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.label or not str(self.label).strip():
            raise errors.InputSpecError("Every benchmark variant needs a non-empty label.")
        object.__setattr__(self, "passes", tuple(self.passes))

    def model_bytes(self) -> bytes:
        return self.model if isinstance(self.model, bytes) else self.model.SerializeToString()

    def model_proto(self) -> onnx.ModelProto:
        if isinstance(self.model, onnx.ModelProto):
            return self.model
        m = onnx.ModelProto()
        m.ParseFromString(self.model)
        return m


@dataclasses.dataclass(frozen=True)
class BenchResult:
    """What one variant measured.

    Attributes:
        label, passes, settings: from the variant.
        stats: latency statistics, or None when the variant failed.
        memory: ``baseline_rss_mb``, ``rss_session_mb``, ``rss_run_mb``, ``rss_run_delta_mb``
            (run peak above the RSS after session creation), ``arena_held_mb`` and
            ``arena_in_use_peak_mb`` (None when unavailable), and the static plan's
            ``static_*`` figures (bytes).
        profile: ``{"runs", "run_ms", "by_op_type": {op: ms}, "by_node": {node: {op_type, ms}}}``
            when profiling was asked for.
        verify: :meth:`fusionviz.verify.VerifyResult.as_dict` when a reference was given.
        error: one sentence when the variant failed, else None.
        samples_ms: every timed run, in order.
        round_medians_ms: the median of each round (drift shows here).
        session_s: seconds to create the session (compile the model, for other backends).
        backend_info: the backend's name, version and the settings it applied in its own
            words (e.g. ``CPU_DENORMALS_OPTIMIZATION``), when its worker started.
    """

    label: str
    passes: tuple[str, ...]
    settings: Settings
    stats: LatencyStats | None
    memory: dict
    profile: dict | None = None
    verify: dict | None = None
    error: str | None = None
    samples_ms: tuple[float, ...] = ()
    round_medians_ms: tuple[float, ...] = ()
    session_s: float | None = None
    backend_info: dict | None = None

    @property
    def backend(self) -> str:
        """The variant's backend name."""
        return self.settings.backend

    def __post_init__(self) -> None:
        if self.stats is None and self.error is None:
            raise ValueError("BenchResult needs stats or an error")

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self, *, samples: bool = False) -> dict:
        d = {
            "label": self.label,
            "passes": list(self.passes),
            "settings": self.settings.as_dict(),
            "latency": self.stats.as_dict() if self.stats else None,
            "memory": dict(self.memory),
            "profile": self.profile,
            "verify": self.verify,
            "error": self.error,
            "session_s": self.session_s,
            "round_medians_ms": list(self.round_medians_ms),
            "backend": self.backend,
            "backend_info": self.backend_info,
        }
        if samples:
            d["samples_ms"] = list(self.samples_ms)
        return d


# --------------------------------------------------------------------------- machine-wide lock


def lock_path() -> Path:
    return Path(tempfile.gettempdir()) / LOCK_NAME


@contextlib.contextmanager
def machine_lock(progress: ProgressFn | None = None, cancel: threading.Event | None = None,
                 path: Path | None = None) -> Iterator[None]:
    """Hold the machine-wide benchmark lock (rule 1), waiting (and saying so) while another holds it."""
    p = path or lock_path()
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    if progress:
                        progress(0.0, "waiting for another benchmark to finish")
                    logger.info("waiting for another benchmark (lock %s)", p)
                    told = True
                if cancel is not None and cancel.is_set():
                    raise BenchCancelled("The benchmark was cancelled while waiting for another one.") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- one worker


class _WorkerFailed(Exception):
    """The worker died, timed out, or reported an error; ``str`` is the user sentence."""


def _limit_child(mem_limit_mb: int) -> Callable[[], None]:
    def fn() -> None:
        os.setsid()
        try:
            import resource

            cap = int(mem_limit_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        except (ValueError, OSError):
            pass
    return fn


def _clean(text: str) -> str:
    """ORT's message without its status prefix and without our temp paths."""
    text = re.sub(r"^\d+ : [A-Z_]+ : ", "", " ".join(str(text).split()))
    text = re.sub(r"Load model from \S+ failed: ?", "Load model failed: ", text)
    text = re.sub(r"\S*fusionviz-bench-[^/\s]+/\S*", "<model>", text)
    return text[:300]


class _Worker:
    """Parent-side handle on one worker process."""

    def __init__(self, label: str, tmpdir: Path, *, timeout_s: float, mem_limit_mb: int,
                 cancel: threading.Event | None, title: str = "onnxruntime") -> None:
        self.label = label
        self.title = title
        self.timeout_s = float(timeout_s)
        self.mem_limit_mb = int(mem_limit_mb)
        self.cancel = cancel
        self.busy_s = 0.0
        self.max_rss_mb = 0.0
        self._buf = b""
        self._err_path = tmpdir / f"worker-{os.getpid()}-{id(self)}.err"
        self._err = open(self._err_path, "wb")
        env = dict(os.environ)
        env["PYTHONPATH"] = _PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fusionviz.bench.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            preexec_fn=_limit_child(self.mem_limit_mb), env=env, cwd=str(tmpdir),
        )
        self._ps = None
        try:
            import psutil

            self._ps = psutil.Process(self.proc.pid)
        except Exception:  # noqa: BLE001 - psutil missing or process already gone
            self._ps = None

    # The one place a worker is killed: its whole process group.
    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            self._err.close()

    def _stderr_tail(self) -> str:
        try:
            self._err.flush()
            data = self._err_path.read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""
        return data

    def _rss_mb(self) -> float:
        if self._ps is None:
            return 0.0
        try:
            return self._ps.memory_info().rss / 1024 / 1024
        except Exception:  # noqa: BLE001 - process gone
            return 0.0

    def _died(self) -> _WorkerFailed:
        code = self.proc.wait()
        tail = self._stderr_tail()
        low = tail.lower()
        if any(k in low for k in ("bad_alloc", "memoryerror", "cannot allocate", "failed to allocate",
                                  "out of memory")):
            return _WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap")
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            if -code == signal.SIGKILL and self.max_rss_mb > 0.8 * self.mem_limit_mb:
                return _WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap")
            return _WorkerFailed(f"{self.title} crashed the worker ({sig})")
        last = [ln for ln in tail.splitlines() if ln.strip()][-1:] or [f"exit status {code}"]
        return _WorkerFailed(f"the worker exited unexpectedly: {' '.join(last[0].split())[:200]}")

    def request(self, msg: dict) -> dict:
        """Send one command and wait for its reply within the remaining time budget."""
        remaining = self.timeout_s - self.busy_s
        if remaining <= 0:
            self.kill()
            raise _WorkerFailed(f"timed out after {self.timeout_s:g} s")
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        t0 = time.monotonic()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        fd = self.proc.stdout.fileno()
        try:
            while True:
                if b"\n" in self._buf:
                    line, self._buf = self._buf.split(b"\n", 1)
                    self.busy_s += time.monotonic() - t0
                    reply = json.loads(line)
                    if not reply.get("ok"):
                        if reply.get("kind") == "memory":
                            self.kill()
                            raise _WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap")
                        if reply.get("kind") in ("input", "unavailable"):
                            raise _WorkerFailed(_clean(reply.get("error") or "bad inputs"))
                        raise _WorkerFailed(f"{self.title} failed: {_clean(reply.get('error') or 'unknown error')}")
                    return reply
                elapsed = time.monotonic() - t0
                if elapsed > remaining:
                    self.kill()
                    self.busy_s += elapsed
                    raise _WorkerFailed(f"timed out after {self.timeout_s:g} s")
                if self.cancel is not None and self.cancel.is_set():
                    self.kill()
                    raise BenchCancelled("The benchmark was cancelled.")
                rss = self._rss_mb()
                self.max_rss_mb = max(self.max_rss_mb, rss)
                if rss > self.mem_limit_mb:
                    self.kill()
                    raise _WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap")
                if sel.select(timeout=min(_POLL_S * 5 if elapsed > 1 else _POLL_S, remaining - elapsed + 0.01)):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        raise self._died()
                    self._buf += chunk
        finally:
            sel.close()


# --------------------------------------------------------------------------- the run


@dataclasses.dataclass
class _Job:
    variant: Variant
    index: int
    model_path: Path
    worker: _Worker | None = None
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


def _static_plan(model: onnx.ModelProto, shapes) -> dict:
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


def _memory_of(job: _Job) -> dict:
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
        jobs: list[_Job] = []
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


def _loops_for(round_ms: float, run_ms: float) -> int:
    """Runs per turn so that a turn lasts about ``round_ms`` (at least one)."""
    return max(1, int(math.ceil(round_ms / max(run_ms, 1e-3))))


def _run_locked(variants, protos, feeds, tmpdir: Path, jobs: list[_Job], *, shapes, min_time_s, warmup,
                max_rounds, timeout_s, mem_limit_mb, profile, verify_against, verify_rtol, say,
                cancel) -> list[BenchResult]:
    names = {f"i{k}": name for k, name in enumerate(feeds)}
    inputs_path = tmpdir / "inputs.npz"
    np.savez(inputs_path, **{f"i{k}": arr for k, arr in enumerate(feeds.values())})

    from fusionviz.backends.registry import TITLES, get_backend

    def new_worker(label: str, backend: str = "ort") -> _Worker:
        return _Worker(label, tmpdir, timeout_s=timeout_s, mem_limit_mb=mem_limit_mb, cancel=cancel,
                       title=TITLES.get(backend, backend))

    # A backend that cannot run here fails its variants with its reason; the others go on.
    unavailable: dict[str, str | None] = {}
    for v in variants:
        b = v.settings.backend
        if b not in unavailable:
            why = get_backend(b).quick_check()
            unavailable[b] = None if why is None else f"{TITLES.get(b, b)} is not available here: {why}"

    def fail(job: _Job, exc: _WorkerFailed) -> None:
        job.error = str(exc)
        logger.info("variant %s failed: %s", job.variant.label, job.error)
        if job.worker is not None:
            job.worker.close()

    for i, (v, proto) in enumerate(zip(variants, protos, strict=False)):
        path = tmpdir / f"model{i}.onnx"
        path.write_bytes(v.model_bytes())
        jobs.append(_Job(v, i, path, plan=_static_plan(proto, shapes),
                         error=unavailable.get(v.settings.backend),
                         output_names=[o.name for o in proto.graph.output]))

    # Reference outputs, in their own worker: onnxruntime off, and at level all for the noise floor.
    ref_outputs: dict | None = None
    noise: dict[str, float] = {}
    verify_error: str | None = None
    if verify_against is not None:
        say(0.01, "running the reference model for verification")
        ref_path = tmpdir / "reference.onnx"
        ref_path.write_bytes(verify_against.SerializeToString())
        w = new_worker("reference")
        try:
            w.request(_init_msg(ref_path, inputs_path, names, Settings()))
            out_path = tmpdir / "ref-out.npz"
            reply = w.request({"cmd": "outputs", "path": str(out_path)})
            ref_outputs = _load_outputs(out_path, reply["names"])
            noise = _reference_noise(w, ref_path, inputs_path, names, tmpdir, ref_outputs)
        except _WorkerFailed as exc:
            verify_error = f"the reference model could not run: {exc}"
        finally:
            w.close()

    n = len(jobs)
    # Start each worker, create its session, warm up and calibrate (one at a time).
    for k, job in enumerate(jobs):
        if job.error is not None:
            continue
        say(0.02 + 0.18 * k / n, f"starting '{job.variant.label}' ({job.variant.settings.describe()})")
        try:
            job.worker = new_worker(job.variant.label, job.variant.settings.backend)
            job.init = job.worker.request(_init_msg(job.model_path, inputs_path, names, job.variant.settings,
                                                    _outputs_of(job)))
            reply = job.worker.request({"cmd": "run", "n": warmup})
            times = reply["times_ms"]
            est = float(np.median(times[1:] if len(times) > 1 else times))
            job.round_ms = 1000.0 * min(ROUND_S, min_time_s / MIN_ROUNDS)
            job.loops = _loops_for(job.round_ms, est)
            job.peak_run_mb = reply["peak_rss_mb"]
        except _WorkerFailed as exc:
            fail(job, exc)

    # Interleaved rounds (rule 3).
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
            except _WorkerFailed as exc:
                fail(job, exc)
                continue
            times = reply["times_ms"]
            job.samples.extend(times)
            job.round_medians.append(float(np.median(times)))
            # re-calibrated every round: a warm-up slowed by a burst of load would otherwise
            # leave turns far shorter than planned for the whole run (at most 4x per round)
            job.loops = min(4 * job.loops, _loops_for(job.round_ms, job.round_medians[-1]))
            job.peak_run_mb = max(job.peak_run_mb or 0.0, reply["peak_rss_mb"])
            if job.processes < PROCESSES and job.measured_s() >= job.processes * min_time_s / PROCESSES:
                try:  # hand the rest of this variant's runs to a fresh process
                    job.worker.close()
                    job.worker = new_worker(job.variant.label, job.variant.settings.backend)
                    job.worker.request(_init_msg(job.model_path, inputs_path, names, job.variant.settings,
                                                 _outputs_of(job)))
                    job.worker.request({"cmd": "run", "n": warmup})
                    job.processes += 1
                except _WorkerFailed as exc:
                    fail(job, exc)

    # Verification, then the profiled session (arena figures; op/node times when asked).
    for k, job in enumerate(jobs):
        if not job.alive:
            continue
        say(0.85 + 0.14 * k / n, f"checking outputs and profiling '{job.variant.label}'")
        if verify_against is not None:
            job.verify = _verify_job(job, tmpdir, ref_outputs, noise, verify_error, verify_rtol)
            if not job.alive:
                continue
        # onnxruntime's arena figures come from its profiler, so it always runs once there;
        # other backends profile only when asked (a second compiled copy).
        if profile or job.variant.settings.backend == "ort":
            try:
                runs = max(3, min(20, job.loops)) if profile else 1
                job.profile = job.worker.request({"cmd": "profile", "n": runs,
                                                  "prefix": str(tmpdir / f"prof{job.index}")})
            except _WorkerFailed as exc:
                logger.info("profiling '%s' failed: %s", job.variant.label, exc)
                job.profile = None
        job.worker.close()
    say(1.0, "done")
    return [_result(job, profile) for job in jobs]


def _init_msg(model_path: Path, inputs_path: Path, names: dict, settings: Settings,
              output_names: list[str] | None = None) -> dict:
    return {"cmd": "init", "model": str(model_path), "inputs": str(inputs_path), "input_names": names,
            "settings": settings.as_dict(), "backend": settings.backend, "output_names": output_names}


def _outputs_of(job: _Job) -> list[str]:
    return list(job.output_names)


def _load_outputs(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[f"o{i}"] for i, name in enumerate(names)}


def _reference_noise(worker: _Worker, ref_path: Path, inputs_path: Path, names: dict, tmpdir: Path,
                     ref_outputs: dict) -> dict[str, float]:
    """Per output, how far onnxruntime's own level-all optimizer moves the reference
    (:func:`fusionviz.verify.reference_noise`: the noise floor ``optimize`` verifies with).
    The worker is re-initialized at level all; a reference that level all cannot run gives none."""
    from fusionviz.verify import reference_noise

    out_path = tmpdir / "ref-all-out.npz"
    try:
        worker.request(_init_msg(ref_path, inputs_path, names, Settings(level="all")))
        reply = worker.request({"cmd": "outputs", "path": str(out_path)})
        return reference_noise(ref_outputs, _load_outputs(out_path, reply["names"]))
    except _WorkerFailed as exc:
        logger.info("the reference at onnxruntime level all could not run (no noise floor): %s", exc)
        return {}


def _verify_job(job: _Job, tmpdir: Path, ref_outputs: dict | None, noise: Mapping[str, float],
                verify_error: str | None, rtol: float) -> dict:
    """Judge one variant's outputs with :func:`fusionviz.verify.judge`, the test ``optimize`` uses
    (``|a-b| <= atol + rtol|b| + floor``, the floor from onnxruntime's own level-all noise)."""
    from fusionviz.verify import VerifyResult, judge

    if ref_outputs is None:
        return VerifyResult(False, (), rtol, error=verify_error or "no reference outputs").as_dict()
    out_path = tmpdir / f"out{job.index}.npz"
    try:
        reply = job.worker.request({"cmd": "outputs", "path": str(out_path)})
        got = _load_outputs(out_path, reply["names"])
    except _WorkerFailed as exc:
        job.error = str(exc)
        job.worker.close()
        return VerifyResult(False, (), rtol, error=str(exc)).as_dict()
    finally:
        with contextlib.suppress(OSError):
            out_path.unlink()
    from fusionviz.passes import registry

    report_only = False
    try:
        report_only = not all(p.exact for p in registry.resolve(job.variant.passes))
    except errors.FusionvizError:
        pass
    diffs, missing = judge(ref_outputs, got, input_set="given", rtol=rtol, noise=noise)
    if missing:
        return VerifyResult(False, tuple(diffs), rtol, error=missing, report_only=report_only,
                            optimized_failed=True).as_dict()
    ok = all(d.ok for d in diffs)
    return VerifyResult(ok, tuple(diffs), rtol, report_only=report_only, input_sets=("given",)).as_dict()


def _result(job: _Job, profile: bool) -> BenchResult:
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
        memory=_memory_of(job),
        profile=prof,
        verify=job.verify,
        error=error,
        samples_ms=tuple(job.samples),
        round_medians_ms=tuple(job.round_medians),
        session_s=job.init.get("session_s"),
        backend_info=job.init.get("backend_info"),
    )
