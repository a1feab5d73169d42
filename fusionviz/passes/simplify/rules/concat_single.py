"""ConcatSingle: a ``Concat`` of one input is removed."""

from __future__ import annotations

from fusionviz.passes.simplify.rules.noop import NoOpRule


class ConcatSingle(NoOpRule):
    """``Concat(x)`` with a single input → ``x``."""

    def pattern(self, op, x):
        return op.Concat(x)
