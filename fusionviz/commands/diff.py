"""`diff BEFORE AFTER [--json OUT]`: what changed between two models, node by node.

BEFORE and AFTER are model paths (file, folder, .zip) or sample names, loaded as every command
loads a model. The comparison is :func:`fusionviz.graphview.diff_models` (its module docstring
has the rules): the counts (fused, removed, added, changed, lifted, unchanged), then each changed
node with what changed ("attribute alpha 0.1 → 0.2", "input 1 (W) values changed, shape
[64,3,3,3]"). ``--json OUT`` writes the counts and the changed nodes with their reasons, plus the
fused, added, removed and lifted nodes, as JSON (``-``: to stdout, instead of the text).

Model-derived text is printed through :func:`fusionviz.errors.printable` (a hostile name cannot
rewrite the terminal).
"""

from __future__ import annotations

import logging

from fusionviz.commands._common import load_model_arg, write_json
from fusionviz.errors import printable

logger = logging.getLogger(__name__)

#: Longest node name printed in the text view.
NAME_CHARS = 120


def register(sub) -> None:
    p = sub.add_parser("diff", help="what changed between two models: counts and each changed node")
    p.add_argument("before", metavar="BEFORE", help="the earlier model: path to .onnx / folder / .zip, or a sample name")
    p.add_argument("after", metavar="AFTER", help="the later model (e.g. the output of optimize)")
    p.add_argument("--json", metavar="OUT", dest="json_out", help="write the diff as JSON to OUT ('-': stdout)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Compare ``args.before`` with ``args.after``; returns the exit code."""
    from fusionviz.graphview import diff_models
    from fusionviz.graphview.diff import COUNT_KEYS
    from fusionviz.graphview.model_graph import node_keys

    before = load_model_arg(args.before)
    after = load_model_arg(args.after)
    diff = diff_models(before.proto, after.proto)
    if args.json_out:
        write_json({"before": before.name, "after": after.name, **diff.as_dict()}, args.json_out)
        if args.json_out == "-":
            return 0
    print(f"before  {printable(before.name, NAME_CHARS)}  ({len(before.proto.graph.node):,} nodes)")
    print(f"after   {printable(after.name, NAME_CHARS)}  ({len(after.proto.graph.node):,} nodes)")
    print("  ".join(f"{k} {diff.counts.get(k, 0):,}" for k in COUNT_KEYS))
    changed = [k for k, s in diff.status_after.items() if s == "changed"]
    if changed:
        nodes = after.proto.graph.node
        ops = dict(zip(node_keys(nodes), (n.op_type for n in nodes), strict=True))
        print(f"changed nodes ({len(changed):,})")
        for k in changed:
            print(f"  {printable(k, NAME_CHARS)} ({printable(ops.get(k, '?'), 60)})")
            for reason in diff.what.get(k, []):
                print(f"    - {printable(reason, 200)}")
    return 0
