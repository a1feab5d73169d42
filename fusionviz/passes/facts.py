"""Static facts about values and nodes that rules check before they rewrite.

Every rule checks what it relies on (a constant value, a static shape, a dtype) and fails with
a reason when it is unknown. The facts:

1. :func:`const_value`: the value of an initializer or a ``Constant`` node's output.
2. :func:`weight_value`: the same for a tensor a fusion may rewrite: never a graph input (an
   initializer listed as an input is a default the caller can override).
3. :func:`static_dims`, :func:`broadcast_keeps_shape`: shapes, and whether broadcasting ``x``
   against a tensor can enlarge it.
4. :func:`ints_attr`, :func:`slice_params`, :func:`is_onnx`, :func:`onnx_opset`: attributes,
   domains, opsets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnxscript.optimizer import basic_constant_propagation

_ONNX_DOMAINS = ("", "ai.onnx")


def is_onnx(node: ir.Node, *op_types: str) -> bool:
    """Whether ``node`` is one of ``op_types`` in the ONNX domain."""
    return node.domain in _ONNX_DOMAINS and node.op_type in op_types


def onnx_opset(model: ir.Model) -> int:
    """The default-domain opset version the model imports (0 when none)."""
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)) or 0)


def const_value(v: ir.Value | None) -> np.ndarray | None:
    """Rule 1: the value of an initializer or a Constant node's output; None when not statically known."""
    if v is None:
        return None
    tensor = v.const_value
    if tensor is None:
        p = v.producer()
        if p is None or not is_onnx(p, "Constant") or len(p.attributes) != 1:
            return None
        attr = next(iter(p.attributes.values()))
        if attr.is_ref():
            return None
        if attr.name == "value":
            tensor = attr.as_tensor()
        elif attr.name in ("value_float", "value_floats"):
            return np.asarray(attr.value, dtype=np.float32)
        elif attr.name in ("value_int", "value_ints"):
            return np.asarray(attr.value, dtype=np.int64)
        else:
            return None
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # noqa: BLE001 - external data missing etc.: not a usable constant
        return None


def static_dims(shape: ir.Shape | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape.dims):
        return None
    return tuple(int(d) for d in shape.dims)


def broadcast_keeps_shape(small: Sequence[int], x_shape: ir.Shape | None) -> str | None:
    """None when broadcasting ``x`` against a tensor of shape ``small`` leaves ``x``'s shape; else why not."""
    if x_shape is None:
        return None if all(d == 1 for d in small) and len(small) == 0 else "the input shape is unknown"
    xr = len(x_shape)
    if len(small) > xr:
        return f"the constant has rank {len(small)} > input rank {xr}, so it would add dimensions"
    for i in range(1, len(small) + 1):
        s = int(small[-i])
        if s == 1:
            continue
        xd = x_shape[-i]
        if not isinstance(xd, int) or xd != s:
            return f"dimension -{i}: constant has {s}, input has {xd}, so it would broadcast"
    return None


def ints_attr(node: ir.Node, name: str) -> list[int] | None:
    a = node.attributes.get(name)
    if a is None:
        return None
    try:
        return [int(i) for i in a.as_ints()]
    except Exception:  # noqa: BLE001 - wrong attribute type or a reference
        return None



def slice_params(node: ir.Node) -> tuple[list[int], list[int], list[int] | None, list[int] | None] | None:
    """(starts, ends, axes, steps) of a Slice, from inputs (opset >= 10) or attributes; None if unknown."""
    if len(node.inputs) >= 3:
        vals = []
        for i in range(1, 5):
            v = node.inputs[i] if i < len(node.inputs) else None
            if v is None:
                vals.append(None)
                continue
            c = const_value(v)
            if c is None:
                return None
            vals.append([int(t) for t in c.reshape(-1)])
        starts, ends, axes, steps = vals
        if starts is None or ends is None:
            return None
        return starts, ends, axes, steps
    starts, ends = ints_attr(node, "starts"), ints_attr(node, "ends")
    if starts is None or ends is None:
        return None
    return starts, ends, ints_attr(node, "axes"), None

def weight_value(value: ir.Value | None) -> np.ndarray | None:
    """Rule 2: the numpy value of a constant that is not a graph input (an initializer, or the
    output of a ``Constant`` node: onnxscript's constant propagation gives it a value)."""
    if value is None or value.is_graph_input():
        return None
    node = value.producer()
    if node is not None:
        basic_constant_propagation([node])
    tensor = value.const_value
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except FileNotFoundError:  # external data is not available
        return None


def release(cv: ir.TensorProtocol) -> None:
    """Unmap a weight kept on disk once it has been read, so its pages leave the process's memory
    (no-op for one in memory, or while an array still points into the map)."""
    if isinstance(cv, ir.ExternalTensor):
        try:
            cv.release()
        except BufferError:
            pass
