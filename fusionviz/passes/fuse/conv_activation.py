"""fuse_conv_activation: Conv + activation into onnxruntime's ``com.microsoft.FusedConv``."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import weight_value
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.rewrite import apply_rules

_FLT_MAX = float(np.finfo(np.float32).max)


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
                arr = weight_value(v)
                if arr is None or arr.size != 1:
                    return None, f"Clip bound '{v.name}' is not a constant scalar."
                bounds.append(float(arr.reshape(())))
            return bounds, ""
        return [], ""

    def check(self, context, x, conv_out, act_out) -> orp.MatchResult:
        r = orp.MatchResult()
        conv = conv_out.producer()
        w = weight_value(conv.inputs[1])
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


class FuseConvActivation(Pass, name="fuse_conv_activation", category=Category.FUSE, order=260,
                         trigger_ops={"Conv"}):
    """Conv + activation into onnxruntime's contrib ``com.microsoft.FusedConv``."""

    title = "Fuse Conv + activation (FusedConv)"
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
        if nearmiss.active():
            _silu_near_misses(model)


def _silu_near_misses(model: ir.Model) -> None:
    """``Conv → x·sigmoid(x)`` (SiLU / Swish) has no FusedConv activation in onnxruntime: say so
    at each site instead of leaving the user to guess why it stayed apart."""
    for conv in model.graph:
        if conv.op_type != "Conv" or conv.domain != "" or not conv.outputs:
            continue
        out = conv.outputs[0]
        readers = [u.node for u in out.uses()]
        sig = next((n for n in readers if n.op_type == "Sigmoid"), None)
        mul = next((n for n in readers if n.op_type == "Mul" and sig is not None
                    and any(v is not None and v.producer() is sig for v in n.inputs)), None)
        if sig is not None and mul is not None:
            nearmiss.note([sig, conv], mul, "Conv + SiLU (x·sigmoid(x)): onnxruntime's FusedConv has no SiLU "
                          "activation, so the Sigmoid and the Mul stay separate kernels",
                          hint="OpenVINO fuses Conv + Swish into one layer (Graph view: compiled by OpenVINO)",
                          kind="no_kernel", rule="ConvSiLU", depth=200)  # wins over the Sigmoid's "other uses"
