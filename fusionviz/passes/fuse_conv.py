"""Convolution fusions: BatchNorm folding, affine/bias folding, Pad folding, Conv + activation.

Each pass is a thin wrapper around rewrite rules in onnxscript's pattern language
(pattern + check + rewrite; a failed check returns a reason). Where onnxscript already has the
rule it is wrapped (BatchNorm into Conv/ConvTranspose/Gemm, scalar affine around Conv, Pad into
Conv); fusionviz adds guards the library lacks (training-mode BatchNorm, parameter shapes, the
opset-2 Pad form) and its own rules for what no library has (BatchNorm into MatMul, per-channel
affine and bias after Conv, Pad into pools, Conv + activation into ``com.microsoft.FusedConv``).

Rules that apply to every pass here:

1. A weight is rewritten only when it is a constant no other node uses (a shared weight is
   never duplicated or changed under another node's feet).
2. An intermediate tensor that disappears must have no consumer outside the pattern and must
   not be a graph output (onnxscript's matcher checks this).
3. Nodes and initializers that the rewrite itself left without consumers (the old weights,
   the Constant nodes that fed a Pad) are removed; unrelated dead code is left to the
   dead-node pass, so each toggle reports only its own changes.

The helpers :func:`apply_rules`, :func:`const_array`, :func:`per_channel` and
:func:`ensure_ms_import` are shared by ``fuse_matmul`` and ``fuse_norm_act`` (new weight names
come from :class:`fusionviz.passes.hygiene.Namer`, unique across every graph of the model).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import _ir_utils
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter.rules.common import _fuse_batchnorm, _fuse_conv_affine, _fuse_pad_into_conv

from fusionviz.passes.base import Category, Pass, all_nodes
from fusionviz.passes.hygiene import Namer, unique_value_names
from fusionviz.passes.rulefilter import applicable_rules, apply_rule_set, model_ops

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"
_FLT_MAX = float(np.finfo(np.float32).max)

# --------------------------------------------------------------------------- shared helpers


def _used(value: ir.Value) -> bool:
    return bool(value.uses()) or value.is_graph_output()


def apply_rules(model: ir.Model, rules: Sequence[orp.RewriteRule], *, commute: bool = False) -> int:
    """Apply onnxscript rewrite rules to ``model`` in place; return how many fired.

    Afterwards removes only what the rewrite orphaned (rule 3): nodes and initializers that had
    consumers before and have none now.
    """
    graph = model.graph
    had_uses = {id(n) for n in graph if any(_used(v) for v in n.outputs)}
    used_inits = {name for name, v in graph.initializers.items() if _used(v)}
    rule_list = applicable_rules(rules, model_ops(model), commute=commute)
    if not rule_list:
        return 0
    for r in rule_list:  # keep the rewrite scoped: never a global dead-code sweep
        r.remove_nodes = True
    count = apply_rule_set(model, rule_list)
    if count:
        unique_value_names(model)  # the rewriter names new values per graph, not per model
        for node in reversed(list(graph)):
            if id(node) in had_uses and not any(_used(v) for v in node.outputs):
                graph.remove(node, safe=True)
        graph_inputs = set(graph.inputs)
        for name in used_inits:
            v = graph.initializers.get(name)
            if v is not None and not _used(v) and v not in graph_inputs:
                del graph.initializers[name]
    return count


def infer_shapes_if_needed(model: ir.Model, values: Sequence[ir.Value | None] = ()) -> None:
    """onnx shape inference, merged into ``model`` in place, unless ``values`` all have shapes.

    Passes that need shapes only when there is something to match call this lazily, instead of
    setting ``needs_shapes`` (which would make the pipeline infer shapes on every model).
    Failures leave the model as it was (rules then fail their checks with a reason).
    """
    if values and all(v is None or (v.shape is not None and v.dtype is not None) for v in values):
        return
    from fusionviz.passes.shapes import infer_shapes

    infer_shapes(model)  # best effort, like the pipeline's: failures are logged


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The numpy value of a constant (initializer that is not a graph input, or Constant node)."""
    if value is None or value.is_graph_input():
        return None
    return _ir_utils.get_numpy_value(value)


def per_channel(arr: np.ndarray, out_rank: int, channels: int) -> np.ndarray | None:
    """``arr`` as a (channels,) vector if it broadcasts along axis 1 only of a rank-``out_rank`` tensor.

    Returns None when ``arr`` would broadcast along other axes or enlarge the output shape.
    """
    if arr.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - arr.ndim) + tuple(arr.shape)
    if out_rank < 2 or shape[0] != 1 or any(d != 1 for d in shape[2:]):
        return None
    if shape[1] == channels:
        return arr.reshape(channels)
    if shape[1] == 1:
        return np.full((channels,), arr.reshape(()), dtype=arr.dtype)
    return None


def _outside_uses(value: ir.Value, inside: set[ir.Node]) -> list[ir.Node]:
    return [n for n, _ in value.uses() if n not in inside]


def _conv_parts(conv: ir.Node) -> tuple[ir.Value, np.ndarray | None, ir.Value | None, np.ndarray | None]:
    w = conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    return w, const_array(w), b, const_array(b) if b is not None else None


def _check_conv_weights(conv: ir.Node, inside: set[ir.Node], result: orp.MatchResult,
                        *, weight_changes: bool) -> orp.MatchResult:
    """Rule 1: constant weight (and bias), not shared when it is rewritten."""
    w, w_np, b, b_np = _conv_parts(conv)
    if w_np is None:
        return result.fail(f"Conv weight '{w.name}' is not a constant.")
    if b is not None and b_np is None:
        return result.fail(f"Conv bias '{b.name}' is not a constant.")
    if weight_changes and _outside_uses(w, inside):
        return result.fail(f"Conv weight '{w.name}' is shared with another node; folding would change it there too.")
    if w_np.dtype.kind != "f":
        return result.fail("Conv weight is not floating point.")
    return result


# --------------------------------------------------------------------------- fold_batchnorm


class _BatchNormGuards:
    """Checks and rewrite shared by the BatchNorm rules (mixed into the library's classes).

    The library's rule math (``_scale_weights``, ``get_filters_axis``) is kept; added:

    1. BatchNorm must be in inference mode, its extra outputs unused, ``spatial=1``, and
       every parameter a ``(C,)`` constant.
    2. The weight must be a constant initializer used by no other node (it is rewritten).
    3. The bias may be shared (exporters and initializer de-duplication share all-zero
       biases): the folded bias gets a fresh name instead of overwriting the shared one,
       which the library would refuse (or, without its check, clobber).
    """

    def __init__(self, namer: Namer) -> None:
        super().__init__()
        self._namer = namer

    def _channels(self, inbound: ir.Node) -> int | None:
        w = const_array(inbound.inputs[1])
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
        if any(_used(v) for v in bn.outputs[1:]):
            return result.fail("BatchNormalization's running-statistics outputs are used.")
        if bn.attributes.get_int("spatial", 1) != 1:
            return result.fail("BatchNormalization has spatial=0 (per-position statistics).")
        w = inbound.inputs[1]
        w_np = const_array(w)
        if w_np is None or not w.is_initializer():
            return result.fail(f"The weight '{w.name}' is not a constant initializer.")
        if w_np.dtype.kind != "f":
            return result.fail("The weight is not floating point.")
        if _outside_uses(w, {inbound}):
            return result.fail(f"The weight '{w.name}' is shared with another node; folding would change it there too.")
        if len(inbound.inputs) > 2 and inbound.inputs[2] is not None and const_array(inbound.inputs[2]) is None:
            return result.fail(f"The bias '{inbound.inputs[2].name}' is not a constant.")
        channels = self._channels(inbound)
        for p in bn.inputs[1:5]:
            arr = const_array(p)
            if arr is None or arr.ndim != 1 or arr.shape[0] != channels:
                return result.fail(f"BatchNormalization parameter '{p.name}' is not a ({channels},) constant.")
        var = const_array(bn.inputs[4])
        if not np.all(np.isfinite(var)) or np.any(var + bn.attributes.get_float("epsilon", 1e-5) <= 0):
            return result.fail("BatchNormalization variance + epsilon is not a positive number everywhere: "
                               "folding would write NaN/inf into the weights.")
        return result

    def rewrite(self, op, x, inbound_out, batchnorm_out):
        bn = batchnorm_out.producer()
        inbound = inbound_out.producer()
        gamma, beta, mean, var = (const_array(v) for v in bn.inputs[1:5])
        scale = gamma / np.sqrt(var + bn.attributes.get_float("epsilon", 1e-5))
        w = inbound.inputs[1]
        w_np = const_array(w)
        w2 = self._scale_weights(w_np, scale, inbound.attributes).astype(w_np.dtype)
        attrs = dict(inbound.attributes)
        gemm_beta = attrs.pop("beta").as_float() if "beta" in attrs else 1.0  # Gemm scales C by beta
        b = inbound.inputs[2] if len(inbound.inputs) > 2 else None
        b_np = const_array(b) if b is not None else np.zeros_like(mean)
        b2 = ((gemm_beta * b_np - mean) * scale + beta).astype(w_np.dtype)
        return op.op(
            inbound.op_type,
            x,
            op.initializer(ir.tensor(w2), name=self._namer(f"{w.name}_bnfold")),
            op.initializer(ir.tensor(b2), name=self._namer(f"{(b.name if b is not None else w.name)}_bnfold_bias")),
            _name=inbound.name,
            **attrs,
        )


class _FoldBNConv(_BatchNormGuards, _fuse_batchnorm.FuseBatchNormIntoConv):
    pass


class _FoldBNConvTranspose(_BatchNormGuards, _fuse_batchnorm.FuseBatchNormIntoConvTranspose):
    def check(self, context, x, inbound_out, batchnorm_out) -> orp.MatchResult:
        r = super().check(context, x, inbound_out, batchnorm_out)
        if not r:
            return r
        w = const_array(inbound_out.producer().inputs[1])
        if w.shape[0] % inbound_out.producer().attributes.get_int("group", 1):
            return r.fail("ConvTranspose in_channels is not divisible by group.")
        return r


class _FoldBNGemm(_BatchNormGuards, _fuse_batchnorm.FuseBatchNormIntoGemm):
    pass


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
        w = const_array(inbound.inputs[1])
        return None if w is None or w.ndim != 2 else w.shape[1]

    def check(self, context, x, inbound_out, batchnorm_out) -> orp.MatchResult:
        result = orp.MatchResult()
        mm = inbound_out.producer()
        w = mm.inputs[1]
        w_np = const_array(w)
        if w_np is None or w_np.ndim != 2:
            return result.fail("MatMul's second input is not a constant 2-D weight.")
        if _outside_uses(w, {mm}):
            return result.fail(f"MatMul weight '{w.name}' is shared with another node.")
        ranks = [v.shape.rank() for v in (x, inbound_out, batchnorm_out) if v.shape is not None]
        if not ranks or ranks[0] != 2:
            return result.fail("MatMul input rank is not known to be 2 (BatchNorm's channel axis is then not W's columns).")
        return _BatchNormGuards.check(self, context, x, inbound_out, batchnorm_out)

    def rewrite(self, op, x, inbound_out, batchnorm_out):
        bn = batchnorm_out.producer()
        mm = inbound_out.producer()
        gamma, beta, mean, var = (const_array(v) for v in bn.inputs[1:5])
        eps = bn.attributes.get_float("epsilon", 1e-5)
        w = const_array(mm.inputs[1])
        scale = gamma / np.sqrt(var + eps)
        w2 = (w * scale[None, :]).astype(w.dtype)
        b2 = (beta - mean * scale).astype(w.dtype)
        return op.Gemm(
            x,
            op.initializer(ir.tensor(w2), name=self._namer(f"{mm.inputs[1].name}_bnfold")),
            op.initializer(ir.tensor(b2), name=self._namer(f"{mm.inputs[1].name}_bnfold_bias")),
        )


class FoldBatchNorm(Pass):
    """BatchNormalization after Conv / ConvTranspose / Gemm / MatMul folded into the weights."""

    name = "fold_batchnorm"
    title = "Fold BatchNorm into Conv / ConvTranspose / Gemm / MatMul"
    category = Category.FUSE
    order = 210
    trigger_ops = frozenset({"BatchNormalization"})
    explain = """\
**What:** an inference-mode `BatchNormalization` that directly follows a `Conv`,
`ConvTranspose`, `Gemm` or `MatMul` (constant 2-D weight, rank-2 input) disappears: its
scale and shift are folded into the weights and bias of the node before it.

**Math:** BatchNorm computes `y = γ·(z − μ)/√(σ² + ε) + β` per output channel. With
`s = γ/√(σ² + ε)` and `z = W·x + b`:

- `W' = W · s` (each output channel's filter scaled by its `s`)
- `b' = (b − μ) · s + β`

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
        ]
        apply_rules(model, rules)


# --------------------------------------------------------------------------- fuse_conv_affine


class _ConvAffineBase(orp.RewriteRuleClassBase):
    """Conv followed by a per-channel scale (Mul/Div) and optionally a shift (Add/Sub)."""

    def __init__(self, namer: Namer, name: str) -> None:
        super().__init__(name=name)
        self._namer = namer

    def _vector(self, conv: ir.Node, v: ir.Value, result: orp.MatchResult, what: str):
        arr = const_array(v)
        if arr is None:
            return None, result.fail(f"The {what} operand '{v.name}' is not a constant.")
        w = const_array(conv.inputs[1])
        vec = per_channel(arr, w.ndim, w.shape[0])
        if vec is None:
            return None, result.fail(f"The {what} operand '{v.name}' {arr.shape} is not per-channel.")
        if arr.dtype != w.dtype:
            return None, result.fail(f"The {what} operand has dtype {arr.dtype}, the weight {w.dtype}.")
        return vec, result

    def _new_conv(self, op, conv: ir.Node, scale: np.ndarray | None, shift: np.ndarray | None):
        x = conv.inputs[0]
        w, w_np, b, b_np = _conv_parts(conv)
        c = w_np.shape[0]
        bias = b_np if b_np is not None else np.zeros((c,), dtype=w_np.dtype)
        new_w = w
        if scale is not None:
            w2 = (w_np * scale.reshape((c,) + (1,) * (w_np.ndim - 1))).astype(w_np.dtype)
            new_w = op.initializer(ir.tensor(w2), name=self._namer(f"{w.name}_scaled"))
            bias = bias * scale
        if shift is not None:
            bias = bias + shift
        new_b = op.initializer(ir.tensor(bias.astype(w_np.dtype)),
                               name=self._namer(f"{(b.name if b is not None else w.name)}_fused_bias"))
        return op.Conv(x, new_w, new_b, _name=conv.name, **conv.attributes)


class _ConvScale(_ConvAffineBase):
    """``Mul(Conv(x), s)`` or ``Div(Conv(x), d)`` → ``Conv(x, W·s, b·s)``."""

    def __init__(self, namer: Namer, divide: bool) -> None:
        super().__init__(namer, "ConvDivFold" if divide else "ConvMulFold")
        self._divide = divide

    def pattern(self, op, x, s):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Div(conv, s) if self._divide else op.Mul(conv, s)

    def check(self, context, x, s, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = _check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=True)
        if not r:
            return r
        vec, r = self._vector(conv, s, r, "scale")
        if vec is not None and self._divide and np.any(vec == 0):
            return r.fail("Division by zero in the scale.")
        return r

    def rewrite(self, op, x, s, conv_out):
        conv = conv_out.producer()
        w = const_array(conv.inputs[1])
        vec = per_channel(const_array(s), w.ndim, w.shape[0])
        if self._divide:
            vec = (1.0 / vec.astype(np.float64)).astype(vec.dtype)
        return self._new_conv(op, conv, vec, None)


class _ConvScaleShift(_ConvAffineBase):
    """``Add(Mul(Conv(x), s), t)`` → ``Conv(x, W·s, b·s + t)``."""

    def __init__(self, namer: Namer) -> None:
        super().__init__(namer, "ConvMulAddFold")

    def pattern(self, op, x, s, t):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Add(op.Mul(conv, s), t)

    def check(self, context, x, s, t, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = _check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=True)
        if not r:
            return r
        _, r = self._vector(conv, s, r, "scale")
        if not r:
            return r
        _, r = self._vector(conv, t, r, "shift")
        return r

    def rewrite(self, op, x, s, t, conv_out):
        conv = conv_out.producer()
        w = const_array(conv.inputs[1])
        return self._new_conv(op, conv, per_channel(const_array(s), w.ndim, w.shape[0]),
                              per_channel(const_array(t), w.ndim, w.shape[0]))


class _ConvShift(_ConvAffineBase):
    """``Add(Conv(x), t)`` / ``Sub(Conv(x), t)`` → ``Conv(x, W, b ± t)``."""

    def __init__(self, namer: Namer, subtract: bool) -> None:
        super().__init__(namer, "ConvSubBias" if subtract else "ConvAddBias")
        self._subtract = subtract

    def pattern(self, op, x, t):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Sub(conv, t) if self._subtract else op.Add(conv, t)

    def check(self, context, x, t, conv_out) -> orp.MatchResult:
        conv = conv_out.producer()
        r = _check_conv_weights(conv, {conv}, orp.MatchResult(), weight_changes=False)
        if not r:
            return r
        _, r = self._vector(conv, t, r, "bias")
        return r

    def rewrite(self, op, x, t, conv_out):
        conv = conv_out.producer()
        w = const_array(conv.inputs[1])
        vec = per_channel(const_array(t), w.ndim, w.shape[0])
        return self._new_conv(op, conv, None, -vec if self._subtract else vec)


class _GuardedAffineConv(_fuse_conv_affine.AffineConvFusion):
    """onnxscript's ``Conv(x·s + t)`` (scalar s, t; no padding) with extra guards.

    The library's math, with new weights named by the model-wide :class:`Namer` (the library
    names them ``<w>_scaled`` / ``<b>_offset``, and its rewriter overwrites an initializer that
    already has that name), and the weight's dtype kept.
    """

    def __init__(self, namer: Namer) -> None:
        super().__init__()
        self._namer = namer

    def check(self, context, x, w, b, scale, offset, conv_out) -> orp.MatchResult:
        r = super().check(context, x, w, b, scale, offset, conv_out)
        if not r:
            return r
        conv = conv_out.producer()
        w_np = const_array(w)
        if w_np is None or w_np.ndim != 4:
            return r.fail("Only 2-D convolutions (4-D weights) are supported.")
        if conv.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return r.fail("Conv uses auto_pad; the input shift would reach padded zeros.")
        if _outside_uses(w, {conv}) or _outside_uses(b, {conv}):
            return r.fail("Conv weight or bias is shared with another node.")
        return r

    def rewrite(self, op, x, w, b, scale, offset, conv_out):
        w_np, b_np = const_array(w), const_array(b)
        s = float(const_array(scale).reshape(()))
        t = float(const_array(offset).reshape(()))
        w2 = (w_np.astype(np.float64) * s).astype(w_np.dtype)
        b2 = (b_np.astype(np.float64) + t * w_np.astype(np.float64).sum(axis=(1, 2, 3))).astype(b_np.dtype)
        return op.Conv(x, op.initializer(ir.tensor(w2), name=self._namer(f"{w.name}_scaled")),
                       op.initializer(ir.tensor(b2), name=self._namer(f"{b.name}_offset")),
                       **conv_out.producer().attributes)


class FuseConvAffine(Pass):
    """Per-channel Mul (and following Add) after Conv folded into the Conv's weights and bias."""

    name = "fuse_conv_affine"
    title = "Fold affine Mul/Add after Conv into its weights"
    category = Category.FUSE
    order = 215
    trigger_ops = frozenset({"Conv"})
    explain = """\
**What:** `Conv → Mul(s)` (or `Div(d)`, i.e. `s = 1/d`), optionally followed by `Add(t)`,
where `s` and `t` are constants with one value per output channel (or one scalar), becomes
one `Conv` with new weights. Also folds a scalar affine *before* a 1×1-style unpadded 2-D
Conv (`Conv(x·s + t)`, onnxscript's rule).

**Math:** `s·(W∗x + b) + t = (s·W)∗x + (s·b + t)`, per output channel `c`:
`W'[c] = s[c]·W[c]`, `b'[c] = s[c]·b[c] + t[c]`.

**Why faster:** the Mul and Add each read and write the full activation tensor; folded,
they cost nothing at run time (weights are rescaled once, offline). Exporters produce this
from frozen affine layers, Caffe2 `Affine`, or a decomposed BatchNorm.

**Not folded:** constants that vary along other axes than the channel (that would change
the result per position), non-constant operands, a weight shared with another node, or a
Conv output used elsewhere.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Conv" for n in model.graph):
            return
        namer = Namer(model)
        # Mul→Add first (as one match), then a lone Mul or Div; then the input-side affine.
        apply_rules(model, [_ConvScaleShift.rule(namer)], commute=True)
        apply_rules(model, [_ConvScale.rule(namer, False), _ConvScale.rule(namer, True)], commute=True)
        apply_rules(model, [_GuardedAffineConv.rule(namer)])


class FuseConvAddBias(Pass):
    """Conv followed by Add/Sub of a per-channel constant: merged into the Conv bias."""

    name = "fuse_conv_add_bias"
    title = "Fold Add(bias) after Conv into the Conv bias"
    category = Category.FUSE
    order = 220
    trigger_ops = frozenset({"Conv"})
    explain = """\
**What:** `Conv(x, W[, b]) → Add(t)` (or `Sub(t)`) with a constant `t` that has one value per
output channel (shape `(C,1,1)`, `(1,C,1,1)`, or a scalar) becomes `Conv(x, W, b + t)`.

**Why faster:** the convolution kernel already adds a bias while it writes its output; a
separate Add is one more pass over the whole activation tensor and one more intermediate
tensor. Exporters emit it when a layer's bias was kept apart (e.g. `bias=False` convs
followed by a learned shift, or folded normalisations).

**Not folded:** a `t` that varies along spatial axes or the batch axis (its shape would
broadcast the output), a non-constant `t`, a Conv output that is used elsewhere or is a
graph output.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Conv" for n in model.graph):
            return
        namer = Namer(model)
        apply_rules(model, [_ConvShift.rule(namer, False)], commute=True)
        apply_rules(model, [_ConvShift.rule(namer, True)])


# --------------------------------------------------------------------------- fuse_pad_into_conv


def pad_amounts(pad: ir.Node, rank: int | None) -> tuple[list[int] | None, str]:
    """Explicit ``[x1_begin, ..., xr_begin, x1_end, ..., xr_end]`` of a constant-mode Pad.

    Handles both Pad-2 (attributes) and Pad-11+ (inputs). Returns ``(pads, "")`` or
    ``(None, reason)``. The pad *value* is not checked here.
    """
    if pad.attributes.get_string("mode", "constant") != "constant":
        return None, "Pad mode is not 'constant'."
    if len(pad.inputs) < 2:  # Pad-2: pads is an attribute
        if "pads" not in pad.attributes:
            return None, "Pad has no pads."
        raw = list(pad.attributes.get_ints("pads"))
        rank = len(raw) // 2
        axes = list(range(rank))
    else:
        if rank is None:
            return None, "The Pad input's rank is unknown."
        arr = const_array(pad.inputs[1])
        if arr is None:
            return None, f"Pad amounts '{pad.inputs[1].name}' are not a constant."
        raw = [int(v) for v in arr.reshape(-1)]
        if len(pad.inputs) > 3 and pad.inputs[3] is not None:
            ax = const_array(pad.inputs[3])
            if ax is None:
                return None, "Pad axes are not a constant."
            axes = [int(a) % rank for a in ax.reshape(-1)]
        else:
            axes = list(range(rank))
    if len(raw) != 2 * len(axes):
        return None, "Pad amounts do not match its axes."
    pads = [0] * (2 * rank)
    for i, a in enumerate(axes):
        pads[a] = raw[i]
        pads[a + rank] = raw[i + len(axes)]
    if any(p < 0 for p in pads):
        return None, "Pad crops (negative amounts)."
    if pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
        return None, "Pad touches the batch or channel axis."
    return pads, ""


def pad_value(pad: ir.Node) -> float | None:
    """The constant pad value (0 when absent), or None when it is not a constant."""
    if len(pad.inputs) < 2:
        return pad.attributes.get_float("value", 0.0)
    if len(pad.inputs) > 2 and pad.inputs[2] is not None:
        arr = const_array(pad.inputs[2])
        return None if arr is None or arr.size != 1 else float(arr.reshape(()))
    return 0.0


class _GuardedPadConv(_fuse_pad_into_conv.FuseConvPad):
    """onnxscript's Pad→Conv rule, also for Pad-2 (attribute form), with explicit guards."""

    def check(self, context, x, pad, conv) -> orp.MatchResult:
        r = orp.MatchResult()
        pad_node, conv_node = pad.producer(), conv.producer()
        if conv_node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return r.fail("Conv uses auto_pad.")
        value = pad_value(pad_node)
        if value is None or value != 0.0:
            return r.fail("Pad value is not a constant zero.")
        rank = x.shape.rank() if x.shape is not None else None
        pads, reason = pad_amounts(pad_node, rank)
        if pads is None:
            return r.fail(reason)
        if len(pad_node.inputs) >= 2:
            return super().check(context, x, pad, conv)
        self._pads_list = pads
        return r

    def rewrite(self, op, x, pad, conv):
        if x.shape is None:  # Pad-2: rank from the attribute (library reads len(x.shape))
            conv_node = conv.producer()
            rank = len(self._pads_list) // 2
            new = self._pads_list[2:rank] + self._pads_list[rank + 2:]
            attrs = conv_node.attributes.copy()
            if "pads" in attrs:
                new = [a + b for a, b in zip(attrs["pads"].as_ints(), new, strict=False)]
            attrs.add(ir.AttrInt64s("pads", new))
            return op.op(conv_node.op_type, x, *conv_node.inputs[1:], _domain=conv_node.domain,
                         _name=conv_node.name, **attrs)
        return super().rewrite(op, x, pad, conv)


class _NormalizeAutoPadAfterPad(_fuse_pad_into_conv.NormalizePadFormatConv):
    """onnxscript's auto_pad → explicit pads, only for Convs fed by a Pad (so the Pad can fold)."""

    def check(self, context, conv, **kw) -> orp.MatchResult:
        src = conv.producer().inputs[0]
        if src is None or src.producer() is None or src.producer().op_type != "Pad":
            return orp.MatchResult().fail("Conv is not fed by a Pad.")
        return super().check(context, conv, **kw)


class _PadPool(orp.RewriteRuleClassBase):
    """``Pool(Pad(x))`` → ``Pool(x, pads += p)`` when that is exactly equivalent.

    1. AveragePool: zero padding; the pool gets ``count_include_pad=1`` (the zeros counted in
       the divisor, as they were). Only if the pool had no padding of its own or already
       counted it; ``ceil_mode=0``.
    2. MaxPool: pad value −∞ (a pool's own padding is −∞), or zero padding of a tensor that a
       Relu made non-negative, where each window keeps at least one real element
       (pad < kernel). Single output (no Indices), ``ceil_mode=0``.
    """

    def __init__(self, op_type: str) -> None:
        super().__init__(name=f"PadInto{op_type}")
        self._op_type = op_type

    def pattern(self, op, x):
        return getattr(op, self._op_type)(
            op.Pad(x, _allow_other_inputs=True, _outputs=["pad"]), _outputs=["pool"])

    def check(self, context, x, pad, pool) -> orp.MatchResult:
        r = orp.MatchResult()
        pad_node, pool_node = pad.producer(), pool.producer()
        a = pool_node.attributes
        if a.get_string("auto_pad", "NOTSET") != "NOTSET":
            return r.fail("The pool uses auto_pad.")
        if a.get_int("ceil_mode", 0):
            return r.fail("The pool uses ceil_mode=1.")
        rank = x.shape.rank() if x.shape is not None else None
        pads, reason = pad_amounts(pad_node, rank)
        if pads is None:
            return r.fail(reason)
        value = pad_value(pad_node)
        if value is None:
            return r.fail("Pad value is not a constant.")
        own = list(a.get_ints("pads", [0] * (len(pads) - 4)))
        kernel = list(a.get_ints("kernel_shape", []))
        rank = len(pads) // 2
        spatial = pads[2:rank] + pads[rank + 2:]
        if len(own) != len(spatial) or len(kernel) != rank - 2:
            return r.fail("Pool pads/kernel do not match the input rank.")
        if self._op_type == "AveragePool":
            if value != 0.0:
                return r.fail("AveragePool pads with zeros; the Pad value is not zero.")
            if any(own) and not a.get_int("count_include_pad", 0):
                return r.fail("AveragePool has its own padding with count_include_pad=0.")
        else:
            if len(pool_node.outputs) > 1:
                return r.fail("MaxPool also returns Indices (they would shift).")
            if any(d != 1 for d in a.get_ints("dilations", [1] * len(kernel))):
                return r.fail("MaxPool is dilated.")
            if value != -math.inf:
                src = x.producer()
                if value != 0.0 or src is None or src.op_type != "Relu":
                    return r.fail("MaxPool pads with −∞; a zero pad is only equivalent after a Relu.")
                total = [p + o for p, o in zip(spatial, own, strict=True)]
                n = len(kernel)
                if any(total[i] >= kernel[i] or total[i + n] >= kernel[i] for i in range(n)):
                    return r.fail("A window would lie entirely in the zero padding.")
        self._new_pads = [p + o for p, o in zip(spatial, own, strict=True)]
        return r

    def rewrite(self, op, x, pad, pool):
        pool_node = pool.producer()
        attrs = pool_node.attributes.copy()
        attrs.add(ir.AttrInt64s("pads", self._new_pads))
        if self._op_type == "AveragePool":
            attrs.add(ir.AttrInt64("count_include_pad", 1))
        return op.op(self._op_type, x, _name=pool_node.name, **attrs)


class FusePadIntoConv(Pass):
    """Pad (zero, constant, spatial only) folded into Conv pads; also into pools where exact."""

    name = "fuse_pad_into_conv"
    title = "Fold Pad into Conv / pool padding"
    category = Category.FUSE
    order = 225
    trigger_ops = frozenset({"Pad"})
    explain = """\
**What:** a separate `Pad` in front of a `Conv` (constant mode, value 0, constant amounts,
only spatial axes) is removed and its amounts are added to the Conv's own `pads`. Also into
`AveragePool` (with `count_include_pad=1`, so the zeros still count in the average) and into
`MaxPool` when the pad value is −∞ (what MaxPool's own padding means), or zero after a ReLU
(then zeros never win the max as long as every window keeps a real element).

**Why faster (stride/padding fusion):** the explicit Pad copies the whole input into a
larger buffer before the convolution reads it again; a convolution pads implicitly while it
gathers its input windows, so the copy, its kernel launch and the enlarged intermediate
tensor disappear.

**Not folded:** a non-zero pad value, reflect/edge modes, pad amounts or value that are not
constants, padding of the batch or channel axis, negative pads (cropping), zero padding into
a MaxPool of possibly negative data (max(−3, 0) ≠ −3), pools with `ceil_mode=1`.
"""
    needs_shapes = False  # infers shapes itself, only when the model has a Pad

    def transform(self, model: ir.Model) -> None:
        pads = [n for n in model.graph if n.op_type == "Pad"]
        if not pads:
            return
        infer_shapes_if_needed(model, [p.inputs[0] for p in pads])
        apply_rules(model, [_NormalizeAutoPadAfterPad.rule()])
        apply_rules(model, [_GuardedPadConv.rule(), _PadPool.rule("AveragePool"), _PadPool.rule("MaxPool")])


# --------------------------------------------------------------------------- fuse_conv_activation

#: activations onnxruntime's CPU FusedConv kernel accepts (MLAS): name -> default params
_FUSED_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish")


class _ConvActivation(orp.RewriteRuleClassBase):
    """``Act(Conv(x, W[, b]))`` → ``com.microsoft.FusedConv(x, W[, b], activation=Act)``."""

    def __init__(self, act: str) -> None:
        super().__init__(name=f"Conv{act}ToFusedConv")
        self._act = act

    def pattern(self, op, x):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return getattr(op, self._act)(conv, _allow_other_inputs=True, _outputs=["act_out"])

    def _params(self, act: ir.Node) -> tuple[list[float] | None, str]:
        a = act.attributes
        if self._act == "LeakyRelu":
            return [a.get_float("alpha", 0.01)], ""
        if self._act == "HardSigmoid":
            return [a.get_float("alpha", 0.2), a.get_float("beta", 0.5)], ""
        if self._act == "Clip":
            if len(act.inputs) <= 1 and ("min" in a or "max" in a):  # Clip-6 attributes
                return [a.get_float("min", -_FLT_MAX), a.get_float("max", _FLT_MAX)], ""
            bounds = []
            for i, default in ((1, -_FLT_MAX), (2, _FLT_MAX)):
                v = act.inputs[i] if len(act.inputs) > i else None
                if v is None:
                    bounds.append(default)
                    continue
                arr = const_array(v)
                if arr is None or arr.size != 1:
                    return None, f"Clip bound '{v.name}' is not a constant scalar."
                bounds.append(float(arr.reshape(())))
            return bounds, ""
        return [], ""

    def check(self, context, x, conv_out, act_out) -> orp.MatchResult:
        r = orp.MatchResult()
        conv = conv_out.producer()
        w = const_array(conv.inputs[1])
        dtype = conv.inputs[1].dtype
        if dtype is None and w is not None:
            dtype = ir.DataType.from_numpy(w.dtype)
        if dtype != ir.DataType.FLOAT:
            return r.fail("onnxruntime's CPU FusedConv kernel is float32 only.")
        params, reason = self._params(act_out.producer())
        if params is None:
            return r.fail(reason)
        self._activation_params = params
        return r

    def rewrite(self, op, x, conv_out, act_out):
        conv = conv_out.producer()
        attrs = dict(conv.attributes)
        extra = {"activation_params": self._activation_params} if self._activation_params else {}
        return op.FusedConv(*conv.inputs, _domain=MS_DOMAIN, _name=conv.name,
                            activation=self._act, **extra, **attrs)


class FuseConvActivation(Pass):
    """Conv + activation into onnxruntime's contrib ``com.microsoft.FusedConv``."""

    name = "fuse_conv_activation"
    title = "Fuse Conv + activation (FusedConv)"
    category = Category.FUSE
    order = 260
    trigger_ops = frozenset({"Conv"})
    explain = """\
**What:** `Conv` followed by `Relu`, `Clip` (ReLU6), `Sigmoid`, `HardSigmoid`, `LeakyRelu`,
`Tanh` or `HardSwish` becomes one `com.microsoft.FusedConv` node (onnxruntime's contrib
operator) whose `activation` / `activation_params` attributes apply the activation inside the
convolution kernel. After *Fold BatchNorm*, Conv + BatchNorm + ReLU ends as this single node.

**Why faster:** the activation is applied to each output value while it is still in
registers/cache, right after the convolution computes it, instead of a second kernel that
reads and writes the whole activation tensor again. One launch and one intermediate tensor
fewer per layer; the bigger the feature maps, the bigger the saving.

**Math:** `FusedConv(x) = act(W∗x + b)`, e.g. ReLU6 is `Clip` with `activation_params=[0, 6]`,
HardSigmoid `[α, β]` computes `max(0, min(1, α·z + β))`.

**Not fused (and why):**
- *SiLU* (`z·Sigmoid(z)`): the Conv output feeds both the Sigmoid and the Mul, and
  onnxruntime 1.32's CPU FusedConv kernel rejects `activation="Silu"`; fusing would need a
  kernel that does not exist, so the nodes stay.
- A Conv output that has other consumers or is a graph output (it must stay materialised).
- Non-float32 convolutions (the CPU kernel is float32 only) and Clip bounds that are not
  constants.
- A standalone BatchNorm + ReLU with no Conv before it: there is no weight to fold the
  BatchNorm into and no fused BatchNorm+ReLU kernel on CPU, so both stay (they are cheap
  elementwise ops; the saving would only be one memory pass).

The result needs onnxruntime (the `com.microsoft` domain is added to the model's opset
imports); other runtimes do not know FusedConv.
"""
    needs_shapes = False

    def transform(self, model: ir.Model) -> None:
        if not any(n.op_type == "Conv" and n.domain == "" for n in model.graph):
            return
        apply_rules(model, [_ConvActivation.rule(a) for a in _FUSED_ACTIVATIONS])
        ensure_ms_import(model)


def ensure_ms_import(model: ir.Model) -> None:
    """Declare ``com.microsoft`` (version 1) when a node of any graph uses it."""
    if any(n.domain == MS_DOMAIN for n in all_nodes(model)):
        model.opset_imports.setdefault(MS_DOMAIN, 1)
        model.graph.opset_imports.setdefault(MS_DOMAIN, 1)


PASSES: list[type[Pass]] = [FoldBatchNorm, FuseConvAffine, FuseConvAddBias, FusePadIntoConv, FuseConvActivation]
