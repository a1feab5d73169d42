"""`optimize MODEL -o OUT.onnx [--passes a,b | --all] [--shape ..] [--input ..] [--inputs F] [--report R.json]
[--freeze NAME=VALUE] [--no-verify] [--rtol R] [--atol A]`."""

from __future__ import annotations

from fusionviz import errors, model_io
from fusionviz.commands import _common as common


def register(sub) -> None:
    p = sub.add_parser("optimize", help="apply passes, verify in onnxruntime, save")
    common.add_model_arg(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--passes", default=None, help="comma-separated pass names (canonical order is used)")
    g.add_argument("--all", action="store_true", help="every pass that keeps outputs equal")
    common.add_input_args(p)
    common.add_freeze_arg(p)
    p.add_argument("--report", metavar="REPORT.json", help="write a JSON report")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime comparison")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="relative tolerance: |a-b| <= atol + rtol*|b| + noise floor (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.set_defaults(func=run)


def run(args) -> int:
    from fusionviz import verify  # heavy imports only when the command runs
    from fusionviz.passes import registry, run_pipeline

    if args.all or args.passes is None:
        names = registry.default_passes()
    else:
        names = [n for n in args.passes.split(",") if n.strip()]
        if not names:
            raise errors.InputSpecError("--passes is empty; name at least one pass or use --all.")
    passes = registry.resolve(names)  # validates names before any work
    loaded, plan, shapes, _ = common.load_with_plan(args, run_check=not args.no_verify)  # before any pass runs
    result = run_pipeline(loaded.proto, [p.name for p in passes], keep_snapshots=False,
                          shapes=shapes, freeze=common.freeze_of(args, plan), progress=lambda i, n, name: common.progress(f"[{i}/{n}] {name}") if i < n else None)
    for r in result.reports:
        line = f"{r.name:<28} {len(r.changes):>4} changes  nodes {r.nodes_before} -> {r.nodes_after}  {r.seconds * 1000:.0f} ms"
        if r.near_miss_total:
            line += f"  near misses {r.near_miss_total} (explain: python -m fusionviz explain MODEL --passes {r.name})"
        if r.error:
            line += f"  (failed: {r.error})"
        elif r.declined:
            line += f"  (declined: {r.declined})"
        elif r.note:
            line += f"  ({r.note})"
        common.progress(line)
    for note in result.notes:
        common.progress(f"note: {note}")
    report = {"model": loaded.name, "inputs": plan.describe_lines(), **result.as_dict()}
    code = 0
    if not args.no_verify:
        exact = all(p.exact for p in passes)
        # A frozen input is verified against the user's own model fed that value.
        reference = loaded.proto if getattr(args, "freeze", None) else result.original
        v = verify.verify(reference, result.final, plan=plan, rtol=args.rtol, atol=args.atol,
                          report_only=not exact, isolated=True)
        report["verify"] = v.as_dict()
        common.progress(f"verify: {v.summary()}")
        if v.error:
            raise errors.RuntimeLoadError(v.error)
        if not v.ok and exact:
            code = 3
    model_io.save_model(result.final, args.output)
    common.progress(f"nodes {result.nodes_before} -> {result.nodes_after}; wrote {args.output}")
    if args.report:
        common.write_json(report, args.report)
    if code == 3:
        raise errors.VerificationError(
            f"Outputs differ: {report['verify']['failure']} (atol {args.atol:g}, rtol {args.rtol:g}); "
            "model saved for inspection."
        )
    return 0
