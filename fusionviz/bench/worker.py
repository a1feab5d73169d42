"""Benchmark worker: one process per variant, driven over a pipe (``python -m fusionviz.bench.worker``).

The parent (:mod:`fusionviz.bench.manager`) starts this module in a fresh process with a memory
cap, then sends one JSON command per line on stdin and reads one JSON reply per line. Replies go
to a private duplicate of the original stdout; fd 1 itself is pointed at stderr, so anything a
library prints can never corrupt the protocol.

Commands (each reply has ``ok``; a failure has ``error`` and ``kind``):

1. ``init``: import the variant's backend runtime (``backend``: ``ort`` when absent; see
   :mod:`fusionviz.backends`), load the inputs (.npz), measure the baseline RSS (interpreter +
   numpy + that runtime + inputs), compile the model with the backend, report the peak RSS
   during compilation and the settings the backend applied.
2. ``run`` ``n``: time ``n`` inferences (perf_counter_ns each; gc disabled), reply with the
   per-call milliseconds and the peak RSS since the model was compiled.
3. ``outputs`` ``path``: run once and save the outputs (``o0``, ``o1``... in order) for
   verification.
4. ``profile`` ``n`` ``prefix``: the backend's per-layer profile over ``n`` runs (onnxruntime:
   a second session with its profiler, aggregated by op type and node, plus the arena figures
   the profiler records; OpenVINO: a ``PERF_COUNT`` copy; TVM: the virtual machine's call timings).
5. ``exit``.

Peak RSS uses Linux's ``VmHWM`` (reset by writing 5 to ``/proc/self/clear_refs``); elsewhere it
falls back to ``ru_maxrss``, which cannot be reset (the run peak then includes creation).

This module imports only the standard library, numpy, :mod:`fusionviz.backends.base` and the one
runtime its variant needs (never OpenVINO or TVM in an onnxruntime worker), so the baseline stays
small.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

_OUT = None  # the protocol stream (a dup of the original stdout)

def _send(obj: dict) -> None:
    _OUT.write(json.dumps(obj) + "\n")
    _OUT.flush()


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _status_mb(key: str) -> float:
    """``/proc/self/status`` field in MB; getrusage's max RSS where /proc is missing."""
    kb = _status_kb(key)
    if kb is not None:
        return kb / 1024.0
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    return _status_mb("VmHWM")


def _ort_sentence(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = " ".join(str(reason if reason is not None else exc).split()).replace("[ONNXRuntimeError] : ", "")
    return text[:300] or type(exc).__name__


def _is_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(k in text for k in ("bad_alloc", "failed to allocate", "cannot allocate", "out of memory"))


class _State:
    def __init__(self) -> None:
        self.compiled = None
        self.call = None
        self.feeds: dict[str, Any] = {}
        self.cfg: dict = {}
        self.baseline_mb = 0.0
        self.peak_reset = False


def _backend_of(msg: dict):
    from fusionviz.backends.registry import get_backend

    name = msg.get("backend") or (msg.get("settings") or {}).get("backend") or "ort"
    return get_backend(name)


def _compile(backend, msg: dict, arrays: dict):
    s = dict(msg["settings"])
    s["output_names"] = msg.get("output_names")
    s["input_shapes"] = {k: list(v.shape) for k, v in arrays.items()}
    model = msg["model"]
    if backend.name != "ort":  # onnxruntime reads the file itself (external data beside it)
        with open(model, "rb") as f:
            model = f.read()
    return backend.compile(model, threads=int(s.get("threads", 1)), settings=s)


def _cmd_init(st: _State, msg: dict) -> dict:
    import numpy as np

    from fusionviz.backends.base import cast_feeds

    st.cfg = msg
    backend = _backend_of(msg)
    backend.preload(threads=int(msg["settings"].get("threads", 1)))  # part of the baseline
    with np.load(msg["inputs"], allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    names = msg.get("input_names") or {}
    arrays = {names.get(k, k): v for k, v in arrays.items()}
    gc.collect()
    st.baseline_mb = _rss_mb()
    st.peak_reset = _reset_peak()
    t0 = time.perf_counter()
    st.compiled = _compile(backend, msg, arrays)
    session_s = time.perf_counter() - t0
    st.feeds = cast_feeds(arrays, st.compiled.input_dtypes(), backend=backend.title)
    st.call = st.compiled.prepare(st.feeds)
    peak = _peak_mb()
    after = _rss_mb()
    st.peak_reset = _reset_peak()
    applied = st.compiled.applied()
    return {
        "ok": True,
        "pid": os.getpid(),
        "baseline_rss_mb": st.baseline_mb,
        "session_peak_rss_mb": peak,
        "after_session_rss_mb": after,
        "session_s": session_s,
        "providers": applied.get("providers") or [backend.title],
        "backend": backend.name,
        "backend_info": {"backend": backend.name, "title": backend.title, "version": backend.version(),
                         **{k: v for k, v in applied.items() if k != "providers"}},
        "peak_resettable": st.peak_reset,
    }


def _cmd_run(st: _State, msg: dict) -> dict:
    n = max(1, int(msg["n"]))
    call = st.call
    times = []
    clock = time.perf_counter_ns
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(n):
            t0 = clock()
            call()
            times.append((clock() - t0) / 1e6)
    finally:
        if gc_was:
            gc.enable()
    return {"ok": True, "times_ms": times, "peak_rss_mb": _peak_mb(), "rss_mb": _rss_mb()}


def _cmd_outputs(st: _State, msg: dict) -> dict:
    import numpy as np

    outs = st.compiled.run(st.feeds)
    names = st.compiled.output_names()
    np.savez(msg["path"], **{f"o{i}": np.asarray(outs[name]) for i, name in enumerate(names) if name in outs})
    return {"ok": True, "names": [n for n in names if n in outs]}


def _cmd_profile(st: _State, msg: dict) -> dict:
    n = max(1, int(msg.get("n", 3)))
    return {"ok": True, **st.compiled.profile(st.feeds, n, prefix=msg["prefix"])}


def aggregate_profile(events: list, runs: int) -> dict:
    """onnxruntime profiler events → per-op-type and per-node times (see ``fusionviz.backends.ort``)."""
    from fusionviz.backends.ort import aggregate_profile as agg

    return agg(events, runs)


_COMMANDS = {"init": _cmd_init, "run": _cmd_run, "outputs": _cmd_outputs, "profile": _cmd_profile}


def main() -> int:
    """Serve commands until ``exit`` or end of input."""
    global _OUT
    _OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    st = _State()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            _send({"ok": False, "kind": "protocol", "error": "bad command"})
            continue
        cmd = msg.get("cmd")
        if cmd == "exit":
            _send({"ok": True})
            return 0
        fn = _COMMANDS.get(cmd)
        if fn is None:
            _send({"ok": False, "kind": "protocol", "error": f"unknown command {cmd!r}"})
            continue
        try:
            _send(fn(st, msg))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            kind = ("memory" if _is_memory(exc) else "input" if isinstance(exc, KeyError)
                    else "unavailable" if type(exc).__name__ == "BackendUnavailableError" else "ort")
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else _ort_sentence(exc)
            _send({"ok": False, "kind": kind, "error": str(text)})
            if kind == "memory":
                return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
