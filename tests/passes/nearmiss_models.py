"""Small models shaped like real exports, each with one site a pass almost fuses.

Each builder returns ``(model, expected)``: ``expected`` names the pass, the node that blocks
the rewrite and the kind of reason (``fusionviz.passes.nearmiss.KINDS``).

- ``conv_bn_constant_nodes``: Paddle2ONNX style, the Conv weight and the BN statistics are
  ``Constant`` nodes (fold_batchnorm needs fold_constants first).
- ``convtranspose_add_bn``: ``ConvTranspose → Add → BatchNormalization`` where the Add's
  constant varies over space (a position map, not a bias). With a per-channel bias, a PP-OCR
  detector's upsampling head (``convtranspose_bias_add_bn``), it is no near miss any more: it folds.
- ``tanh_gelu_megatron``: Megatron's tanh GELU, ``tanh(√(2/π)·x·(1 + 0.044715·x·x))``: the
  polynomial factored, a form ``fuse_gelu`` does not take. (The textbook form with ``x³`` written
  as ``x·x·x``, ``tanh_gelu_cubed_by_mul``, and jax2tf's order, ``tanh_gelu_jax_order``, were
  near misses and fuse now.)
- ``qdq_attention``: QuantizeLinear/DequantizeLinear between the scores MatMul and Softmax.
- ``guarded_attention``: torch dynamo's ``Where(IsNaN(p), 0, p)`` after Softmax (GPT-2) with a
  float mask input that may hold -inf (without a mask, ``guarded_attention_unmasked``, it fuses).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

F = onnx.TensorProto.FLOAT


class Builder:
    """Nodes, initializers and unique names for a one-graph model."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, arr, base: str = "c") -> str:
        nm = self.name(base)
        self.inits.append(onh.from_array(np.asarray(arr), nm))
        return nm

    def constant_node(self, arr, base: str = "k") -> str:
        out = self.name(base)
        self.nodes.append(oh.make_node("Constant", [], [out], name=self.name("Constant"),
                                       value=onh.from_array(np.asarray(arr), out)))
        return out

    def w(self, *shape: int, scale: float = 0.2) -> str:
        return self.init((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op: str, inputs, name: str | None = None, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(oh.make_node(op, list(inputs), [out], name=name or self.name(op), **attrs))
        return out

    def model(self, x_shape, y: str, opset: int = 17, inputs: dict | None = None) -> onnx.ModelProto:
        """The model with input ``x`` (and ``inputs``: name → float shape) and output ``y``."""
        ins = [oh.make_tensor_value_info("x", F, x_shape)]
        ins += [oh.make_tensor_value_info(k, F, v) for k, v in (inputs or {}).items()]
        graph = oh.make_graph(self.nodes, "g", ins, [], self.inits)
        m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
        m.ir_version = 8
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
        m.graph.output.append(inferred[y])
        onnx.checker.check_model(m)
        return m


def _bn_params(b: Builder, c: int, make) -> list[str]:
    rng = b.rng
    return [make((1 + 0.1 * rng.standard_normal(c)).astype(np.float32), "scale"),
            make((0.1 * rng.standard_normal(c)).astype(np.float32), "bias"),
            make((0.1 * rng.standard_normal(c)).astype(np.float32), "mean"),
            make((1 + 0.1 * rng.random(c)).astype(np.float32), "var")]


def conv_bn_constant_nodes():
    b = Builder()
    w = b.constant_node((b.rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32), "conv_w")
    conv = b.op("Conv", ["x", w], name="conv", pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", [conv, *_bn_params(b, 4, b.constant_node)], name="bn")
    return b.model([1, 3, 8, 8], y), {"pass": "fold_batchnorm", "blocker": b.nodes[0].name, "kind": "needs_pass"}


def convtranspose_bias_add_bn(bias_shape=(1, 4, 1, 1)):
    """PP-OCR's upsampling head: the Add's constant is a per-channel bias, so it folds (not a near miss)."""
    b = Builder()
    ct = b.op("ConvTranspose", ["x", b.w(3, 4, 2, 2)], name="up", strides=[2, 2])
    add = b.op("Add", [ct, b.init((0.1 * b.rng.standard_normal(bias_shape)).astype(np.float32), "ct_bias")],
               name="up_bias")
    y = b.op("BatchNormalization", [add, *_bn_params(b, 4, b.init)], name="up_bn")
    return b.model([1, 3, 8, 8], y), {"pass": "fold_batchnorm", "blocker": "up_bias", "kind": "in_between"}


def convtranspose_add_bn():
    """The same head with an Add whose constant varies over space (a position map): it stays between."""
    return convtranspose_bias_add_bn(bias_shape=(1, 4, 16, 16))


def tanh_gelu_cubed_by_mul():
    """The textbook tanh GELU with x³ written as x·x·x: fuses (no near miss)."""
    b = Builder()
    h = b.op("MatMul", ["x", b.w(16, 16)], name="fc")
    c = lambda v: b.init(np.array(v, np.float32))  # noqa: E731
    cube = b.op("Mul", [b.op("Mul", [h, h], name="x_sq"), h], name="x_cubed")
    inner = b.op("Mul", [c(math.sqrt(2 / math.pi)), b.op("Add", [h, b.op("Mul", [c(0.044715), cube])])])
    half = b.op("Mul", [c(0.5), b.op("Add", [b.op("Tanh", [inner], name="tanh"), c(1.0)])])
    y = b.op("Mul", [h, half], name="gelu_out")
    return b.model([2, 16], y), {"pass": "fuse_gelu", "blocker": None, "kind": None}


HID, NH = 32, 4
HS = HID // NH


def _attention(b: Builder, x: str, between_scores: bool, guard: bool, mask: str | None = None) -> str:
    def proj():
        return b.op("Add", [b.op("MatMul", [x, b.w(HID, HID)]), b.w(HID, scale=0.05)])

    def heads(v):
        r = b.op("Reshape", [v, b.init(np.array([0, 0, NH, HS], np.int64), "shape")])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])

    q, k, v = heads(proj()), heads(proj()), heads(proj())
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    if between_scores:
        scale, zero = b.init(np.array(0.05, np.float32), "qs"), b.init(np.array(0, np.int8), "qz")
        q8 = b.op("QuantizeLinear", [scores, scale, zero], name="scores_q")
        scores = b.op("DequantizeLinear", [q8, scale, zero], name="scores_dq")
    scores = b.op("Div", [scores, b.init(np.array(math.sqrt(HS), np.float32))])
    if mask is not None:
        scores = b.op("Add", [scores, mask], name="masked")
    probs = b.op("Softmax", [scores], name="softmax", axis=-1)
    if guard:
        nan = b.op("IsNaN", [probs], name="isnan")
        probs = b.op("Where", [nan, b.init(np.array(0.0, np.float32)), probs], name="where")
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return b.op("Reshape", [ctx, b.init(np.array([0, 0, HID], np.int64), "shape")])


def qdq_attention():
    b = Builder()
    y = _attention(b, "x", between_scores=True, guard=False)
    return b.model([2, 8, HID], y), {"pass": "fuse_attention", "blocker": "scores_dq", "kind": "qdq"}


def guarded_attention():
    """torch dynamo's guard with a float mask that may hold -inf (a boolean mask turned into 0/-inf):
    a fully masked row is NaN before the guard, 0 after it, NaN in the fused kernel."""
    b = Builder()
    ctx = _attention(b, "x", between_scores=False, guard=True, mask="mask")
    out = b.op("Add", [b.op("MatMul", [ctx, b.w(HID, HID)], name="out_proj"), b.w(HID, scale=0.05)])
    y = b.op("Add", [out, "x"], name="residual")
    return (b.model([2, 8, HID], y, inputs={"mask": [2, 1, 8, 8]}),
            {"pass": "fuse_attention", "blocker": "isnan", "kind": "other_uses"})


def guarded_attention_unmasked():
    """The guard with no mask: no row can be all -inf, the guard is a no-op and is fused away."""
    b = Builder()
    y = _attention(b, "x", between_scores=False, guard=True)
    return b.model([2, 8, HID], y), {"pass": "fuse_attention", "blocker": None, "kind": None}


def tanh_gelu_megatron():
    """Megatron's bias-GELU body: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x·x)))."""
    b = Builder()
    h = b.op("MatMul", ["x", b.w(16, 16)], name="fc")
    c = lambda v: b.init(np.array(v, np.float32))  # noqa: E731
    poly = b.op("Add", [c(1.0), b.op("Mul", [c(0.044715), b.op("Mul", [h, h], name="x_sq")], name="k_x_sq")],
                name="poly")
    inner = b.op("Mul", [b.op("Mul", [c(math.sqrt(2 / math.pi)), h], name="k_x"), poly], name="inner")
    half = b.op("Mul", [c(0.5), b.op("Add", [b.op("Tanh", [inner], name="tanh"), c(1.0)])])
    y = b.op("Mul", [h, half], name="gelu_out")
    return b.model([2, 16], y), {"pass": "fuse_gelu", "blocker": "inner", "kind": "form"}


ALL = {f.__name__: f for f in (conv_bn_constant_nodes, convtranspose_add_bn, tanh_gelu_megatron,
                                 qdq_attention, guarded_attention)}


def conv_silu():
    """YOLOv8's Conv → x·sigmoid(x): onnxruntime has no fused kernel for it."""
    b = Builder()
    conv = b.op("Conv", ["x", b.w(4, 3, 3, 3)], name="conv", pads=[1, 1, 1, 1])
    y = b.op("Mul", [conv, b.op("Sigmoid", [conv], name="sig")], name="silu")
    return b.model([1, 3, 8, 8], y), {"pass": "fuse_conv_activation", "blocker": "silu", "kind": "no_kernel"}


ALL["conv_silu"] = conv_silu


def tanh_gelu_jax_order():
    """jax2tf's tanh GELU (a file-type classifier): 0.044715·x³ as x·(x·(0.044715·x)): fuses."""
    b = Builder()
    h = b.op("MatMul", ["x", b.w(16, 16)], name="fc")
    c = lambda v: b.init(np.array(v, np.float32))  # noqa: E731
    k = b.op("Mul", [c(0.044715), h], name="k_x")
    k2 = b.op("Mul", [h, k], name="k_x2")
    k3 = b.op("Mul", [h, k2], name="k_x3")
    inner = b.op("Mul", [c(math.sqrt(2 / math.pi)), b.op("Add", [h, k3])])
    half = b.op("Mul", [c(0.5), b.op("Add", [c(1.0), b.op("Tanh", [inner], name="tanh")])])
    y = b.op("Mul", [h, half], name="gelu_out")
    return b.model([2, 16], y), {"pass": "fuse_gelu", "blocker": None, "kind": None}
