"""Normalisation and activation fusions: GELU and LayerNorm.

``fuse_gelu`` wraps onnxscript's ``ort_fusions`` GELU rules (``GeluErfFusion``,
``GeluTanhFusion`` and ``erfgelu``'s two forms), with every commuted operand order, and adds
the forms they miss: ``(x·0.5)·(1 + erf(x/√2))`` (Hugging Face's order) and ``x·(1/√2)``
instead of ``x/√2``, and the same order for the tanh form. The fused node is ONNX ``Gelu``
(opset >= 20, ``approximate="tanh"`` for the tanh form) or otherwise onnxruntime's
``com.microsoft.Gelu`` / ``FastGelu``.

``fuse_layernorm`` wraps onnxscript's ``LayerNormFusion`` / ``LayerNormBiasFusion``
(ReduceMean with axes as an input, opset >= 18) and adds the opset-17 form (axes as an
attribute). Guards the library lacks: the model's opset has LayerNormalization (>= 17), and
scale/bias have exactly the normalised (last) dimension.
"""

from __future__ import annotations

import logging
import math

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.ort_fusions import erfgelu as _erfgelu
from onnxscript.rewriter.ort_fusions import gelu as _gelu
from onnxscript.rewriter.rules.fusion import _layer_norm

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.fuse_conv import (
    MS_DOMAIN,
    apply_rules,
    ensure_ms_import,
    infer_shapes_if_needed,
)

logger = logging.getLogger(__name__)

_SQRT_TWO = math.sqrt(2.0)
_INV_SQRT_TWO = 1.0 / math.sqrt(2.0)
_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_DTYPES = frozenset({ir.DataType.FLOAT})


def onnx_opset(model: ir.Model) -> int:
    """The default-domain opset version the model imports (0 when none)."""
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)) or 0)


def _float_input(x: ir.Value) -> orp.MatchResult:
    r = orp.MatchResult()
    if x.dtype not in _GELU_DTYPES:
        return r.fail(f"GELU input dtype {x.dtype} is not float32 (onnxruntime's Gelu kernels are float32 on CPU).")
    return r


# --------------------------------------------------------------------------- GELU rules


class _GuardedErfGelu(_gelu.GeluErfFusion):
    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)


class _GuardedTanhGelu(_gelu.GeluTanhFusion):
    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)


def _guarded(fn):
    """A plain pattern function (erfgelu's) wrapped into a guarded rule."""
    return orp.RewriteRule(fn, _erfgelu.gelu, lambda context, x, **_: _float_input(x))


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
    """``Mul(Mul(0.5, x), 1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (Hugging Face's NewGELU order)."""

    def __init__(self, cube_as_mul: bool) -> None:
        super().__init__(name=f"TanhGeluHalfFirst{'m' if cube_as_mul else 'p'}")
        self._cube_as_mul = cube_as_mul

    def pattern(self, op, x):
        cube = op.Mul(op.Mul(x, x), x) if self._cube_as_mul else op.Pow(x, 3.0)
        t = op.Tanh(op.Mul(_SQRT_TWO_OVER_PI, op.Add(x, op.Mul(0.044715, cube))))
        return op.Mul(op.Mul(0.5, x), op.Add(t, 1.0))

    def check(self, context, x, **_) -> orp.MatchResult:
        return _float_input(x)

    def rewrite(self, op, x, **_):
        return op.FastGelu(x, _domain=MS_DOMAIN)


def _erf_rules() -> list[orp.RewriteRule]:
    """Six structures (three multiplication orders x Div/Mul by sqrt 2); commuted later.

    The library's ``GeluErfFusion`` is form 1 with Div and ``erf_gelu_pattern_2`` form 2 with
    Div (``erf_gelu_pattern_1`` is a commuted copy of ``GeluErfFusion`` and is not repeated).
    """
    rules = [_GuardedErfGelu.rule(), _guarded(_erfgelu.erf_gelu_pattern_2), _ErfGeluExtra.rule(3, False)]
    return rules + [_ErfGeluExtra.rule(form, True) for form in (1, 2, 3)]


def _tanh_rules() -> list[orp.RewriteRule]:
    return [_GuardedTanhGelu.rule(), _TanhGeluHalfFirst.rule(False), _TanhGeluHalfFirst.rule(True)]


_RULE_CACHE: dict[str, list[orp.RewriteRule]] = {}


def _commuted(kind: str) -> list[orp.RewriteRule]:
    """Commuted rule lists, built once per process (the rules keep no per-model state)."""
    if kind not in _RULE_CACHE:
        base = _erf_rules() if kind == "Erf" else _tanh_rules()
        _RULE_CACHE[kind] = [c for r in base for c in r.commute()]
    return _RULE_CACHE[kind]


class FuseGelu(Pass):
    """Erf- and tanh-form GELU subgraphs into one Gelu node."""

    name = "fuse_gelu"
    title = "Fuse GELU (erf and tanh forms)"
    category = Category.FUSE
    order = 280
    trigger_ops = frozenset({"Erf", "Tanh"})
    explain = """\
**What:** the 5–9 elementwise nodes exporters write for GELU become one node:

- erf form `0.5·x·(1 + erf(x/√2))` → `Gelu`
- tanh form `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` → `Gelu(approximate="tanh")`

using ONNX `Gelu` when the model's opset is 20 or newer, else onnxruntime's contrib
`com.microsoft.Gelu` / `com.microsoft.FastGelu` (the opset is never raised for you). Every
operand order of the multiplications and additions is recognised, and `x·(1/√2)` as well
as `x/√2`.

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


# --------------------------------------------------------------------------- LayerNorm rules


def _last_dim_param(x: ir.Value, p: ir.Value, what: str) -> orp.MatchResult:
    """LayerNormalization(axis=-1) needs scale/bias of shape (D,) where D = x.shape[-1]."""
    r = orp.MatchResult()
    if p.shape is None or x.shape is None or x.shape.rank() < 1:
        return r.fail(f"The {what} or input shape is unknown.")
    dims = [d for d in p.shape]
    while len(dims) > 1 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 1 or dims[0] != x.shape[-1]:
        return r.fail(f"The {what} shape {list(p.shape)} is not ({x.shape[-1]},).")
    if p.dtype != x.dtype:
        return r.fail(f"The {what} dtype differs from the input's.")
    return r


class _GuardedLayerNorm(_layer_norm.LayerNormFusion):
    """The library's LayerNorm rule (check and rewrite) with a pattern for both ReduceMean forms.

    1. opset >= 18: axes ``[-1]`` as a constant input (the library's own pattern);
    2. opset 17: axes ``[-1]`` as an attribute (the library has a TODO for it).

    ``keepdims`` may be left at its default (1); the library requires it spelled out.
    Guard added: the scale has shape ``(D,)`` with ``D`` the last dimension of x.
    """

    def __init__(self, axes_as_attribute: bool) -> None:
        super().__init__(name=f"LayerNorm{'AxesAttr' if axes_as_attribute else 'AxesInput'}")
        self._attr = axes_as_attribute

    def _mean(self, op, v, out: str):
        if self._attr:
            return op.ReduceMean(v, axes=[-1], _outputs=[out])
        return op.ReduceMean(v, [-1], _outputs=[out])

    def pattern(self, op, x, scale, epsilon):
        mean = self._mean(op, x, "mean")
        deviation = op.Sub(x, mean)
        squared = orp.OrValue([op.Mul(deviation, deviation), op.Pow(deviation, 2)])
        variance = self._mean(op, squared, "variance")
        std_dev = op.Sqrt(op.Add(variance, epsilon))
        normalized = orp.OrValue([op.Mul(deviation, op.Reciprocal(std_dev)), op.Div(deviation, std_dev)])
        return op.Mul(normalized, scale)

    def check(self, context, x, scale, epsilon, mean, variance, **kw) -> orp.MatchResult:
        r = orp.MatchResult()
        for v in (mean, variance):
            node = v.producer()
            if node.attributes.get_int("keepdims", 1) != 1:
                return r.fail("ReduceMean drops the reduced axis (keepdims=0).")
            if node.attributes.get_int("noop_with_empty_axes", 0):
                return r.fail("ReduceMean has noop_with_empty_axes=1.")
        r = super().check(context, x, epsilon, **kw)
        if not r:
            return r
        return _last_dim_param(x, scale, "scale")


class _GuardedLayerNormBias(_layer_norm.LayerNormBiasFusion):
    def check(self, context, x, scale, bias, normalized, **_) -> orp.MatchResult:
        if len(normalized.producer().inputs) > 2 and normalized.producer().inputs[2] is not None:
            return orp.MatchResult().fail("LayerNormalization already has a bias.")
        return _last_dim_param(x, bias, "bias")


class FuseLayerNorm(Pass):
    """Decomposed LayerNorm (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add) into LayerNormalization."""

    name = "fuse_layernorm"
    title = "Fuse decomposed LayerNorm into LayerNormalization"
    category = Category.FUSE
    order = 285
    trigger_ops = frozenset({"ReduceMean", "LayerNormalization"})
    explain = """\
**What:** the nine nodes of a hand-written layer norm over the last axis

`μ = mean(x)`, `d = x − μ`, `σ² = mean(d²)` (`Pow(d, 2)` or `d·d`),
`y = d / √(σ² + ε) · γ + β` (or `d · 1/√(σ² + ε)`)

become one `LayerNormalization(x, γ, β, axis=-1, epsilon=ε)` (ONNX opset 17 or newer).

**Why faster:** the decomposed form makes two reductions and five full-size elementwise
passes over the activations, each writing an intermediate tensor; the fused kernel computes
mean and variance in one pass per row and writes only the result. For a transformer that is
two of these per layer on the `[batch, seq, hidden]` stream.

**Not fused:** models with opset < 17 (no LayerNormalization), non-constant or non-scalar ε,
normalisation over other axes than the last, γ/β whose shape is not `(hidden,)`, or any
intermediate (e.g. the mean) used elsewhere. Exporters that already emit
`LayerNormalization` (torch.onnx at opset 17+) leave nothing for this pass.
"""
    needs_shapes = False  # infers shapes itself, only when there is a ReduceMean or LayerNormalization

    def transform(self, model: ir.Model) -> None:
        means = [n for n in model.graph if n.op_type in ("ReduceMean", "LayerNormalization")]
        if onnx_opset(model) < 17 or not means:
            return
        infer_shapes_if_needed(model, [n.inputs[0] for n in means])
        apply_rules(model, [_GuardedLayerNorm.rule(False), _GuardedLayerNorm.rule(True)])
        apply_rules(model, [_GuardedLayerNormBias.rule()], commute=True)


PASSES: list[type[Pass]] = [FuseGelu, FuseLayerNorm]
