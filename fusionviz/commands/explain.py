"""`explain MODEL [--passes a,b | --all] [--shape ..] [--json OUT] [--limit N]`: per pass, what it
changed and where it almost changed something (near misses: the nodes matched, the node that
blocked the rewrite, the reason, and what would make it fire)."""

from __future__ import annotations

from fusionviz import errors
from fusionviz.commands import _common as common


def register(sub) -> None:
    p = sub.add_parser("explain", help="per pass: applied sites and near misses (why a rewrite did not fire)")
    common.add_model_arg(p)
    common.add_pass_args(p)
    common.add_shape_arg(p)
    p.add_argument("--json", metavar="OUT.json", help="write the explanation as JSON ('-' for stdout)")
    p.add_argument("--limit", type=int, default=20, metavar="N",
                   help="lines per pass for applied sites and near misses (default 20; --json has all)")
    p.set_defaults(func=run)


def explanation(result) -> list[dict]:
    """Per pass of a :class:`~fusionviz.passes.pipeline.PipelineResult`: status, applied sites,
    near misses (JSON-ready)."""
    out = []
    for r in result.reports:
        out.append({
            "name": r.name,
            "status": r.status,
            "reason": r.error or r.declined or r.skip_reason or "",
            "applied": [c.as_dict() for c in r.changes],
            "near_misses": [m.as_dict() for m in r.near_misses],
            "near_miss_total": r.near_miss_total,
        })
    return out


def _nodes(ops: list[str], names: list[str], shown: int = 4) -> str:
    """"Conv c1 + BatchNormalization bn1", the first ``shown`` of a long list and how many more."""
    items = [f"{o} {n}" for o, n in zip(ops, names, strict=False)]
    if len(items) > shown:
        return " + ".join(items[:shown]) + f" + {len(items) - shown} more"
    return " + ".join(items) or "-"


def _lines(entry: dict, limit: int) -> list[str]:
    head = (f"{entry['name']:<26} {entry['status']:<9} {len(entry['applied'])} applied · "
            f"{entry['near_miss_total']} near misses")
    lines = [head + (f"  ({entry['reason']})" if entry["reason"] else "")]
    for c in entry["applied"][:limit]:
        lines.append(f"  applied    {c['kind']}: {_nodes(c['in_ops'], c['inputs'])} -> {_nodes(c['out_ops'], c['outputs'])}")
    if len(entry["applied"]) > limit:
        lines.append(f"  ... {len(entry['applied']) - limit} more applied (see --json)")
    for m in entry["near_misses"][:limit]:
        where = f"at {m['blocker']}" if m["blocker"] else "pass"
        lines.append(f"  near miss  {where} [{m['kind']}]: {m['reason']}")
        if m["nodes"]:
            lines.append(f"             matched: {', '.join(m['nodes'])}")
        if m["hint"]:
            lines.append(f"             -> {m['hint']}")
    shown = min(limit, len(entry["near_misses"]))
    if entry["near_miss_total"] > shown:
        lines.append(f"  ... {entry['near_miss_total'] - shown} more near misses")
    return lines


def run(args) -> int:
    from fusionviz.passes import registry, run_pipeline

    passes = registry.resolve(common.pass_names_of(args))
    if args.limit < 0:
        raise errors.InputSpecError("--limit must be 0 or more.")
    loaded = common.load_model_arg(args.model)
    result = run_pipeline(loaded.proto, [p.name for p in passes], keep_snapshots=False,
                          shapes=common.shapes_of(args) or None)
    entries = explanation(result)
    if args.json != "-":
        for e in entries:
            print("\n".join(_lines(e, args.limit)))
        for note in result.notes:
            print(f"note: {note}")
    if args.json:
        common.write_json({"model": loaded.name, "nodes_before": result.nodes_before,
                           "nodes_after": result.nodes_after, "passes": entries, "notes": list(result.notes)},
                          args.json)
    return 0
