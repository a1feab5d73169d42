"""The graph a backend executes (OpenVINO layers, TVM fused functions) drawn as DOT, and its
provenance laid over the original ONNX graph.

Drawing rules (the code points back to them):

1. One box per executed layer, in execution order: its type (bold), its name, runtime
   precision · output layout · output shape, the kernel the backend picked, and the time per
   inference when it was measured.
2. The ONNX nodes a layer absorbed are listed in it, one per line ("◂ /conv1/Conv"), at most
   ``MAX_ABSORBED_LINES`` (then "+k more"); nodes fusionviz placed from the graph's structure
   say "(inferred)". A layer that absorbed two or more ONNX nodes has the thick green border
   the pass diffs give fused nodes.
3. Reorder layers (a layout change the backend inserted) are amber and dashed, and say which
   layouts they convert between ("abcd → acdb").
4. Constant layers (weights) are not drawn; model inputs and outputs are drawn as the ONNX graph
   view draws them (house shapes). Edges follow the runtime graph's topology.
5. At most ``max_nodes`` layers are drawn, the first in execution order; edges from a layer not
   drawn start at a "⋯" stub, and the note says how many were left out.

On the original graph (:func:`executed_diff`), in the style of the pass diffs' *before* view:
the first ONNX node (model order) of each multi-node layer is "changed" ("absorbs N nodes"),
the other nodes of that layer are "removed" with "fused into <layer>", nodes no executed layer
computes (folded into constants) are "removed", and single-node layers leave their node
unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import onnx

from fusionviz import errors
from fusionviz.backends.base import ExecutedGraph, ExecutedLayer
from fusionviz.graphview import dot as D
from fusionviz.graphview.build import Rendered
from fusionviz.graphview.diff import GraphDiff
from fusionviz.graphview.model_graph import node_keys

logger = logging.getLogger(__name__)

#: Absorbed ONNX nodes listed in a layer's box before "+k more" (rule 2).
MAX_ABSORBED_LINES = 8
#: Above this many drawn layers, layout work is bounded (as in build.py).
BIG_LAYOUT = 150

REORDER_STYLE = ("#fff1c1", "#b45309", "filled,dashed,bold")
FUSED_BORDER = D.STATUS_STYLE["fused"][1]

# Backend layer types → the ONNX view's op families (colours).
_TYPE_FAMILY = {
    "Convolution": "conv", "Deconvolution": "conv", "GroupConvolution": "conv",
    "FullyConnected": "matmul", "MatMul": "matmul", "Gemm": "matmul",
    "Eltwise": "elementwise", "Math": "elementwise", "Multiply": "elementwise", "Add": "elementwise",
    "Pooling": "pool", "Reduce": "pool", "TopK": "pool",
    "MVN": "norm", "NormalizeL2": "norm", "RMS": "norm",
    "Reshape": "layout", "Transpose": "layout", "Gather": "layout", "Concatenation": "layout",
    "Broadcast": "layout", "StridedSlice": "layout", "Convert": "layout", "ShapeOf": "layout",
    "Split": "layout", "Pad": "layout", "Interpolate": "layout", "Softmax": "activation",
    "Subgraph": "fused", "If": "control", "TensorIterator": "control", "Loop": "control",
}
# Keywords in TVM's function names ("fused_conv2d_add_relu") → families, first match wins.
_KEYWORDS = (("conv", "conv"), ("matmul", "matmul"), ("dense", "matmul"), ("pool", "pool"),
             ("norm", "norm"), ("softmax", "activation"), ("reshape", "layout"), ("transpose", "layout"),
             ("take", "layout"), ("concat", "layout"), ("strided_slice", "layout"), ("cast", "layout"))


def _max_nodes() -> int:
    try:
        return max(1, int(os.environ.get("FUSIONVIZ_MAX_DRAW_NODES", "400")))
    except ValueError:
        return 400


@dataclasses.dataclass(frozen=True)
class CompiledRenderOptions:
    """What to draw of an executed graph.

    Attributes:
        max_nodes: cap on drawn layers [env FUSIONVIZ_MAX_DRAW_NODES, 400] (rule 5).
        rankdir: "TB" or "LR".
        legend: add a legend node to the DOT.
    """

    max_nodes: int = dataclasses.field(default_factory=_max_nodes)
    rankdir: str = "TB"
    legend: bool = True


def _title(backend: str) -> str:
    from fusionviz.backends.registry import TITLES

    return TITLES.get(backend, backend)


def layer_family(layer: ExecutedLayer) -> str:
    """The colour family of an executed layer (``fusionviz.graphview.dot.FAMILY_FILL`` key)."""
    fam = _TYPE_FAMILY.get(layer.layer_type)
    if fam is not None:
        return fam
    low = layer.layer_type.lower()
    for word, fam in _KEYWORDS:
        if word in low:
            return fam
    if low.startswith("fused_"):
        return "elementwise"
    return D.family(layer.layer_type)


def absorbed_map(graph: ExecutedGraph) -> dict[str, str]:
    """ONNX node key → the executed layer that computes it (see ``ExecutedGraph.onnx_to_layer``)."""
    return graph.onnx_to_layer()


def executed_diff(model: onnx.ModelProto, graph: ExecutedGraph) -> GraphDiff:
    """The executed graph's provenance as a diff of the original model (module docstring).

    Draw it with ``render_graph(model, diff=executed_diff(model, graph), side="before")``.

    Args:
        model: the ONNX model the backend compiled.
        graph: what the backend executes.

    Returns:
        A :class:`~fusionviz.graphview.diff.GraphDiff` whose before side is ``model``.
    """
    keys = node_keys(model.graph.node)
    order = {k: i for i, k in enumerate(keys)}
    owner = graph.onnx_to_layer()
    members: dict[str, list[str]] = {}
    for key in keys:
        if key in owner:
            members.setdefault(owner[key], []).append(key)
    status_before: dict[str, str] = {}
    fused_into: dict[str, str] = {}
    contributors: dict[str, list[str]] = {}
    provenance: dict[str, list[str]] = {}
    for key in keys:
        layer = owner.get(key)
        if layer is None:
            status_before[key] = "removed"
            continue
        group = sorted(members[layer], key=order.__getitem__)
        if len(group) < 2:
            status_before[key] = "unchanged"
        elif key == group[0]:
            status_before[key] = "changed"
            contributors[key] = group[1:]
            provenance[key] = group
        else:
            status_before[key] = "removed"
            fused_into[key] = layer
    counts = {"fused": len(contributors), "removed": sum(1 for s in status_before.values() if s == "removed"),
              "added": 0, "changed": 0,
              "unchanged": sum(1 for s in status_before.values() if s == "unchanged"),
              "absorbed": len(fused_into)}
    status_after = {k: ("fused" if k in contributors else "unchanged")
                    for k, s in status_before.items() if s != "removed"}
    return GraphDiff(counts, status_before, status_after, provenance, {}, fused_into, contributors)


def _layout_text(layer: ExecutedLayer, by_name: dict[str, ExecutedLayer]) -> str | None:
    if not layer.is_reorder:
        return None
    src = next((by_name[i].output_layout for i in layer.inputs if i in by_name and by_name[i].output_layout), None)
    if src and layer.output_layout:
        return f"{src} → {layer.output_layout}"
    return layer.output_layout


def _lines(layer: ExecutedLayer, by_name: dict[str, ExecutedLayer]) -> list[tuple[str, str | None, int | None, bool]]:
    """Rules 1-3: the label of one layer."""
    lines: list[tuple[str, str | None, int | None, bool]] = [(D.shorten(D.clean(layer.layer_type), 44), None, 12, True)]
    if layer.name != layer.layer_type:
        lines.append((D.shorten(D.clean(layer.name), 44), "#555555", 9, False))
    reorder = _layout_text(layer, by_name)
    if reorder:
        lines.append((f"layout change {reorder}", "#92400e", 10, True))
    layout = None if reorder or layer.output_layout in ("undef", "") else layer.output_layout
    facts = [x for x in (layer.precision, layout, layer.shape) if x]
    if facts:
        lines.append((D.shorten(D.clean(" · ".join(facts)), 52), "#333333", 9, False))
    if layer.kernel and layer.kernel not in ("undef", "unknown"):
        lines.append((D.shorten(D.clean(layer.kernel), 44), "#6b7280", 8, False))
    if layer.time_ms is not None:
        lines.append((f"{layer.time_ms:.3f} ms", "#1d4ed8", 10, True))
    inferred = set(layer.inferred)
    shown = layer.absorbed[:MAX_ABSORBED_LINES]
    for key in shown:
        tail = " (inferred)" if key in inferred else ""
        lines.append((D.shorten(D.clean(key), 60) + tail, "#14602c", 9, False))
    if len(layer.absorbed) > len(shown):
        lines.append((f"+{len(layer.absorbed) - len(shown)} more ONNX nodes", "#14602c", 9, True))
    return lines


def render_executed(graph: ExecutedGraph, *, options: CompiledRenderOptions | None = None) -> Rendered:
    """Draw an executed graph as DOT (rules 1-5).

    Args:
        graph: from ``Compiled.executed_graph()`` (optionally ``with_times``).
        options: what to draw.

    Returns:
        A :class:`~fusionviz.graphview.build.Rendered`; ``node_ids`` maps element ids to layer
        names.

    Raises:
        RenderError: bad options.
    """
    opts = options if options is not None else CompiledRenderOptions()
    if opts.rankdir not in ("TB", "LR", "BT", "RL"):
        raise errors.RenderError("rankdir must be one of TB, LR, BT, RL.")
    if opts.max_nodes < 1:
        raise errors.RenderError("max_nodes must be at least 1.")
    by_name = graph.by_name
    body = [layer for layer in graph.layers if not layer.is_constant and not layer.is_io]
    io = [layer for layer in graph.layers if layer.is_io]
    drawn_layers = body[: opts.max_nodes]
    left_out = len(body) - len(drawn_layers)
    notes: list[str] = []
    if left_out:
        notes.append(f"{len(body):,} executed layers: showing the first {len(drawn_layers):,} in execution order.")
    if graph.note:
        notes.append(graph.note)

    out = D.graph_header(rankdir=opts.rankdir, big=len(drawn_layers) > BIG_LAYOUT)
    dot_name: dict[str, str] = {}
    node_ids: dict[str, str] = {}
    families: set[str] = set()
    has_reorder = has_fused = False
    for i, layer in enumerate(drawn_layers):
        nm = f"n{i}"
        dot_name[layer.name] = nm
        eid = D.element_id(D.NODE_ID_PREFIX, layer.name)
        node_ids[eid] = layer.name
        if layer.is_reorder:
            fill, border, style = REORDER_STYLE
            pen = "2"
            has_reorder = True
        else:
            fam = layer_family(layer)
            families.add(fam)
            fill, border, style, pen = D.FAMILY_FILL.get(fam, "#ffffff"), "#7a7a7a", "rounded,filled", "1"
            if len(layer.absorbed) >= 2:
                border, pen, style = FUSED_BORDER, "2.5", "rounded,filled,bold"
                has_fused = True
        out.append(f"  {nm} " + D.attrs(id=eid, label=D.html_label(_lines(layer, by_name)), fillcolor=fill,
                                          color=border, style=style, penwidth=pen,
                                          tooltip=D.shorten(D.clean(layer.name), 300)) + ";")
    for i, layer in enumerate(io):  # rule 4
        nm = f"t{i}"
        dot_name[layer.name] = nm
        is_in = layer.layer_type in ("Input", "Parameter")
        text = layer.name[len("input:"):] if layer.name.startswith("input:") else layer.name
        lines = [(D.shorten(D.clean(text), 36), None, 10, True)]
        facts = [x for x in (layer.precision, layer.output_layout, layer.shape) if x and x != "undef"]
        if facts:
            lines.append((D.shorten(D.clean(" · ".join(facts)), 44), "#333333", 9, False))
        out.append(f"  {nm} " + D.attrs(label=D.html_label(lines), shape="invhouse" if is_in else "house",
                                          style="filled", fillcolor="#dbeafe" if is_in else "#e0f2e9",
                                          color="#4b5563") + ";")
    stubs: dict[str, str] = {}
    edges: list[str] = []
    seen_edges: set[tuple[str, str]] = set()
    for layer in [*drawn_layers, *io]:
        dst = dot_name[layer.name]
        for src_name in layer.inputs:
            src_layer = by_name.get(src_name)
            if src_layer is None or src_layer.is_constant:
                continue
            src = dot_name.get(src_name)
            if src is None:  # rule 5: a layer that is not drawn
                if layer.is_io and layer.layer_type not in ("Input", "Parameter"):
                    continue
                src = stubs.get(src_name)
                if src is None:
                    src = f"x{len(stubs)}"
                    stubs[src_name] = src
                    out.append(f"  {src} " + D.attrs(label="⋯ from " + D.shorten(D.clean(src_name), 24),
                                                     shape="plaintext", fontsize="9", fontcolor="#777777") + ";")
            if (src, dst) not in seen_edges and src != dst:
                seen_edges.add((src, dst))
                edges.append(f"  {src} -> {dst};")
    out.extend(edges)
    legend: list[tuple[str, str, str]] = []
    if has_fused:
        legend.append(("absorbed 2+ ONNX nodes", D.STATUS_STYLE["fused"][0], FUSED_BORDER))
    if has_reorder:
        legend.append(("layout change (Reorder)", REORDER_STYLE[0], REORDER_STYLE[1]))
    for fam in D.FAMILY_FILL:
        if fam in families:
            legend.append((D.FAMILY_TITLE[fam], D.FAMILY_FILL[fam], "#7a7a7a"))
    if opts.legend and legend and drawn_layers:
        rows = "".join(f'<TR><TD BGCOLOR="{D.html_text(f)}" COLOR="{D.html_text(b)}" BORDER="1" WIDTH="14" '
                       f'HEIGHT="10"></TD><TD ALIGN="LEFT">{D.html_text(t)}</TD></TR>' for t, f, b in legend)
        label = D.HtmlLabel('<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="2">'
                            f'<TR><TD COLSPAN="2"><B>{D.html_text(_title(graph.backend))} layers</B></TD></TR>'
                            + rows + "</TABLE>")
        out.append("  legend " + D.attrs(label=label, shape="plaintext", style="filled", fillcolor="white",
                                           color="white", fontsize="9") + ";")
    if not drawn_layers:
        out.append("  empty " + D.attrs(label="No executed layers.", shape="plaintext", fontsize="12") + ";")
    out.append("}")
    return Rendered(dot="\n".join(out) + "\n", drawn=len(drawn_layers), total=len(body),
                    note=" ".join(notes) or None, node_ids=node_ids, scope_ids={}, legend=tuple(legend))


def compile_executed(model: onnx.ModelProto, backend: str, *, shapes=None, layer_times: bool = False,
                     threads: int = 1, runs: int = 5, feeds=None) -> tuple[ExecutedGraph, float]:
    """Compile ``model`` with ``backend`` and read the graph it executes (what ``render --compiled``
    and the Graph page draw).

    Args:
        model: the ONNX model.
        backend: a backend name ("openvino", "tvm").
        shapes: concrete shapes for inputs with symbolic dims (``--shape``).
        layer_times: also measure per-layer times over ``runs`` profiled inferences.
        threads: intra-op threads.
        runs: profiled inferences when ``layer_times``.
        feeds: the inputs to compile for and profile on (default: made from ``shapes``), e.g. an
            ``InputPlan``'s, so the times are those of the inputs onnxruntime's profile ran on.

    Returns:
        (the executed graph, seconds the compilation took).

    Raises:
        fusionviz.backends.BackendUnavailableError: the backend cannot be used here.
        fusionviz.backends.BackendError: it could not compile or run the model.
        fusionviz.errors.RenderError: the backend cannot describe what it executes.
    """
    import tempfile
    import time

    from fusionviz.backends import get_backend
    from fusionviz.inputs import make_inputs
    from fusionviz.model_io import runtime_source

    b = get_backend(backend)
    b.require()
    if feeds is None:
        feeds = make_inputs(model, {k: list(v) for k, v in (shapes or {}).items()} or None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fusionviz_compile_") as tmp:  # weights on disk: a file with its data
        compiled = b.compile(runtime_source(model, tmp), threads=threads,
                             settings={"input_shapes": {k: list(v.shape) for k, v in feeds.items()},
                                       "output_names": [o.name for o in model.graph.output],
                                       "profile_layers": bool(layer_times)})
    compile_s = time.perf_counter() - t0
    graph = compiled.executed_graph()
    if graph is None:
        raise errors.RenderError(f"The {b.title} backend cannot describe the graph it executes.")
    if layer_times:
        prof = compiled.profile(feeds, runs)
        graph = graph.with_times({name: rec["ms"] for name, rec in prof["by_node"].items()})
    return graph, compile_s


def _compile_child(data: bytes, backend: str, shapes, layer_times: bool, threads: int, feeds=None):
    """:func:`compile_executed` in a child process: (graph, seconds) or (None, error sentence)."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    try:
        return compile_executed(model, backend, shapes=shapes, layer_times=layer_times, threads=threads,
                                feeds=feeds)
    except errors.FusionvizError as exc:
        return None, str(exc)


def compile_executed_isolated(model: onnx.ModelProto, backend: str, *, shapes=None, layer_times: bool = False,
                              threads: int = 1, timeout_s: float = 600.0, feeds=None) -> tuple[ExecutedGraph, float]:
    """:func:`compile_executed` in a fresh process, so a runtime that crashes or leaks threads and
    memory cannot take the caller (the app's server) with it.

    Raises:
        fusionviz.errors.RuntimeLoadError: the child failed, crashed or ran out of time (one sentence).
    """
    import concurrent.futures as cf
    import multiprocessing as mp

    from fusionviz.backends.registry import TITLES, canonical

    title = TITLES.get(canonical(backend), backend)
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        fut = pool.submit(_compile_child, model.SerializeToString(), backend,
                          {k: list(v) for k, v in (shapes or {}).items()}, layer_times, threads,
                          None if feeds is None else dict(feeds))
        try:
            graph, got = fut.result(timeout=timeout_s)
        except cf.TimeoutError:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
            raise errors.RuntimeLoadError(f"{title} did not finish compiling within {timeout_s:g} s.") from None
        except cf.process.BrokenProcessPool:
            raise errors.RuntimeLoadError(f"{title} crashed while compiling the model.") from None
    if graph is None:
        raise errors.RuntimeLoadError(str(got))
    return graph, float(got)
