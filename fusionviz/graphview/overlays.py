"""Per-node overlays: one number per node of one side, drawn by ``build`` rule 8, each with its own
scale, palette and legend (as Model Explorer's node data).

Rules (the code points back to them):

1. One record for every overlay (:class:`Overlay`): what it measures, a value per node key, the
   scale's steps, the palette and the unit. ``render_options()`` is what ``RenderOptions`` takes,
   ``legend()`` the entries the page draws, ``text(key)`` the value as written in the side panel.
2. Kinds (:data:`KINDS`): ``change`` is the diff's colours (build rule 1; no values, the header's
   legend); ``time`` the median kernel time per node (``fusionviz.profile``, onnxruntime's
   optimizer off, so a fused node is timed as its own kernel); ``memory`` the bytes of the tensors a
   node writes, from shape inference with the inputs fixed (``analysis.infer_tensor_info``); a node
   whose outputs shape inference cannot size (onnxruntime's NCHWc and contrib ops) takes the bytes
   its kernel wrote in a profiled run when one is given (``profile.NodeTimes.output_bytes``), else
   it has no value; the note says how many of each; ``error`` the largest max
   rel error of a node's outputs against the other side (``fusionviz.compare``), NaN where a NaN/Inf
   appears; ``ov_time`` OpenVINO's per-layer times (rule 4).
3. Fixed scales, so two panes and two models read alike: time in decades of milliseconds from
   ≤ 0.01 ms to > 10 ms; memory in steps of 4× from ≤ 16 KB to > 4 MB (a feature map of a
   CNN's first layers and of its last ones fall in different steps); error on the comparison's
   own scale (given by the caller).
4. OpenVINO per-layer times (``ov_time``): OpenVINO's CPU plugin runs layers, not ONNX nodes; a
   layer often holds several (Conv + BatchNormalization + Relu is one convolution). A layer's
   real time (``ExecutedLayer.time_ms``, the mean over profiled inferences) is not split: it is
   given whole to the group. Every node of the group is filled with the layer's time (the colour
   says how slow the kernel it runs in is); the group's first node in model order carries the
   time in its label ("OpenVINO 0.31 ms (layer of 3 nodes)") and the others say "in <first
   node>'s layer". Sums count each layer once (:meth:`Overlay.total`). Layers that hold no ONNX
   node (reorders and converts OpenVINO added) and nodes folded into constants at compile time
   have no node to colour; the note gives their count and time.
5. Inside a control-flow body (:func:`body_overlay`): the body's nodes take the values the
   whole model's run gave them by node name (onnxruntime's profile names body nodes; a name
   that occurs twice in the model is left out, it cannot be told apart); a node that has no
   value (a branch not taken on these inputs) is not coloured, and the note counts them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence

import onnx

from fusionviz.graphview import dot as D

#: Rule 2: the overlay kinds, in the order the page offers them, with their names.
KINDS = {"change": "Change class", "time": "Time per node (onnxruntime)", "ov_time": "Time per layer (OpenVINO)",
         "memory": "Memory written", "error": "Error per tensor"}

#: Rule 3: the time scale (ms) and the memory scale (bytes).
TIME_SCALE = ((0.01, "≤ 0.01 ms"), (0.1, "≤ 0.1 ms"), (1.0, "≤ 1 ms"), (10.0, "≤ 10 ms"), (math.inf, "> 10 ms"))
MEMORY_SCALE = ((16384.0, "≤ 16 KB"), (65536.0, "≤ 64 KB"), (262144.0, "≤ 256 KB"), (1048576.0, "≤ 1 MB"),
                (4194304.0, "≤ 4 MB"), (math.inf, "> 4 MB"))


@dataclasses.dataclass(frozen=True)
class Overlay:
    """Rule 1: a number per node of one side.

    Attributes:
        kind: one of :data:`KINDS` (not ``change``, which has no values).
        title: what a value is, before it in labels and the legend ("time", "writes", "max rel").
        values: (node key, value) pairs; NaN is marked apart.
        scale: (upper bound, label) per step, ascending.
        fills: the palette, low to high.
        unit: "ms", "B" or "" (see ``build.format_value``).
        nan_label: the name of a NaN value in the legend ("" when the kind has none).
        note: one line on where the numbers come from (and what is missing).
        missing: nodes that should have a value and have none (memory: outputs of unknown size).
        labels: (node key, label text) where a node's label says more than its value (rule 4).
        groups: (node key, group key) for nodes whose value is their group's, shared with the
            group's first node ``group key`` (rule 4); sums count a group once.
        details: (node key, text) written in the side panel instead of the bare value (rule 4).
    """

    kind: str
    title: str
    values: tuple[tuple[str, float], ...]
    scale: tuple[tuple[float, str], ...]
    fills: tuple[str, ...]
    unit: str = ""
    nan_label: str = ""
    note: str = ""
    missing: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, str], ...] = ()
    details: tuple[tuple[str, str], ...] = ()

    def value(self, key: str) -> float | None:
        """The value of node ``key``, or None."""
        return self._map.get(key)

    @functools.cached_property
    def _map(self) -> dict[str, float]:
        return dict(self.values)

    def text(self, key: str) -> str | None:
        """The value of ``key`` as written in labels and the side panel, or None."""
        from fusionviz.graphview.build import format_value

        v = self.value(key)
        if v is None:
            return None
        return dict(self.details).get(key) or format_value(v, self.unit)

    def total(self, keys: Iterable[str]) -> tuple[float, int]:
        """(the sum of the values of ``keys``, how many of them have one); a group's value counts
        once however many of its nodes are in ``keys`` (rule 4)."""
        group = dict(self.groups)
        seen: set[str] = set()
        total, n = 0.0, 0
        for k in keys:
            v = self.value(k)
            if v is None:
                continue
            n += 1
            head = group.get(k, k)
            if head in seen:
                continue
            seen.add(head)
            total += v
        return total, n

    def render_options(self) -> dict:
        """``RenderOptions`` fields that draw this overlay (build rule 8)."""
        return {"node_values": self.values, "value_scale": self.scale, "value_title": self.title,
                "value_fills": self.fills, "value_unit": self.unit,
                "value_nan_label": self.nan_label or "NaN/Inf", "value_labels": self.labels}

    def legend(self) -> list[tuple[str, str, str]]:
        """(title, fill, border) per step, then NaN when the kind has one and a value is NaN."""
        from fusionviz.graphview.build import RenderOptions, value_legend

        has_nan = bool(self.nan_label) and any(math.isnan(v) for _, v in self.values)
        return value_legend(RenderOptions(**self.render_options()), with_nan=has_nan)


def time_overlay(times_ms: Mapping[str, float] | Iterable[tuple[str, float]], note: str = "",
                 inlined: Mapping[str, int] | None = None) -> Overlay:
    """Rule 2: median kernel time per node (ms), e.g. ``profile.NodeTimes.node_values()``.
    ``inlined``: node key -> how many nodes onnxruntime ran the function op as
    (``profile.NodeTimes.inlined``; its time is their sum), said in the side panel."""
    from fusionviz.graphview.build import format_value

    times = dict(times_ms)
    details = tuple((k, f"{format_value(times[k], 'ms')} (ran as {n} inlined node{'s' if n != 1 else ''}: onnxruntime "
                        "has no kernel for this function op and runs its function body; the sum of their times)")
                    for k, n in (inlined or {}).items() if k in times)
    return Overlay("time", "time", tuple(times.items()), TIME_SCALE, D.TIME_FILLS, unit="ms", note=note,
                   details=details)


def written_bytes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None
                  ) -> tuple[dict[str, int], int]:
    """Rule 2: node key -> bytes of the tensors it writes, and how many nodes have an output of
    unknown size (left out)."""
    from fusionviz.analysis import infer_tensor_info
    from fusionviz.graphview.model_graph import node_keys

    info = infer_tensor_info(model, shapes)
    out: dict[str, int] = {}
    unknown = 0
    for node, key in zip(model.graph.node, node_keys(model.graph.node), strict=True):
        total = 0
        for t in node.output:
            if not t:
                continue
            ti = info.get(t)
            nb = ti.nbytes if ti is not None else None
            if nb is None:
                total = -1
                break
            total += nb
        if total < 0:
            unknown += 1
        else:
            out[key] = total
    return out, unknown


def memory_overlay(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                   measured: Mapping[str, int] | None = None) -> Overlay:
    """Rule 2: bytes each node writes, from shape inference with the inputs fixed by ``shapes``;
    ``measured`` (node key -> bytes written in a profiled run) sizes the nodes inference cannot."""
    got, unknown = written_bytes(model, shapes)
    filled = 0
    if unknown and measured:
        from fusionviz.graphview.model_graph import node_keys

        for key in node_keys(model.graph.node):
            if key not in got and key in measured:
                got[key] = int(measured[key])
                filled += 1
        unknown -= filled
    total = sum(got.values())
    from fusionviz.graphview.build import format_value

    note = f"{format_value(float(total), 'B')} written by {len(got):,} nodes"
    if filled:
        note += f" ({filled:,} sized by onnxruntime's profile: shape inference does not know their op)"
    if unknown:
        note += f"; {unknown:,} node(s) write a tensor of unknown size (not coloured)"
    return Overlay("memory", "writes", tuple((k, float(v)) for k, v in got.items()), MEMORY_SCALE,
                   D.MEMORY_FILLS, unit="B", note=note, missing=unknown)


def error_overlay(values: Iterable[tuple[str, float]], scale: tuple[tuple[float, str], ...], note: str = "") -> Overlay:
    """Rule 2: the largest max rel error of each node's outputs (``CompareResult.node_values``),
    on the comparison's scale."""
    return Overlay("error", "max rel", tuple(values), scale, D.HEAT_FILLS, nan_label="NaN/Inf introduced",
                   note=note)


def openvino_time_overlay(graph, model: onnx.ModelProto | None = None) -> Overlay:
    """Rule 4: OpenVINO's per-layer times on the ONNX nodes each layer holds.

    Args:
        graph: a timed ``backends.ExecutedGraph`` (``compiled.compile_executed(layer_times=True)``).
        model: the model it was compiled from: orders a group, and a group's first node is its
            first that is not a Constant (a weight held in a Constant node is absorbed too).
    """
    from fusionviz.graphview.build import format_value
    from fusionviz.graphview.model_graph import node_keys

    nodes = list(model.graph.node) if model is not None else []
    order = {k: i for i, k in enumerate(node_keys(nodes))}
    consts = {k for k, n in zip(order, nodes, strict=True) if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}
    values: dict[str, float] = {}
    labels: dict[str, str] = {}
    groups: dict[str, str] = {}
    details: dict[str, str] = {}
    in_consts: set[str] = set()
    extra_ms, extra_n, layers = 0.0, 0, 0
    for layer in graph.layers:
        if layer.is_io:
            continue
        if layer.is_constant:
            in_consts.update(layer.absorbed)
            continue
        if layer.time_ms is None:
            continue
        members = [k for k in layer.absorbed if k not in values]
        if order:
            members = sorted((k for k in members if k in order), key=order.__getitem__)
        if not members:
            extra_ms += layer.time_ms
            extra_n += 1
            continue
        layers += 1
        head, t = next((k for k in members if k not in consts), members[0]), float(layer.time_ms)
        others = [k for k in members if k != head and k not in consts]
        kernel = f", {layer.kernel}" if layer.kernel else ""
        size = f"layer of {len(others) + 1} nodes" if others else "its own layer"
        for k in members:
            values[k] = t
            if k == head:
                labels[k] = f"OpenVINO {format_value(t, 'ms')} ({size})"
                with_ = (f" with {', '.join(others[:4])}" + (" …" if len(others) > 4 else "")) if others else ""
                details[k] = f"{format_value(t, 'ms')}: OpenVINO layer {layer.name} ({layer.layer_type}{kernel}), {size}{with_}"
            else:
                groups[k] = head
                labels[k] = f"in {head}'s OpenVINO layer ({format_value(t, 'ms')})"
                details[k] = f"{format_value(t, 'ms')} for the whole layer: in the OpenVINO layer of {head} ({layer.name})"
    folded = len((in_consts - set(values) - consts) & set(order) if order else in_consts - set(values))
    total = sum(t for k, t in values.items() if k not in groups)
    held = sum(1 for k in values if k not in consts)
    note = (f"{format_value(total, 'ms')} in {layers:,} OpenVINO layers holding {held:,} nodes "
            "(CPU plugin, f32, 1 thread, mean of its profiled runs; a layer's time is drawn on every node it holds, "
            "written on its first)")
    if extra_n:
        note += f"; {format_value(extra_ms, 'ms')} in {extra_n:,} layers OpenVINO added (reorders, converts: no node)"
    if folded:
        note += f"; {folded:,} node(s) folded into constants when compiling (not coloured)"
    return Overlay("ov_time", "OpenVINO", tuple(values.items()), TIME_SCALE, D.TIME_FILLS, unit="ms", note=note,
                   labels=tuple(labels.items()), groups=tuple(groups.items()), details=tuple(details.items()))


def body_overlay(whole: Overlay, body_keys: Sequence[str], by_name: Mapping[str, float], note: str = "") -> Overlay:
    """Rule 5: ``whole``'s kind on a body's nodes: ``by_name`` is node name -> value from the run
    of the whole model (names that occur twice already left out); ``body_keys`` the body's node keys."""
    values = tuple((k, float(by_name[k])) for k in body_keys if k in by_name)
    missing = len(body_keys) - len(values)
    return dataclasses.replace(whole, values=values, labels=(), groups=(), details=(), missing=missing,
                               note=note)


def unique_node_names(model: onnx.ModelProto) -> set[str]:
    """Rule 5: node names (main-graph keys, body names) that occur once in the whole model,
    bodies included; a name seen twice cannot be told apart in a profile."""
    from fusionviz.graphview.model_graph import node_keys

    counts: dict[str, int] = {}
    for k in node_keys(model.graph.node):
        counts[k] = counts.get(k, 0) + 1

    def bodies(n: onnx.NodeProto):
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
            elif a.type == onnx.AttributeProto.GRAPHS:
                yield from a.graphs

    stack = [g for n in model.graph.node for g in bodies(n)]
    while stack:
        g = stack.pop()
        for n in g.node:
            if n.name:
                counts[n.name] = counts.get(n.name, 0) + 1
            stack.extend(bodies(n))
    return {k for k, c in counts.items() if c == 1}


def body_time_overlay(whole: onnx.ModelProto, body: onnx.ModelProto, inner_ms: Mapping[str, float],
                      inlined: Mapping[str, int] | None = None) -> Overlay:
    """Rule 5: the time overlay of a body (``bodies.body_model``) from the profile of the whole
    model (``profile.NodeTimes.inner_ms``: body node name -> median kernel time; ``inlined``: body
    node name -> how many nodes onnxruntime ran a function op as, ``NodeTimes.inlined``)."""
    from fusionviz.graphview.model_graph import node_keys

    unique = unique_node_names(whole)
    named = {k: v for k, v in inner_ms.items() if k in unique}
    keys = node_keys(body.graph.node)
    have = [k for k in keys if k in named]
    note = (f"{sum(named[k] for k in have):.3g} ms in {len(have):,} of {len(keys):,} nodes of this body (median per "
            f"run of each kernel; a Loop body's node: one iteration); {len(keys) - len(have):,} did not run on these "
            "inputs or share a name")
    ov = body_overlay(time_overlay({}), keys, named, note=note)
    return dataclasses.replace(ov, details=time_overlay(dict(ov.values), inlined=inlined).details)


def unattributed_kernels(model: onnx.ModelProto, inner_ms: Mapping[str, float]) -> tuple[int, float]:
    """Rule 2: (how many, total ms) of the profiled kernels that are no node of ``model`` nor of its
    bodies: what onnxruntime made itself and ``profile`` rule 5 could not give back to a node (a
    function op in a body with an unnamed node, a float16 Softmax run as its body between the casts
    onnxruntime inserts, named ``ReduceMax_2`` and ``InsertedPrecisionFreeCast_x``)."""
    names = set(node_keys_everywhere(model))
    got = [v for k, v in inner_ms.items() if k not in names]
    return len(got), float(sum(got))


def node_keys_everywhere(model: onnx.ModelProto) -> list[str]:
    """Main-graph node keys, then every body node's name (bodies nested at any depth)."""
    from fusionviz.graphview.model_graph import node_keys
    from fusionviz.passes.walk import proto_graphs

    bodies = [n.name for g in proto_graphs(model.graph) if g is not model.graph for n in g.node if n.name]
    return list(node_keys(model.graph.node)) + bodies
