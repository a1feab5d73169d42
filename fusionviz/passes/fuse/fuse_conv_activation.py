"""fuse_conv_activation: Conv [+ residual Add] + activation into onnxruntime's ``com.microsoft.FusedConv``.

Rules (the code points back to them):

1. ``Act(Conv(x))`` → ``FusedConv(x, W, b, activation=Act)`` for the activations onnxruntime's
   CPU kernel takes (:data:`_FUSED_ACTIVATIONS`; onnxruntime 1.32 also computes ``HardSwish``).
2. ``[Act](Add(Conv(x), z))`` → ``FusedConv(x, W, b, z, activation=Act)``: the kernel's fourth
   input ``Z`` is added to the convolution (bias included) before the activation, element by
   element, without broadcasting (checked against the unfused nodes in onnxruntime, at level
   off and at level all, where its NCHWc transformer leaves a FusedConv with ``Z`` as it is).
   So ``z`` must provably have the Conv output's shape (:mod:`fusionviz.passes.dims`: a
   residual Add of an export with symbolic input dims is proved through the graph), and be
   float32 like the Conv. A per-channel constant ``z`` is a bias (``fuse_conv_add_bias``).
   The Add + activation form is matched before the lone Add, and both before rule 1.
3. ``Conv → x·HardSigmoid(x, 1/6, 0.5)`` (HardSwish in a model whose opset has no HardSwish op,
   as ``fuse_hardswish`` leaves it) → ``FusedConv(activation="HardSwish")``: a contrib op, so
   the model's opset does not matter.
4. Conv + SiLU has no kernel: a ``no_kernel`` near miss says so at each site.
5. Rule 2 leaves a residual Add alone that onnxruntime itself takes into an NCHWc Conv on this
   CPU (asked, not predicted: the graph it builds at level all from the model as it is is
   captured, as ``nchwc_layout`` does; there a Conv it rewrote is the ``com.microsoft.nchwc.Conv``
   named ``<conv output>_nchwc``, and it took the Add in when it has a sum input). onnxruntime's
   NCHWc Conv adds the residual and applies the activation in its blocked layout; a
   ``FusedConv`` with a sum input is not taken into that layout, runs in NCHW between reorders
   and takes the next residual blocks out of the layout with it: slower at level all and in
   ``nchwc_layout``'s capture (a CRNN with 7 such sites: 1.04x the original's time at level
   all with them, 1.00x without). The judgement is per Add: when onnxruntime takes it into the
   Conv on one side, the Conv on the other side does not take it either. Where onnxruntime
   keeps the Add apart (a residual outside the blocked layout, a 1-D Conv, a CPU without NCHWc
   kernels) rule 2 applies; a failed capture leaves rule 2 as it was.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.dims import DimKeys
from fusionviz.passes.facts import weight_value
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import, per_channel
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed

logger = logging.getLogger(__name__)

_FLT_MAX = float(np.finfo(np.float32).max)


_FUSED_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish")


def _float32_conv(conv: ir.Node, r: orp.MatchResult) -> orp.MatchResult:
    w = weight_value(conv.inputs[1])
    dtype = conv.inputs[1].dtype
    if dtype is None and w is not None:
        dtype = ir.DataType.from_numpy(w.dtype)
    if dtype != ir.DataType.FLOAT:
        return r.fail("onnxruntime's CPU FusedConv kernel is float32 only.")
    return r


class _ConvActivation(orp.RewriteRuleClassBase):
    """Rule 1: ``Act(Conv(x, W[, b]))`` → ``com.microsoft.FusedConv(x, W[, b], activation=Act)``."""

    def __init__(self, act: str) -> None:
        super().__init__(name=f"Conv{act}ToFusedConv")
        self._act = act
        self._activation_params: list[float] = []

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
        r = _float32_conv(conv_out.producer(), orp.MatchResult())
        if not r:
            return r
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


class _ConvAddActivation(_ConvActivation):
    """Rule 2: ``[Act](Add(Conv(x, W[, b]), z))`` → ``FusedConv(x, W, b, z[, activation=Act])``.

    ``sums`` maps each Add node (by id) to, per input index read from a Conv, None when the
    other input provably has the Conv output's shape, else why not (built before any rewrite,
    so that a residual chain whose ``z`` a previous site just rewrote is still judged).
    """

    def __init__(self, act: str | None, sums: dict[int, dict[int, tuple[str, str, str] | None]]) -> None:
        orp.RewriteRuleClassBase.__init__(self, name=f"ConvAdd{act or ''}ToFusedConv")
        self._act = act
        self._sums = sums
        self._activation_params = []

    def pattern(self, op, x, z):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        total = op.Add(conv, z, _outputs=["add_out"])
        if self._act is None:
            return total
        return getattr(op, self._act)(total, _allow_other_inputs=True, _outputs=["act_out"])

    def check(self, context, x, z, conv_out, add_out, act_out=None) -> orp.MatchResult:
        r = _float32_conv(conv_out.producer(), orp.MatchResult())
        if not r:
            return r
        add = add_out.producer()
        if z.dtype is not None and z.dtype != ir.DataType.FLOAT:
            return r.fail(f"The Add's other input '{z.name}' is not float32.")
        index = next((i for i, v in enumerate(add.inputs) if v is conv_out), None)
        why = self._sums.get(id(add), {}).get(index, ("the Add was not seen before the pass", "", "condition"))
        if why is not None:
            reason, hint, kind = why
            if act_out is None and _lone_activation(add) is not None:
                return nearmiss.reported(r.fail(reason))  # the Add + activation rule reported this site
            if nearmiss.active():
                text = reason if why is NCHWC_SUM else f"FusedConv adds its sum input Z without broadcasting, and {reason}"
                nearmiss.note([conv_out.producer(), add] + ([act_out.producer()] if act_out is not None else []),
                              add, text, hint=hint, kind=kind, rule=self.name, depth=150)
            return nearmiss.reported(r.fail(reason))
        self._activation_params = []
        if act_out is not None:
            params, reason = self._params(act_out.producer())
            if params is None:
                return r.fail(reason)
            self._activation_params = params
        return r

    def rewrite(self, op, x, z, conv_out, add_out, act_out=None):
        conv = conv_out.producer()
        attrs = dict(conv.attributes)
        extra = {"activation": self._act} if self._act else {}
        if self._activation_params:
            extra["activation_params"] = self._activation_params
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        return op.FusedConv(conv.inputs[0], conv.inputs[1], bias, z, _domain=MS_DOMAIN, _name=conv.name,
                            **extra, **attrs)


class _ConvHardSwishOfHardSigmoid(orp.RewriteRuleClassBase):
    """Rule 3: ``Mul(Conv(x), HardSigmoid(Conv(x), 1/6, 0.5))`` → ``FusedConv(activation="HardSwish")``."""

    def pattern(self, op, x):
        conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Mul(conv, op.HardSigmoid(conv, _allow_other_attributes=True, _outputs=["gate"]))

    def check(self, context, x, conv_out, gate) -> orp.MatchResult:
        r = _float32_conv(conv_out.producer(), orp.MatchResult())
        if not r:
            return r
        node = gate.producer()
        alpha, beta = node.attributes.get_float("alpha", 0.2), node.attributes.get_float("beta", 0.5)
        if abs(alpha - 1 / 6) > 1e-4 / 6 or abs(beta - 0.5) > 0.5e-4:
            return r.fail(f"HardSigmoid has alpha {alpha:g}, beta {beta:g}; HardSwish is alpha 1/6, beta 0.5.")
        return r

    def rewrite(self, op, x, conv_out, gate):
        conv = conv_out.producer()
        return op.FusedConv(*conv.inputs, _domain=MS_DOMAIN, _name=conv.name, activation="HardSwish",
                            **dict(conv.attributes))


def _lone_activation(add: ir.Node) -> ir.Node | None:
    """The activation rule 2 would take with ``add``: its output's only reader, when it is one."""
    out = add.outputs[0]
    uses = list(out.uses())
    if len(uses) != 1 or out.is_graph_output():
        return None
    node = uses[0].node
    return node if node.op_type in _FUSED_ACTIVATIONS and node.domain == "" else None


def _sum_table(model: ir.Model) -> dict[int, dict[int, tuple[str, str, str] | None]]:
    """Rule 2's shape judgement for every Add that reads a Conv output (see :class:`_ConvAddActivation`)."""
    adds = [n for n in model.graph if n.op_type == "Add" and n.domain == "" and len(n.inputs) == 2
            and any(v is not None and v.producer() is not None and v.producer().op_type == "Conv" for v in n.inputs)]
    if not adds:
        return {}
    infer_shapes_if_needed(model, [v for n in adds for v in n.inputs])
    keys = DimKeys(model.graph)
    absorbed: set[str] | None = None  # rule 5, asked once there is a site it could decide
    table: dict[int, dict[int, tuple[str, str, str] | None]] = {}
    for add in adds:
        for i, v in enumerate(add.inputs):
            conv = v.producer() if v is not None else None
            if conv is None or conv.op_type != "Conv":
                continue
            z = add.inputs[1 - i]
            why = keys.why_not_same(v, z)
            if why is None:
                if absorbed is None:
                    absorbed = nchwc_absorbed(model)
                if any(u is not None and u.name in absorbed for u in add.inputs):  # per Add (rule 5)
                    table.setdefault(id(add), {})[i] = NCHWC_SUM
                    continue
            if why is None:
                table.setdefault(id(add), {})[i] = None
                continue
            w = weight_value(conv.inputs[1])
            zc = weight_value(z)
            if zc is not None and w is not None and per_channel(zc, w.ndim, w.shape[0]) is not None:
                entry = (f"'{z.name}' is a per-channel constant (a bias)",
                         "turn on fuse_conv_add_bias first (it folds the Add into the Conv bias)", "needs_pass")
            else:
                entry = (why, "give the model's input shapes (--shape) so that the shapes are known", "condition")
            table.setdefault(id(add), {})[i] = entry
    return table


#: Rule 5's reason (the near miss's whole text: it is not about the sum input's shape)
NCHWC_SUM = ("onnxruntime takes this residual Add into an NCHWc Conv (its blocked layout) on this CPU; a FusedConv "
             "with a sum input stays in NCHW between reorders there, which runs slower",
             "nchwc_layout (or onnxruntime at level all) fuses this Conv + Add itself", "condition")


def nchwc_absorbed(model: ir.Model) -> set[str]:
    """Rule 5: the output names of the Convs that onnxruntime, at level all on this CPU, turns
    into an NCHWc Conv with a sum input (the residual Add taken in), read from the graph it
    builds from ``model``; empty when that capture fails."""
    from fusionviz.model_io import weights_dir
    from fusionviz.passes.facts import onnx_opset
    from fusionviz.passes.layout.nchwc_layout import NCHWC, capture_ort_bytes, disabled_fusions

    proto = ir.serde.serialize_model(model)
    try:
        data = capture_ort_bytes(proto, disabled_optimizers=disabled_fusions(onnx_opset(model)),
                                 weights_dir=weights_dir(proto))
    except Exception as exc:  # noqa: BLE001 - rule 5 is a refinement: without it rule 2 applies as before
        logger.info("fuse_conv_activation: onnxruntime's layout capture failed (%s); rule 2 as is", exc)
        return set()
    return {n.name[: -len("_nchwc")] for n in onnx.ModelProto.FromString(data).graph.node
            if n.domain == NCHWC and n.op_type == "Conv" and n.name.endswith("_nchwc")
            and len(n.input) > 3 and n.input[3]}


class FuseConvActivation(Pass, name="fuse_conv_activation", category=Category.FUSE, order=260,
                         trigger_ops={"Conv"}):
    """Conv + activation into onnxruntime's contrib ``com.microsoft.FusedConv``."""

    title = "Fuse Conv + activation (FusedConv)"
    explain = """\
**What:** `Conv` followed by `Relu`, `Clip` (ReLU6), `Sigmoid`, `HardSigmoid`, `LeakyRelu`,
`Tanh` or `HardSwish` becomes one `com.microsoft.FusedConv` node (onnxruntime's contrib
operator) whose `activation` / `activation_params` attributes apply the activation inside the
convolution kernel. After *Fold BatchNorm*, Conv + BatchNorm + ReLU ends as this single node.
A residual `Add` between the Conv and the activation (ResNet's `relu(conv(x) + shortcut)`)
goes in too, as FusedConv's sum input `Z`; so does a residual Add with no activation after it.
HardSwish written as `x·HardSigmoid(x, 1/6, 0.5)` (what *Fuse HardSwish* makes of the Paddle
chain in a model older than opset 14) becomes `activation="HardSwish"` too.

**Why faster:** the activation is applied to each output value while it is still in
registers/cache, right after the convolution computes it, instead of a second kernel that
reads and writes the whole activation tensor again. One launch and one intermediate tensor
fewer per layer; the bigger the feature maps, the bigger the saving.

**Math:** `FusedConv(x) = act(W∗x + b)`, e.g. ReLU6 is `Clip` with `activation_params=[0, 6]`,
HardSigmoid `[α, β]` computes `max(0, min(1, α·z + β))`; with a sum input,
`FusedConv(x, W, b, Z) = act(W∗x + b + Z)`, `Z` added element by element.

**Not fused (and why):**
- *SiLU* (`z·Sigmoid(z)`): the Conv output feeds both the Sigmoid and the Mul, and
  onnxruntime 1.32's CPU FusedConv kernel rejects `activation="Silu"`; fusing would need a
  kernel that does not exist, so the nodes stay.
- A Conv output that has other consumers or is a graph output (it must stay materialised).
- A residual Add whose other input is not provably the Conv output's shape: the kernel adds
  `Z` without broadcasting. Shapes are proved through the graph even when the input dims are
  symbolic (a stride-1 "same" convolution keeps H and W); where they are not, `--shape` helps.
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
        sums = _sum_table(model)
        if sums:
            apply_rules(model, [_ConvAddActivation.rule(a, sums) for a in _FUSED_ACTIVATIONS], commute=True)
            apply_rules(model, [_ConvAddActivation.rule(None, sums)], commute=True)
        apply_rules(model, [_ConvHardSwishOfHardSigmoid.rule()], commute=True)
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
                          "activation, so the Conv and the SiLU stay two kernels (fuse_silu makes the "
                          "Sigmoid and the Mul one QuickGelu)",
                          hint="OpenVINO fuses Conv + Swish into one layer (Graph view: compiled by OpenVINO)",
                          kind="no_kernel", rule="ConvSiLU", depth=200)  # wins over the Sigmoid's "other uses"
