"""fuse_layernorm: a decomposed LayerNorm into LayerNormalization.

Wraps onnxscript's ``LayerNormFusion`` / ``LayerNormBiasFusion`` (ReduceMean with axes as an
input, opset >= 18) and adds the opset-17 form (axes as an attribute). Guards the library
lacks: the model's opset has LayerNormalization (>= 17, the pass's precondition), and
scale/bias have exactly the normalised (last) dimension.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass, PreconditionError
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed


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


class _GuardedLayerNorm(_compat.LayerNormFusion):
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


class _GuardedLayerNormBias(_compat.LayerNormBiasFusion):
    def check(self, context, x, scale, bias, normalized, **_) -> orp.MatchResult:
        if len(normalized.producer().inputs) > 2 and normalized.producer().inputs[2] is not None:
            return orp.MatchResult().fail("LayerNormalization already has a bias.")
        return _last_dim_param(x, bias, "bias")


class FuseLayerNorm(Pass, name="fuse_layernorm", category=Category.FUSE, order=285,
                    trigger_ops={"ReduceMean", "LayerNormalization"}):
    """Decomposed LayerNorm (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add) into LayerNormalization."""

    title = "Fuse decomposed LayerNorm into LayerNormalization"
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

    def requires(self, model: ir.Model) -> None:
        opset = onnx_opset(model)
        if opset < 17:
            raise PreconditionError(f"nothing to do: ONNX opset {opset} has no LayerNormalization (17 or newer)")

    def transform(self, model: ir.Model) -> None:
        means = [n for n in model.graph if n.op_type in ("ReduceMean", "LayerNormalization")]
        if not means:
            return
        infer_shapes_if_needed(model, [n.inputs[0] for n in means])
        apply_rules(model, [_GuardedLayerNorm.rule(False), _GuardedLayerNorm.rule(True)])
        apply_rules(model, [_GuardedLayerNormBias.rule()], commute=True)
