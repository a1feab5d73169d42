"""`tune MODEL [--backend ort,openvino[,tvm,trt]] [--shape ..] [--json OUT] [--budget-s S]`.

Searches pass subsets × onnxruntime level × backend for the fastest verified variant, then
confirms it in a fresh interleaved run against the original under onnxruntime level all and each
backend alone (see :mod:`fusionviz.tune`). Progress and the search path go to stderr; the
recommendation with its confirmed ratio and interval (in :mod:`fusionviz.bench.claims`' words:
"faster" only when the interval excludes 1), one line per backend with the settings it
applied (flush-to-zero included), and a line for each backend that could not be used.
"""

from __future__ import annotations

from fusionviz import errors
from fusionviz.commands import _common as common
from fusionviz.tune import DEFAULT_BACKENDS


def register(sub) -> None:
    p = sub.add_parser("tune", help="search passes x onnxruntime level x backend for the fastest verified "
                                    "variant, then confirm it")
    common.add_model_arg(p)
    common.add_input_args(p)
    common.add_freeze_arg(p)
    p.add_argument("--backend", default=",".join(DEFAULT_BACKENDS), metavar="ort,openvino,tvm,trt",
                   help=f"backends to search (default {','.join(DEFAULT_BACKENDS)}; TVM is slow untuned, "
                        "TensorRT needs an NVIDIA GPU)")
    p.add_argument("--json", metavar="OUT.json", help="write the search path and the winner as JSON ('-' for stdout)")
    p.add_argument("--budget-s", type=float, default=120.0,
                   help="wall-clock budget of the search in seconds (default 120; the confirmation comes on top)")
    p.add_argument("--min-time-s", type=float, default=0.5,
                   help="timed seconds per variant per measurement (default 0.5; the confirmation uses twice that)")
    p.set_defaults(func=run)


def _applied_line(c) -> str:
    info = dict(c.applied or {})
    title = f"{info.pop('title', c.config.backend)} {info.pop('version', '') or ''}".strip()
    info.pop("backend", None)
    return f"  {c.config.backend}: {title}: " + ", ".join(f"{k}={v}" for k, v in info.items())


def run(args) -> int:
    from fusionviz.backends.registry import parse_backends
    from fusionviz.bench.claims import speed_claim
    from fusionviz.tune import tune

    backends = parse_backends(args.backend)  # unknown names -> InputSpecError before any work
    if args.budget_s <= 0 or args.min_time_s <= 0:
        raise errors.InputSpecError("--budget-s and --min-time-s must be positive.")
    loaded, plan, shapes, feeds = common.load_with_plan(args)
    result = tune(loaded.proto, shapes=shapes, feeds=feeds, freeze=common.freeze_of(args, plan), budget_s=args.budget_s, min_time_s=args.min_time_s,
                  backends=backends, progress=common.progress)
    for s in result.steps:
        ms = f"{s.median_ms:8.3f} ms" if s.median_ms is not None else "  failed   "
        mark = "*" if s.chosen else " "
        common.progress(f"{mark} {s.phase:<34} {s.config.label():<40} {ms}  {'verified' if s.verified else s.note}")
    common.progress("confirmation (fresh interleaved run; ratio to the original @ORT all, 95% interval):")
    for c in result.confirmation:
        if c.ratio is None:
            common.progress(f"  {c.role:<9} {c.config.label():<40} failed: {c.note}")
            continue
        words = "(the baseline)" if c.role == "baseline" else speed_claim(c.ratio, c.ci_low, c.ci_high)
        common.progress(f"  {c.role:<9} {c.config.label():<40} {c.median_ms:8.3f} ms  {words}  "
                        f"{'verified' if c.verified else c.note}")
    seen = set()
    for c in result.confirmation:
        if c.applied and c.config.backend not in seen:
            seen.add(c.config.backend)
            common.progress(_applied_line(c))
    for line in result.backend_notes.values():
        common.progress(f"  {line}")
    common.progress(f"best: {result.claim()}")
    common.progress(result.recommendation)
    common.progress(f"passes: {','.join(result.best.passes) or '(none)'}")
    if args.json:
        common.write_json({"model": loaded.name, **result.as_dict()}, args.json)
    return 0
