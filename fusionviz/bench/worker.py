"""Benchmark worker: one process per variant, driven over a pipe (``python -m fusionviz.bench.worker``).

The parent (:mod:`fusionviz.bench.runner`) starts this module in a fresh process with a memory
cap, then sends one JSON command per line on stdin and reads one JSON reply per line. Replies go
to a private duplicate of the original stdout; fd 1 itself is pointed at stderr, so anything a
library prints can never corrupt the protocol.

Commands (each reply has ``ok``; a failure has ``error`` and ``kind``):

1. ``init``: load the inputs (.npz), measure the baseline RSS (interpreter + numpy +
   onnxruntime + inputs), create the session, report the peak RSS during creation.
2. ``run`` ``n``: time ``n`` calls of ``session.run`` (perf_counter_ns each; gc disabled), reply
   with the per-call milliseconds and the peak RSS since the session was created.
3. ``outputs`` ``path``: run once and save the outputs (``o0``, ``o1``... in order) for
   verification.
4. ``profile`` ``n`` ``prefix``: a second session with onnxruntime's profiler, ``n`` runs,
   aggregated by op type and by node, plus the arena figures the profiler records.
5. ``exit``.

Peak RSS uses Linux's ``VmHWM`` (reset by writing 5 to ``/proc/self/clear_refs``); elsewhere it
falls back to ``ru_maxrss``, which cannot be reset (the run peak then includes creation).

This module imports only the standard library, numpy and onnxruntime, so the baseline stays small.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

_OUT = None  # the protocol stream (a dup of the original stdout)

_NP_OF_ORT = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


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
    text = " ".join(str(exc).split()).replace("[ONNXRuntimeError] : ", "")
    return text[:300] or type(exc).__name__


def _is_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(k in text for k in ("bad_alloc", "failed to allocate", "cannot allocate", "out of memory"))


class _State:
    def __init__(self) -> None:
        self.session = None
        self.feeds: dict[str, Any] = {}
        self.cfg: dict = {}
        self.baseline_mb = 0.0
        self.peak_reset = False


def _session_options(cfg: dict, *, profile_prefix: str | None = None):
    import onnxruntime as ort

    levels = {
        "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    levels["layout"] = getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT", levels["all"])
    s = cfg["settings"]
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[s["level"]]
    so.intra_op_num_threads = int(s["threads"])
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if s.get("denormal_as_zero"):
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def _make_session(cfg: dict, *, profile_prefix: str | None = None):
    import onnxruntime as ort

    s = cfg["settings"]
    providers = [s["provider"]]
    if s["provider"] != "CPUExecutionProvider":
        providers.append("CPUExecutionProvider")
    kwargs = {}
    if s.get("disabled_optimizers"):
        kwargs["disabled_optimizers"] = list(s["disabled_optimizers"])
    return ort.InferenceSession(cfg["model"], _session_options(cfg, profile_prefix=profile_prefix),
                                providers=providers, **kwargs)


def _feeds_for(session, arrays: dict) -> dict:
    import numpy as np

    feeds = {}
    for inp in session.get_inputs():
        if inp.name not in arrays:
            raise KeyError(f"the model needs input '{inp.name}', which the benchmark inputs lack")
        arr = arrays[inp.name]
        want = _NP_OF_ORT.get(inp.type)
        if want is not None and arr.dtype != np.dtype(want):
            arr = arr.astype(want)
        feeds[inp.name] = np.ascontiguousarray(arr)
    return feeds


def _cmd_init(st: _State, msg: dict) -> dict:
    import numpy as np
    import onnxruntime  # noqa: F401  (part of the baseline)

    st.cfg = msg
    with np.load(msg["inputs"], allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    names = msg.get("input_names") or {}
    arrays = {names.get(k, k): v for k, v in arrays.items()}
    gc.collect()
    st.baseline_mb = _rss_mb()
    st.peak_reset = _reset_peak()
    t0 = time.perf_counter()
    st.session = _make_session(msg)
    session_s = time.perf_counter() - t0
    st.feeds = _feeds_for(st.session, arrays)
    peak = _peak_mb()
    after = _rss_mb()
    st.peak_reset = _reset_peak()
    return {
        "ok": True,
        "pid": os.getpid(),
        "baseline_rss_mb": st.baseline_mb,
        "session_peak_rss_mb": peak,
        "after_session_rss_mb": after,
        "session_s": session_s,
        "providers": st.session.get_providers(),
        "peak_resettable": st.peak_reset,
    }


def _cmd_run(st: _State, msg: dict) -> dict:
    n = max(1, int(msg["n"]))
    sess, feeds = st.session, st.feeds
    times = []
    clock = time.perf_counter_ns
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(n):
            t0 = clock()
            sess.run(None, feeds)
            times.append((clock() - t0) / 1e6)
    finally:
        if gc_was:
            gc.enable()
    return {"ok": True, "times_ms": times, "peak_rss_mb": _peak_mb(), "rss_mb": _rss_mb()}


def _cmd_outputs(st: _State, msg: dict) -> dict:
    import numpy as np

    outs = st.session.run(None, st.feeds)
    names = [o.name for o in st.session.get_outputs()]
    np.savez(msg["path"], **{f"o{i}": np.asarray(v) for i, v in enumerate(outs)})
    return {"ok": True, "names": names}


def _cmd_profile(st: _State, msg: dict) -> dict:
    n = max(1, int(msg.get("n", 3)))
    sess = _make_session(st.cfg, profile_prefix=msg["prefix"])
    feeds = _feeds_for(sess, st.feeds)
    for _ in range(n):
        sess.run(None, feeds)
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        try:
            os.remove(path)
        except OSError:
            pass
    del sess
    return {"ok": True, **aggregate_profile(events, n)}


def aggregate_profile(events: list, runs: int) -> dict:
    """Per-op-type and per-node milliseconds (mean per run) and arena figures from profiler events.

    Args:
        events: the parsed profiler JSON (a list of Chrome-trace events).
        runs: how many ``session.run`` calls the profile covers.

    Returns:
        ``{"runs", "run_ms", "by_op_type", "by_node", "arena"}``; ``arena`` holds the largest
        ``mem_arena_held``/``mem_in_use_peak`` seen (bytes), or None when the profiler has none.
    """
    by_op: dict[str, float] = {}
    by_node: dict[str, dict] = {}
    run_us: list[float] = []
    held = peak = None
    for e in events:
        if not isinstance(e, dict):
            continue
        cat, name, dur = e.get("cat"), str(e.get("name", "")), float(e.get("dur", 0) or 0)
        if cat == "Session" and name == "model_run":
            run_us.append(dur)
        if cat != "Node" or not name.endswith("_kernel_time"):
            continue
        args = e.get("args") or {}
        op = str(args.get("op_name", "?"))
        node = name[: -len("_kernel_time")]
        by_op[op] = by_op.get(op, 0.0) + dur
        rec = by_node.setdefault(node, {"op_type": op, "ms": 0.0, "provider": args.get("provider")})
        rec["ms"] += dur
        for key, cur in (("mem_arena_held", held), ("mem_in_use_peak", peak)):
            if key in args:
                try:
                    v = int(args[key])
                except (TypeError, ValueError):
                    continue
                if key == "mem_arena_held":
                    held = v if cur is None else max(cur, v)
                else:
                    peak = v if cur is None else max(cur, v)
    runs = max(1, runs)
    by_op_ms = {k: v / 1000.0 / runs for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])}
    for rec in by_node.values():
        rec["ms"] = rec["ms"] / 1000.0 / runs
    arena = None
    if held is not None or peak is not None:
        arena = {"arena_held_bytes": held, "in_use_peak_bytes": peak}
    return {
        "runs": runs,
        "run_ms": (sum(run_us) / len(run_us) / 1000.0) if run_us else None,
        "by_op_type": by_op_ms,
        "by_node": by_node,
        "arena": arena,
    }


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
            kind = "memory" if _is_memory(exc) else ("input" if isinstance(exc, KeyError) else "ort")
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else _ort_sentence(exc)
            _send({"ok": False, "kind": kind, "error": str(text)})
            if kind == "memory":
                return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
