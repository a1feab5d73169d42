"""fuse_rmsnorm: a decomposed RMSNorm into ONNX ``RMSNormalization`` (opset 23 or newer).

Wraps onnxscript's ``ort_fusions`` ``RmsNormFusion`` (its pattern: both orders of the final
scale Mul, the optional Casts around it) with another replacement: the library writes
onnxruntime's ``SimplifiedLayerNormalization``, which onnxruntime registers in the ONNX domain
where no ONNX opset has it, so the ONNX checker rejects the result (measured: the pass was
declined). ONNX ``RMSNormalization`` (opset 23) has a CPU kernel in onnxruntime 1.32 (checked).
Models of an older opset are left alone (the opset is never raised): the RMSNorms that follow
a residual Add become ``com.microsoft.SkipSimplifiedLayerNormalization`` in
``fuse_skip_rmsnorm``. Guards the library lacks: float32 input and scale with no cast to
another precision, and a scale of shape ``(D,)`` with ``D`` the input's last dim.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass, PreconditionError
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed


class _GuardedRmsNorm(_compat.RmsNormFusion):
    def check(self, context, x, scale, epsilon, compute_dtype, target_dtype, **kw) -> orp.MatchResult:
        r = orp.MatchResult()
        if compute_dtype is not None or target_dtype is not None:
            return r.fail("The norm is computed through a Cast (another precision); only float32 throughout fuses.")
        if x.dtype != ir.DataType.FLOAT or scale.dtype != ir.DataType.FLOAT:
            return r.fail("Input or scale is not float32.")
        if x.shape is None or scale.shape is None or len(scale.shape) != 1 or scale.shape[0] != x.shape[-1]:
            return r.fail(f"The scale shape {scale.shape} is not (last dim of x,).")
        return super().check(context, x, scale, epsilon, compute_dtype, target_dtype, **kw)

    def rewrite(self, op, x, scale, epsilon, **_):
        return op.RMSNormalization(x, scale, axis=-1, epsilon=float(epsilon.const_value.numpy().reshape(())),
                                   stash_type=1)


_RULES: list[orp.RewriteRule] = []


def _rules() -> list[orp.RewriteRule]:
    if not _RULES:
        _RULES.extend([_GuardedRmsNorm.rule("RmsNormScaleFirst", _mul_order=False),
                       _GuardedRmsNorm.rule("RmsNormScaleLast", _mul_order=True)])
    return _RULES


class FuseRmsNorm(Pass, name="fuse_rmsnorm", category=Category.FUSE, order=286,
                  trigger_ops={"ReduceMean"}):
    """Decomposed RMSNorm (Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Mul) into RMSNormalization."""

    title = "Fuse decomposed RMSNorm into RMSNormalization"
    explain = """\
**What:** the seven nodes of an RMSNorm over the last axis, as Llama, Qwen2 and Mistral write it
(`x · 1/√(mean(x²) + ε) · γ`), become ONNX `RMSNormalization(x, γ, axis=-1, epsilon=ε)`
(opset 23 or newer; onnxruntime has a CPU kernel).

**Why faster:** one reduction and four full-size element-wise passes over the hidden stream,
each writing an intermediate, become one kernel that reads each row once and writes it once.

**Older opsets:** onnxruntime's own `SimplifiedLayerNormalization` sits in the ONNX domain
where no opset has it (the checker rejects it), and the opset is never raised for you: an
RMSNorm after a residual Add still fuses, into `com.microsoft.SkipSimplifiedLayerNormalization`
(`fuse_skip_rmsnorm`); a lone one (the first layer's) stays.

**Not fused:** a norm computed in another precision through Casts (float16 / bfloat16 models),
γ of another shape than `(hidden,)`, a non-constant ε, or an intermediate used elsewhere.
"""

    def requires(self, model: ir.Model) -> None:
        opset = onnx_opset(model)
        if opset < 23:
            raise PreconditionError(f"nothing to do: ONNX opset {opset} has no RMSNormalization (23 or newer); "
                                    "fuse_skip_rmsnorm fuses an RMSNorm after a residual Add")
    needs_shapes = False  # infers shapes itself, only when there is a ReduceMean

    def transform(self, model: ir.Model) -> None:
        means = [n for n in model.graph if n.op_type == "ReduceMean"]
        if not means:
            return
        infer_shapes_if_needed(model, [n.inputs[0] for n in means])
        apply_rules(model, _rules())
