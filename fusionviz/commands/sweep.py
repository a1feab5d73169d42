"""`sweep MODELS... --passes each|all|a,b,c [--backends ort,openvino] [--time] --out RESULTS.csv|.json`.

Checks every model × pass set × backend on Ray (:mod:`fusionviz.sweep`): each cell is optimized,
written, re-checked for validity and verified on the normal/zeros/edge input sets; ``--time``
also measures it against the original at onnxruntime level all. Each cell is stored in an
SQLite file (``--db``, default RESULTS.sqlite beside the output) as it finishes, so a rerun
skips what is done. Progress goes to stderr, the totals to stdout.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from fusionviz import errors

logger = logging.getLogger(__name__)


def register(sub) -> None:
    """Add the ``sweep`` subcommand to the CLI's subparsers."""
    p = sub.add_parser("sweep", help="check (and time) many models x pass sets x backends on Ray")
    p.add_argument("models", nargs="+", metavar="MODELS",
                   help="model files, folders (every .onnx inside), sample names, 'wild' (the corpus) "
                        "or a corpus manifest .json")
    p.add_argument("--passes", default="each",
                   help="each (every pass alone), all, original, pass names, a+b for one combined "
                        "variant; comma-separated (default each)")
    p.add_argument("--backends", default="ort", help="comma-separated backends: ort, openvino (default ort)")
    p.add_argument("--address", default=None,
                   help="a Ray cluster: 'auto' (this node's cluster) or ray://HOST:PORT; "
                        "default: a local Ray started for the sweep")
    p.add_argument("--workers", type=int, default=2, help="checks at once on the local Ray (default 2)")
    p.add_argument("--time", action="store_true",
                   help="also time each ok cell vs the original at onnxruntime level all (slow)")
    p.add_argument("--min-time", type=float, default=0.5, metavar="S",
                   help="timed seconds per benchmark variant with --time (default 0.5)")
    p.add_argument("--retries", type=int, default=2, help="retries of a task whose worker died (default 2)")
    p.add_argument("--engine", choices=("ray", "inline"), default="ray",
                   help="ray (default) or inline: one cell at a time in this process, no Ray")
    p.add_argument("--out", required=True, metavar="RESULTS.csv|.json", help="the results table")
    p.add_argument("--db", default=None, metavar="PATH",
                   help="the SQLite store (default: RESULTS.sqlite beside --out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the sweep, write the results file and print the totals.

    Returns:
        0 when the sweep ran (failing cells are rows of the table, not an exit status).

    Raises:
        fusionviz.sweep.SweepError: bad models, passes, backends, output path or Ray set-up.
    """
    from fusionviz.sweep import (
        ProgressBar,
        SweepStore,
        parse_backends,
        parse_passes,
        resolve_models,
        run_sweep,
        write_results,
    )
    from fusionviz.sweep.spec import SweepError, versions

    out = Path(args.out)
    if out.suffix.lower() not in (".csv", ".json"):
        raise SweepError(f"--out must end in .csv or .json, not '{errors.printable(out.name, 100)}'.")
    if args.workers < 1:
        raise SweepError("--workers must be at least 1.")
    if args.retries < 0:
        raise SweepError("--retries must be 0 or more.")
    if args.min_time <= 0:
        raise SweepError("--min-time must be positive.")
    variants = parse_passes(args.passes)
    backends = parse_backends(args.backends)
    models = resolve_models(args.models)
    db = Path(args.db) if args.db else out.with_suffix(".sqlite")
    progress = None if args.no_progress else ProgressBar(sys.stderr)
    with SweepStore(db) as store:
        summary = run_sweep(models, variants, store=store, backends=backends, engine=args.engine,
                            address=args.address, workers=args.workers, time_cells=args.time,
                            min_time_s=args.min_time, max_retries=args.retries, progress=progress)
    meta = {"versions": versions(), "backends": list(backends), "variants": [v.label for v in variants],
            "models": [m.name for m in models], "timed": bool(args.time)}
    write_results(summary.rows, out, meta=meta)
    t = summary.totals
    print(f"{summary.cells} cells ({len(models)} models x {len(variants)} variants x {len(backends)} "
          f"backend{'s' if len(backends) != 1 else ''}): ok {t.get('ok', 0)}, invalid {t.get('invalid', 0)}, "
          f"mismatch {t.get('mismatch', 0)}, new_nan {t.get('new_nan', 0)}, error {t.get('error', 0)}; "
          f"{summary.executed} checked now, {summary.skipped} already stored"
          + (f", {summary.timed} timed" if args.time else "") + f"; {summary.seconds:.1f} s")
    print(f"results: {out}  store: {db}")
    return 0
