"""Generated models for tests and benchmarks: deep transformer-like graphs of any size.

The graph has what makes real exported transformers hard to draw: name scopes in the
``/encoder/layer.N/attention/self/MatMul`` style, symbolic dims (``batch``, ``seq``), and one
*hub* tensor (the extended attention mask) that feeds every layer. Weights are tiny, so a
5,000-node model is a few hundred kB. The model passes the ONNX checker and shape inference.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

logger = logging.getLogger(__name__)

#: Nodes per encoder layer in :func:`transformer_model` (attention 23 + feed-forward 11).
NODES_PER_LAYER = 34
#: Nodes outside the layers (mask preparation, embeddings, final Identity).
EXTRA_NODES = 7


def layers_for(total_nodes: int) -> int:
    """Number of layers that gives about ``total_nodes`` nodes."""
    return max(1, math.ceil((total_nodes - EXTRA_NODES) / NODES_PER_LAYER))


def transformer_model(layers: int, *, hidden: int = 16, heads: int = 2, opset: int = 17,
                      scoped: bool = True) -> onnx.ModelProto:
    """A BERT-like encoder with ``layers`` layers (``NODES_PER_LAYER * layers + EXTRA_NODES`` nodes).

    Args:
        layers: number of encoder layers.
        hidden: hidden size (kept tiny: the point is the graph, not the weights).
        heads: attention heads; must divide ``hidden``.
        opset: default-domain opset.
        scoped: name nodes in the ``/encoder/layer.N/...`` style (name scopes); False gives flat
            names (``encoder_layer_3_attention_self_MatMul``), as many converters write them.

    Returns:
        A checked ModelProto with inputs ``input_ids`` [batch, seq] (int64) and
        ``attention_mask`` [batch, seq] (int64), output ``last_hidden_state``.
    """
    rng = np.random.default_rng(0)
    head_dim = hidden // heads
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def w(name: str, *shape: int) -> str:
        return init(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    def node(op: str, ins: list[str], outs: list[str], name: str, **attrs) -> None:
        if not scoped:
            name = name.strip("/").replace("/", "_").replace(".", "_")
        nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))

    # Shared constants (initializers, folded into labels by the graph view).
    init("split_heads_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    init("merge_heads_shape", np.array([0, 0, hidden], dtype=np.int64))
    init("sqrt_d", np.array(math.sqrt(head_dim), dtype=np.float32))
    init("one", np.array(1.0, dtype=np.float32))
    init("half", np.array(0.5, dtype=np.float32))
    init("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    init("mask_big", np.array(-10000.0, dtype=np.float32))
    init("unsq_axes", np.array([1, 2], dtype=np.int64))

    # Mask preparation: one tensor that every layer reads (the hub).
    node("Unsqueeze", ["attention_mask", "unsq_axes"], ["/mask/unsq"], "/embeddings/mask/Unsqueeze")
    node("Cast", ["/mask/unsq"], ["/mask/cast"], "/embeddings/mask/Cast", to=TensorProto.FLOAT)
    node("Sub", ["one", "/mask/cast"], ["/mask/inv"], "/embeddings/mask/Sub")
    node("Mul", ["/mask/inv", "mask_big"], ["ext_mask"], "/embeddings/mask/Mul")
    # Embeddings.
    w("word_embeddings", 64, hidden)
    node("Gather", ["word_embeddings", "input_ids"], ["/emb/gather"], "/embeddings/word_embeddings/Gather", axis=0)
    w("emb_ln_scale", hidden)
    w("emb_ln_bias", hidden)
    node("LayerNormalization", ["/emb/gather", "emb_ln_scale", "emb_ln_bias"], ["/emb/out"],
         "/embeddings/LayerNorm/LayerNormalization", axis=-1, epsilon=1e-12)
    x = "/emb/out"

    for i in range(layers):
        p = f"/encoder/layer.{i}"
        t = f"{p}/"  # tensor-name prefix
        proj = {}
        for part in ("query", "key", "value"):
            node("MatMul", [x, w(f"{t}{part}.weight", hidden, hidden)], [f"{t}{part}/mm"],
                 f"{p}/attention/self/{part}/MatMul")
            node("Add", [f"{t}{part}/mm", w(f"{t}{part}.bias", hidden)], [f"{t}{part}/out"],
                 f"{p}/attention/self/{part}/Add")
            node("Reshape", [f"{t}{part}/out", "split_heads_shape"], [f"{t}{part}/heads"],
                 f"{p}/attention/self/Reshape_{part}")
            perm = [0, 2, 3, 1] if part == "key" else [0, 2, 1, 3]
            node("Transpose", [f"{t}{part}/heads"], [f"{t}{part}/t"], f"{p}/attention/self/Transpose_{part}",
                 perm=perm)
            proj[part] = f"{t}{part}/t"
        a = f"{p}/attention/self"
        node("MatMul", [proj["query"], proj["key"]], [f"{t}scores"], f"{a}/MatMul")
        node("Div", [f"{t}scores", "sqrt_d"], [f"{t}scaled"], f"{a}/Div")
        node("Add", [f"{t}scaled", "ext_mask"], [f"{t}masked"], f"{a}/Add")
        node("Softmax", [f"{t}masked"], [f"{t}probs"], f"{a}/Softmax", axis=-1)
        node("MatMul", [f"{t}probs", proj["value"]], [f"{t}ctx"], f"{a}/MatMul_1")
        node("Transpose", [f"{t}ctx"], [f"{t}ctx_t"], f"{a}/Transpose", perm=[0, 2, 1, 3])
        node("Reshape", [f"{t}ctx_t", "merge_heads_shape"], [f"{t}ctx_m"], f"{a}/Reshape")
        o = f"{p}/attention/output"
        node("MatMul", [f"{t}ctx_m", w(f"{t}attn_out.weight", hidden, hidden)], [f"{t}ao_mm"], f"{o}/dense/MatMul")
        node("Add", [f"{t}ao_mm", w(f"{t}attn_out.bias", hidden)], [f"{t}ao"], f"{o}/dense/Add")
        node("Add", [f"{t}ao", x], [f"{t}res1"], f"{o}/Add")
        node("LayerNormalization", [f"{t}res1", w(f"{t}ln1.scale", hidden), w(f"{t}ln1.bias", hidden)],
             [f"{t}h1"], f"{o}/LayerNorm/LayerNormalization", axis=-1, epsilon=1e-12)
        f = f"{p}/intermediate"
        node("MatMul", [f"{t}h1", w(f"{t}ff1.weight", hidden, 4 * hidden)], [f"{t}ff1_mm"], f"{f}/dense/MatMul")
        node("Add", [f"{t}ff1_mm", w(f"{t}ff1.bias", 4 * hidden)], [f"{t}ff1"], f"{f}/dense/Add")
        g = f"{f}/intermediate_act_fn"
        node("Div", [f"{t}ff1", "sqrt2"], [f"{t}g_div"], f"{g}/Div")
        node("Erf", [f"{t}g_div"], [f"{t}g_erf"], f"{g}/Erf")
        node("Add", [f"{t}g_erf", "one"], [f"{t}g_add"], f"{g}/Add")
        node("Mul", [f"{t}ff1", f"{t}g_add"], [f"{t}g_mul"], f"{g}/Mul")
        node("Mul", [f"{t}g_mul", "half"], [f"{t}gelu"], f"{g}/Mul_1")
        q = f"{p}/output"
        node("MatMul", [f"{t}gelu", w(f"{t}ff2.weight", 4 * hidden, hidden)], [f"{t}ff2_mm"], f"{q}/dense/MatMul")
        node("Add", [f"{t}ff2_mm", w(f"{t}ff2.bias", hidden)], [f"{t}ff2"], f"{q}/dense/Add")
        node("Add", [f"{t}ff2", f"{t}h1"], [f"{t}res2"], f"{q}/Add")
        node("LayerNormalization", [f"{t}res2", w(f"{t}ln2.scale", hidden), w(f"{t}ln2.bias", hidden)],
             [f"{t}out"], f"{q}/LayerNorm/LayerNormalization", axis=-1, epsilon=1e-12)
        x = f"{t}out"

    node("Identity", [x], ["last_hidden_state"], "/Identity")
    graph = helper.make_graph(
        nodes,
        "synthetic_transformer",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="fusionviz.synthetic")
    model.ir_version = 8
    return model


def transformer_with_nodes(total_nodes: int, **kwargs) -> onnx.ModelProto:
    """A :func:`transformer_model` with about ``total_nodes`` nodes (never fewer)."""
    return transformer_model(layers_for(total_nodes), **kwargs)


_CONTROL_FLOW_TEXT = """<ir_version: 8, opset_import: ["" : 17]>
vad (float[1,8] x, int64 sr) => (float[1,8] y, float[1,8] z) <float[8,8] w, float[8] b> {
    k = Constant<value = int64 {16000}>()
    c = Equal(sr, k)
    y = If(c) <
        then_branch = speech () => (float[1,8] t_out) {
            t1 = Identity(x)
            t2 = MatMul(t1, w)
            t3 = Add(t2, b)
            t_out = Relu(t3)
        },
        else_branch = silence () => (float[1,8] e_out) {
            e_out = Sigmoid(x)
        }
    >
    trip = Constant<value = int64 {3}>()
    go = Constant<value = bool {1}>()
    z = Loop(trip, go, x) <
        body = steps (int64 i, bool cin, float[1,8] acc) => (bool cout, float[1,8] acc2) {
            cout = Identity(cin)
            s = Add(acc, x)
            acc2 = If(c) <
                then_branch = keep () => (float[1,8] r) { r = Relu(s) },
                else_branch = flip () => (float[1,8] r2) { r2 = Neg(s) }
            >
        }
    >
}"""


def control_flow_model() -> onnx.ModelProto:
    """A small model with control flow, for the body views: an If whose ``then_branch`` reads
    outer weights (``Identity → MatMul → Add → Relu``; identity elimination changes it) and
    whose ``else_branch`` is one ``Sigmoid``; a Loop whose body holds a nested If reading a
    value of the main graph (``c``) and one of the body (``s``). Nodes are named ``If_2``,
    ``Loop_5``; a body's nodes carry its graph's name (``speech/MatMul_1``)."""
    m = onnx.parser.parse_model(_CONTROL_FLOW_TEXT)
    rng = np.random.default_rng(0)
    del m.graph.initializer[:]
    m.graph.initializer.extend([numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
                                numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    stack = [(m.graph, "")]
    while stack:
        g, prefix = stack.pop()
        for i, n in enumerate(g.node):
            n.name = f"{prefix}{n.op_type}_{i}"
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append((a.g, f"{a.g.name}/"))
    return m
