"""`export-me MODEL [--passes a,b | --all] -o DIR [--time] [--openvino-time] [--error] [--shape ..] [--input ..] [--inputs F]`:
the original and optimized graphs, their provenance and the per-node overlays, written in Google
Model Explorer's graph JSON and node-data JSON (``graphview/model_explorer.py``).

DIR gets ``graphs.json`` (one collection, graphs ``before`` and ``after``), ``node_data_change.json``
(the change class), ``node_data_memory.json`` (bytes each node writes), and with ``--time``
``node_data_time.json`` (median kernel time per node, onnxruntime's profiler, optimizer off), with
``--openvino-time`` ``node_data_ov_time.json`` (each OpenVINO layer's time on every node it holds;
a side OpenVINO cannot read is left out, with the reason printed) and with ``--error`` ``node_data_error.json`` (largest max rel error of each after node's outputs). Open
``graphs.json`` in Model Explorer, then load a node-data file to colour the nodes.
"""

from __future__ import annotations

from pathlib import Path

from fusionviz import errors
from fusionviz.commands import _common as common


def register(sub) -> None:
    p = sub.add_parser("export-me", help="write the before/after graphs, provenance and overlays for Model Explorer")
    common.add_model_arg(p)
    common.add_pass_args(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the JSON files into")
    p.add_argument("--time", action="store_true",
                   help="time every node of both graphs with onnxruntime's profiler (a few runs)")
    p.add_argument("--openvino-time", action="store_true",
                   help="compile both graphs with OpenVINO and export each layer's time on the nodes it holds")
    p.add_argument("--error", action="store_true",
                   help="compare every tensor of the two graphs and export each after node's error")
    common.add_input_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from fusionviz.graphview import diff_models
    from fusionviz.graphview.model_explorer import write_export
    from fusionviz.graphview.overlays import error_overlay, memory_overlay, time_overlay
    from fusionviz.passes import registry, run_pipeline

    passes = registry.resolve(common.pass_names_of(args))
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise errors.InputSpecError(f"'{args.output}' is a file; give a folder for the JSON files.")
    loaded = common.load_model_arg(args.model)
    shapes = common.shapes_of(args) or None
    plan = None
    if args.openvino_time:
        from fusionviz.backends import get_backend

        why = get_backend("openvino").quick_check()
        if why:
            raise errors.InputSpecError(f"--openvino-time needs OpenVINO: {why}")
    if args.time or args.error or args.openvino_time:
        plan = common.input_plan_of(args, loaded.proto)
        common.say_inputs(plan)
    result = run_pipeline(loaded.proto, [p.name for p in passes], keep_snapshots=False, shapes=shapes)
    before, after = result.original, result.final
    diff = diff_models(before, after)
    overlays: dict[str, dict] = {}
    times = {}
    if args.time:
        from fusionviz.profile import node_times

        feeds = plan.feeds("user" if plan.user_data else "normal")
        for side, model in (("before", before), ("after", after)):
            common.progress(f"export-me: timing the {side} graph's nodes")
            times[side] = node_times(model, feeds, isolated=True)
        overlays["time"] = {s: time_overlay(t.times_ms, inlined=t.inlined) for s, t in times.items()}
    overlays["memory"] = {s: memory_overlay(m, shapes, times[s].output_bytes if s in times else None)
                          for s, m in (("before", before), ("after", after))}
    skipped = []
    if args.openvino_time:
        from fusionviz.graphview.compiled import compile_executed_isolated
        from fusionviz.graphview.overlays import openvino_time_overlay

        feeds = plan.feeds("user" if plan.user_data else "normal")
        got = {}
        for side, model in (("before", before), ("after", after)):
            common.progress(f"export-me: timing the {side} graph's OpenVINO layers")
            try:
                graph, _ = compile_executed_isolated(model, "openvino", layer_times=True, feeds=feeds,
                                                     shapes={k: list(v.shape) for k, v in feeds.items()})
            except errors.FusionvizError as exc:
                skipped.append(f"ov_time ({side}): not exported: {exc}")
                continue
            got[side] = openvino_time_overlay(graph, model)
        if got:
            overlays["ov_time"] = got
    if args.error:
        from fusionviz.compare import ERROR_SCALE, compare_models

        common.progress("export-me: comparing every tensor of the two graphs")
        cmp = compare_models(before, after, plan=plan, isolated=True, labels=("before", "after"))
        overlays["error"] = {"after": error_overlay(cmp.node_values("b"), ERROR_SCALE)}
    try:
        paths = write_export(out, loaded.name, before, after, diff, overlays)
    except OSError as exc:
        raise errors.InputSpecError(f"Cannot write into '{args.output}': {exc.strerror}.") from None
    print(f"{loaded.name}: {result.nodes_before:,} -> {result.nodes_after:,} nodes ({diff.summary()})")
    for p in paths:
        print(f"wrote {p}")
    for kind, by_side in overlays.items():
        for side, ov in by_side.items():
            if ov.note:
                print(f"{kind} ({side}): {ov.note}")
    for line in skipped:
        print(line)
    if times:
        print("time: " + ", ".join(f"{s} {t.total_ms:.2f} ms in {len(t.times_ms):,} kernels" for s, t in times.items()))
    return 0
