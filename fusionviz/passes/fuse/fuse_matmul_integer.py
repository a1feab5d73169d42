"""fuse_matmul_integer: dynamic quantization's MatMul groups into onnxruntime's fused int8 kernels.

onnxruntime's dynamic quantizer (``quantize_dynamic``) writes every quantized MatMul as
``DynamicQuantizeLinear(x)`` → ``MatMulInteger(x_q, w_q, x_zp, w_zp)`` → ``Cast(float)`` →
``Mul(·, Mul(x_scale, w_scale))`` [→ ``Add(bias)``]: five or six nodes, an int32 and a float32
tensor written and read between them. At level extended onnxruntime makes them one kernel
(its MatMulIntegerToFloatFusion, then DynamicQuantizeMatMulFusion); this pass does so in the
graph. Rules:

1. The group: a ``MatMulInteger`` whose only reader is a ``Cast`` to float, whose only reader
   is a ``Mul`` by the output of another ``Mul``, read by nothing else, of the input's scale
   and a constant weight scale (either order). No output in between is a graph output.
2. The input ``x_q`` and its zero point are ``DynamicQuantizeLinear`` outputs, and its scale
   output is the input scale in that ``Mul`` (so input and weight scales are told apart; the
   kernels take them in fixed places, onnxruntime takes the ``Mul``'s operand order on trust).
3. The weight, its scale and zero point are constants; the scale (and zero point) is one value
   or one per column of a 2-D weight.
4. Element types (onnxruntime's CPU kernels): ``x_q`` is uint8 (DynamicQuantizeLinear's only
   output type), the weight uint8 or int8; float32 scales.
5. A following ``Add`` of a constant bias of shape ``(N,)`` or ``(1, …, N)``, ``N`` > 1 the
   weight's columns, goes in too (the only reader of the ``Mul``'s output).
6. The node: ``com.microsoft.DynamicQuantizeMatMul(x, w_q, w_scale, w_zp, bias)`` when the
   ``DynamicQuantizeLinear``'s three outputs are read by this group alone (it goes in too:
   onnxruntime asks the same);
   otherwise ``com.microsoft.MatMulIntegerToFloat(x_q, w_q, x_scale, w_scale, x_zp, w_zp,
   bias)`` and the ``DynamicQuantizeLinear`` stays for its other readers (a query, key and
   value projection of one input share it).
7. The kernels compute what the group computes: the same int32 sum scaled by the same float
   product ``x_scale·w_scale``, then the bias.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import const_value, is_onnx
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import substitute
from fusionviz.passes.hygiene import Namer

_U8, _I8 = ir.DataType.UINT8, ir.DataType.INT8


class _Miss(Exception):
    def __init__(self, reason: str, blocker: ir.Node | None = None) -> None:
        super().__init__(reason)
        self.reason, self.blocker = reason, blocker


def _only_reader(v: ir.Value, op: str, what: str) -> ir.Node:
    """Rule 1: the one node reading ``v``, of type ``op``."""
    users = [u.node for u in v.uses()]
    if v.is_graph_output() or len(users) != 1:
        raise _Miss(f"the {what} is read by {len(users)} nodes" + (" and is a graph output" if v.is_graph_output()
                                                                   else "") + "; the fused kernel computes it inside")
    if not is_onnx(users[0], op):
        raise _Miss(f"the {what} goes to {users[0].op_type}, not {op}", users[0])
    return users[0]


def _per_column(arr: np.ndarray | None, n: int, what: str) -> None:
    """Rule 3."""
    if arr is not None and arr.size not in (1, n):
        raise _Miss(f"the weight's {what} has {arr.size} values; the kernels take one or one per column ({n})")


class _Group:
    """Rules 1–5 around one MatMulInteger."""

    def __init__(self, mi: ir.Node) -> None:
        self.mi = mi
        x_q, w_q = mi.inputs[0], mi.inputs[1]
        x_zp = mi.inputs[2] if len(mi.inputs) > 2 else None
        w_zp = mi.inputs[3] if len(mi.inputs) > 3 else None
        # rule 2
        dq = x_q.producer() if x_q is not None else None
        if dq is None or not is_onnx(dq, "DynamicQuantizeLinear") or dq.outputs[0] is not x_q:
            raise _Miss("the MatMulInteger's input is not a DynamicQuantizeLinear's output (static quantization "
                        "is fuse_qdq's)")
        if x_zp is not None and x_zp is not dq.outputs[2]:
            raise _Miss("the input zero point is not the DynamicQuantizeLinear's", dq)
        # rule 1
        self.cast = _only_reader(mi.outputs[0], "Cast", "int32 product")
        to = self.cast.attributes.get("to")
        if to is None or to.value != int(ir.DataType.FLOAT):
            raise _Miss("the Cast does not go to float32", self.cast)
        self.mul = _only_reader(self.cast.outputs[0], "Mul", "float product")
        other = next(v for v in self.mul.inputs if v is not self.cast.outputs[0])
        self.scales = other.producer() if other is not None else None
        if self.scales is None or not is_onnx(self.scales, "Mul") or other.is_graph_output() or len(other.uses()) != 1:
            raise _Miss("the product is not scaled by a Mul of the two scales read by it alone", self.mul)
        x_scale = dq.outputs[1]
        if x_scale not in self.scales.inputs:
            raise _Miss("the scales Mul does not read the DynamicQuantizeLinear's scale", self.scales)
        w_scale = next((v for v in self.scales.inputs if v is not x_scale), None)
        ws, w, wz = const_value(w_scale), const_value(w_q), const_value(w_zp) if w_zp is not None else None
        # rule 3
        if w is None or ws is None or (w_zp is not None and wz is None):
            raise _Miss("the weight, its scale or its zero point is not a constant", self.mi)
        if w.ndim != 2:
            raise _Miss(f"the weight is {w.ndim}-D; per-column scales are defined for a 2-D weight", self.mi)
        n = w.shape[1]
        _per_column(ws, n, "scale")
        _per_column(wz, n, "zero point")
        # rule 4
        w_type = ir.DataType(int(w_q.const_value.dtype)) if w_q.const_value is not None else w_q.dtype
        if w_type not in (_U8, _I8):  # the input is DynamicQuantizeLinear's: uint8 (its spec)
            raise _Miss(f"the weight is {w_type}: the kernels take a uint8 input with a uint8 or int8 weight", self.mi)
        if ws.dtype != np.float32:
            raise _Miss("the weight scale is not float32", self.scales)
        self.dq, self.x_q, self.w_q, self.x_zp, self.w_zp = dq, x_q, w_q, x_zp, w_zp
        self.x_scale, self.w_scale = x_scale, w_scale
        # rule 5
        self.add, self.bias = None, None
        out = self.mul.outputs[0]
        users = [u.node for u in out.uses()]
        if len(users) == 1 and not out.is_graph_output() and is_onnx(users[0], "Add"):
            b = next((v for v in users[0].inputs if v is not out), None)
            bv = const_value(b)
            if (bv is not None and bv.dtype == np.float32 and bv.ndim >= 1 and bv.shape[-1] == n and n > 1
                    and all(d == 1 for d in bv.shape[:-1])):
                self.add, self.bias = users[0], b
        # rule 6
        self.whole = all(all(u.node is mi or u.node is self.scales for u in v.uses()) and not v.is_graph_output()
                         for v in dq.outputs)

    @property
    def nodes(self) -> list[ir.Node]:
        out = [self.mi, self.cast, self.scales, self.mul] + ([self.add] if self.add is not None else [])
        return ([self.dq] if self.whole else []) + out

    @property
    def out(self) -> ir.Value:
        return (self.add if self.add is not None else self.mul).outputs[0]

    def build(self) -> ir.Node:
        if self.whole:
            op, inputs = "DynamicQuantizeMatMul", [self.dq.inputs[0], self.w_q, self.w_scale, self.w_zp, self.bias]
        else:
            op, inputs = "MatMulIntegerToFloat", [self.x_q, self.w_q, self.x_scale, self.w_scale, self.x_zp,
                                                  self.w_zp, self.bias]
        while inputs[-1] is None:  # optional inputs left out at the end
            inputs.pop()
        return ir.node(op, inputs, domain=MS_DOMAIN, name="")


class FuseMatMulInteger(Pass, name="fuse_matmul_integer", category=Category.FUSE, order=232,
                        trigger_ops={"MatMulInteger"}):
    """DynamicQuantizeLinear → MatMulInteger → Cast → Mul [→ Add] into DynamicQuantizeMatMul
    (or MatMulIntegerToFloat where the quantized input is shared)."""

    mirrors_ort = "extended"
    needs_shapes = False  # reads only the weights' shapes, known from their initializers

    title = "Fuse dynamically quantized MatMuls into DynamicQuantizeMatMul"
    explain = """\
**What:** a dynamically quantized model (onnxruntime's `quantize_dynamic`) writes each MatMul as
`DynamicQuantizeLinear(x)` → `MatMulInteger` → `Cast(float)` → `Mul(x_scale·w_scale)`
[→ `Add(bias)`]. This becomes one `com.microsoft.DynamicQuantizeMatMul(x, w_q, w_scale, w_zp,
bias)`, or `MatMulIntegerToFloat` where the quantized input also feeds other MatMuls (a
query, key and value projection of one input): the kernels onnxruntime's own level extended
makes of them.

**Why faster:** the group writes the int32 product, casts it to a float32 tensor and scales it
in two more passes; the fused kernel scales (and adds the bias) in the GEMM's epilogue, and
DynamicQuantizeMatMul also quantizes its input in the same kernel.

**Math:** `y = (x_scale·w_scale)·Σ (x_q − x_zp)(w_q − w_zp) + b` — the same int32 sum, scaled by
the same float product as the group.

**Not fused:** a MatMulInteger not fed by DynamicQuantizeLinear (static quantization is
*Fuse QDQ groups*'), a product read by anything else, weights or scales that are not
constants, a weight scale that is neither one value nor one per column, a weight of another
type than uint8/int8.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = False
        for node in list(model.graph):
            if node.graph is None or not is_onnx(node, "MatMulInteger"):
                continue
            try:
                group = _Group(node)
            except _Miss as miss:
                nearmiss.note([node], miss.blocker, miss.reason, kind="condition", rule="MatMulIntegerToFloat")
                continue
            new = group.build()
            substitute(model, new, group.nodes, group.out, namer, "int8")
            fused = True
        if fused:
            ensure_ms_import(model)
