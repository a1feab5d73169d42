"""`compare A B [--inputs F.npz] [--shape ..] [--set S] [--json OUT] [--top N]`: where inside the
graph two models start to differ, tensor by tensor.

A and B are model paths (file, folder, .zip) or sample names: e.g. the original and the output
of ``optimize``, or two snapshots. Both run in onnxruntime with optimizations off on one input
set of A's input plan (``--set``; default ``user`` with ``--inputs``, else ``normal``), every
intermediate tensor exposed, in chunks (:mod:`fusionviz.compare` has the rules: matching by name
and through provenance, the tolerance ``verify`` applies, NCHWc layouts, chunks). Prints the
first tensor beyond tolerance with its producing node in A and in B, then the ``--top`` largest
per-tensor errors; ``--json OUT`` writes every row. Exit 0 when the comparison ran (a divergence
is its result, not a failure), 2 on bad input or when a model does not run on the inputs.
"""

from __future__ import annotations

from fusionviz import errors
from fusionviz.commands import _common as common
from fusionviz.errors import printable

#: Longest tensor or node name printed.
NAME_CHARS = 100


def register(sub) -> None:
    p = sub.add_parser("compare", help="per-tensor comparison of two models: where the error starts")
    p.add_argument("a", metavar="A", help="the reference model (path or sample name), e.g. the original")
    p.add_argument("b", metavar="B", help="the model compared with it, e.g. the output of optimize")
    common.add_input_args(p)
    p.add_argument("--set", dest="input_set", default=None, choices=("normal", "zeros", "edge", "user"),
                   help="the input set both models run on (default: user with --inputs, else normal)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="relative tolerance: |a-b| <= atol + rtol*|b| + noise floor (default 1e-4, as optimize)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="print the N largest per-tensor errors (default 10)")
    p.add_argument("--chunk", type=int, default=None, metavar="N",
                   help="at most N tensors exposed per run (default 400); a big model takes several runs")
    p.add_argument("--chunk-mb", type=float, default=None, metavar="MB",
                   help="about MB of exposed tensors per run and model (default 256)")
    p.add_argument("--json", metavar="OUT.json", dest="json_out", help="write every row as JSON ('-' for stdout)")
    p.set_defaults(func=run)


def _fmt(x: float) -> str:
    return f"{x:9.2e}" if x == x and x not in (float("inf"), float("-inf")) else f"{x!s:>9}"


def run(args) -> int:
    """Compare ``args.a`` with ``args.b``; returns the exit code."""
    from fusionviz.compare import DEFAULT_CHUNK_MB, DEFAULT_CHUNK_TENSORS, compare_models

    if args.top < 0:
        raise errors.InputSpecError("--top must be 0 or more.")
    if (args.chunk is not None and args.chunk < 1) or (args.chunk_mb is not None and args.chunk_mb <= 0):
        raise errors.InputSpecError("--chunk must be at least 1 and --chunk-mb more than 0.")
    if args.input_set == "user" and not args.inputs_file:
        raise errors.InputSpecError("--set user needs your data: give it with --inputs FILE.npz.")
    a = common.load_model_arg(args.a)
    b = common.load_model_arg(args.b)
    plan = common.input_plan_of(args, a.proto)
    common.say_inputs(plan)

    def progress(k: int, n: int) -> None:
        if n > 1:
            common.progress(f"compare: run {k}/{n}")

    result = compare_models(a.proto, b.proto, plan=plan, input_set=args.input_set, rtol=args.rtol, atol=args.atol,
                            chunk_tensors=args.chunk or DEFAULT_CHUNK_TENSORS,
                            chunk_mb=args.chunk_mb or DEFAULT_CHUNK_MB, isolated=True, progress=progress)
    if args.json_out:
        common.write_json({"a": a.name, "b": b.name, **result.as_dict()}, args.json_out)
        if args.json_out == "-":
            return 0
    c = result.counts()
    print(f"A  {printable(a.name, NAME_CHARS)}  ({len(a.proto.graph.node):,} nodes)")
    print(f"B  {printable(b.name, NAME_CHARS)}  ({len(b.proto.graph.node):,} nodes)")
    print(f"input set {result.input_set}: {c['compared']:,} tensors compared in {result.runs} run"
          f"{'s' if result.runs != 1 else ''} ({c['by_name']:,} by name, {c['through_provenance']:,} through "
          f"provenance); {c['unmatched']:,} of A without a counterpart in B; {result.seconds:.1f} s")
    print(printable(result.divergence_line(), 400))
    top = result.top(args.top)
    if top:
        print(f"largest per-tensor errors ({len(top)} of {c['compared']:,}):")
        print(f"  {'max rel':>9} {'max abs':>9} {'cosine':>9} {'NaN/Inf':>7}  verdict  tensor (node in A -> node in B)")
        for r in top:
            d = r.diff
            p = r.pair
            b_node = f"{p.op_b} {p.node_b}".strip() if p.node_b else p.op_b
            print(f"  {_fmt(d.max_rel_diff)} {_fmt(d.max_abs_diff)} {d.cosine:9.6f} {d.new_nonfinite:7d}  "
                  f"{'ok' if d.ok else 'BEYOND':<7}  {printable(p.name, NAME_CHARS)} "
                  f"({printable(f'{p.op_a} {p.node_a}', NAME_CHARS)} -> {printable(b_node, NAME_CHARS)})")
    _say_losses(result, a.proto, args.top)
    for note in result.notes:
        print(f"note: {printable(note, 400)}")
    return 0


def _say_losses(result, reference, top: int) -> None:
    """Where the error appears (:mod:`fusionviz.lossy`): the nodes of A that add the most, and the
    ``--keep-fp32`` list for a precision pass, when anything is beyond tolerance."""
    from fusionviz.lossy import keep_fp32, node_losses

    if result.first_divergence is None or top == 0:
        return
    losses = [x for x in node_losses(result, reference) if x.added > 0][:top]
    if not losses:
        return
    print(f"nodes of A that add the most error ({len(losses)}; relative error sqrt(2(1-cosine)) of the output "
          "less the inputs'):")
    print(f"  {'added':>9} {'error':>9}  node -> tensor")
    for x in losses:
        print(f"  {x.added:9.2e} {x.error:9.2e}  {printable(f'{x.op} {x.node}', NAME_CHARS)} -> "
              f"{printable(x.tensor, NAME_CHARS)}")
    keep = keep_fp32(losses, rtol=result.rtol)
    if keep:
        print(f"to keep them in float32 through a precision pass: --keep-fp32 {','.join(keep)}")
