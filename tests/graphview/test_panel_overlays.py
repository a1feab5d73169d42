"""The side panel's data (graphview.panel), the per-node overlays (graphview.overlays) and the
onnxruntime profile they read times from (fusionviz.profile)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from gv_helpers import conv_bn_relu, fused_after

from fusionviz import errors
from fusionviz.graphview import RenderOptions, diff_models, render_graph
from fusionviz.graphview.dot import MEMORY_FILLS, NODE_ID_PREFIX, TIME_FILLS, element_id
from fusionviz.graphview.overlays import (
    MEMORY_SCALE,
    TIME_SCALE,
    error_overlay,
    memory_overlay,
    time_overlay,
    written_bytes,
)
from fusionviz.graphview.panel import SMALL_ELEMENTS, attr_text, node_panel, tensor_bytes
from fusionviz.passes.nearmiss import NearMiss
from fusionviz.profile import keyed_copy, node_times, parse_profile


def _line(dot: str, key: str) -> str:
    eid = element_id(NODE_ID_PREFIX, key)
    return next(ln for ln in dot.splitlines() if f'id="{eid}"' in ln)


# ------------------------------------------------------------------ panel


def test_panel_of_a_fused_node_has_its_tensors_weights_provenance_and_measures():
    before = conv_bn_relu()
    after = fused_after(before)
    diff = diff_models(before, after)
    mem = memory_overlay(after)
    p = node_panel(after, "FusedConv_fv1", "after", diff=diff, overlays=[mem, time_overlay({"FusedConv_fv1": 0.25})])
    assert (p.op, p.domain, p.status) == ("FusedConv", "com.microsoft", "fused")
    assert dict(p.attributes)["activation"] == "Relu" and dict(p.attributes)["kernel_shape"] == "[3, 3]"
    assert [i.name for i in p.inputs] == ["x", "W", "B"]
    x = p.inputs[0]
    assert (x.kind, x.dtype, x.shape, x.nbytes) == ("graph input", "f32", "1×3×8×8", 1 * 3 * 8 * 8 * 4)
    w = next(r for r in p.weights if r.name == "W")
    arr = onnx.numpy_helper.to_array(next(t for t in after.graph.initializer if t.name == "W"))
    assert (w.shape, w.dtype, w.nbytes) == ("4×3×3×3", "f32", arr.size * 4)
    assert w.min == pytest.approx(float(arr.min())) and w.mean == pytest.approx(float(arr.mean()))
    assert p.absorbed == ("Conv_12", "BatchNormalization_13", "Relu_14")
    assert "fold_batchnorm" in p.passes
    assert dict(p.measures) == {"writes": "1 KB", "time": "0.25 ms"}  # 1×4×8×8 f32 = 1024 bytes


def test_panel_of_a_removed_node_says_where_it_went_and_names_its_near_misses():
    before = conv_bn_relu()
    after = fused_after(before)
    diff = diff_models(before, after)
    near = [NearMiss("rule_a", ("Conv_12", "BatchNormalization_13"), "Relu_14", "a reason", "a hint"),
            NearMiss("rule_b", ("Relu_14",), None, "other reason")]
    p = node_panel(before, "BatchNormalization_13", "before", diff=diff, near_misses=near)
    assert p.status == "removed" and p.went_into == "FusedConv_fv1"
    assert [(r.rule, r.part) for r in p.near_misses] == [("rule_a", "matched")]
    relu = node_panel(before, "Relu_14", "before", diff=diff, near_misses=near)
    assert [(r.rule, r.part, r.reason) for r in relu.near_misses] == [("rule_a", "blocked here", "a reason"),
                                                                     ("rule_b", "matched", "other reason")]


def test_big_weights_get_shape_and_bytes_but_no_statistics():
    m = conv_bn_relu()
    big = onnx.numpy_helper.from_array(np.zeros((SMALL_ELEMENTS + 1,), np.float32), "W")
    del m.graph.initializer[0]
    m.graph.initializer.insert(0, big)
    w = next(r for r in node_panel(m, "Conv_12", "before").weights if r.name == "W")
    assert w.nbytes == (SMALL_ELEMENTS + 1) * 4 and w.min is None and w.mean is None


def test_tensor_bytes_and_attribute_text():
    assert tensor_bytes("f16", "2×3") == 12 and tensor_bytes("f32", "scalar") == 4
    assert tensor_bytes("f32", "N×3") is None and tensor_bytes("str", "2") is None
    assert attr_text(list(range(20))).endswith("… (20 items)]")
    assert attr_text({"tensor": {"dtype": "f32", "shape": [2, 2]}}) == "tensor f32 [2, 2]"


def test_panel_of_an_unknown_node_is_a_clear_error():
    with pytest.raises(errors.RenderError, match="No node named"):
        node_panel(conv_bn_relu(), "nope", "before")


# ------------------------------------------------------------------ overlays


def test_memory_is_the_bytes_each_node_writes():
    got, unknown = written_bytes(conv_bn_relu())
    assert got == {"Conv_12": 1024, "BatchNormalization_13": 1024, "Relu_14": 1024} and unknown == 0


def test_memory_of_an_op_inference_cannot_size_comes_from_a_measurement_or_is_counted():
    after = fused_after(conv_bn_relu())
    after.graph.node[0].domain = "unknown.domain"
    after.graph.node[0].op_type = "Mystery"
    after.opset_import.append(onnx.helper.make_opsetid("unknown.domain", 1))
    del after.graph.output[:]
    after.graph.output.append(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None))
    plain = memory_overlay(after)
    assert plain.values == () and "1 node(s) write a tensor of unknown size" in plain.note
    measured = memory_overlay(after, measured={"FusedConv_fv1": 4096})
    assert measured.values == (("FusedConv_fv1", 4096.0),) and "sized by onnxruntime's profile" in measured.note


def test_each_overlay_draws_with_its_own_palette_unit_and_legend():
    m = conv_bn_relu()
    t = time_overlay({"Conv_12": 0.005, "Relu_14": 20.0})
    r = render_graph(m, options=RenderOptions(**t.render_options()))
    assert f'fillcolor="{TIME_FILLS[0]}"' in _line(r.dot, "Conv_12") and "time 0.005 ms" in _line(r.dot, "Conv_12")
    assert f'fillcolor="{TIME_FILLS[-1]}"' in _line(r.dot, "Relu_14")
    assert [x[0] for x in t.legend()] == [f"time {label}" for _, label in TIME_SCALE]
    mem = memory_overlay(m)
    r = render_graph(m, options=RenderOptions(**mem.render_options()))
    line = _line(r.dot, "Conv_12")
    assert f'fillcolor="{MEMORY_FILLS[0]}"' in line and "writes 1 KB" in line  # 1 KB is in the ≤ 16 KB step
    assert [x[0] for x in mem.legend()] == [f"writes {label}" for _, label in MEMORY_SCALE]
    e = error_overlay([("Conv_12", 1e-3), ("Relu_14", math.nan)], ((1e-2, "≤ 1e-2"), (math.inf, "> 1e-2")))
    assert e.legend()[-1][0] == "NaN/Inf introduced" and e.text("Relu_14") == "NaN/Inf"
    assert e.text("BatchNormalization_13") is None


# ------------------------------------------------------------------ profile


def test_profile_events_give_the_median_after_the_warm_up_and_the_bytes_written():
    ev = [{"cat": "Node", "name": "A_kernel_time", "dur": d, "args": {"output_size": "64"}} for d in (900, 10, 30, 20)]
    ev += [{"cat": "Node", "name": "A_fence_before", "dur": 5000}, {"cat": "Session", "name": "run", "dur": 1}]
    times, written = parse_profile(ev)
    assert times == {"A": pytest.approx(0.02)} and written == {"A": 64}


def test_node_times_map_every_kernel_to_its_node_even_unnamed_ones():
    m = conv_bn_relu(("Conv_12", "", ""))
    assert [n.name for n in keyed_copy(m).graph.node] == ["Conv_12", "#1", "#2"]
    t = node_times(m, {"x": np.ones((1, 3, 8, 8), np.float32)}, runs=2)
    assert set(t.times_ms) == {"Conv_12", "#1", "#2"} and all(v >= 0 for v in t.times_ms.values())
    assert t.output_bytes == {"Conv_12": 1024, "#1": 1024, "#2": 1024}


def test_a_model_that_does_not_run_is_one_clear_error():
    with pytest.raises(errors.RuntimeLoadError, match="could not"):
        node_times(conv_bn_relu(), {"x": np.ones((1, 5, 8, 8), np.float32)}, runs=1, isolated=True)


def test_totals_add_the_time_and_bytes_of_the_nodes_a_fused_node_stands_for():
    from fusionviz.graphview.panel import totals

    keys = ["Conv_12", "BatchNormalization_13", "Relu_14"]
    t = time_overlay({"Conv_12": 0.5, "Relu_14": 0.25})
    m = memory_overlay(conv_bn_relu())
    e = error_overlay([("Conv_12", 1e-3)], ((math.inf, "all"),))
    assert totals(keys, [t, m, e]) == (("time", "0.75 ms", 2), ("writes", "3 KB", 3))
    assert totals(["nope"], [t]) == ()
