"""Per-node time from onnxruntime's profiler: which node of *this* graph costs what.

Rules (the code points back to them):

1. The model runs as it is: onnxruntime's own optimizer is off (``ORT_DISABLE_ALL``), so every
   kernel onnxruntime runs is one node of the graph drawn, and a node fusionviz fused (a
   FusedConv, an Attention) is timed as the one kernel it is. Nodes are renamed to their display
   keys (``graphview.model_graph.node_keys``: the name, or ``#i``) in the copy that runs, so an
   unnamed or repeated name still maps to one node.
2. ``SessionOptions.enable_profiling`` writes Chrome-trace JSON; its ``cat == "Node"`` events named
   ``<node>_kernel_time`` carry the kernel's duration (µs). The first run is a warm-up and is
   left out; a node's time is the median over the other runs, in milliseconds. The same events
   carry ``output_size``, the bytes the kernel wrote (kept too: the memory overlay uses it for
   nodes shape inference cannot size, e.g. onnxruntime's NCHWc and contrib ops).
3. One intra-op thread by default, so times add up and do not depend on the machine's load from
   other threads; the total and the share of each node are what the overlay shows.
4. ``isolated=True`` (the app) runs the profile in the verification child (``python -m
   fusionviz.verify_worker``) under its memory and time caps: a model that allocates
   gigabytes or crashes onnxruntime takes only the child down. A failure is a
   :class:`~fusionviz.errors.RuntimeLoadError` with one line saying why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import tempfile
from collections.abc import Mapping

import numpy as np
import onnx

from fusionviz import errors

logger = logging.getLogger(__name__)

#: Suffix of a kernel's event name in the profile (rule 2).
KERNEL_SUFFIX = "_kernel_time"
#: Profiled runs after the warm-up (rule 2).
DEFAULT_RUNS = 5


@dataclasses.dataclass(frozen=True)
class NodeTimes:
    """Median kernel time per node of one model (rule 2).

    Attributes:
        times_ms: node key -> median kernel time in milliseconds.
        runs: profiled runs the medians are over (warm-up excluded).
        threads: intra-op threads.
        output_bytes: node key -> bytes its kernel wrote (the profile's ``output_size``).
        inner_ms: node name -> median kernel time of the nodes inside If/Loop/Scan bodies (the
            profile names them too; a Loop body's node: one iteration), for the body overlays.
        inner_bytes: node name -> bytes written, for the same nodes.
        total_ms: the sum of the node medians.
    """

    times_ms: dict[str, float]
    runs: int
    threads: int
    output_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    inner_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    inner_bytes: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return float(sum(self.times_ms.values()))

    def node_values(self) -> tuple[tuple[str, float], ...]:
        """(node key, ms) pairs: ``graphview.RenderOptions.node_values`` of the time overlay."""
        return tuple(self.times_ms.items())


def keyed_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rule 1: a copy whose main-graph nodes are named by their display keys."""
    from fusionviz.graphview.model_graph import node_keys

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for node, key in zip(m.graph.node, node_keys(m.graph.node), strict=True):
        node.name = key
    return m


def parse_profile(events: list, keys: set[str] | None = None, *, skip_first: bool = True
                  ) -> tuple[dict[str, float], dict[str, int]]:
    """Rule 2: (node name -> median kernel time in ms, node name -> bytes written) from
    onnxruntime's profile events.

    Args:
        events: the profile JSON (a list of trace events).
        keys: when given, only these node names are kept.
        skip_first: leave out each node's first occurrence (the warm-up run).
    """
    durations: dict[str, list[float]] = {}
    written: dict[str, int] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "Node":
            continue
        name = str(ev.get("name", ""))
        if not name.endswith(KERNEL_SUFFIX):
            continue
        node = name[: -len(KERNEL_SUFFIX)]
        if keys is not None and node not in keys:
            continue
        durations.setdefault(node, []).append(float(ev.get("dur", 0)) / 1000.0)
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        try:
            written[node] = int(args.get("output_size", ""))
        except (TypeError, ValueError):
            pass
    out = {}
    for node, ds in durations.items():
        kept = ds[1:] if skip_first and len(ds) > 1 else ds
        out[node] = float(statistics.median(kept))
    return out, written


def profile_here(model_bytes: bytes, feeds: Mapping[str, np.ndarray], runs: int, threads: int,
                 folder: str | None = None) -> tuple[dict[str, float], dict[str, int]]:
    """Rules 1-3 in this process: run the (already keyed) model ``runs + 1`` times, profiled.
    Weights that stay on disk (``fusionviz.model_io`` rule 9) are read from ``folder``."""
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config

    so = ort.SessionOptions()
    for key, value in ort_session_config(folder=folder).items():
        so.add_session_config_entry(key, value)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="fusionviz_profile_") as tmp:
        so.profile_file_prefix = os.path.join(tmp, "profile")
        try:
            sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
            names = {i.name for i in sess.get_inputs()}
            run_feeds = {k: v for k, v in feeds.items() if k in names}
            for _ in range(runs + 1):
                sess.run(None, run_feeds)
            path = sess.end_profiling()
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types; one line for the user
            raise errors.RuntimeLoadError(f"onnxruntime could not run the model to time it: "
                                          f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
    return parse_profile(events)


def node_times(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *, runs: int = DEFAULT_RUNS,
               threads: int = 1, isolated: bool = False) -> NodeTimes:
    """Median kernel time of every main-graph node of ``model`` on ``feeds`` (rules 1-4).

    Raises:
        fusionviz.errors.RuntimeLoadError: the model does not load or run, or the child failed.
    """
    if runs < 1:
        raise errors.InputSpecError("Profile at least one run.")
    from fusionviz.model_io import weights_dir

    keyed = keyed_copy(model)
    data = keyed.SerializeToString()  # with weights on disk: the graph only, the weights read from their folder
    folder = weights_dir(model)
    times, written = (_child(data, dict(feeds), runs, threads, folder) if isolated
                      else profile_here(data, feeds, runs, threads, folder))
    from fusionviz.graphview.model_graph import node_keys

    keys = set(node_keys(model.graph.node))
    return NodeTimes({k: v for k, v in times.items() if k in keys}, runs, threads,
                     {k: v for k, v in written.items() if k in keys},
                     {k: v for k, v in times.items() if k not in keys},
                     {k: v for k, v in written.items() if k not in keys})


def _child(data: bytes, feeds: dict, runs: int, threads: int,
           folder: str | None = None) -> tuple[dict[str, float], dict[str, int]]:
    """Rule 4: :func:`profile_here` in the verification child (``python -m fusionviz.verify_worker``),
    under its memory and time caps."""
    from fusionviz.verify import _child as run_isolated

    return run_isolated(("profile", data, feeds, runs, threads, folder), what="time the model's nodes")
