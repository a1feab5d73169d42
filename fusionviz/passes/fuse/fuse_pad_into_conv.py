"""fuse_pad_into_conv: a zero Pad folded into the padding of the Conv or pool after it."""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import weight_value
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed


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
        arr = weight_value(pad.inputs[1])
        if arr is None:
            return None, f"Pad amounts '{pad.inputs[1].name}' are not a constant."
        raw = [int(v) for v in arr.reshape(-1)]
        if len(pad.inputs) > 3 and pad.inputs[3] is not None:
            ax = weight_value(pad.inputs[3])
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
        arr = weight_value(pad.inputs[2])
        return None if arr is None or arr.size != 1 else float(arr.reshape(()))
    return 0.0


class _GuardedPadConv(_compat.FuseConvPad):
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


class _NormalizeAutoPadAfterPad(_compat.NormalizePadFormatConv):
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


class FusePadIntoConv(Pass, name="fuse_pad_into_conv", category=Category.FUSE, order=225,
                      trigger_ops={"Pad"}):
    """Pad (zero, constant, spatial only) folded into Conv pads; also into pools where exact."""

    mirrors_ort = "basic"

    title = "Fold Pad into Conv / pool padding"
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
