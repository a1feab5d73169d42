"""fuse_gelu: erf- and tanh-form GELU subgraphs into one Gelu node.

Wraps onnxscript's ``ort_fusions`` GELU rules (``GeluErfFusion``, ``GeluTanhFusion`` and
``erfgelu``'s two forms), with every commuted operand order, and adds the forms they miss:
``(x·0.5)·(1 + erf(x/√2))`` (Hugging Face's order) and ``x·(1/√2)`` instead of ``x/√2``, and
the same order for the tanh form. The tanh form's ``0.044715·x³`` is taken as
``0.044715·Pow(x, 3)``, as ``0.044715·(x·x·x)`` (the textbook written with products) and as
jax2tf's ``x·(x·(0.044715·x))`` (every association of that chain of Muls that commuting the
operands reaches), each with the half first or last. The fused node is ONNX ``Gelu`` (opset >= 20,
``approximate="tanh"`` for the tanh form) or otherwise onnxruntime's ``com.microsoft.Gelu`` /
``FastGelu``.
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed

_SQRT_TWO = math.sqrt(2.0)


_INV_SQRT_TWO = 1.0 / math.sqrt(2.0)


_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)


_GELU_DTYPES = frozenset({ir.DataType.FLOAT})


def _float_input(x: ir.Value) -> orp.MatchResult:
    r = orp.MatchResult()
    if x.dtype not in _GELU_DTYPES:
        return r.fail(f"GELU input dtype {x.dtype} is not float32 (onnxruntime's Gelu kernels are float32 on CPU).")
    return r


class _GuardedErfGelu(_compat.GeluErfFusion):
    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)


class _GuardedTanhGelu(_compat.GeluTanhFusion):
    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)


def _guarded(fn):
    """A plain pattern function (erfgelu's) wrapped into a guarded rule."""
    return orp.RewriteRule(fn, _compat.erf_gelu_replacement, lambda context, x, **_: _float_input(x))


class _ErfGeluExtra(orp.RewriteRuleClassBase):
    """The erf forms the library misses.

    1. ``Mul(Mul(x, 0.5), 1 + erf(x/√2))`` (Hugging Face order);
    2. ``x·(1/√2)`` instead of ``x/√2`` in any of the three orders.
    """

    def __init__(self, form: int, mul_inner: bool) -> None:
        super().__init__(name=f"ErfGelu{form}{'m' if mul_inner else 'd'}")
        self._form, self._mul_inner = form, mul_inner

    def pattern(self, op, x):
        inner = op.Mul(x, _INV_SQRT_TWO) if self._mul_inner else op.Div(x, _SQRT_TWO)
        one_plus = op.Add(op.Erf(inner), 1.0)
        if self._form == 1:
            return op.Mul(op.Mul(x, one_plus), 0.5)
        if self._form == 2:
            return op.Mul(x, op.Mul(one_plus, 0.5))
        return op.Mul(op.Mul(x, 0.5), one_plus)

    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)

    def rewrite(self, op, x, **_):
        return op.Gelu(x, _domain=MS_DOMAIN)


class _TanhGeluHalfFirst(orp.RewriteRuleClassBase):
    """``Mul(Mul(0.5, x), 1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (Hugging Face's NewGELU order).

    ``cube``: ``"pow"`` (``0.044715·Pow(x, 3)``), ``"mul"`` (``0.044715·(x·x·x)``) or ``"jax"``
    (``x·(x·(0.044715·x))``).
    """

    def __init__(self, cube: str) -> None:
        super().__init__(name=f"TanhGeluHalfFirst{cube[0]}")
        self._cube = cube

    def pattern(self, op, x):
        t = op.Tanh(op.Mul(_SQRT_TWO_OVER_PI, op.Add(x, _scaled_cube(op, x, self._cube))))
        return op.Mul(op.Mul(0.5, x), op.Add(t, 1.0))

    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)

    def rewrite(self, op, x, **_):
        return op.FastGelu(x, _domain=MS_DOMAIN)


def _scaled_cube(op, x, cube: str):
    """``0.044715·x³`` in one of its spellings (see :class:`_TanhGeluHalfFirst`)."""
    if cube == "jax":
        return op.Mul(x, op.Mul(x, op.Mul(0.044715, x)))
    return op.Mul(0.044715, op.Mul(op.Mul(x, x), x) if cube == "mul" else op.Pow(x, 3.0))


class _TanhGeluHalfLast(orp.RewriteRuleClassBase):
    """``x·(0.5·(1 + tanh(√(2/π)·(x + 0.044715·x³))))`` with x³ written as products (the
    library's ``GeluTanhFusion`` takes this order with ``Pow`` only)."""

    def __init__(self, cube: str) -> None:
        super().__init__(name=f"TanhGeluHalfLast{cube[0]}")
        self._cube = cube

    def pattern(self, op, x):
        t = op.Tanh(op.Mul(_SQRT_TWO_OVER_PI, op.Add(x, _scaled_cube(op, x, self._cube))))
        return op.Mul(x, op.Mul(0.5, op.Add(t, 1.0)))

    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)

    def rewrite(self, op, x, **_):
        return op.FastGelu(x, _domain=MS_DOMAIN)


def _erf_rules() -> list[orp.RewriteRule]:
    """Six structures (three multiplication orders x Div/Mul by sqrt 2); commuted later.

    The library's ``GeluErfFusion`` is form 1 with Div and ``erf_gelu_pattern_2`` form 2 with
    Div (``erf_gelu_pattern_1`` is a commuted copy of ``GeluErfFusion`` and is not repeated).
    """
    rules = [_GuardedErfGelu.rule(), _guarded(_compat.erf_gelu_pattern_2), _ErfGeluExtra.rule(3, False)]
    return rules + [_ErfGeluExtra.rule(form, True) for form in (1, 2, 3)]


def _tanh_rules() -> list[orp.RewriteRule]:
    return [_GuardedTanhGelu.rule(), _TanhGeluHalfLast.rule("mul"), _TanhGeluHalfLast.rule("jax"),
            *(_TanhGeluHalfFirst.rule(cube) for cube in ("pow", "mul", "jax"))]


_RULE_CACHE: dict[str, list[orp.RewriteRule]] = {}


def _commuted(kind: str) -> list[orp.RewriteRule]:
    """Commuted rule lists, built once per process (the rules keep no per-model state)."""
    if kind not in _RULE_CACHE:
        base = _erf_rules() if kind == "Erf" else _tanh_rules()
        _RULE_CACHE[kind] = [c for r in base for c in r.commute()]
    return _RULE_CACHE[kind]


class FuseGelu(Pass, name="fuse_gelu", category=Category.FUSE, order=280, trigger_ops=frozenset({"Erf",
               "Tanh"})):
    """Erf- and tanh-form GELU subgraphs into one Gelu node."""

    title = "Fuse GELU (erf and tanh forms)"
    explain = """\
**What:** the 5–9 elementwise nodes exporters write for GELU become one node:

- erf form `0.5·x·(1 + erf(x/√2))` → `Gelu`
- tanh form `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` → `Gelu(approximate="tanh")`

using ONNX `Gelu` when the model's opset is 20 or newer, else onnxruntime's contrib
`com.microsoft.Gelu` / `com.microsoft.FastGelu` (the opset is never raised for you). Every
operand order of the multiplications and additions is recognised, and `x·(1/√2)` as well
as `x/√2`; `x³` as `Pow(x, 3)`, as `x·x·x`, and jax2tf's `x·(x·(0.044715·x))`.

**Why faster:** each of the unfused nodes reads and writes the whole `[batch, seq, 4·hidden]`
activation, the biggest tensor of a transformer layer; fused, it is read once and written
once, with a vectorised erf/tanh. On GPU that is 5–9 kernel launches fewer per layer.

**Not fused:** non-float32 inputs (onnxruntime's CPU Gelu kernels are float32), constants
that differ from √2, 0.5, 1, 0.044715, √(2/π) by more than 1e-5 relative, or an
intermediate that another node also uses.
"""
    needs_shapes = False  # infers shapes itself, only when there is an Erf or Tanh

    def transform(self, model: ir.Model) -> None:
        ops = {n.op_type for n in model.graph}
        if not ops & {"Erf", "Tanh"}:
            return
        infer_shapes_if_needed(model, [n.inputs[0] for n in model.graph if n.op_type in ("Erf", "Tanh")])
        before = {id(n) for n in model.graph}
        for kind in ("Erf", "Tanh"):  # only the rule family that can match
            if kind in ops:
                apply_rules(model, _commuted(kind))
        new = [n for n in model.graph if id(n) not in before and n.domain == MS_DOMAIN]
        if onnx_opset(model) >= 20:
            for node in new:  # ONNX Gelu-20 (standard, portable) instead of the contrib op
                if node.op_type == "FastGelu":
                    node.attributes.add(ir.AttrString("approximate", "tanh"))
                if node.op_type in ("Gelu", "FastGelu"):
                    node.op_type, node.domain = "Gelu", ""
        ensure_ms_import(model)
