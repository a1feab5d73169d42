"""`optimize MODEL -o OUT.onnx [--passes a,b | --all] [--shape ..] [--input ..] [--inputs F]
[--report R.json|R.html|R.md] [--freeze NAME=VALUE] [--no-verify] [--no-bisect] [--rtol R] [--atol A]`.

The report is :func:`fusionviz.report.build`'s, the app's own; its file's extension picks the
format (``.html``: one self-contained page with both graphs, :mod:`fusionviz.report_html`).

When the result of exact passes fails verification, the passes responsible are found
(:mod:`fusionviz.bisect`) and the list without them is run and verified; if that verifies it is
delivered (exit 0) with a ``note:`` line per declined pass, and the report lists them as
``declined`` with the reason. An explicit ``--passes`` list is treated the same way: the passes
the user asked for that keep the outputs, verified, with a note, beat no model at all.
``--no-bisect`` fails the whole run instead (exit 3).
"""

from __future__ import annotations

from pathlib import Path

from fusionviz import errors, model_io
from fusionviz.commands import _common as common


def register(sub) -> None:
    p = sub.add_parser("optimize", help="apply passes, verify in onnxruntime, save")
    common.add_model_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    common.add_pass_args(p)
    common.add_input_args(p)
    common.add_freeze_arg(p)
    p.add_argument("--report", metavar="REPORT.(json|html|md)",
                   help="write the report; the extension picks the format: .json (data), .html (one self-contained "
                        "page with both graphs, the passes, near misses, verification, environment), .md")
    p.add_argument("--keep-fp32", metavar="NODE,NODE", default=None,
                   help="precision passes (fp16, int8_*) keep these nodes in float32 (compare of the original "
                        "and a precision result lists the nodes that add the most error)")
    switches = {
        "--external-data": "write the weights (initializers of 1 MB or more) to OUT.onnx.data next to the model; "
                           "done anyway when the model's weights stay on disk (big models) or it would pass "
                           "protobuf's 2 GB",
        "--no-verify": "skip the onnxruntime comparison",
        "--compare": "compare every intermediate tensor of the original and the result and put the rows in --report "
                     "(done anyway when verification fails, a pass is declined or a pass is lossy)",
        "--no-bisect": "when verification fails, fail (exit 3) instead of finding the passes responsible and "
                       "delivering the verified rest without them",
    }
    for flag, tip in switches.items():
        p.add_argument(flag, action="store_true", help=tip)
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="relative tolerance: |a-b| <= atol + rtol*|b| + noise floor (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.set_defaults(func=run)


def run(args) -> int:
    from fusionviz.passes.pipeline import new_weights_on_disk

    with new_weights_on_disk():  # a big model's new weights to disk (model_io rule 10) until the command ends
        return _optimize(args)


def _optimize(args) -> int:
    from fusionviz import report as R
    from fusionviz import verify  # heavy imports only when the command runs
    from fusionviz.passes import registry, run_pipeline
    from fusionviz.passes.precision.keep import keeping_fp32

    if args.report and R.format_of(args.report) is None:  # before any work
        raise errors.InputSpecError(f"--report must end in .json, .html or .md, not '{args.report}'.")

    passes = registry.resolve(common.pass_names_of(args))  # validates names before any work
    loaded, plan, shapes, _ = common.load_with_plan(args, run_check=not args.no_verify)  # before any pass runs
    frozen = common.freeze_of(args, plan)
    keep = _keep_fp32(args, loaded.proto, passes)
    with keeping_fp32(keep):
        result = run_pipeline(loaded.proto, [p.name for p in passes], keep_snapshots=False, shapes=shapes,
                              freeze=frozen,
                              progress=lambda i, n, name: common.progress(f"[{i}/{n}] {name}") if i < n else None)
    _say_reports(result)
    code = 0
    v = found = None
    if not args.no_verify:
        exact = all(p.exact for p in passes)
        # A frozen input is verified against the user's own model fed that value.
        reference = loaded.proto if frozen else result.original
        v = verify.verify(reference, result.final, plan=plan, rtol=args.rtol, atol=args.atol,
                          report_only=not exact, isolated=True)
        common.progress(f"verify: {v.summary()}")
        if exact and v.differs and not args.no_bisect:
            result, v, found = _bisect(args, loaded, plan, shapes, frozen, [p.name for p in passes], result, v)
        if v.error:
            raise errors.RuntimeLoadError(v.error + (f"; bisection: {found.describe()}" if found else ""))
        if not v.ok and exact:
            code = 3
    cmp_ = _compare(args, loaded, plan, frozen, passes, result, v, found)
    report = _report(args, loaded, plan, shapes, [p.name for p in passes], result, v, found, cmp_)
    _, data_file = model_io.save_model_files(result.final, args.output, external=True if args.external_data else None)
    weights = f" (weights in {data_file})" if data_file else ""
    common.progress(f"nodes {result.nodes_before} -> {result.nodes_after}; wrote {args.output}{weights}")
    if data_file:  # the report says where the weights went too
        report["notes"].append(f"The model was written to {args.output} with its weights in {data_file} beside it "
                               "(keep the two files together).")
    if args.report:
        from fusionviz.commands.render import quiet_c_stderr

        # Graphviz's bundled fontconfig may print to file descriptor 2 while the HTML's graphs are laid out.
        quiet_c_stderr(lambda: R.write(report, args.report, before=result.original, after=result.final))
        common.progress(f"wrote the report {args.report}")
    if code == 3:
        where = f" bisection: {found.describe()};" if found else ""
        raise errors.VerificationError(
            f"Outputs differ: {report['verify']['failure']} (atol {args.atol:g}, rtol {args.rtol:g});{where} "
            "model saved for inspection."
        )
    return 0


def _keep_fp32(args, model, passes) -> list[str]:
    """``--keep-fp32``'s node names, each checked against the model (one line when one is unknown)."""
    names = [n.strip() for n in (args.keep_fp32 or "").split(",") if n.strip()]
    if not names:
        return []
    if all(p.exact for p in passes):
        raise errors.InputSpecError("--keep-fp32 is for precision passes (fp16, int8_dynamic, int8_static); "
                                    "none is selected.")
    known = {n.name for n in model.graph.node}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise errors.InputSpecError(f"--keep-fp32: no node named {', '.join(repr(n) for n in unknown[:5])} in the "
                                    "model (names as 'compare' or 'info' print them).")
    return names


def _compare(args, loaded, plan, frozen, passes, result, v, found):
    """The per-tensor comparison for the report: on request (``--compare``), or when it tells the
    user something verification alone does not (a failure, a declined pass, a lossy pass)."""
    if not args.report or args.no_verify:
        return None
    lossy = not all(p.exact for p in passes)
    if not (args.compare or lossy or (v is not None and not v.ok) or (found is not None and found.declined)):
        return None
    from fusionviz.compare import compare_models

    reference = loaded.proto if frozen else result.original
    try:
        cmp_ = compare_models(reference, result.final, plan=plan, rtol=args.rtol, atol=args.atol, isolated=True)
    except errors.FusionvizError as exc:
        common.progress(f"note: no per-tensor comparison in the report: {exc}")
        return None
    common.progress(f"compare: {cmp_.divergence_line()}")
    return cmp_


def _report(args, loaded, plan, shapes, names, result, v, found, cmp_=None) -> dict:
    """The report (``fusionviz.report.build``, the app's schema) with the command that reproduces the run."""
    from fusionviz import report as R
    from fusionviz import samples

    is_sample = args.model in samples.sample_names() and not Path(args.model).exists()
    command = R.cli_command(args.model, names, shapes=shapes, values=common.given_values(args),
                            inputs_file=args.inputs_file, output=args.output,
                            freeze=common.frozen_values(args), rtol=args.rtol, atol=args.atol,
                            keep_fp32=[n.strip() for n in (args.keep_fp32 or "").split(",") if n.strip()])
    return R.build(model_name=loaded.name, sha256=loaded.sha256, source="sample" if is_sample else "file",
                   result=result, plan=plan, verification=v, bisect=found, compare=cmp_, command=command)


def _say_reports(result) -> None:
    for r in result.reports:
        line = f"{r.name:<28} {len(r.changes):>4} changes  nodes {r.nodes_before} -> {r.nodes_after}  {r.seconds * 1000:.0f} ms"
        if r.near_miss_total:
            line += f"  near misses {r.near_miss_total} (explain: python -m fusionviz explain MODEL --passes {r.name})"
        if r.error:
            line += f"  (failed: {r.failure})"
        elif r.declined:
            line += f"  (declined: {r.declined})"
        elif r.skip_reason:
            line += f"  (skipped: {r.skip_reason})"
        common.progress(line)
    for note in result.notes:
        common.progress(f"note: {note}")


def _bisect(args, loaded, plan, shapes, frozen, names, result, v):
    """Find the passes responsible for a failed verification; deliver the rest when it verifies.

    Returns:
        ``(result, verification, BisectResult)``: the rest's result (with the declined passes'
        reports) and verification when it verifies, else the full run's as given.
    """
    from fusionviz import bisect

    common.progress(f"bisect: finding the passes that change the outputs (at most {bisect.MAX_PROBES} probes)")
    found = bisect.bisect(loaded.proto, names, plan, rtol=args.rtol, atol=args.atol, shapes=shapes,
                          freeze=frozen, reference=loaded.proto if frozen else None, first=(result, v),
                          progress=common.progress)
    common.progress(f"bisect: {found.describe()}")
    if not found.delivered:
        return result, v, found
    rest = found.result_with_declined()
    common.progress(f"verify: {found.rest_verify.summary()}")
    for name, why in found.reasons().items():
        common.progress(f"note: declined {name}: {why}; the rest verifies and was delivered "
                        "(--no-bisect fails instead)")
    return rest, found.rest_verify, found
