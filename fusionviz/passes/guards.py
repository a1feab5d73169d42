"""Which constants guard a singularity: epsilons that keep a Log, a division or a root finite.

``log(x + 1e-10)``, ``y / (x + eps)``, ``sqrt(var + eps)``, ``pow(x + eps, -0.5)``: the small
constant is what keeps the result finite when ``x`` is 0. Such a constant must keep its exact
value through every rewrite: a pass that rounds it to zero (fp16 conversion: 1e-10 is below
fp16's smallest subnormal; a denormal flush: fp16 subnormals) or treats it as a no-op turns a
finite output into -inf or NaN exactly on the inputs the epsilon was written for, while random
test inputs (never exactly 0) show no difference.

Rules:

1. A *singular slot* is an input where 0 (or a value rounded towards it) makes the op blow up:
   ``Log``, ``Sqrt``, ``Reciprocal`` input 0, ``Div`` input 1 (the divisor), ``Pow`` input 0
   (the base: a negative exponent divides).
2. A constant *reaches* a singular slot when a path from it gets there through value-preserving
   ops (``Cast``, ``Reshape``, ``Expand``, ...) and at most two additive ops (``Add``, ``Sub``,
   ``Max``, ``Sum``, ``Clip``: the epsilon is added to the tensor it guards).
3. :func:`singular_path` returns the nodes of the first such path (the additive guard and the
   singular op included), or an empty list.
4. fp16 cannot hold a non-zero magnitude below its smallest normal number (6.1e-05,
   :func:`fp16_underflow`) faithfully, nor a finite one above 65504 (:func:`fp16_overflow`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

#: op type -> input indices where a zero makes the op infinite or undefined (rule 1)
SINGULAR_SLOTS: dict[str, tuple[int, ...]] = {
    "Log": (0,), "Sqrt": (0,), "Reciprocal": (0,), "Div": (1,), "Pow": (0,),
}
_ADDITIVE = frozenset({"Add", "Sub", "Max", "Sum", "Clip"})
_PASS_THROUGH = frozenset({"Cast", "CastLike", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand",
                           "Flatten", "Transpose", "Concat", "Tile"})
_MAX_ADDITIVE = 2
_MAX_DEPTH = 8
_ONNX = ("", "ai.onnx")

#: fp16's smallest normal and largest finite number
FP16_TINY = float(np.finfo(np.float16).tiny)
FP16_MAX = float(np.finfo(np.float16).max)


def singular_path(value: ir.Value) -> list[ir.Node]:
    """Rule 3: the nodes from ``value``'s first consumer to a singular slot it reaches, or []."""
    stack: list[tuple[ir.Value, list[ir.Node], int]] = [(value, [], 0)]
    seen: set[tuple[int, int]] = set()
    while stack:
        v, path, additive = stack.pop()
        if len(path) >= _MAX_DEPTH:
            continue
        for node, idx in v.uses():
            if node.graph is None or node.domain not in _ONNX or (id(node), additive) in seen:
                continue
            seen.add((id(node), additive))
            if idx in SINGULAR_SLOTS.get(node.op_type, ()):
                return [*path, node]
            if node.op_type in _PASS_THROUGH:
                extra = 0
            elif node.op_type in _ADDITIVE and additive < _MAX_ADDITIVE:
                extra = 1
            else:
                continue
            for out in node.outputs:
                stack.append((out, [*path, node], additive + extra))
    return []


def fp16_overflow(array: np.ndarray) -> str | None:
    """Why fp16 cannot hold ``array``: a finite magnitude above 65504 (it becomes infinite, or
    the converter clamps it and changes the value); None when it can."""
    if array.dtype.kind != "f" or array.size == 0:
        return None
    a = np.abs(array[np.isfinite(array)].astype(np.float64))
    if a.size and a.max() > FP16_MAX:
        return f"holds {a.max():.3g}, above fp16's largest finite number"
    return None


def fp16_underflow(array: np.ndarray) -> str | None:
    """Why fp16 rounds ``array`` towards zero: a non-zero magnitude below fp16's smallest normal
    (6.1e-05) becomes a subnormal or 0; None when none is that small."""
    if array.dtype.kind != "f" or array.size == 0:
        return None
    a = np.abs(array[np.isfinite(array)].astype(np.float64))
    small = a[(a > 0) & (a < FP16_TINY)]
    if small.size:
        return f"holds {small.min():.3g}, below fp16's smallest normal number"
    return None


def constant_array(v: ir.Value) -> np.ndarray | None:
    """The value of an initializer or of a ``Constant`` node's ``value`` tensor, else None."""
    tensor = v.const_value
    if tensor is None:
        p = v.producer()
        attr = p.attributes.get("value") if p is not None and p.op_type == "Constant" and p.domain in _ONNX else None
        if attr is None or attr.type is not ir.AttributeType.TENSOR:
            return None
        tensor = attr.as_tensor()
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # noqa: BLE001 - external data missing etc.: not a usable constant
        return None


def constant_values(graph_nodes: Sequence[ir.Node], initializers: Sequence[ir.Value]) -> list[ir.Value]:
    """Initializers plus the outputs of ``Constant`` nodes among ``graph_nodes``."""
    out = list(initializers)
    out += [n.outputs[0] for n in graph_nodes if n.op_type == "Constant" and n.domain in _ONNX and n.outputs]
    return out
