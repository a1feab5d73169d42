"""Passes for tests only: their results change the numbers. A real pass that does is a bug that
gets fixed, so tests of bisection bring their own. Register this module with :func:`register`
(``tests/test_bisect.py``) or by adding ``"fv_broken_passes"`` to the registry's modules.

1. ``test_scale_weight`` (a fusion, order 255): multiplies the first float initializer by 1.5.
2. ``test_shift_weight`` (a simplification, order 155): adds 1 to the last float initializer.
"""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes.base import Category, Change, ChangeKind, Outcome, Pass


def _float_weights(model: ir.Model) -> list[ir.Value]:
    return [v for v in model.graph.initializers.values()
            if v.const_value is not None and v.dtype == ir.DataType.FLOAT]


def _rewrite(pass_name: str, value: ir.Value, array, what: str) -> Outcome:
    value.const_value = ir.tensor(array.astype("float32"), name=value.name)
    detail = f"weight '{value.name}' {what} (a test pass: the outputs change)"
    return Outcome(changes=(Change(ChangeKind.CHANGED, pass_name, (), (), (), (), detail),))


class ScaleWeight(Pass, name="test_scale_weight", category=Category.FUSE, order=255):
    title = "Test: scale the first float weight by 1.5"
    explain = "Multiplies the first float initializer by 1.5, so verification must fail (rule 1)."

    def transform(self, model: ir.Model) -> Outcome | None:
        weights = _float_weights(model)
        if not weights:
            return None
        return _rewrite(self.name, weights[0], weights[0].const_value.numpy() * 1.5, "scaled by 1.5")


class ShiftWeight(Pass, name="test_shift_weight", category=Category.SIMPLIFY, order=155):
    title = "Test: add 1 to the last float weight"
    explain = "Adds 1 to the last float initializer, so verification must fail (rule 2)."

    def transform(self, model: ir.Model) -> Outcome | None:
        weights = _float_weights(model)
        if not weights:
            return None
        return _rewrite(self.name, weights[-1], weights[-1].const_value.numpy() + 1.0, "shifted by 1")


def register(monkeypatch) -> None:
    """Add this module's passes to the registry for one test (``monkeypatch`` undoes it)."""
    from pathlib import Path

    from fusionviz.passes import registry

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    monkeypatch.setattr(registry, "_MODULES", (*registry._MODULES, "fv_broken_passes"))
    monkeypatch.setattr(registry, "_CACHE", None)
