"""`tune MODEL [--shape ..] [--json OUT] [--budget-s S]`: search for the fastest verified variant."""

from __future__ import annotations

from fusionviz import errors
from fusionviz.commands._common import (
    add_input_args,
    add_model_arg,
    input_plan_of,
    load_model_arg,
    progress,
    say_inputs,
    shapes_of,
    write_json,
)


def register(sub) -> None:
    p = sub.add_parser("tune", help="search pass subsets x onnxruntime level for the fastest verified variant")
    add_model_arg(p)
    add_input_args(p)
    p.add_argument("--json", metavar="OUT.json", help="write the search path and the winner as JSON ('-' for stdout)")
    p.add_argument("--budget-s", type=float, default=120.0, help="wall-clock budget in seconds (default 120)")
    p.add_argument("--min-time-s", type=float, default=0.5,
                   help="timed seconds per variant per measurement (default 0.5)")
    p.set_defaults(func=run)


def run(args) -> int:
    from fusionviz.tune import tune

    if args.budget_s <= 0 or args.min_time_s <= 0:
        raise errors.InputSpecError("--budget-s and --min-time-s must be positive.")
    loaded = load_model_arg(args.model)
    plan = input_plan_of(args, loaded.proto)  # the inputs verify and bench use
    say_inputs(plan)
    result = tune(loaded.proto, shapes=shapes_of(args), feeds=plan.feeds("user" if plan.user_data else "normal"),
                  budget_s=args.budget_s, min_time_s=args.min_time_s,
                  progress=progress)
    for s in result.steps:
        ms = f"{s.median_ms:8.3f} ms" if s.median_ms is not None else "  failed   "
        mark = "*" if s.chosen else " "
        progress(f"{mark} {s.phase:<34} {s.config.label():<40} {ms}  {'verified' if s.verified else s.note}")
    progress(f"best: {result.best.label()}  {result.best_ms:.3f} ms vs original @all {result.baseline_ms:.3f} ms "
             f"({result.speedup:.2f}x)")
    progress(f"passes: {','.join(result.best.passes) or '(none)'}")
    if args.json:
        write_json({"model": loaded.name, **result.as_dict()}, args.json)
    return 0
