"""`info MODEL [--json]`: inputs/outputs, op histogram, params, opsets.

Model-derived text (names, producer, op types, domains) is printed through
:func:`fusionviz.errors.printable`: control characters, ANSI escapes and bidi overrides are shown
as escapes so a hostile model cannot rewrite the terminal; names are cut at ``NAME_CHARS``.
``--json`` prints the full text (JSON escapes control characters itself).
"""

from __future__ import annotations

import logging

from fusionviz.commands._common import add_model_arg, load_model_arg, write_json
from fusionviz.errors import printable
from fusionviz.summary import summarize

logger = logging.getLogger(__name__)

#: Longest name printed in the text view.
NAME_CHARS = 200


def register(sub) -> None:
    p = sub.add_parser("info", help="inputs/outputs, op histogram, params, FLOPs")
    add_model_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _t(text: object, n: int = NAME_CHARS) -> str:
    return printable(text, n)


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(_t(d, 60) for d in shape) + "]"


def run(args) -> int:
    """Print the summary of ``args.model``; returns the exit code."""
    loaded = load_model_arg(args.model)
    s = summarize(loaded.proto)
    extra = {}
    try:
        from fusionviz import analysis

        extra = analysis.model_cost(loaded.proto).as_dict()
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - FLOPs are an extra; the summary still stands
        logger.warning("FLOP count failed: %s", printable(exc, 200))
    if args.json:
        write_json({"name": loaded.name, "sha256": loaded.sha256, "size_bytes": loaded.size_bytes,
                    **s.as_dict(), **({"cost": extra} if extra else {})}, None)
        return 0
    print(f"model      {_t(loaded.name)}  ({loaded.size_bytes / 1e6:.2f} MB, sha256 {loaded.short_hash})")
    print(f"producer   {_t(s.producer) or '-'}   IR {s.ir_version}   opsets "
          + ", ".join(f"{_t(d, 60)}={v}" for d, v in s.opsets.items()))
    print("inputs")
    for i in s.inputs:
        print(f"  {_t(i['name'])}: {_t(i['dtype'])} {_fmt_shape(i['shape'])}")
    print("outputs")
    for o in s.outputs:
        print(f"  {_t(o['name'])}: {_t(o['dtype'])} {_fmt_shape(o['shape'])}")
    try:
        from fusionviz.inputs import plan_inputs

        plan = plan_inputs(loaded.proto)
        if plan.has_choices:
            note = ""
            try:  # the plan optimize, verify and bench use: the first candidate the model runs on
                from fusionviz.verify import probe

                if loaded.weights_dir is None:
                    plan = probe(loaded.proto, plan)
                else:  # a big model: info reads its graph alone, running it would read every weight
                    note = " - not run here: its weights stay on disk; optimize runs it first"
            except Exception as exc:  # noqa: BLE001 - said on the line below; optimize stops on it
                note = f" - the model did not run on any of fusionviz's choices ({printable(exc, 160)})"
            print("run with (fusionviz's choice for the free dims and values; change with --shape / --input)"
                  + note)
            for line in plan.describe_lines():
                print(f"  {_t(line, 2 * NAME_CHARS)}")
    except Exception as exc:  # noqa: BLE001 - the plan is an extra here; optimize reports it properly
        logger.info("no input plan: %s", printable(exc, 200))
    print(f"nodes      {s.node_count} ({s.node_count_main} in the main graph, {s.subgraph_count} subgraphs)")
    print(f"params     {s.param_count:,} ({s.param_bytes / 1e6:.2f} MB)")
    if extra:
        print(f"FLOPs      {extra.get('flops', 0):,}  (MACs {extra.get('macs', 0):,})")
    print("ops        " + ", ".join(f"{_t(k, 80)}×{v}" for k, v in s.op_histogram.items()))
    return 0
