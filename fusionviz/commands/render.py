"""`render MODEL [--diff OTHER.onnx | --compiled openvino|tvm] [--graph PATH] [--focus NODE --hops K] ... -o OUT.(dot|svg)`.

MODEL is drawn; with ``--diff OTHER``, MODEL is the *before* snapshot and OTHER the *after*
one, and the picture is OTHER with its fused/new/changed nodes highlighted (``--side before``
draws MODEL with the removed nodes highlighted instead). With ``--compiled BACKEND`` the model
is compiled by that backend and the picture is the graph it executes: one box per executed
layer with the ONNX nodes it absorbed (``--layer-times`` measures per-layer times first);
``--side before`` draws MODEL instead, each absorbed node marked with the layer it went into.
``--graph NODE/then_branch`` draws a control-flow body instead of the main graph (nested:
``If_0/then_branch/Loop_3/body``); with ``--diff`` the same body of both models is compared.
SVG is laid out in-process by pygraphviz; when it is missing the command says so and exits 2
(write .dot instead).
"""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path

from fusionviz import errors
from fusionviz.commands._common import add_model_arg, add_shape_arg, load_model_arg, shapes_of

logger = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("render", help="draw the graph (or the diff of two models) as DOT or SVG")
    add_model_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.(dot|svg)", help="output file")
    p.add_argument("--diff", metavar="OTHER.onnx", help="the 'after' model: highlight what changed")
    p.add_argument("--side", choices=("after", "before"), default="after",
                   help="with --diff: draw the after model (default) or the before model")
    p.add_argument("--graph", metavar="PATH",
                   help="draw the If/Loop/Scan body PATH (NODE/then_branch, nested NODE/body/NODE/else_branch) "
                        "instead of the main graph")
    p.add_argument("--focus", metavar="NODE", help="draw only NODE and its neighbours")
    p.add_argument("--hops", type=int, default=2, metavar="K", help="neighbourhood size for --focus")
    p.add_argument("--collapse", action="store_true", help="draw name scopes as boxes")
    p.add_argument("--expand", action="append", default=[], metavar="SCOPE",
                   help="with --collapse: keep SCOPE open (repeatable)")
    p.add_argument("--changed-only", action="store_true", help="with --diff: only changed regions")
    p.add_argument("--context-hops", type=int, default=1, metavar="K",
                   help="neighbours kept around changes with --changed-only")
    p.add_argument("--max-nodes", type=int, default=None, metavar="N", help="cap on drawn nodes")
    p.add_argument("--rankdir", choices=("TB", "LR"), default="TB", help="layout direction")
    p.add_argument("--compiled", metavar="BACKEND", choices=COMPILED_BACKENDS,
                   help="draw the graph BACKEND executes (openvino or tvm), with what each layer absorbed")
    p.add_argument("--layer-times", action="store_true",
                   help="with --compiled: measure per-layer times (a few profiled runs) and show them")
    p.add_argument("--threads", type=int, default=1, help="with --compiled: intra-op threads (default 1)")
    add_shape_arg(p)
    p.set_defaults(func=run)


#: Backends whose executed graph can be drawn.
COMPILED_BACKENDS = ("openvino", "tvm")


def run(args) -> int:
    from fusionviz.graphview import RenderOptions, diff_models, render_graph, render_svg

    out = Path(args.output)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in ("dot", "gv", "svg"):
        raise errors.RenderError(f"Output must end in .dot or .svg, not '{out.suffix or out.name}'.")
    if getattr(args, "compiled", None):
        return _run_compiled(args, out, fmt)
    if getattr(args, "layer_times", False):
        raise errors.RenderError("--layer-times needs --compiled BACKEND.")
    if args.hops < 0 or args.context_hops < 0:
        raise errors.RenderError("--hops and --context-hops must be 0 or more.")
    if args.max_nodes is not None and args.max_nodes < 1:
        raise errors.RenderError("--max-nodes must be at least 1.")
    if args.changed_only and not args.diff:
        raise errors.RenderError("--changed-only needs --diff OTHER.onnx to compare against.")
    model = load_model_arg(args.model).proto
    other = load_model_arg(args.diff).proto if args.diff else None
    if args.graph:
        from fusionviz.graphview.bodies import body_model

        model = body_model(model, args.graph, where=Path(args.model).name)
        other = body_model(other, args.graph, where=Path(args.diff).name) if other is not None else None
    diff = None
    if other is not None:
        diff = diff_models(model, other)
        if args.side == "after":
            model = other
    kw = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
    options = RenderOptions(collapse=args.collapse, expanded=tuple(args.expand), focus=args.focus,
                            hops=args.hops, changed_only=args.changed_only,
                            context_hops=args.context_hops, rankdir=args.rankdir, **kw)
    rendered = render_graph(model, diff=diff, side=args.side, options=options)
    _write(rendered, out, fmt, render_svg)
    where = f" of body {args.graph}" if args.graph else ""
    msg = f"wrote {out} ({rendered.drawn:,} of {rendered.total:,} nodes{where} drawn)"
    if diff is not None:
        msg += "; " + diff.summary()
    sys.stderr.write(msg + "\n")
    if rendered.note:
        sys.stderr.write(f"note: {rendered.note}\n")
    return 0


def _write(rendered, out: Path, fmt: str, render_svg, *, whole: bool = False) -> None:
    """Write DOT, or SVG laid out in-process (``whole``: never split into parts)."""
    if fmt in ("dot", "gv"):
        text = rendered.dot
    elif whole and "parts" in inspect.signature(render_svg).parameters:
        text = quiet_c_stderr(lambda d: render_svg(d, parts=False), rendered.dot)
    else:
        text = quiet_c_stderr(render_svg, rendered.dot)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise errors.RenderError(f"Cannot write '{out}': {exc.strerror}.") from None


def _run_compiled(args, out: Path, fmt: str) -> int:
    """``--compiled BACKEND``: compile, read the executed graph, draw it (or MODEL with its provenance)."""
    from fusionviz.backends import get_backend
    from fusionviz.graphview import RenderOptions, render_graph, render_svg
    from fusionviz.graphview.compiled import (
        CompiledRenderOptions,
        compile_executed,
        executed_diff,
        render_executed,
    )

    if args.diff or args.focus or args.collapse or args.changed_only or args.graph:
        raise errors.RenderError("--compiled draws the executed graph; it cannot be combined with "
                                 "--diff, --graph, --focus, --collapse or --changed-only.")
    if args.threads < 1:
        raise errors.RenderError("--threads must be at least 1.")
    if args.max_nodes is not None and args.max_nodes < 1:
        raise errors.RenderError("--max-nodes must be at least 1.")
    backend = get_backend(args.compiled)
    backend.require()
    loaded = load_model_arg(args.model)
    model = loaded.proto
    graph, compile_s = compile_executed(model, args.compiled, shapes=shapes_of(args), layer_times=args.layer_times,
                                        threads=args.threads)
    if args.side == "before":
        kw = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
        rendered = render_graph(model, diff=executed_diff(model, graph), side="before",
                                options=RenderOptions(rankdir=args.rankdir, **kw))
        _write(rendered, out, fmt, render_svg)
        what = f"{rendered.drawn:,} of {rendered.total:,} nodes of {loaded.name} drawn"
    else:
        kw = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
        rendered = render_executed(graph, options=CompiledRenderOptions(rankdir=args.rankdir, **kw))
        _write(rendered, out, fmt, render_svg, whole=True)
        what = f"{rendered.drawn:,} of {rendered.total:,} executed layers drawn"
    fused = sum(1 for layer in graph.layers if len(layer.absorbed) >= 2 and not layer.is_constant)
    reorders = sum(1 for layer in graph.layers if layer.is_reorder)
    sys.stderr.write(f"wrote {out} ({what}); {backend.title} compiled in {compile_s:.2f} s: "
                     f"{fused} layers absorbed 2+ ONNX nodes, {reorders} layout changes\n")
    if rendered.note:
        sys.stderr.write(f"note: {rendered.note}\n")
    return 0


def quiet_c_stderr(fn, *args):
    """Run ``fn`` with file descriptor 2 sent to /dev/null: Graphviz's bundled fontconfig prints
    warnings about the system's font configuration straight from C, which would break the CLI's
    one-line-on-stderr contract. Python-level errors still surface as exceptions."""
    import os

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                return fn(*args)
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
