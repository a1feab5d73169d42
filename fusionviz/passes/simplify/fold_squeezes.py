"""fold_squeezes: ``Squeeze(Squeeze(x, a1), a2)`` becomes one ``Squeeze(x, a)``.

onnxoptimizer's pass of the same name, as an onnxscript rule. The rules:

1. Both Squeezes name their axes (input from opset 13, attribute before); a Squeeze without
   axes removes every dimension of size 1, which needs the shape: such a pair is left alone.
2. The axes are constants. Negative axes need the rank of the Squeeze's input; non-negative
   ones do not.
3. The axes of the second Squeeze count the dimensions the first one kept, so each is mapped
   back to ``x``: the ``k``-th dimension left after the first Squeeze is the ``k``-th index of
   ``x`` not in ``a1``. The merged axes are ``a1`` plus those, sorted.
4. The intermediate has no other consumer and is not a graph output (else both stay).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import const_value, ints_attr
from fusionviz.passes.rewrite import apply_rules


def squeeze_axes(node: ir.Node, rank: int | None) -> tuple[list[int] | None, str]:
    """Rules 1-2: the non-negative axes ``node`` removes, or (None, why not known)."""
    if len(node.inputs) >= 2 and node.inputs[1] is not None:
        value = const_value(node.inputs[1])
        if value is None:
            return None, "the axes are not a constant"
        axes = [int(a) for a in value.reshape(-1)]
    else:
        axes = ints_attr(node, "axes")
        if axes is None:
            return None, "a Squeeze without axes removes every dimension of size 1"
    if any(a < 0 for a in axes):
        if rank is None:
            return None, "negative axes and the input rank is unknown"
        axes = [a + rank if a < 0 else a for a in axes]
    return axes, ""


def merged_axes(first: list[int], second: list[int]) -> list[int]:
    """Rule 3: the axes of ``x`` that ``Squeeze(Squeeze(x, first), second)`` removes."""
    removed = set(first)
    kept: list[int] = []
    i = 0
    while len(kept) <= max(second, default=-1):
        if i not in removed:
            kept.append(i)
        i += 1
    return sorted(removed | {kept[a] for a in second})


def _rank(v: ir.Value) -> int | None:
    return len(v.shape) if v.shape is not None else None


class SqueezeSqueeze(orp.RewriteRuleClassBase):
    """The rule: ``Squeeze(Squeeze(x, a1), a2)`` → ``Squeeze(x, merged_axes(a1, a2))``."""

    def __init__(self) -> None:
        super().__init__("SqueezeSqueeze", remove_nodes=False)

    def pattern(self, op, x):
        inner = op.Squeeze(x, _allow_other_inputs=True, _outputs=["mid"])
        return op.Squeeze(inner, _allow_other_inputs=True)

    def check(self, context, x: ir.Value, mid: ir.Value) -> orp.MatchResult:
        r = orp.MatchResult()
        if len(mid.uses()) != 1 or mid.is_graph_output():  # rule 4
            return r.fail("The first Squeeze's output has other consumers.")
        first, why = squeeze_axes(mid.producer(), _rank(x))
        if first is None:
            return r.fail(f"First Squeeze: {why}.")
        rank_x = _rank(x)
        rank_mid = _rank(mid) if mid.shape is not None else (rank_x - len(set(first)) if rank_x is not None else None)
        second, why = squeeze_axes(context.root, rank_mid)
        if second is None:
            return r.fail(f"Second Squeeze: {why}.")
        self._axes = merged_axes(first, second)
        self._as_input = len(context.root.inputs) >= 2
        return r

    def rewrite(self, op, x: ir.Value, mid: ir.Value):
        if self._as_input:
            return op.Squeeze(x, op.Constant(value=ir.tensor(np.array(self._axes, dtype=np.int64))))
        return op.Squeeze(x, axes=self._axes)


class FuseConsecutiveSqueezes(Pass, name="fold_squeezes", aliases=("fuse_consecutive_squeezes",), category=Category.SIMPLIFY,
                              order=145, trigger_ops={"Squeeze"}):
    mirrors_ort = "basic"
    title = "Merge consecutive Squeezes"
    explain = """\
**What:** `Squeeze(Squeeze(x, a1), a2)` becomes one `Squeeze(x, a)`: the second Squeeze's axes
count the dimensions the first one kept, so they are mapped back to `x`'s and merged with `a1`.
E.g. `x` of shape `(1, 3, 1, 4)`: `Squeeze(·, [0])` then `Squeeze(·, [1])` is `Squeeze(x, [0, 2])`.

**Why faster:** a Squeeze is a copy of the tensor (or at least a kernel launch and a new
buffer) for a change of shape only; two in a row do that twice. Exporters write them when a
model drops batch and channel dimensions one at a time.

**Not merged:** a Squeeze without axes (it removes every size-1 dimension, which needs the
shape), axes that are not constants, negative axes of a tensor of unknown rank, an
intermediate that something else also reads.
"""

    def transform(self, model: ir.Model) -> None:
        apply_rules(model, [SqueezeSqueeze.rule()], to_fixed_point=True)
