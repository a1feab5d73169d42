"""nchwc_layout: onnxruntime's NCHWc layout captured as a pass."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz.passes.layout.nchwc_layout import NCHWC
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import make_session, run_model, verify


def _cnn(channels: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = onh.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.2).astype(np.float32), "w1")
    w2 = onh.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), "w2")
    nodes = [
        oh.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        oh.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap"),
    ]
    g = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 32, 32])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, channels, 1, 1])], [w1, w2])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_nchwc_layout_captures_blocked_kernels_that_run_with_ort_off():
    model = _cnn()
    result = run_pipeline(model, ["nchwc_layout"])
    (rep,) = result.reports
    assert rep.error is None and rep.changes
    final = result.final
    nchwc_ops = [n.op_type for n in final.graph.node if n.domain == NCHWC]
    assert "Conv" in nchwc_ops
    assert any(n.op_type == "ReorderOutput" for n in final.graph.node)  # leaving the blocked layout is drawn
    assert any(o.domain == NCHWC for o in final.opset_import)
    assert [o.name for o in final.graph.output] == ["y"]
    # runs in onnxruntime with its optimizer off, same outputs
    out = run_model(make_session(final, level="off"), {"x": np.ones((1, 3, 32, 32), np.float32)})
    assert out["y"].shape == (1, 16, 1, 1)
    assert verify(result.original, final).ok
    # provenance: new nodes name the original nodes they came from
    srcs = {p.value for n in final.graph.node for p in n.metadata_props if p.key == "fusionviz.sources"}
    assert any("conv1" in s for s in srcs)


def test_nchwc_layout_skips_models_without_conv():
    text = """
    <ir_version: 9, opset_import: ["" : 17]>
    g (float[2,8] x) => (float[2,8] y) {
      y = Relu(x)
    }"""
    result = run_pipeline(onnx.parser.parse_model(text), ["nchwc_layout"])
    assert result.reports[0].changes == () and result.reports[0].error is None
    assert [n.op_type for n in result.final.graph.node] == ["Relu"]


def _fp16_cnn(with_fp32_branch: bool = False) -> onnx.ModelProto:
    """The CNN of :func:`_cnn` in float16; optionally with a float32 Conv beside it."""
    m = _cnn()
    for t in m.graph.initializer:
        t.CopyFrom(onh.from_array(onh.to_array(t).astype(np.float16), t.name))
    m.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    m.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    if with_fp32_branch:
        rng = np.random.default_rng(1)
        m.graph.initializer.append(onh.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32), "w3"))
        m.graph.input.append(oh.make_tensor_value_info("x32", onnx.TensorProto.FLOAT, [1, 3, 32, 32]))
        m.graph.node.append(oh.make_node("Conv", ["x32", "w3"], ["y32"], name="conv32", pads=[1, 1, 1, 1]))
        m.graph.output.append(oh.make_tensor_value_info("y32", onnx.TensorProto.FLOAT, [1, 8, 32, 32]))
    return m


def _elem_types(m: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in m.graph.initializer}


def test_fp16_convs_are_left_alone_with_the_reason():
    # onnxruntime has NCHWc kernels for float32 only; its capture of an fp16 model widened the
    # weights to float32 and added Casts: a layout pass must not change precision
    from fusionviz.passes.layout.nchwc_layout import nchwc_types

    assert "float16" not in nchwc_types() and "float32" in nchwc_types()
    model = _fp16_cnn()
    result = run_pipeline(model, ["nchwc_layout"])
    (rep,) = result.reports
    assert rep.error is None and rep.changes == ()
    final = result.final
    assert not any(n.domain == NCHWC for n in final.graph.node)
    assert [n.op_type for n in final.graph.node].count("Cast") == 0
    assert set(_elem_types(final).values()) == {onnx.TensorProto.FLOAT16}
    whole = rep.near_misses[0]  # the pass's reason first: past the limit the per-Conv ones are cut
    assert whole.kind == "pass" and "float16" in whole.reason and "NCHWc kernels for float32 only" in whole.reason
    sites = {n.blocker for n in rep.near_misses if n.kind == "no_kernel"}
    assert sites == {"conv1", "conv2"}


def test_capture_that_changes_precision_is_declined():
    # a float32 Conv beside float16 ones: onnxruntime's capture widens the float16 part too
    model = _fp16_cnn(with_fp32_branch=True)
    result = run_pipeline(model, ["nchwc_layout"])
    (rep,) = result.reports
    assert rep.status == "declined"
    assert "precision" in rep.declined and "Cast to float" in rep.declined
    assert _elem_types(result.final) == _elem_types(result.original)
    assert [n.op_type for n in result.final.graph.node] == [n.op_type for n in result.original.graph.node]


@pytest.mark.parametrize(
    "change, expected",
    [
        pytest.param("none", None, id="same_model_is_no_change"),
        pytest.param("cast", "1 Cast to float32 added", id="added_cast"),
        pytest.param("widen", "weight(s) became float32", id="widened_weight"),
    ],
)
def test_precision_change_names_what_changed(change, expected):
    from fusionviz.passes.layout.dtypes import precision_change

    before = _fp16_cnn()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    if change == "cast":
        after.graph.node.insert(0, oh.make_node("Cast", ["x"], ["x32"], to=onnx.TensorProto.FLOAT))
    elif change == "widen":
        w = after.graph.initializer[0]
        w.CopyFrom(onh.from_array(onh.to_array(w).astype(np.float32), w.name))
    why = precision_change(before, after)
    assert why is None if expected is None else expected in why
