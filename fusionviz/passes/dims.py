"""Which dimensions of two tensors are provably equal, from the known shapes and the graph's structure.

A fusion that merges an element-wise op into a kernel that does not broadcast (onnxruntime's
``FusedConv`` adds its sum input ``Z`` element by element) must know that both operands have
the same shape. ONNX shape inference leaves a convolution's spatial dims unknown when the
model's input dims are symbolic (``[N, 3, H, W]``), so most residual Adds of real exports have
no static shape. The graph itself proves more: a 3×3 convolution with stride 1 and padding 1
keeps ``H``; two strided branches of a downsampling block map ``H`` to the same
``floor((H + c - 1) / s) + 1``. Rules (the code points back to them):

1. Every dimension gets a *key*; equal keys mean equal sizes at run time for every input the
   model accepts. Keys are interned ints: ``("int", n)`` for a static size, ``("param", name)``
   for a named symbolic dim (named dims are equal by the ONNX convention onnxruntime also
   relies on), a formula over another key for a dim a node computes (rule 3), and
   ``("value", value, axis)`` otherwise, which equals only itself.
2. Keys are computed in one forward sweep over the main graph in node order (no recursion, so
   a deep network costs nothing more); a known shape fact wins over a derived one, except a
   name ONNX shape inference made up (``unk__3``), which is used only when nothing is derived.
3. What a node does to a dim: shape-preserving ops (activations, normalisations, casts, Q/DQ)
   keep their first input's keys; broadcasting ops keep a key all inputs share, dims of 1 (or
   missing, right-aligned) dropping out; ``Conv`` / ``FusedConv`` / pools map a spatial key
   to ``("conv", key, stride, pads − dilation·(kernel − 1))`` (the same key when stride 1 and
   the padding keeps the size; a pool with ``ceil_mode`` keys its begin padding too), ``auto_pad=SAME_*`` to ``("ceil", key, stride)``, channels to
   the weight's output channels; global pools make spatial dims 1; ``ConvTranspose`` maps
   ``key`` to ``("convT", key, stride, offset)``; ``Transpose`` permutes; ``Concat`` keeps the
   keys off its axis. Anything else gets fresh keys.
4. Values of subgraphs, and values the sweep did not reach, are unknown: nothing is proved.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from fusionviz.passes.facts import ints_attr, weight_value
from fusionviz.passes.hygiene import MADE_UP_DIM_PREFIX

_SAME_SHAPE = frozenset({
    "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
    "Softplus", "Softsign", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Erf",
    "Identity", "Cast", "CastLike", "Dropout", "BatchNormalization", "InstanceNormalization", "LRN", "Softmax",
    "LogSoftmax", "Hardmax", "Gelu", "Mish", "Sin", "Cos", "Not", "Sign", "PRelu", "LayerNormalization",
    "GroupNormalization", "QuantizeLinear", "DequantizeLinear", "ThresholdedRelu", "Shrink", "IsNaN", "IsInf",
    "FastGelu", "BiasGelu", "QuickGelu",
})
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
                        "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitShift"})
_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
_GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
_DOMAINS = ("", "ai.onnx", "com.microsoft")
#: the prefix of the names ONNX shape inference makes up for dims it cannot compute (rule 2)
_GENERATED = MADE_UP_DIM_PREFIX

Keys = tuple[int, ...]


class DimKeys:
    """Dimension keys of every value of ``graph`` (module docstring)."""

    def __init__(self, graph: ir.Graph) -> None:
        self._ids: dict[tuple, int] = {}
        self._keys: dict[int, Keys | None] = {}  # id(value) -> keys (None: rank unknown)
        for v in list(graph.inputs) + list(graph.initializers.values()):
            self._keys[id(v)] = self._from_shape(v, None)
        for node in graph:
            derived = self._derive(node)
            for i, v in enumerate(node.outputs):
                self._keys[id(v)] = self._from_shape(v, derived if i == 0 else None)

    # ------------------------------------------------------------------ rule 1

    def _intern(self, key: tuple) -> int:
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = len(self._ids)
        return got

    def _fresh(self, v: ir.Value, axis: int) -> int:
        return self._intern(("value", id(v), axis))

    def _from_shape(self, v: ir.Value, derived: Keys | None) -> Keys | None:
        """Rule 2: the shape's facts, else the derived keys, else fresh keys."""
        shape = v.shape
        if shape is None:
            return derived
        rank = shape.rank()
        if derived is not None and len(derived) != rank:
            derived = None
        out = []
        for axis, d in enumerate(shape.dims):
            if isinstance(d, int):
                out.append(self._intern(("int", d)))
            elif d.value is not None and not d.value.startswith(_GENERATED):
                out.append(self._intern(("param", d.value)))
            elif derived is not None:
                out.append(derived[axis])
            elif d.value is not None:
                out.append(self._intern(("param", d.value)))
            else:
                out.append(self._fresh(v, axis))
        return tuple(out)

    def keys(self, v: ir.Value | None) -> Keys | None:
        """The keys of ``v``'s dims, or None when its rank is unknown (rule 4)."""
        if v is None:
            return None
        return self._keys.get(id(v))

    def same_shape(self, a: ir.Value, b: ir.Value) -> bool:
        """Whether ``a`` and ``b`` provably have the same shape."""
        ka, kb = self.keys(a), self.keys(b)
        return ka is not None and ka == kb

    def why_not_same(self, a: ir.Value, b: ir.Value) -> str | None:
        """None when ``a`` and ``b`` provably have the same shape, else one sentence why not."""
        ka, kb = self.keys(a), self.keys(b)
        if ka is None or kb is None:
            return f"the rank of '{(a if ka is None else b).name}' is unknown"
        if len(ka) != len(kb):
            return f"'{a.name}' has rank {len(ka)}, '{b.name}' rank {len(kb)}"
        for axis, (x, y) in enumerate(zip(ka, kb, strict=True)):
            if x != y:
                return (f"dimension {axis} of '{a.name}' and '{b.name}' is not provably the same size "
                        f"({self._describe(x)} vs {self._describe(y)})")
        return None

    def _describe(self, key: int) -> str:
        for k, i in self._ids.items():
            if i == key:
                if k[0] == "int":
                    return str(k[1])
                if k[0] == "param":
                    return str(k[1])
                if k[0] == "value":
                    return "unknown"
                return "computed"
        return "unknown"

    # ------------------------------------------------------------------ rule 3

    def _derive(self, node: ir.Node) -> Keys | None:
        if node.domain not in _DOMAINS or not node.outputs:
            return None
        op = node.op_type
        ins = node.inputs
        first = self.keys(ins[0]) if ins else None
        out = node.outputs[0]
        if op in _SAME_SHAPE:
            return first
        if op in _BROADCAST:
            return self._broadcast([self.keys(v) for v in ins if v is not None], out)
        if op in ("Conv", "FusedConv") or op in _POOLS:
            return self._windowed(node, first, out)
        if op in _GLOBAL_POOLS:
            return None if first is None else first[:2] + tuple(self._intern(("int", 1)) for _ in first[2:])
        if op == "ConvTranspose":
            return self._transposed(node, first, out)
        if op == "Transpose":
            perm = ints_attr(node, "perm")
            if first is None:
                return None
            perm = perm if perm is not None else list(reversed(range(len(first))))
            return tuple(first[p] for p in perm) if sorted(perm) == list(range(len(first))) else None
        if op == "Concat":
            axis = node.attributes.get_int("axis", 0)
            if first is None:
                return None
            axis = axis + len(first) if axis < 0 else axis
            return tuple(self._fresh(out, i) if i == axis else k for i, k in enumerate(first))
        return None

    def _broadcast(self, inputs: Sequence[Keys | None], out: ir.Value) -> Keys | None:
        if not inputs or any(k is None for k in inputs):
            return None
        rank = max(len(k) for k in inputs)
        one = self._intern(("int", 1))
        keys = []
        for axis in range(rank):
            seen = {k[axis - (rank - len(k))] for k in inputs if axis - (rank - len(k)) >= 0}
            seen.discard(one)
            if not seen:
                keys.append(one)
            elif len(seen) == 1:
                keys.append(seen.pop())
            else:
                keys.append(self._fresh(out, axis))
        return tuple(keys)

    def _windowed(self, node: ir.Node, first: Keys | None, out: ir.Value) -> Keys | None:
        """Conv, FusedConv and the pools: ``out = floor((in + pads − d·(k − 1) − 1) / s) + 1``."""
        if first is None or len(first) < 3:
            return None
        n = len(first) - 2
        is_conv = node.op_type in ("Conv", "FusedConv")
        w = weight_value(node.inputs[1]) if is_conv and len(node.inputs) > 1 else None
        kernel = ints_attr(node, "kernel_shape")
        if kernel is None and w is not None and w.ndim == n + 2:
            kernel = list(w.shape[2:])
        strides = ints_attr(node, "strides") or [1] * n
        dilations = ints_attr(node, "dilations") or [1] * n
        pads = ints_attr(node, "pads") or [0] * (2 * n)
        auto_pad = node.attributes.get_string("auto_pad", "NOTSET")
        ceil = node.op_type in _POOLS and node.attributes.get_int("ceil_mode", 0) == 1
        if kernel is None or len(kernel) != n or len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
            return None
        keys = [first[0]]
        if is_conv:
            keys.append(self._intern(("int", int(w.shape[0]))) if w is not None else self._fresh(out, 1))
        else:
            keys.append(first[1])
        for i in range(n):
            k_in, s = first[2 + i], strides[i]
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                keys.append(k_in if s == 1 else self._intern(("ceil", k_in, s)))
                continue
            total = 0 if auto_pad == "VALID" else pads[i] + pads[i + n]
            c = total - dilations[i] * (kernel[i] - 1)
            if s == 1 and c == 0:
                keys.append(k_in)
            else:
                keys.append(self._intern(("pool_ceil", k_in, s, c, pads[i]) if ceil else ("conv", k_in, s, c)))
        return tuple(keys)

    def _transposed(self, node: ir.Node, first: Keys | None, out: ir.Value) -> Keys | None:
        """ConvTranspose: ``out = s·(in − 1) + output_padding + d·(k − 1) + 1 − pads``."""
        if first is None or len(first) < 3 or len(node.inputs) < 2:
            return None
        n = len(first) - 2
        w = weight_value(node.inputs[1])
        if w is None or w.ndim != n + 2 or "output_shape" in node.attributes:
            return None
        if node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return None
        strides = ints_attr(node, "strides") or [1] * n
        dilations = ints_attr(node, "dilations") or [1] * n
        pads = ints_attr(node, "pads") or [0] * (2 * n)
        out_pad = ints_attr(node, "output_padding") or [0] * n
        if len(strides) != n or len(dilations) != n or len(pads) != 2 * n or len(out_pad) != n:
            return None
        keys = [first[0], self._intern(("int", int(w.shape[1]) * node.attributes.get_int("group", 1)))]
        for i in range(n):
            offset = out_pad[i] + dilations[i] * (int(w.shape[2 + i]) - 1) + 1 - pads[i] - pads[i + n]
            keys.append(self._intern(("convT", first[2 + i], strides[i], offset)))
        return tuple(keys)
