"""fold_batchnorm: an inference-mode BatchNormalization folded into the weights before it."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat, nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import weight_value
from fusionviz.passes.fuse.conv_common import is_used, outside_uses, per_channel
from fusionviz.passes.hygiene import Namer
from fusionviz.passes.rewrite import apply_rules


class _BatchNormGuards:
    """Checks and rewrite shared by the BatchNorm rules (mixed into the library's classes).

    The library's rule math (``_scale_weights``, ``get_filters_axis``) is kept; added:

    1. BatchNorm must be in inference mode, its extra outputs unused, ``spatial=1``, and
       every parameter a ``(C,)`` constant.
    2. The weight must be a constant initializer used by no other node (it is rewritten).
    3. The bias may be shared (exporters and initializer de-duplication share all-zero
       biases): the folded bias gets a fresh name instead of overwriting the shared one,
       which the library would refuse (or, without its check, clobber).
    4. A per-channel constant Add between a Conv / ConvTranspose and the BatchNorm (a bias kept
       apart: PP-OCR's upsampling head) is folded with it: ``b' = (b + t − μ)·s + β``
       (:class:`_FoldBNThroughShift`).
    """

    def __init__(self, namer: Namer) -> None:
        super().__init__()
        self._namer = namer

    def _channels(self, inbound: ir.Node) -> int | None:
        w = weight_value(inbound.inputs[1])
        if w is None:
            return None
        if inbound.op_type == "ConvTranspose":
            return w.shape[1] * inbound.attributes.get_int("group", 1)
        if inbound.op_type == "Gemm":
            return w.shape[0] if inbound.attributes.get_int("transB", 0) else w.shape[1]
        return w.shape[0]

    def check(self, context, x, inbound_out: ir.Value, batchnorm_out: ir.Value) -> orp.MatchResult:
        result = orp.MatchResult()
        bn = batchnorm_out.producer()
        inbound = inbound_out.producer()
        if bn.attributes.get_int("training_mode", 0):
            return result.fail("BatchNormalization is in training mode (training_mode=1): its statistics are not constants.")
        if any(is_used(v) for v in bn.outputs[1:]):
            return result.fail("BatchNormalization's running-statistics outputs are used.")
        if bn.attributes.get_int("spatial", 1) != 1:
            return result.fail("BatchNormalization has spatial=0 (per-position statistics).")
        w = inbound.inputs[1]
        w_np = weight_value(w)
        if w_np is None or not w.is_initializer():
            return result.fail(f"The weight '{w.name}' is not a constant initializer.", w)
        if w_np.dtype.kind != "f":
            return result.fail("The weight is not floating point.")
        if outside_uses(w, {inbound}):
            return result.fail(f"The weight '{w.name}' is shared with another node; folding would change it there too.",
                               w)
        if len(inbound.inputs) > 2 and inbound.inputs[2] is not None and weight_value(inbound.inputs[2]) is None:
            return result.fail(f"The bias '{inbound.inputs[2].name}' is not a constant.", inbound.inputs[2])
        channels = self._channels(inbound)
        for p in bn.inputs[1:5]:
            arr = weight_value(p)
            if arr is None or arr.ndim != 1 or arr.shape[0] != channels:
                return result.fail(f"BatchNormalization parameter '{p.name}' is not a ({channels},) constant.", p)
        var = weight_value(bn.inputs[4])
        if not np.all(np.isfinite(var)) or np.any(var + bn.attributes.get_float("epsilon", 1e-5) <= 0):
            return result.fail("BatchNormalization variance + epsilon is not a positive number everywhere: "
                               "folding would write NaN/inf into the weights.")
        return result

    def rewrite(self, op, x, inbound_out, batchnorm_out):
        return self._fold(op, x, inbound_out.producer(), batchnorm_out.producer(), None)

    def _fold(self, op, x, inbound: ir.Node, bn: ir.Node, shift: np.ndarray | None):
        """The folded node; ``shift`` is a per-channel constant added between it and the BN (rule 4)."""
        gamma, beta, mean, var = (weight_value(v) for v in bn.inputs[1:5])
        scale = gamma / np.sqrt(var + bn.attributes.get_float("epsilon", 1e-5))
        w = inbound.inputs[1]
        w_np = weight_value(w)
        w2 = self._scale_weights(w_np, scale, inbound.attributes).astype(w_np.dtype)
        attrs = dict(inbound.attributes)
        gemm_beta = attrs.pop("beta").as_float() if "beta" in attrs else 1.0  # Gemm scales C by beta
        b = inbound.inputs[2] if len(inbound.inputs) > 2 else None
        b_np = weight_value(b) if b is not None else np.zeros_like(mean)
        if shift is not None:
            b_np = b_np + shift
        b2 = ((gemm_beta * b_np - mean) * scale + beta).astype(w_np.dtype)
        return op.op(
            inbound.op_type,
            x,
            op.initializer(ir.tensor(w2), name=self._namer(f"{w.name}_bnfold")),
            op.initializer(ir.tensor(b2), name=self._namer(f"{(b.name if b is not None else w.name)}_bnfold_bias")),
            _name=inbound.name,
            **attrs,
        )


class _FoldBNConv(_BatchNormGuards, _compat.FuseBatchNormIntoConv):
    pass


class _FoldBNConvTranspose(_BatchNormGuards, _compat.FuseBatchNormIntoConvTranspose):
    def check(self, context, x, inbound_out, batchnorm_out) -> orp.MatchResult:
        r = super().check(context, x, inbound_out, batchnorm_out)
        if not r:
            return r
        w = weight_value(inbound_out.producer().inputs[1])
        if w.shape[0] % inbound_out.producer().attributes.get_int("group", 1):
            return r.fail("ConvTranspose in_channels is not divisible by group.")
        return r


class _FoldBNGemm(_BatchNormGuards, _compat.FuseBatchNormIntoGemm):
    pass


class _FoldBNThroughShift(_BatchNormGuards, orp.RewriteRuleClassBase):
    """Rule 4: ``BatchNormalization(Add(Conv|ConvTranspose(x), t))``, ``t`` a per-channel constant."""

    def __init__(self, namer: Namer, inbound: type) -> None:
        super().__init__(namer)
        self._inbound = inbound()  # the library rule whose weight scaling applies
        self.name = f"FoldBNThroughBias{self._inbound.op_type}"

    def pattern(self, op, x, t):
        inbound = getattr(op, self._inbound.op_type)(x, _allow_other_inputs=True, _outputs=["inbound_out"])
        return op.BatchNormalization(op.Add(inbound, t, _outputs=["add_out"]), _allow_other_inputs=True,
                                     _outputs=["batchnorm_out"])

    def _scale_weights(self, weights, scale_factor, attributes):
        return self._inbound._scale_weights(weights, scale_factor, attributes)

    def _shift(self, inbound: ir.Node, t: ir.Value) -> np.ndarray | None:
        w, arr, channels = weight_value(inbound.inputs[1]), weight_value(t), self._channels(inbound)
        if w is None or arr is None or channels is None or arr.dtype != w.dtype:
            return None
        return per_channel(arr, w.ndim, channels)

    def check(self, context, x, t, inbound_out, add_out, batchnorm_out) -> orp.MatchResult:
        r = _BatchNormGuards.check(self, context, x, inbound_out, batchnorm_out)
        if not r:
            return r
        inbound = inbound_out.producer()
        if self._shift(inbound, t) is None:
            arr = weight_value(t)
            what = "not a constant" if arr is None else f"{tuple(arr.shape)}, not one value per channel"
            if nearmiss.active():  # the Add stays in between: say so, not "a condition failed"
                nearmiss.note([inbound, batchnorm_out.producer()], add_out.producer(),
                              f"an Add sits between {inbound.op_type} ({inbound.name}) and BatchNormalization, and "
                              f"its operand '{t.name}' is {what}, so it cannot be folded with the BatchNorm",
                              hint="only a per-channel constant Add folds into the bias", kind="in_between",
                              rule=self.name, depth=150)
            return nearmiss.reported(r.fail(f"The Add's operand '{t.name}' is {what}.", t))
        w = weight_value(inbound.inputs[1])
        if inbound.op_type == "ConvTranspose" and w.shape[0] % inbound.attributes.get_int("group", 1):
            return r.fail("ConvTranspose in_channels is not divisible by group.")
        return r

    def rewrite(self, op, x, t, inbound_out, add_out, batchnorm_out):
        inbound = inbound_out.producer()
        return self._fold(op, x, inbound, batchnorm_out.producer(), self._shift(inbound, t))


class _FoldBNMatMul(_BatchNormGuards, orp.RewriteRuleClassBase):
    """``BatchNormalization(MatMul(x, W))`` with a constant 2-D W and a rank-2 x → ``Gemm(x, W', b')``.

    BatchNorm normalises axis 1, which for a rank-2 MatMul output is the column axis of W:
    ``W' = W · diag(s)``, ``b' = β − μ·s`` with ``s = γ/√(σ²+ε)``.
    """

    def pattern(self, op, x):
        return op.BatchNormalization(
            op.MatMul(x, _allow_other_inputs=True, _outputs=["inbound_out"]),
            _allow_other_inputs=True,
            _outputs=["batchnorm_out"],
        )

    def _channels(self, inbound: ir.Node) -> int | None:
        w = weight_value(inbound.inputs[1])
        return None if w is None or w.ndim != 2 else w.shape[1]

    def check(self, context, x, inbound_out, batchnorm_out) -> orp.MatchResult:
        result = orp.MatchResult()
        mm = inbound_out.producer()
        w = mm.inputs[1]
        w_np = weight_value(w)
        if w_np is None or w_np.ndim != 2:
            return result.fail("MatMul's second input is not a constant 2-D weight.")
        if outside_uses(w, {mm}):
            return result.fail(f"MatMul weight '{w.name}' is shared with another node.")
        ranks = [v.shape.rank() for v in (x, inbound_out, batchnorm_out) if v.shape is not None]
        if not ranks or ranks[0] != 2:
            return result.fail("MatMul input rank is not known to be 2 (BatchNorm's channel axis is then not W's columns).")
        return _BatchNormGuards.check(self, context, x, inbound_out, batchnorm_out)

    def rewrite(self, op, x, inbound_out, batchnorm_out):
        bn = batchnorm_out.producer()
        mm = inbound_out.producer()
        gamma, beta, mean, var = (weight_value(v) for v in bn.inputs[1:5])
        eps = bn.attributes.get_float("epsilon", 1e-5)
        w = weight_value(mm.inputs[1])
        scale = gamma / np.sqrt(var + eps)
        w2 = (w * scale[None, :]).astype(w.dtype)
        b2 = (beta - mean * scale).astype(w.dtype)
        return op.Gemm(
            x,
            op.initializer(ir.tensor(w2), name=self._namer(f"{mm.inputs[1].name}_bnfold")),
            op.initializer(ir.tensor(b2), name=self._namer(f"{mm.inputs[1].name}_bnfold_bias")),
        )


class FoldBatchNorm(Pass, name="fold_batchnorm", category=Category.FUSE, order=210,
                    trigger_ops={"BatchNormalization"}):
    """BatchNormalization after Conv / ConvTranspose / Gemm / MatMul folded into the weights."""

    mirrors_ort = "basic"

    title = "Fold BatchNorm into Conv / ConvTranspose / Gemm / MatMul"
    explain = """\
**What:** an inference-mode `BatchNormalization` that directly follows a `Conv`,
`ConvTranspose`, `Gemm` or `MatMul` (constant 2-D weight, rank-2 input) disappears: its
scale and shift are folded into the weights and bias of the node before it. A per-channel
constant `Add` between a Conv / ConvTranspose and the BatchNorm (a bias the exporter kept
apart) is folded with it.

**Math:** BatchNorm computes `y = γ·(z − μ)/√(σ² + ε) + β` per output channel. With
`s = γ/√(σ² + ε)` and `z = W·x + b`:

- `W' = W · s` (each output channel's filter scaled by its `s`)
- `b' = (b − μ) · s + β` (with an Add of `t` in between: `b' = (b + t − μ) · s + β`)

**Why faster:** BatchNorm reads and writes the whole activation tensor once more; after
folding the convolution produces the normalised result directly, so one kernel launch and one
full-size intermediate tensor disappear (on CPU and GPU alike, a memory-bound op for free).
It also lets the next pass merge the activation into the convolution, so
Conv + BatchNorm + ReLU ends as one kernel.

**Not folded (and why):** BatchNorm in training mode (its statistics change); parameters
that are not constants; a weight shared with another node (folding would change that node
too); a convolution output that is used elsewhere or is a graph output. A BatchNorm with no
convolution or matrix product before it (e.g. BatchNorm → ReLU at the start of a
pre-activation block) has nothing to fold into and stays: onnxruntime has no fused
BatchNorm+ReLU kernel for it on CPU.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "BatchNormalization" for n in model.graph):
            return
        namer = Namer(model)
        rules = [
            _FoldBNConv.rule(namer),
            _FoldBNConvTranspose.rule(namer),
            _FoldBNGemm.rule(namer),
            _FoldBNMatMul.rule(namer),
            _FoldBNThroughShift.rule(namer, _compat.FuseBatchNormIntoConv),
            _FoldBNThroughShift.rule(namer, _compat.FuseBatchNormIntoConvTranspose),
        ]
        apply_rules(model, rules, commute=True)
