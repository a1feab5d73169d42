"""Worker management (pyperf's ``_manager``): the machine-wide lock and the parent's handle on
one worker process.

1. **One machine-wide queue.** A benchmark holds an exclusive ``fcntl.flock`` on
   ``<tempdir>/fusionviz-bench.lock`` for its whole run; another benchmark (another app session,
   another user, the CLI) waits and says so through ``progress``.
2. **A worker** (:mod:`fusionviz.bench.worker`) starts in its own process group with
   ``RLIMIT_AS`` set to the memory cap; the parent polls its RSS (psutil) and kills the group when
   it passes the cap or when the worker's own busy time passes ``timeout_s``. A crash, hang or
   allocation failure is a :class:`WorkerFailed` whose text is the user's sentence.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fusionviz.bench.records import BenchCancelled, ProgressFn

logger = logging.getLogger(__name__)

LOCK_NAME = "fusionviz-bench.lock"
_POLL_S = 0.02
_PKG_ROOT = str(Path(__file__).resolve().parents[2])


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


class WorkerFailed(Exception):
    """The worker died, timed out, or reported an error; ``str`` is the user sentence."""


#: How a message about the worker's memory cap says what raises it.
_RAISE_CAP = " (bench --mem-limit MB raises it)"


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


class WorkerHandle:
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

    def _died(self) -> WorkerFailed:
        code = self.proc.wait()
        tail = self._stderr_tail()
        low = tail.lower()
        if any(k in low for k in ("bad_alloc", "memoryerror", "cannot allocate", "failed to allocate",
                                  "out of memory")):
            return WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap{_RAISE_CAP}")
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            if -code == signal.SIGKILL and self.max_rss_mb > 0.8 * self.mem_limit_mb:
                return WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap{_RAISE_CAP}")
            return WorkerFailed(f"{self.title} crashed the worker ({sig})")
        last = [ln for ln in tail.splitlines() if ln.strip()][-1:] or [f"exit status {code}"]
        return WorkerFailed(f"the worker exited unexpectedly: {' '.join(last[0].split())[:200]}")

    def request(self, msg: dict) -> dict:
        """Send one command and wait for its reply within the remaining time budget."""
        remaining = self.timeout_s - self.busy_s
        if remaining <= 0:
            self.kill()
            raise WorkerFailed(f"timed out after {self.timeout_s:g} s")
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
                            raise WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap{_RAISE_CAP}")
                        if reply.get("kind") in ("input", "unavailable"):
                            raise WorkerFailed(_clean(reply.get("error") or "bad inputs"))
                        raise WorkerFailed(f"{self.title} failed: {_clean(reply.get('error') or 'unknown error')}")
                    return reply
                elapsed = time.monotonic() - t0
                if elapsed > remaining:
                    self.kill()
                    self.busy_s += elapsed
                    raise WorkerFailed(f"timed out after {self.timeout_s:g} s")
                if self.cancel is not None and self.cancel.is_set():
                    self.kill()
                    raise BenchCancelled("The benchmark was cancelled.")
                rss = self._rss_mb()
                self.max_rss_mb = max(self.max_rss_mb, rss)
                if rss > self.mem_limit_mb:
                    self.kill()
                    raise WorkerFailed(f"exceeded the {self.mem_limit_mb} MB memory cap{_RAISE_CAP}")
                if sel.select(timeout=min(_POLL_S * 5 if elapsed > 1 else _POLL_S, remaining - elapsed + 0.01)):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        raise self._died()
                    self._buf += chunk
        finally:
            sel.close()

