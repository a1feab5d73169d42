"""What the Conv fusions share: weights that may be rewritten, per-channel constants, the
affine rule base, and the ``com.microsoft`` opset import their fused nodes need."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes.facts import weight_value
from fusionviz.passes.hygiene import Namer
from fusionviz.passes.walk import all_nodes

MS_DOMAIN = "com.microsoft"


def is_used(value: ir.Value) -> bool:
    return bool(value.uses()) or value.is_graph_output()


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


def outside_uses(value: ir.Value, inside: set[ir.Node]) -> list[ir.Node]:
    return [n for n, _ in value.uses() if n not in inside]


def conv_parts(conv: ir.Node) -> tuple[ir.Value, np.ndarray | None, ir.Value | None, np.ndarray | None]:
    w = conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    return w, weight_value(w), b, weight_value(b) if b is not None else None


def check_conv_weights(conv: ir.Node, inside: set[ir.Node], result: orp.MatchResult,
                        *, weight_changes: bool) -> orp.MatchResult:
    """Rule 1: constant weight (and bias), not shared when it is rewritten."""
    w, w_np, b, b_np = conv_parts(conv)
    if w_np is None:
        return result.fail(f"Conv weight '{w.name}' is not a constant.")
    if b is not None and b_np is None:
        return result.fail(f"Conv bias '{b.name}' is not a constant.")
    if weight_changes and outside_uses(w, inside):
        return result.fail(f"Conv weight '{w.name}' is shared with another node; folding would change it there too.")
    if w_np.dtype.kind != "f":
        return result.fail("Conv weight is not floating point.")
    return result


class ConvAffineBase(orp.RewriteRuleClassBase):
    """Conv followed by a per-channel scale (Mul/Div) and optionally a shift (Add/Sub)."""

    def __init__(self, namer: Namer, name: str) -> None:
        super().__init__(name=name)
        self._namer = namer

    def _vector(self, conv: ir.Node, v: ir.Value, result: orp.MatchResult, what: str):
        arr = weight_value(v)
        if arr is None:
            return None, result.fail(f"The {what} operand '{v.name}' is not a constant.")
        w = weight_value(conv.inputs[1])
        vec = per_channel(arr, w.ndim, w.shape[0])
        if vec is None:
            return None, result.fail(f"The {what} operand '{v.name}' {arr.shape} is not per-channel.")
        if arr.dtype != w.dtype:
            return None, result.fail(f"The {what} operand has dtype {arr.dtype}, the weight {w.dtype}.")
        return vec, result

    def _new_conv(self, op, conv: ir.Node, scale: np.ndarray | None, shift: np.ndarray | None):
        x = conv.inputs[0]
        w, w_np, b, b_np = conv_parts(conv)
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


def ensure_ms_import(model: ir.Model) -> None:
    """Declare ``com.microsoft`` (version 1) when a node of any graph uses it."""
    if any(n.domain == MS_DOMAIN for n in all_nodes(model)):
        model.opset_imports.setdefault(MS_DOMAIN, 1)
        model.graph.opset_imports.setdefault(MS_DOMAIN, 1)
