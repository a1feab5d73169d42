"""The base of the rules whose rewrite is their input: a node that does nothing."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp


class NoOpRule(orp.RewriteRuleClassBase):
    """A rule that replaces its match by its input ``x`` (as an ``Identity``, bypassed later).

    ``remove_nodes=False``: the matched node stays until the pass's cleanup finds it dead, so a
    rule never removes what it did not make dead.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name or type(self).__name__, remove_nodes=False)

    def rewrite(self, op, x: ir.Value, **_):
        return op.Identity(x)


def flatten(*items: object) -> list[orp.RewriteRule]:
    """Rules, rule lists and rule sets as one flat list of rules."""
    out: list[orp.RewriteRule] = []
    for it in items:
        if isinstance(it, orp.RewriteRuleSet):
            out.extend(it.rules)
        elif isinstance(it, (list, tuple)):
            out.extend(it)  # type: ignore[arg-type]
        else:
            out.append(it)  # type: ignore[arg-type]
    return out
