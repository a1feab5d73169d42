"""fuse_qdq: QDQ node groups into the QLinear ops onnxruntime runs them as.

A QDQ-quantized model writes every quantized Conv and MatMul as float math between
DequantizeLinear and QuantizeLinear nodes. onnxruntime's level extended (its QDQ
selector/action transformer) turns these groups into integer kernels; with its optimizer off
they run as float Conv/MatMul plus a DQ and a Q per tensor. This pass makes the same groups,
under the conditions onnxruntime's Conv, MatMul and Gemm selectors check, and some more (the code
points back to them):

1. The group: ``DequantizeLinear(x_q)`` and ``DequantizeLinear(w_q)`` feed a ``Conv`` or a
   ``Gemm`` (optionally a third, int32 ``DequantizeLinear`` feeds its bias) or a ``MatMul``, whose
   only use is one ``QuantizeLinear``. Every input of the op comes from a DequantizeLinear
   (but for a constant float bias: rule 4); its output is no graph output and read by
   nothing but that Q. A DQ whose output other nodes also read stays for them (onnxruntime
   gives each group its own copy of such a DQ first), the group reads its quantized input.
2. Element types (onnxruntime's CPU QLinearConv/QLinearMatMul kernels): ``x``, ``w`` and ``y``
   are uint8 or int8; ``y`` has ``x``'s type; an int8 ``x`` needs an int8 ``w``. Scales are
   float32. A Conv on int8 activations stays: onnxruntime makes QLinearConv of it only where
   int8 QDQ Conv is allowed (ARM CPUs); on x86 it keeps the float group. MatMul takes int8.
3. Scales and zero points are constants. ``x`` and ``y``: one value (a scalar or one
   element). ``w``: one value, or per channel: a Conv's along its output channels (DQ axis 0,
   one value per output channel), a MatMul's per column of a 2-D weight (axis 1, one value per
   column), a Gemm's per output (axis 0 of a ``transB`` weight, else axis 1). No blocked
   quantization (``block_size``).
4. A Conv's or Gemm's bias: int32, zero point 0, scale ``x_scale · w_scale`` (per channel) within 1e-5
   relative: what QLinearConv computes with; onnxruntime moves the bias without checking, this
   pass does not. A float32 constant bias is quantized as onnxruntime's bias quantization does
   first: ``round(b / (x_scale · w_scale))`` as int32.
5. A missing zero point becomes an explicit 0 of the quantized type (QLinearConv and
   QLinearMatMul take them as inputs; onnxruntime does the same).
6. A Gemm becomes ``com.microsoft.QGemm`` (alpha, transA, transB kept; beta must be 1 when
   there is a bias), a Conv ``QLinearConv``, a MatMul ``QLinearMatMul`` (ONNX domain).
7. Not done: a Relu/Clip that the Q makes redundant (onnxruntime drops it), Softmax →
   QLinearSoftmax and the other one-input QLinear ops, Add/Mul → QLinearAdd/QLinearMul,
   DQ → MatMul without a Q (MatMulIntegerToFloat).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import const_value, is_onnx
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import new_initializer, substitute
from fusionviz.passes.hygiene import Namer

_8BIT = (ir.DataType.UINT8, ir.DataType.INT8)
#: rule 4: relative tolerance of the bias scale against x_scale · w_scale
BIAS_RTOL = 1e-5


class _Miss(Exception):
    def __init__(self, reason: str, kind: str = "condition", blocker: ir.Node | None = None) -> None:
        super().__init__(reason)
        self.reason, self.kind, self.blocker = reason, kind, blocker


def _dq_of(v: ir.Value | None) -> ir.Node | None:
    p = v.producer() if v is not None else None
    return p if p is not None and is_onnx(p, "DequantizeLinear") else None


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return int(a.value) if a is not None else default


def _params(node: ir.Node, what: str) -> tuple[ir.Value, np.ndarray, ir.Value | None, np.ndarray | None]:
    """Rule 3: the scale and zero point of a Q or DQ node, as constants."""
    if _int_attr(node, "block_size", 0):
        raise _Miss(f"the {what} is quantized in blocks (block_size); QLinear ops take per-tensor or "
                    "per-channel scales", "no_kernel", node)
    scale = node.inputs[1]
    s = const_value(scale)
    if s is None:
        raise _Miss(f"the {what}'s scale is not a constant", blocker=node)
    if s.dtype != np.float32:
        raise _Miss(f"the {what}'s scale is {s.dtype}; onnxruntime's QLinear kernels take float32 scales",
                    "no_kernel", node)
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    z = const_value(zp) if zp is not None else None
    if zp is not None and z is None:
        raise _Miss(f"the {what}'s zero point is not a constant", blocker=node)
    return scale, s, zp, z


def _one_value(s: np.ndarray, z: np.ndarray | None, what: str, node: ir.Node) -> None:
    if s.size != 1 or s.ndim > 1 or (z is not None and (z.size != 1 or z.ndim > 1)):
        raise _Miss(f"the {what} has {s.size} scales; the QLinear op takes one", "no_kernel", node)


def _qtype(node: ir.Node) -> ir.DataType | None:
    """The quantized type of a DQ's input or a Q's output: the value's type, else its zero
    point's, else a Q's ``output_dtype`` or uint8 (the defaults the operators define)."""
    v = node.inputs[0] if node.op_type == "DequantizeLinear" else node.outputs[0]
    if v.dtype is not None:
        return v.dtype
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    if zp is not None and zp.dtype is not None:
        return zp.dtype
    if node.op_type == "QuantizeLinear" and zp is None:
        dt = _int_attr(node, "output_dtype", 0)
        return ir.DataType(dt) if dt else ir.DataType.UINT8
    return None


def _zero_point(model: ir.Model, namer: Namer, zp: ir.Value | None, dtype: ir.DataType) -> ir.Value:
    """Rule 5."""
    if zp is not None:
        return zp
    return new_initializer(model, namer, "qdq_zero_point", np.zeros((), dtype=dtype.numpy()))


class _Group:
    """One matched group (rule 1), checked (rules 2-4)."""

    def __init__(self, model: ir.Model, target: ir.Node) -> None:
        self.target = target
        op = target.op_type
        out = target.outputs[0]
        uses = out.uses()
        qs = [u for u, _ in uses if is_onnx(u, "QuantizeLinear") and u.inputs[0] is out]
        if not qs:
            raise _Miss(f"the {op}'s output is not quantized (no QuantizeLinear reads it)", "form")
        if len(uses) != 1 or len(qs) != 1 or out.is_graph_output():
            other = next((u for u, _ in uses if u is not qs[0]), None)
            raise _Miss(f"the {op}'s output is also read by {other.op_type if other else 'the graph output'}; "
                        "a QLinear op gives only the quantized result", "other_uses", other)
        self.q = qs[0]
        inputs = [v for v in target.inputs if v is not None]
        dqs = [_dq_of(v) for v in inputs]
        self.float_bias = None
        if op in ("Conv", "Gemm") and len(inputs) == 3 and dqs[2] is None and const_value(inputs[2]) is not None:
            self.float_bias = const_value(inputs[2])
            inputs, dqs = inputs[:2], dqs[:2]
        for i, (v, dq) in enumerate(zip(inputs, dqs, strict=True)):
            if dq is None:
                name = ("the bias" if i == 2 else f"input {i}")
                raise _Miss(f"{name} of the {op} is not dequantized ({v.producer().op_type if v.producer() else 'a '}"
                            f"{'' if v.producer() else 'float tensor'}); every input of a QLinear op is quantized",
                            "form", v.producer())
        self.dqs = dqs
        if op == "MatMul" and len(dqs) != 2:
            raise _Miss("the MatMul does not have two inputs", "form")
        if op in ("Conv", "Gemm") and len(dqs) not in (2, 3):
            raise _Miss(f"the {op} does not have two or three inputs", "form")
        if op == "Gemm" and len(target.inputs) == 3 and target.inputs[2] is not None:
            beta = target.attributes.get("beta")
            if beta is not None and float(beta.value) != 1.0:
                raise _Miss("the Gemm's beta is not 1; onnxruntime's QGemm adds the bias as it is", "condition")
        dx, dw = dqs[0], dqs[1]
        self.x_t, self.w_t, self.y_t = x_t, w_t, y_t = _qtype(dx), _qtype(dw), _qtype(self.q)
        # rule 2
        for what, t, n in (("input", x_t, dx), ("weight", w_t, dw), ("output", y_t, self.q)):
            if t not in _8BIT:
                raise _Miss(f"the quantized {what} is {t}; onnxruntime's QLinear{op} kernel takes uint8/int8",
                            "no_kernel", n)
        if y_t != x_t:
            raise _Miss(f"the output is quantized to {y_t}, the input to {x_t}; onnxruntime makes a QLinear op "
                        "only when they agree", "condition", self.q)
        if op == "Conv" and x_t == ir.DataType.INT8:
            raise _Miss("a Conv on int8 activations: onnxruntime makes QLinearConv of it only on ARM CPUs "
                        "(on x86 it keeps the float Conv)", "condition", dx)
        if x_t == ir.DataType.INT8 and w_t != ir.DataType.INT8:
            raise _Miss("an int8 input with a uint8 weight: onnxruntime's QLinear kernels take int8 only with "
                        "int8", "no_kernel", dw)
        # rule 3
        self.x = _params(dx, "input's DequantizeLinear")
        self.w = _params(dw, "weight's DequantizeLinear")
        self.y = _params(self.q, "QuantizeLinear")
        _one_value(self.x[1], self.x[3], "input's DequantizeLinear", dx)
        _one_value(self.y[1], self.y[3], "QuantizeLinear", self.q)
        ws, wz = self.w[1], self.w[3]
        if ws.size != 1 or ws.ndim > 1:
            w_shape = dw.inputs[0].shape
            rank = len(w_shape) if w_shape is not None else None
            axis = _int_attr(dw, "axis", 1)
            if rank is not None and axis < 0:
                axis += rank
            if op == "Conv":
                want_axis, n = 0, (w_shape[0] if rank else None)
            elif op == "Gemm" and _int_attr(target, "transB", 0):
                want_axis, n = 0, (w_shape[0] if rank == 2 else None)
            else:
                want_axis, n = 1, (w_shape[1] if rank == 2 else None)
            if ws.ndim != 1 or axis != want_axis or not isinstance(n, int) or ws.shape[0] != n \
                    or (wz is not None and wz.shape != ws.shape):
                where = "output channel" if op != "MatMul" else "column of a 2-D weight (axis 1)"
                raise _Miss(f"the weight's scales are not one per {where}", "no_kernel", dw)
        # rule 4
        self.bias = None
        if len(dqs) == 3:
            db = dqs[2]
            if _qtype(db) != ir.DataType.INT32:
                raise _Miss(f"the bias is quantized to {_qtype(db)}; QLinearConv takes an int32 bias",
                            "no_kernel", db)
            _, bs, _, bz = _params(db, "bias's DequantizeLinear")
            want = (self.x[1].reshape(()) * ws).astype(np.float64).reshape(-1)
            got = np.broadcast_to(bs.astype(np.float64).reshape(-1), want.shape) if bs.size in (1, want.size) \
                else None
            if got is None or not np.allclose(got, want, rtol=BIAS_RTOL, atol=0):
                raise _Miss("the bias's scale is not x_scale · w_scale; QLinearConv computes with that scale",
                            "condition", db)
            if bz is not None and np.any(bz != 0):
                raise _Miss("the bias's zero point is not 0", "condition", db)
            self.bias = db.inputs[0]
        elif self.float_bias is not None:
            fb = self.float_bias
            step = (self.x[1].reshape(()).astype(np.float64) * ws.astype(np.float64)).reshape(-1)
            if fb.dtype != np.float32 or fb.ndim != 1 or step.size not in (1, fb.size) or np.any(step <= 0):
                raise _Miss("the float bias is not a float32 vector that can be quantized with x_scale · w_scale",
                            "form", target)
            q = np.round(fb.astype(np.float64) / step)
            if np.any(np.abs(q) > np.iinfo(np.int32).max):
                raise _Miss("the float bias does not fit int32 at scale x_scale · w_scale", "condition", target)
            self.float_bias = q.astype(np.int32)

    @property
    def nodes(self) -> list[ir.Node]:
        return [*self.dqs, self.target, self.q]

    def build(self, model: ir.Model, namer: Namer) -> ir.Node:
        dx, dw = self.dqs[0], self.dqs[1]
        ins = [dx.inputs[0], self.x[0], _zero_point(model, namer, self.x[2], self.x_t),
               dw.inputs[0], self.w[0], _zero_point(model, namer, self.w[2], self.w_t),
               self.y[0], _zero_point(model, namer, self.y[2], self.y_t)]
        if self.target.op_type == "Conv":
            if self.bias is not None:
                ins.append(self.bias)
            elif self.float_bias is not None:
                ins.append(new_initializer(model, namer, f"{self.target.inputs[2].name}_int32", self.float_bias))
            attrs = {k: a for k, a in self.target.attributes.items()}
            return ir.node("QLinearConv", ins, attrs, name="")
        if self.target.op_type == "Gemm":
            bias = self.bias
            if bias is None and self.float_bias is not None:
                bias = new_initializer(model, namer, f"{self.target.inputs[2].name}_int32", self.float_bias)
            ins = [*ins[:6], bias, *ins[6:]]
            attrs = {k: a for k, a in self.target.attributes.items() if k in ("alpha", "transA", "transB")}
            return ir.node("QGemm", ins, attrs, domain=MS_DOMAIN, name="")
        return ir.node("QLinearMatMul", ins, name="")


class FuseQDQ(Pass, name="fuse_qdq", category=Category.FUSE, order=230, trigger_ops={"QuantizeLinear"}):
    """DequantizeLinear → Conv / MatMul / Gemm → QuantizeLinear into QLinearConv / QLinearMatMul / QGemm."""

    mirrors_ort = "extended"

    title = "Fuse QDQ groups into QLinearConv / QLinearMatMul / QGemm"
    explain = """\
**What:** in a QDQ-quantized model, `Q(Conv(DQ(x_q), DQ(w_q), DQ(b_int32)))` becomes
`QLinearConv(x_q, x_scale, x_zp, w_q, w_scale, w_zp, y_scale, y_zp, b_int32)`, and
`Q(MatMul(DQ(a_q), DQ(b_q)))` becomes `QLinearMatMul(...)` and a Gemm `com.microsoft.QGemm`:
the integer kernels onnxruntime's
own QDQ transformer (level extended) runs such groups as. The conditions are onnxruntime's:
8-bit tensors (uint8, or int8 with an int8 weight), the output of the input's type, one scale
for the input and output, per-tensor or per-channel weight scales (a Conv's per output
channel, a MatMul's per column), an int32 bias with scale `x_scale·w_scale` and zero point 0,
and a Conv/MatMul output read only by the QuantizeLinear.

**Why faster:** the float group dequantizes both tensors to float32 (4× the bytes), runs a
float kernel and quantizes the result again; the QLinear kernel multiplies the 8-bit values
with integer arithmetic (VNNI / dot-product instructions) and requantizes in its epilogue:
three fewer passes over memory and a 4× smaller weight read.

**Math:** `y_q = saturate(round(x_s·w_s/y_s · Σ (x_q − x_zp)(w_q − w_zp) + b) + y_zp)`. The
float group rounds the same sum after computing it in float32, so a result can differ by one
quantization step (`y_scale`) where the float sum lands next to a rounding boundary, as
onnxruntime's own level extended does.

A constant float bias is quantized to int32 at scale `x_scale·w_scale` first, as onnxruntime
does.

**Not fused:** a Conv or MatMul output read by anything besides the QuantizeLinear, a Conv on
int8 activations (onnxruntime makes that QLinearConv only on ARM CPUs), 16-bit or 4-bit quantization, blocked scales, non-float32 scales,
a Relu/Clip between the op and its QuantizeLinear, a Gemm with beta ≠ 1 and a bias.
"""
    needs_shapes = False  # reads only the weights' shapes, known from their initializers

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused_ms = False
        for node in list(model.graph):
            if node.graph is None or not is_onnx(node, "Conv", "MatMul", "Gemm"):
                continue
            if not any(_dq_of(v) is not None for v in node.inputs):
                continue
            try:
                group = _Group(model, node)
            except _Miss as miss:
                nearmiss.note([node], miss.blocker, miss.reason, kind=miss.kind, rule=f"QDQ{node.op_type}")
                continue
            new = group.build(model, namer)
            read = [v for n in group.nodes for v in n.inputs if v is not None]
            substitute(model, new, group.nodes, group.q.outputs[0], namer, "qlinear")
            for v in read:  # scales and zero points only the removed DQ/Q nodes read
                if (v.name in model.graph.initializers and model.graph.initializers[v.name] is v
                        and not v.uses() and not v.is_graph_output() and not v.is_graph_input()):
                    del model.graph.initializers[v.name]
            fused_ms = fused_ms or new.domain == MS_DOMAIN
        if fused_ms:
            ensure_ms_import(model)
