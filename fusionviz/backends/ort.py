"""onnxruntime on the CPU: the reference backend (levels off / basic / extended / layout / all).

This is the one place fusionviz builds onnxruntime sessions for timing: the benchmark worker
calls :meth:`OrtBackend.compile`. The ``trt`` backend (:mod:`fusionviz.backends.trt`) reuses it
with other execution providers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fusionviz.backends.base import (
    Backend,
    BackendError,
    BackendSettings,
    Compiled,
    ExecutedGraph,
    cast_feeds,
    first_sentence,
)

logger = logging.getLogger(__name__)

def np_dtype(ort_type: str) -> np.dtype | None:
    """The numpy dtype of an onnxruntime type string ("tensor(float)" → float32), or None."""
    name = ort_type[len("tensor("):-1] if ort_type.startswith("tensor(") else ""
    try:
        return np.dtype({"float": "float32", "double": "float64"}.get(name, name)) if name else None
    except TypeError:  # string, bfloat16, float8...: no numpy dtype of that name
        return None


def session_options(settings: BackendSettings, *, threads: int, profile_prefix: str | None = None):
    """onnxruntime ``SessionOptions`` for ``settings``.

    Args:
        settings: level, denormal flag.
        threads: intra-op threads (inter-op is always 1).
        profile_prefix: switch the profiler on, writing files with this prefix.

    Returns:
        An ``onnxruntime.SessionOptions``.
    """
    import onnxruntime as ort

    from fusionviz.ortlevels import graph_optimization_level

    so = ort.SessionOptions()
    so.graph_optimization_level = graph_optimization_level(settings.level)
    so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if settings.denormal_as_zero:
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def make_session(model: bytes | str, settings: BackendSettings, *, threads: int,
                 providers: Sequence[str] | None = None, profile_prefix: str | None = None):
    """An ``InferenceSession`` (exceptions from onnxruntime pass through unchanged).

    Args:
        model: serialized model or a path.
        settings: see :func:`session_options`; ``provider`` is used when ``providers`` is None.
        threads: intra-op threads.
        providers: execution providers in priority order.
        profile_prefix: see :func:`session_options`.
    """
    import onnxruntime as ort

    if providers is None:
        providers = [settings.provider]
        if settings.provider != "CPUExecutionProvider":
            providers.append("CPUExecutionProvider")
    kwargs: dict[str, Any] = {}
    if settings.disabled_optimizers:
        kwargs["disabled_optimizers"] = list(settings.disabled_optimizers)
    return ort.InferenceSession(model, session_options(settings, threads=threads, profile_prefix=profile_prefix),
                                providers=list(providers), **kwargs)


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
        for key in ("mem_arena_held", "mem_in_use_peak"):
            if key in args:
                try:
                    v = int(args[key])
                except (TypeError, ValueError):
                    continue
                if key == "mem_arena_held":
                    held = v if held is None else max(held, v)
                else:
                    peak = v if peak is None else max(peak, v)
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


class OrtCompiled:
    """An onnxruntime session behind the :class:`~fusionviz.backends.base.Compiled` interface."""

    def __init__(self, model: bytes | str, settings: BackendSettings, *, threads: int,
                 providers: Sequence[str] | None = None, backend: str = "ort") -> None:
        self.backend = backend
        self._model = model
        self._settings = settings
        self._threads = int(threads)
        self._providers = list(providers) if providers is not None else None
        try:
            self.session = make_session(model, settings, threads=threads, providers=providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
            why = first_sentence(exc)
            raise BackendError(f"onnxruntime cannot load the model: {why}", reason=why) from None

    def input_dtypes(self) -> dict[str, np.dtype | None]:
        return {i.name: np_dtype(i.type) for i in self.session.get_inputs()}

    def output_names(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self.output_names()
        try:
            outs = self.session.run(names, cast_feeds(feeds, self.input_dtypes(), backend="onnxruntime"))
        except KeyError:
            raise
        except Exception as exc:  # noqa: BLE001
            why = first_sentence(exc)
            raise BackendError(f"onnxruntime failed to run the model: {why}", reason=why) from None
        return {n: np.asarray(o) for n, o in zip(names, outs, strict=True)}

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        ready = cast_feeds(feeds, self.input_dtypes(), backend="onnxruntime")
        return functools.partial(self.session.run, None, ready)

    def executed_graph(self) -> ExecutedGraph | None:
        return None

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int, *, prefix: str | None = None) -> dict:
        """onnxruntime's profiler over ``runs`` runs of a second, profiled session.

        Args:
            feeds: inputs.
            runs: inferences to profile.
            prefix: profile file prefix (a temporary directory when None); the file is removed.
        """
        runs = max(1, int(runs))
        with contextlib.ExitStack() as stack:
            if prefix is None:
                prefix = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="fv-prof-")), "p")
            sess = make_session(self._model, self._settings, threads=self._threads,
                                providers=self._providers, profile_prefix=prefix)
            ready = cast_feeds(feeds, self.input_dtypes(), backend="onnxruntime")
            for _ in range(runs):
                sess.run(None, ready)
            path = sess.end_profiling()
            try:
                with open(path) as f:
                    events = json.load(f)
            finally:
                with contextlib.suppress(OSError):
                    os.remove(path)
            del sess
        return aggregate_profile(events, runs)

    def applied(self) -> dict[str, Any]:
        return {
            "graph_optimization_level": self._settings.level,
            "session.set_denormal_as_zero": "1" if self._settings.denormal_as_zero else "0",
            "intra_op_num_threads": self._threads,
            "providers": list(self.session.get_providers()),
        }


@dataclasses.dataclass(frozen=True)
class OrtBackend(Backend):
    """onnxruntime's CPU execution provider (or ``settings.provider``)."""

    name: str = "ort"
    title: str = "onnxruntime"
    package: ClassVar[str] = "onnxruntime"

    def build(self, model_bytes: bytes | str, settings: BackendSettings, *, threads: int) -> Compiled:
        return OrtCompiled(model_bytes, settings, threads=threads, backend=self.name)
