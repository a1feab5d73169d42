"""`passes`: list passes (name, category, title)."""

from __future__ import annotations

from fusionviz.commands._common import write_json


def register(sub) -> None:
    p = sub.add_parser("passes", help="list passes: name, category, title")
    p.add_argument("--json", action="store_true", help="print JSON with explanations")
    p.set_defaults(func=run)


def run(args) -> int:
    from fusionviz.passes import all_passes  # heavy (onnx-ir, onnxscript): only when used

    passes = all_passes()
    if args.json:
        write_json([p.info() for p in passes], None)
        return 0
    width = max(len(p.name) for p in passes)
    for p in passes:
        print(f"{p.name:<{width}}  {p.category.value:<13}  {p.title}")
    return 0
