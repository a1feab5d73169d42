"""`bisect MODEL [--ort LEVEL | --passes a,b | --all] [--shape ..] [--json OUT]`: which optimizer
changes the model's outputs.

``--ort LEVEL`` (default ``all``) bisects onnxruntime's own graph transformers at that level
against level off (:mod:`fusionviz.ortbisect`: names from onnxruntime's verbose log, probes
through ``disabled_optimizers``) and prints the transformers whose removal restores the outputs,
ready for ``disabled_optimizers``. ``--passes`` / ``--all`` bisect fusionviz's own passes
(:mod:`fusionviz.bisect`, what ``optimize`` does on its own when verification fails). Exit 0
when the bisection ran (a culprit is its result, not a failure), 2 on bad input or when the
model does not run.
"""

from __future__ import annotations

from fusionviz import errors
from fusionviz.commands import _common as common
from fusionviz.errors import printable


def register(sub) -> None:
    p = sub.add_parser("bisect", help="which optimizer changes the outputs: onnxruntime's (--ort) or our passes")
    common.add_model_arg(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--ort", metavar="LEVEL", nargs="?", const="all", default=None,
                      help="bisect onnxruntime's graph transformers at LEVEL (basic, extended, layout, all; "
                           "default all) against level off (the default when no --passes/--all)")
    what.add_argument("--passes", help="bisect these fusionviz passes (comma-separated)")
    what.add_argument("--all", action="store_true", help="bisect every fusionviz pass")
    common.add_input_args(p)
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4, as optimize)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--max-probes", type=int, default=None, metavar="N", help="at most N probes")
    p.add_argument("--json", metavar="OUT.json", dest="json_out", help="write the result as JSON ('-' for stdout)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.max_probes is not None and args.max_probes < 2:
        raise errors.InputSpecError("--max-probes must be at least 2.")
    if args.passes is not None or args.all:
        return _passes(args)
    return _ort(args, args.ort or "all")


def _ort(args, level: str) -> int:
    from fusionviz.ortbisect import bisect_ort
    from fusionviz.ortlevels import LEVELS

    if level not in LEVELS or level == "off":
        raise errors.InputSpecError(f"--ort takes one of {', '.join(LEVELS[1:])}, not '{level}'.")
    loaded = common.load_model_arg(args.model)
    plan = common.input_plan_of(args, loaded.proto)
    common.say_inputs(plan)
    common.progress(f"bisect: onnxruntime level {level} against level off")
    found = bisect_ort(loaded.proto, plan, level=level, rtol=args.rtol,
                       atol=args.atol, max_probes=args.max_probes, progress=common.progress)
    if found.error and not found.probes:
        raise errors.RuntimeLoadError(found.describe())
    if args.json_out:
        common.write_json({"model": loaded.name, **found.as_dict()}, args.json_out)
        if args.json_out == "-":
            return 0
    print(f"{printable(loaded.name, 100)}: {len(found.candidates)} transformers changed the graph at level "
          f"{level}: {', '.join(found.candidates) or 'none'}")
    base = found.baseline
    if base is not None and (base.first is not None or base.failure):
        print(f"level {level} vs off: {printable(base.failure or base.first.describe(), 400)}")
    print(printable(found.describe(), 600))
    for p in found.probes:
        if p.ignored:
            print(f"note: onnxruntime still applied {', '.join(p.ignored)} although disabled")
    return 0


def _passes(args) -> int:
    from fusionviz import bisect
    from fusionviz.passes import registry

    passes = registry.resolve(common.pass_names_of(args))
    loaded = common.load_model_arg(args.model)
    plan = common.input_plan_of(args, loaded.proto)
    common.say_inputs(plan)
    shapes = common.shapes_of(args)
    found = bisect.bisect(loaded.proto, [p.name for p in passes], plan, rtol=args.rtol, atol=args.atol,
                          shapes=shapes, max_probes=args.max_probes, progress=common.progress)
    if args.json_out:
        common.write_json({"model": loaded.name, **found.as_dict()}, args.json_out)
        if args.json_out == "-":
            return 0
    print(f"{printable(loaded.name, 100)}: {printable(found.describe(), 600)}")
    for name, why in found.reasons().items():
        print(f"  {name}: {printable(why, 400)}")
    if found.excluded:
        print(f"note: precision passes are not bisected (they report their error): {', '.join(found.excluded)}")
    return 0
