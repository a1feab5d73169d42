"""FLOPs, MACs and parameters per node and per model (rules of :mod:`fusionviz.analysis`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz.analysis.memory import MAX_BODY_DEPTH
from fusionviz.analysis.tensors import _bodies, _execution_order, _TensorInfo, infer_tensor_info
from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)

_ELEMENTWISE = frozenset(
    """Add Sub Mul Div Relu LeakyRelu Sigmoid Tanh Erf Exp Log Sqrt Pow Neg Abs Clip HardSigmoid
    HardSwish Gelu FastGelu BiasGelu QuickGelu Softplus Softsign Max Min Where Reciprocal PRelu Elu
    Selu Mish Sin Cos Floor Ceil Round Sign Equal Greater Less GreaterOrEqual LessOrEqual Not And
    Or Xor Mod Sum Mean ThresholdedRelu Celu BiasAdd""".split()
)
_NORM5 = frozenset(
    "LayerNormalization SkipLayerNormalization SimplifiedLayerNormalization "
    "SkipSimplifiedLayerNormalization RMSNormalization InstanceNormalization GroupNormalization".split()
)
_REDUCE = frozenset(
    "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare "
    "ReduceLogSumExp GlobalAveragePool GlobalMaxPool ArgMax ArgMin".split()
)
_CONV = frozenset("Conv FusedConv ConvInteger QLinearConv NhwcConv".split())
_MATMUL = frozenset("MatMul FusedMatMul MatMulInteger QLinearMatMul".split())
_GEMM = frozenset(["Gemm", "FusedGemm"])


# --------------------------------------------------------------------------- FLOPs / MACs / params


@dataclasses.dataclass(frozen=True)
class Cost:
    """FLOPs, MACs and parameters of a model (main graph) and per node."""

    flops: int
    macs: int
    params: int
    per_node: tuple[dict, ...]
    unknown_nodes: int = 0

    def as_dict(self, *, per_node: bool = False) -> dict:
        d = {"flops": self.flops, "macs": self.macs, "params": self.params,
             "unknown_nodes": self.unknown_nodes}
        if per_node:
            d["per_node"] = [dict(x) for x in self.per_node]
        return d


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_cost(node: onnx.NodeProto, info: Mapping[str, _TensorInfo]) -> tuple[int, int, bool]:
    """(flops, macs, known) for one node; ``known`` is False when a needed shape is missing."""
    op = node.op_type

    def dims(name: str) -> tuple[int, ...] | None:
        ti = info.get(name) if name else None
        return ti.dims if ti is not None else None

    def numel(name: str) -> int | None:
        d = dims(name)
        return int(np.prod(d, dtype=np.int64)) if d is not None else None

    out = node.output[0] if node.output else ""
    if op in _CONV:
        w_idx = 3 if op == "QLinearConv" else 1
        w, y = dims(node.input[w_idx]) if len(node.input) > w_idx else None, numel(out)
        if w is None or y is None or len(w) < 2:
            return 0, 0, False
        macs = y * int(np.prod(w[1:], dtype=np.int64))
        extra = 0
        if op in ("Conv", "FusedConv") and len(node.input) > 2 and node.input[2]:
            extra += y  # bias
        if op == "FusedConv":
            extra += y  # activation
            if len(node.input) > 3 and node.input[3]:
                extra += y  # Z sum
        return 2 * macs + extra, macs, True
    if op == "ConvTranspose":
        x, w = dims(node.input[0]), dims(node.input[1])
        if x is None or w is None or len(w) < 2:
            return 0, 0, False
        macs = int(np.prod(x, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
        extra = (numel(out) or 0) if len(node.input) > 2 and node.input[2] else 0
        return 2 * macs + extra, macs, True
    if op in _MATMUL:
        a_idx = 0
        a, y = dims(node.input[a_idx]), numel(out)
        if a is None or y is None or not a:
            return 0, 0, False
        k = a[-1]
        if op == "FusedMatMul" and _attr(node, "transA", 0) and len(a) >= 2:
            k = a[-2]
        macs = y * int(k)
        return 2 * macs, macs, True
    if op in _GEMM:
        a, y = dims(node.input[0]), numel(out)
        if a is None or y is None or len(a) != 2:
            return 0, 0, False
        k = a[0] if _attr(node, "transA", 0) else a[1]
        macs = y * int(k)
        extra = y if len(node.input) > 2 and node.input[2] else 0
        if op == "FusedGemm":
            extra += y
        return 2 * macs + extra, macs, True
    if op in ("MaxPool", "AveragePool", "LpPool"):
        y = numel(out)
        k = _attr(node, "kernel_shape")
        if y is None or not k:
            return 0, 0, False
        return y * int(np.prod(k)), 0, True
    if op in _REDUCE:
        x = numel(node.input[0]) if node.input else None
        return (x or 0), 0, x is not None
    if op in _ELEMENTWISE or op in ("BatchNormalization", "Softmax", "LogSoftmax") or op in _NORM5:
        y = numel(out)
        if y is None:
            return 0, 0, False
        per = 2 if op == "BatchNormalization" else 3 if op in ("Softmax", "LogSoftmax") else 5 if op in _NORM5 else 1
        return per * y, 0, True
    return 0, 0, True


def model_cost(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None) -> Cost:
    """FLOPs, MACs and parameters, in total and per node (conventions in the module docstring).

    Args:
        model: the model.
        shapes: input shape overrides.

    Returns:
        A :class:`Cost`; ``params`` counts each initializer and Constant tensor once.
    """
    info = infer_tensor_info(model, shapes)
    weights: dict[str, int] = {}
    for g in proto_graphs(model.graph):  # rule 6: every body's weights
        for t in g.initializer:
            weights[t.name] = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        for n in g.node:
            if n.op_type == "Constant":
                ti = info.get(n.output[0]) if n.output else None
                if ti is not None and ti.numel is not None:
                    weights[n.output[0]] = ti.numel
    flops, macs, unknown, per_node = _graph_cost(model.graph, info, weights, 0)
    return Cost(int(flops), int(macs), int(sum(weights.values())), tuple(per_node), unknown)


def _graph_cost(g: onnx.GraphProto, info: Mapping[str, _TensorInfo], weights: Mapping[str, int],
                depth: int) -> tuple[int, int, int, list[dict]]:
    """(flops, macs, unknown nodes, per-node rows) of one graph; a node holding bodies costs
    its larger If branch, or its Loop/Scan body once (rule 6)."""
    per_node = []
    flops = macs = 0
    unknown = 0
    for n in _execution_order(g):
        f, m, known = node_cost(n, info)
        bodies = _bodies(n) if depth < MAX_BODY_DEPTH else []
        if bodies:
            costs = [_graph_cost(b, info, weights, depth + 1)[:3] for _, b in bodies]
            if n.op_type == "If" and n.domain in ("", "ai.onnx"):
                costs = [max(costs, key=lambda c: c[0])]
            f += sum(c[0] for c in costs)
            m += sum(c[1] for c in costs)
            unknown += sum(c[2] for c in costs)
        p = sum(weights.get(x, 0) for x in set(n.input) if x)
        if not known:
            unknown += 1
        flops += f
        macs += m
        per_node.append({"name": n.name, "op_type": n.op_type, "flops": int(f), "macs": int(m),
                         "params": int(p), "known": known})
    return flops, macs, unknown, per_node
