"""fuse_qdq: QDQ Conv / MatMul groups into QLinearConv / QLinearMatMul, where onnxruntime makes them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionviz.passes import run_pipeline
from tests.passes.conftest import ops

U8, I8 = TensorProto.UINT8, TensorProto.INT8
RNG = np.random.default_rng(7)
#: output scales of the groups whose result is a graph output (one quantization step)
STEP = 0.05


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, ins: list[str], name: str, **attrs) -> str:
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    def q(self, x: str, name: str, scale: float, zp: int, dtype: int) -> str:
        npt = np.uint8 if dtype == U8 else np.int8
        return self.node("QuantizeLinear", [x, self.const(f"{name}_s", np.float32(scale)),
                                            self.const(f"{name}_z", npt(zp))], name)

    def dq(self, xq: str, name: str, scale, zp, *, axis: int | None = None) -> str:
        s = self.const(f"{name}_s", np.asarray(scale, dtype=np.float32))
        ins = [xq, s] + ([self.const(f"{name}_z", zp)] if zp is not None else [])
        return self.node("DequantizeLinear", ins, name, **({"axis": axis} if axis is not None else {}))

    def weight(self, name: str, shape: tuple, dtype: int, *, per_axis: int | None = None, zp: bool = True):
        npt = np.uint8 if dtype == U8 else np.int8
        lo, hi = (0, 255) if dtype == U8 else (-127, 127)
        w = self.const(f"{name}_q", RNG.integers(lo, hi, size=shape).astype(npt))
        if per_axis is None:
            return self.dq(w, name, 0.02, (npt(128 if dtype == U8 else 0) if zp else None)), 0.02
        n = shape[per_axis]
        scales = (0.01 + 0.02 * RNG.random(n)).astype(np.float32)
        z = np.full(n, 128 if dtype == U8 else 0, dtype=npt) if zp else None
        return self.dq(w, name, scales, z, axis=per_axis), scales


def _conv(b: _Builder, name: str, xq: str, x_scale: float, x_zp, dtype: int, w_dtype: int, *,
          per_channel: bool, bias: str = "int32", y_scale: float = STEP, x: str | None = None) -> tuple[str, str]:
    """DQ(x) → Conv(3x3, 4 → 4 channels) → Q; returns (conv output, Q output). ``x``: a DQ output
    to read instead of a DQ of its own."""
    x = x or b.dq(xq, f"{name}_dqx", x_scale, x_zp)
    w, ws = b.weight(f"{name}_w", (4, 4, 3, 3), w_dtype, per_axis=0 if per_channel else None)
    ins = [x, w]
    if bias == "int32":
        bs = np.asarray(x_scale * np.asarray(ws, dtype=np.float32), dtype=np.float32)
        bq = b.const(f"{name}_bq", RNG.integers(-500, 500, size=4).astype(np.int32))
        ins.append(b.dq(bq, f"{name}_dqb", bs if bs.ndim else np.float32(bs), None,
                        axis=0 if per_channel else None))
    elif bias == "float":
        ins.append(b.const(f"{name}_bf", RNG.standard_normal(4).astype(np.float32)))
    y = b.node("Conv", ins, name, pads=[1, 1, 1, 1])
    zp = 128 if dtype == U8 else 0
    return y, b.q(y, f"{name}_q", y_scale, zp, dtype)


def _matmul(b: _Builder, name: str, aq: str, a_scale: float, a_zp, dtype: int, w_dtype: int, *,
            per_column: bool) -> str:
    a = b.dq(aq, f"{name}_dqa", a_scale, a_zp)
    w, _ = b.weight(f"{name}_w", (16, 8), w_dtype, per_axis=1 if per_column else None)
    y = b.node("MatMul", [a, w], name)
    return b.q(y, f"{name}_q", STEP, 128 if dtype == U8 else 0, dtype)


def _gemm(b: _Builder, name: str, aq: str, *, trans_b: bool, bias: str) -> str:
    """DQ(uint8 A [3, 16]) → Gemm(int8 weight per output, 8 outputs) → Q."""
    a = b.dq(aq, f"{name}_dqa", 0.03, np.uint8(128))
    w, ws = b.weight(f"{name}_w", (8, 16) if trans_b else (16, 8), I8, per_axis=0 if trans_b else 1)
    ins = [a, w]
    if bias == "int32":
        bq = b.const(f"{name}_bq", RNG.integers(-500, 500, size=8).astype(np.int32))
        ins.append(b.dq(bq, f"{name}_dqb", (np.float32(0.03) * ws).astype(np.float32), None, axis=0))
    else:
        ins.append(b.const(f"{name}_bf", RNG.standard_normal(8).astype(np.float32)))
    y = b.node("Gemm", ins, name, transB=int(trans_b))
    return b.q(y, f"{name}_q", STEP, 128, U8)


def qdq_model() -> onnx.ModelProto:
    """Eight groups onnxruntime turns into QLinear ops on x86 (two with a float bias it quantizes) and
    three it does not (int8 activations into a Conv, twice from one shared DQ; a Conv output also
    read by a Relu)."""
    b = _Builder()
    outs: list[str] = []
    # uint8 activations: per-tensor uint8 weight with an int32 bias, then a per-channel int8 weight
    xq = b.q("X", "qx", 0.03, 128, U8)
    _, y1 = _conv(b, "conv_u8", xq, 0.03, np.uint8(128), U8, U8, per_channel=False)
    _, y2 = _conv(b, "conv_u8s8_pc", y1, STEP, np.uint8(128), U8, I8, per_channel=True)
    outs.append(b.dq(y2, "out_conv_u8", STEP, np.uint8(128)))
    # int8 activations and weights, per channel, no bias; the input DQ has a second reader
    xs = b.q("X", "qx8", 0.03, 0, I8)
    shared = b.dq(xs, "dq_shared", 0.03, np.int8(0))
    _, y3 = _conv(b, "conv_s8_pc", xs, 0.03, np.int8(0), I8, I8, per_channel=True, bias="none", x=shared)
    outs.append(b.dq(y3, "out_conv_s8", STEP, np.int8(0)))
    _, y3b = _conv(b, "conv_s8_shared_dq", xs, 0.03, np.int8(0), I8, I8, per_channel=False, bias="none",
                   x=shared)
    outs.append(b.dq(y3b, "out_conv_s8b", STEP, np.int8(0)))
    # a float bias (quantized, fused); not fused: a Conv output also read by a Relu
    # (both read one DQ: it stays for the Conv that is not fused)
    shared_u8 = b.dq(xq, "dq_shared_u8", 0.03, np.uint8(128))
    _, y4 = _conv(b, "conv_float_bias", xq, 0.03, np.uint8(128), U8, U8, per_channel=False, bias="float",
                  x=shared_u8)
    outs.append(b.dq(y4, "out_float_bias", STEP, np.uint8(128)))
    raw, y5 = _conv(b, "conv_two_users", xq, 0.03, np.uint8(128), U8, U8, per_channel=False, x=shared_u8)
    outs.append(b.dq(y5, "out_two_users", STEP, np.uint8(128)))
    outs.append(b.node("Relu", [raw], "relu_side"))
    # MatMuls: uint8 x per-column int8 weight (no zero point), uint8 x uint8, int8 x int8 per column
    mq = b.q("M", "qm", 0.03, 128, U8)
    outs.append(b.dq(_matmul(b, "mm_u8s8_pc", mq, 0.03, np.uint8(128), U8, I8, per_column=True), "out_mm1",
                     STEP, np.uint8(128)))
    outs.append(b.dq(_matmul(b, "mm_u8u8", mq, 0.03, np.uint8(128), U8, U8, per_column=False), "out_mm2",
                     STEP, np.uint8(128)))
    ms = b.q("M", "qm8", 0.03, 0, I8)
    outs.append(b.dq(_matmul(b, "mm_s8_pc", ms, 0.03, np.int8(0), I8, I8, per_column=True), "out_mm3",
                     STEP, np.int8(0)))
    gq = b.q("G", "qg", 0.03, 128, U8)
    outs.append(b.dq(_gemm(b, "gemm_tb_int32", gq, trans_b=True, bias="int32"), "out_g1", STEP, np.uint8(128)))
    outs.append(b.dq(_gemm(b, "gemm_float_bias", gq, trans_b=False, bias="float"), "out_g2", STEP,
                     np.uint8(128)))
    graph = helper.make_graph(
        b.nodes, "qdq",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("M", TensorProto.FLOAT, [2, 3, 16]),
         helper.make_tensor_value_info("G", TensorProto.FLOAT, [3, 16])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


FUSED_CONV, FUSED_MATMUL, FUSED_GEMM = 3, 3, 2


def _ort_extended(model: onnx.ModelProto, tmp_path) -> onnx.ModelProto:
    path = str(tmp_path / "ort_all.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = path
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(path)


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _feeds() -> dict:
    rng = np.random.default_rng(3)
    return {"X": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
            "M": rng.standard_normal((2, 3, 16)).astype(np.float32),
            "G": rng.standard_normal((3, 16)).astype(np.float32)}


def test_fuses_exactly_the_groups_onnxruntime_fuses(tmp_path):
    model = qdq_model()
    result = run_pipeline(model, ["fuse_qdq"])
    rep = next(r for r in result.reports if r.name == "fuse_qdq")
    assert rep.error is None, rep.error
    final = result.final
    got = ops(final)
    assert got.count("QLinearConv") == FUSED_CONV and got.count("QLinearMatMul") == FUSED_MATMUL
    assert got.count("QGemm") == FUSED_GEMM and "Gemm" not in got
    left = sorted(n.name for n in final.graph.node if n.op_type == "Conv")
    assert left == ["conv_s8_pc", "conv_s8_shared_dq", "conv_two_users"]
    assert "MatMul" not in got
    read = {i for n in final.graph.node for i in n.input}
    assert [i.name for i in final.graph.initializer if i.name not in read] == []  # the removed DQs' scales go too
    # onnxruntime's own QDQ transformer makes the same ops from the same groups
    theirs = ops(_ort_extended(model, tmp_path))
    assert theirs.count("QLinearConv") == FUSED_CONV and theirs.count("QLinearMatMul") == FUSED_MATMUL
    assert theirs.count("QGemm") == FUSED_GEMM
    names = {n.name for n in final.graph.node}
    assert "dq_shared_u8" in names and "dq_shared" in names  # still read by Convs that stay
    # every group's Q and Conv/MatMul are gone
    assert not any(n.name.startswith(("conv_u8", "conv_float", "mm_")) and n.op_type in ("Conv", "MatMul",
                   "QuantizeLinear") for n in final.graph.node)
    # the two that stay are explained
    misses = {m.blocker or (m.nodes[0] if m.nodes else ""): m for m in rep.near_misses}
    kinds = {m.kind for m in rep.near_misses}
    assert {"other_uses", "condition"} <= kinds, misses
    assert any("relu_side" == (m.blocker or "") for m in rep.near_misses)


def test_outputs_match_within_one_quantization_step():
    model = qdq_model()
    final = run_pipeline(model, ["fuse_qdq"]).final
    feeds = _feeds()
    want, got = _run(model, feeds), _run(final, feeds)
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape
        assert np.max(np.abs(a - b)) <= STEP * 1.001
    # most elements are equal: the integer kernel and the float group round the same sums
    same = np.mean([np.mean(a == b) for a, b in zip(want, got, strict=True)])
    assert same > 0.9


@pytest.mark.parametrize("change", ["int16", "bias_scale", "per_channel_matmul_axis0"])
def test_forms_onnxruntime_has_no_kernel_for_stay(change):
    b = _Builder()
    if change == "int16":
        xq = b.node("QuantizeLinear", ["X", b.const("s", np.float32(0.03)), b.const("z", np.int16(0))], "q16")
        x = b.dq(xq, "dq16", 0.03, np.int16(0))
        w, _ = b.weight("w", (4, 4, 3, 3), I8)
        y = b.node("Conv", [x, w], "conv", pads=[1, 1, 1, 1])
        out = b.node("QuantizeLinear", [y, b.const("ys", np.float32(STEP)), b.const("yz", np.int16(0))], "yq")
        opset = 21
    elif change == "bias_scale":
        xq = b.q("X", "qx", 0.03, 128, U8)
        x = b.dq(xq, "dqx", 0.03, np.uint8(128))
        w, _ = b.weight("w", (4, 4, 3, 3), U8)
        bias = b.dq(b.const("bq", np.arange(4, dtype=np.int32)), "dqb", np.float32(0.5), None)
        y = b.node("Conv", [x, w, bias], "conv", pads=[1, 1, 1, 1])
        out = b.q(y, "yq", STEP, 128, U8)
        opset = 13
    else:
        xq = b.q("M", "qx", 0.03, 128, U8)
        x = b.dq(xq, "dqx", 0.03, np.uint8(128))
        w, _ = b.weight("w", (16, 8), I8, per_axis=0)
        y = b.node("MatMul", [x, w], "mm")
        out = b.q(y, "yq", STEP, 128, U8)
        opset = 13
    xin = ("M", [2, 16]) if change.startswith("per_channel_matmul") else ("X", [1, 4, 8, 8])
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info(xin[0], TensorProto.FLOAT, xin[1])],
                              [helper.make_tensor_value_info(out, TensorProto.UNDEFINED, None)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    result = run_pipeline(model, ["fuse_qdq"])
    rep = next(r for r in result.reports if r.name == "fuse_qdq")
    assert rep.error is None, rep.error
    assert not any(op.startswith("QLinear") for op in ops(result.final))
    assert rep.near_misses and rep.near_misses[0].kind in ("no_kernel", "condition")
