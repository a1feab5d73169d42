"""`info MODEL [--json]`: inputs/outputs, op histogram, params, opsets."""

from __future__ import annotations

from fusionviz.commands._common import add_model_arg, load_model_arg, write_json
from fusionviz.summary import summarize


def register(sub) -> None:
    p = sub.add_parser("info", help="inputs/outputs, op histogram, params, FLOPs")
    add_model_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def run(args) -> int:
    loaded = load_model_arg(args.model)
    s = summarize(loaded.proto)
    extra = {}
    try:
        from fusionviz import analysis

        extra = analysis.model_cost(loaded.proto).as_dict()
    except ImportError:
        pass
    if args.json:
        write_json({"name": loaded.name, "sha256": loaded.sha256, "size_bytes": loaded.size_bytes,
                    **s.as_dict(), **({"cost": extra} if extra else {})}, None)
        return 0
    print(f"model      {loaded.name}  ({loaded.size_bytes / 1e6:.2f} MB, sha256 {loaded.short_hash})")
    print(f"producer   {s.producer or '-'}   IR {s.ir_version}   opsets "
          + ", ".join(f"{d}={v}" for d, v in s.opsets.items()))
    print("inputs")
    for i in s.inputs:
        print(f"  {i['name']}: {i['dtype']} {_fmt_shape(i['shape'])}")
    print("outputs")
    for o in s.outputs:
        print(f"  {o['name']}: {o['dtype']} {_fmt_shape(o['shape'])}")
    print(f"nodes      {s.node_count} ({s.node_count_main} in the main graph, {s.subgraph_count} subgraphs)")
    print(f"params     {s.param_count:,} ({s.param_bytes / 1e6:.2f} MB)")
    if extra:
        print(f"FLOPs      {extra.get('flops', 0):,}  (MACs {extra.get('macs', 0):,})")
    print("ops        " + ", ".join(f"{k}×{v}" for k, v in s.op_histogram.items()))
    return 0
