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
5. Function ops onnxruntime has no kernel for (HardSwish, Mish, Softmax on float16, a model-local
   function, ...) are inlined by onnxruntime into their function body even with its
   optimizer off: ``Graph::InlineFunction`` names the body's tensors ``_inlfunc_<Op>_<name>`` (then
   ``_inlfunc_<Op>_token_<N>_<name>`` for the next call of that op), leaves the body's nodes
   unnamed, and the profiler names an unnamed node ``<op>_<node index>``, so its kernels match no
   node of the model. When the model has a function op (:func:`has_function_ops`), the copy that
   runs is first inlined as onnxruntime would (:func:`inline_as_onnxruntime_does`): a graph-only
   session (large weights turned into inputs of the same type and shape, so nothing is read or
   written but the graph) saves the graph onnxruntime runs (``optimized_model_filepath``); each
   call node it inlined is replaced in the copy by the nodes it became, found by the tensors they
   share (the body's own tensors join them; their outputs are the call node's outputs, every
   tensor they read is the model's, their own or a constant of the body) and named
   ``<key>::inlined:<i>`` (the body's own tensors renamed after it too: onnxruntime names them per
   graph, so a body's may repeat the main graph's). Inside If/Loop/Scan bodies the same, where
   every node of the body is named and the call node's name occurs once in the model (the profile
   names body nodes by name). The profile then names every kernel; a call node's time is the sum
   of its inlined nodes' medians, its bytes written those of the nodes writing its outputs, and
   ``NodeTimes.inlined`` says how many nodes it ran as. A call node this cannot place (in a body
   with an unnamed or repeated node, an opset the body needs that the model does not import at
   that version, a body onnxruntime also wrapped in casts it inserted: a float16 Softmax) is left
   to onnxruntime: its kernels stay unnamed and the overlay's note counts them
   (``overlays.unattributed_kernels``).
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
#: Rule 5: the name of the i-th node a function op was inlined into is ``<key><INLINED><i>``.
INLINED = "::inlined:"
#: Rule 5: initializers above this many bytes become inputs of the graph-only session.
GRAPH_ONLY_BYTES = 4096


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
        inlined: node key (or a body node's name) -> how many nodes onnxruntime ran a function op
            as (rule 5); its time in ``times_ms`` (``inner_ms``) is their sum.
        total_ms: the sum of the node medians.
    """

    times_ms: dict[str, float]
    runs: int
    threads: int
    output_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    inner_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    inner_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    inlined: dict[str, int] = dataclasses.field(default_factory=dict)

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


def has_function_ops(model: onnx.ModelProto) -> bool:
    """Rule 5: whether a node of ``model`` (bodies included) is a function op onnxruntime may inline
    (an ONNX op defined by a function body, or a model-local function)."""
    local = {(f.domain, f.name) for f in model.functions}
    versions = {o.domain or "": o.version for o in model.opset_import}
    stack = [model.graph]
    while stack:
        for n in stack.pop().node:
            stack.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
            domain = "" if n.domain in ("", "ai.onnx") else n.domain
            if (n.domain, n.op_type) in local:
                return True
            try:
                schema = onnx.defs.get_schema(n.op_type, versions.get(domain, 1), domain)
            except onnx.defs.SchemaError:
                continue
            if schema.has_function or schema.has_context_dependent_function:
                return True
    return False


def graph_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rule 5: a copy whose main-graph initializers above :data:`GRAPH_ONLY_BYTES` (and any on disk)
    are graph inputs of the same type and shape: onnxruntime loads its graph without the weights."""
    from onnx import helper

    m = onnx.ModelProto()
    for fd, value in model.ListFields():  # field by field: the weights are never copied
        if fd.name != "graph":
            m.MergeFrom(onnx.ModelProto(**{fd.name: value}))
    for fd, value in model.graph.ListFields():
        if fd.name != "initializer":
            m.graph.MergeFrom(onnx.GraphProto(**{fd.name: value}))
    inputs = {i.name for i in m.graph.input}
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() > GRAPH_ONLY_BYTES:
            if t.name not in inputs:
                m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            m.graph.initializer.append(t)
    return m


def onnxruntime_graph(model: onnx.ModelProto, folder: str | None = None) -> onnx.ModelProto:
    """Rule 5: the graph onnxruntime runs for ``model`` with its optimizer off (function ops
    without a kernel inlined, bodies included), saved by a graph-only session."""
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config

    so = ort.SessionOptions()
    for key, value in ort_session_config(folder=folder).items():
        so.add_session_config_entry(key, value)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="fusionviz_inline_") as tmp:
        so.optimized_model_filepath = os.path.join(tmp, "ran.onnx")
        ort.InferenceSession(graph_only(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath, load_external_data=False)


def _tensors(g: onnx.GraphProto) -> set[str]:
    """Every tensor name a graph declares, reads or writes (its own scope)."""
    out = {i.name for i in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        out.update(n.input)
        out.update(n.output)
    out.discard("")
    return out


def _placements(g: onnx.GraphProto, r: onnx.GraphProto, outer: set[str], names_once: set[str], taken: set[str],
                versions: Mapping[str, int], ran_versions: Mapping[str, int], path: tuple,
                found: dict[tuple, tuple[dict[str, list[onnx.NodeProto]], dict[str, onnx.TensorProto]]]) -> None:
    """Rule 5 for one graph ``g`` of the model and the same graph ``r`` onnxruntime ran: which of
    ``g``'s call nodes became which nodes of ``r`` (``found[path]``: name -> nodes, and the
    initializers onnxruntime made of their constants); then the same for their bodies.
    ``names_once``: the node names that occur once in the model (a body's call node needs one: the
    profile names body nodes by name); ``taken``: every node name of the model."""
    names = [n.name for n in g.node]
    if not all(names) or len(set(names)) != len(names):
        return  # an unnamed or repeated node cannot be told from what onnxruntime made
    kept = {n.name for n in r.node if n.name in set(names)}
    called = set(names) - kept
    new = [n for n in r.node if n.name not in kept]
    own = _tensors(g)
    known = own | outer
    if called and new:
        producer = {o: n.name for n in g.node for o in n.output if o}
        # union-find over the new nodes, joined by the tensors the model does not have (the bodies' own)
        parent = list(range(len(new)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        first: dict[str, int] = {}
        for i, n in enumerate(new):
            for t in [*n.input, *n.output]:
                if t and t not in known:
                    if t in first:
                        parent[find(i)] = find(first[t])
                    else:
                        first[t] = i
        comps: dict[int, list[int]] = {}
        for i in range(len(new)):
            comps.setdefault(find(i), []).append(i)
        by_call: dict[str, list[int]] = {}
        for members in comps.values():
            owners = {producer.get(o) for i in members for o in new[i].output if o in known}
            if len(owners) == 1 and (owner := owners.pop()) in called:
                by_call.setdefault(owner, []).extend(members)
        ran_inits = {t.name: t for t in r.initializer}
        nodes = {n.name: n for n in g.node}
        place: dict[str, list[onnx.NodeProto]] = {}
        inits: dict[str, onnx.TensorProto] = {}
        for key, members in by_call.items():
            body = [new[i] for i in sorted(members)]
            made = {o for n in body for o in n.output if o}
            if path and key not in names_once:
                continue  # its kernels could not be told apart in the profile
            if any(f"{key}{INLINED}{i}" in taken for i in range(len(body))):
                continue  # a name that would repeat
            if not all(o in made for o in nodes[key].output if o):
                continue  # an output the inlined nodes do not write: not placed
            if any(versions.get(d, ran_versions.get(d)) != ran_versions.get(d)
                   for d in {("" if n.domain == "ai.onnx" else n.domain) for n in body}):
                continue  # the body needs an opset the model imports at another version
            if not all(t in known or t in made or t in ran_inits for n in body for t in n.input if t):
                continue  # reads a tensor onnxruntime made apart from the inlining (a cast it inserted)
            # the body's own tensors and constants renamed after the call node: onnxruntime names
            # them per graph, so a body's may repeat the main graph's
            own_names = {t for n in body for t in [*n.input, *n.output] if t and t not in known}
            rename = {t: f"{key}{INLINED}{t}" for t in own_names}
            copies = []
            for n in body:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                c.input[:] = [rename.get(t, t) for t in n.input]
                c.output[:] = [rename.get(t, t) for t in n.output]
                copies.append(c)
            place[key] = copies
            for t in own_names & set(ran_inits):
                c = onnx.TensorProto()
                c.CopyFrom(ran_inits[t])
                c.name = rename[t]
                inits[c.name] = c
        if place:
            found[path] = (place, inits)
    ran_nodes = {n.name: n for n in r.node if n.name in kept}
    for n in g.node:
        rn = ran_nodes.get(n.name)
        if rn is None:
            continue
        ran_attrs = {x.name: x for x in rn.attribute if x.type == onnx.AttributeProto.GRAPH}
        for x in n.attribute:
            if x.type == onnx.AttributeProto.GRAPH and x.name in ran_attrs:
                _placements(x.g, ran_attrs[x.name].g, known, names_once, taken, versions, ran_versions,
                            (*path, (n.name, x.name)), found)


def inline_as_onnxruntime_does(model: onnx.ModelProto, ran: onnx.ModelProto
                               ) -> tuple[onnx.ModelProto, dict[str, list[str]], dict[str, list[str]]]:
    """Rule 5: ``model`` (keyed: main-graph node names unique) with each call node onnxruntime
    inlined in ``ran`` (its saved graph) replaced by the nodes it became, named
    ``<name>::inlined:<i>``, in the main graph and in If/Loop/Scan bodies whose nodes are all named
    (a body's call node by a name that occurs once in the model).

    Returns:
        (the rewritten copy, name -> names of its inlined nodes, name -> names of those that write
        the call node's outputs). A call node that cannot be placed is kept as it is.
    """
    from fusionviz.graphview.overlays import node_keys_everywhere, unique_node_names

    versions = {o.domain or "": o.version for o in model.opset_import}
    ran_versions = {**versions, **{o.domain or "": o.version for o in ran.opset_import}}
    found: dict[tuple, tuple[dict, dict]] = {}
    _placements(model.graph, ran.graph, set(), unique_node_names(model), set(node_keys_everywhere(model)),
                versions, ran_versions, (), found)
    if not found:
        return model, {}, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    groups: dict[str, list[str]] = {}
    writers: dict[str, list[str]] = {}

    def apply(g: onnx.GraphProto, path: tuple) -> None:
        place, inits = found.get(path, ({}, {}))
        if place:
            old = list(g.node)
            del g.node[:]
            for n in old:
                body = place.get(n.name)
                if body is None:
                    g.node.append(n)
                    continue
                outs = {o for o in n.output if o}
                for i, b in enumerate(body):
                    c = g.node.add()
                    c.CopyFrom(b)
                    c.name = f"{n.name}{INLINED}{i}"
                    groups.setdefault(n.name, []).append(c.name)
                    if outs & set(c.output):
                        writers.setdefault(n.name, []).append(c.name)
            g.initializer.extend(inits.values())
        for n in g.node:
            for x in n.attribute:
                if x.type == onnx.AttributeProto.GRAPH and any(p[: len(path) + 1] == (*path, (n.name, x.name))
                                                               for p in found):
                    apply(x.g, (*path, (n.name, x.name)))

    apply(out.graph, ())
    if not groups:
        return model, {}, {}
    have = {o.domain or "" for o in out.opset_import}
    used = {("" if b.domain == "ai.onnx" else b.domain) for place, _ in found.values() for body in place.values()
            for b in body}
    for d in used - have:
        out.opset_import.add(domain=d, version=ran_versions[d])
    return out, groups, writers


def fold_inlined(times: dict[str, float], written: dict[str, int], groups: Mapping[str, list[str]],
                 writers: Mapping[str, list[str]]) -> dict[str, int]:
    """Rule 5: the inlined nodes' times summed onto their call node (in place); returns key -> how
    many of its inlined nodes ran."""
    count: dict[str, int] = {}
    for key, members in groups.items():
        got = [times.pop(m) for m in members if m in times]
        wrote = [written[m] for m in writers.get(key, ()) if m in written]
        for m in members:
            written.pop(m, None)
        if got:
            times[key] = float(sum(got))
            count[key] = len(got)
        if wrote:
            written[key] = int(sum(wrote))
    return count


def profile_here(model_bytes: bytes, feeds: Mapping[str, np.ndarray], runs: int, threads: int,
                 folder: str | None = None, inline: bool = False
                 ) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """Rules 1-3 and 5 in this process: run the (already keyed) model ``runs + 1`` times,
    profiled. Weights that stay on disk (``fusionviz.model_io`` rule 9) are read from ``folder``.
    ``inline``: the model has function ops; inline those onnxruntime would first (rule 5).

    Returns:
        (node -> median ms, node -> bytes written, call node key -> how many nodes it ran as).
    """
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config

    groups: dict[str, list[str]] = {}
    writers: dict[str, list[str]] = {}
    if inline:
        model = onnx.load_from_string(model_bytes)
        try:
            ran = onnxruntime_graph(model, folder)
        except Exception as exc:  # noqa: BLE001 - left to onnxruntime: its kernels are counted unnamed
            logger.info("function ops not inlined ahead: %s", str(exc).splitlines()[0][:200] if str(exc) else exc)
        else:
            rewritten, groups, writers = inline_as_onnxruntime_does(model, ran)
            if groups:
                model_bytes = rewritten.SerializeToString()
        del model
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
    times, written = parse_profile(events)
    return times, written, fold_inlined(times, written, groups, writers)


def node_times(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *, runs: int = DEFAULT_RUNS,
               threads: int = 1, isolated: bool = False) -> NodeTimes:
    """Median kernel time of every main-graph node of ``model`` on ``feeds`` (rules 1-5).

    Raises:
        fusionviz.errors.RuntimeLoadError: the model does not load or run, or the child failed.
    """
    if runs < 1:
        raise errors.InputSpecError("Profile at least one run.")
    from fusionviz.model_io import weights_dir

    keyed = keyed_copy(model)
    data = keyed.SerializeToString()  # with weights on disk: the graph only, the weights read from their folder
    folder = weights_dir(model)
    inline = has_function_ops(model)
    times, written, inlined = (_child(data, dict(feeds), runs, threads, folder, inline) if isolated
                               else profile_here(data, feeds, runs, threads, folder, inline))
    from fusionviz.graphview.model_graph import node_keys

    keys = set(node_keys(model.graph.node))
    return NodeTimes({k: v for k, v in times.items() if k in keys}, runs, threads,
                     {k: v for k, v in written.items() if k in keys},
                     {k: v for k, v in times.items() if k not in keys},
                     {k: v for k, v in written.items() if k not in keys}, inlined)


def _child(data: bytes, feeds: dict, runs: int, threads: int, folder: str | None = None,
           inline: bool = False) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """Rule 4: :func:`profile_here` in the verification child (``python -m fusionviz.verify_worker``),
    under its memory and time caps."""
    from fusionviz.verify import _child as run_isolated

    return run_isolated(("profile", data, feeds, runs, threads, folder, inline), what="time the model's nodes")
