"""widen_fp16_cpu: float16 regions onnxruntime's CPU provider runs in float32 are written in float32."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnxruntime as ort

from fusionviz.passes import registry
from fusionviz.passes.precision.kernels import runs_in_float32

F16 = onnx.TensorProto.FLOAT16


def _model(dtype=np.float16) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Transpose -> Add -> Relu -> y; the first Relu's output r is an output
    too, and a second Transpose of it another; weights float16 values (stored as ``dtype``), so
    the float32 model is the reference."""
    rng = np.random.default_rng(0)
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [
        onh.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16).astype(dtype), "w"),
        onh.from_array(rng.standard_normal(16).astype(np.float16).astype(dtype), "b"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"], name="relu"),
        oh.make_node("Transpose", ["r"], ["mm"], name="transpose", perm=[0, 1, 3, 2]),
        oh.make_node("Add", ["mm", "b"], ["a"], name="add"),
        oh.make_node("Relu", ["a"], ["y"], name="relu2"),
        oh.make_node("Transpose", ["r"], ["t"], name="transpose2", perm=[0, 1, 3, 2]),
    ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", elem, [1, 3, 16, 16])],
                          [oh.make_tensor_value_info("y", elem, [1, 4, 16, 16]), oh.make_tensor_value_info("r", elem, [1, 4, 16, 16]),
                           oh.make_tensor_value_info("t", elem, [1, 4, 16, 16])],
                          inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _session(model: onnx.ModelProto, level, saved: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    if saved:
        so.optimized_model_filepath = saved
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _casts_onnxruntime_runs(model: onnx.ModelProto) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "saved.onnx")
        _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, path)
        return sum(n.op_type == "Cast" for n in onnx.load(path).graph.node)


def test_onnxruntime_is_asked_which_nodes_lack_a_float16_kernel():
    widened = runs_in_float32(_model())
    assert {"conv", "relu", "add", "relu2"} <= widened  # no float16 CPU kernel in onnxruntime
    # Transpose has one; onnxruntime runs the first in float32 anyway, as both its neighbours
    # are, and the second (a graph output's) in float16
    assert "transpose" in widened
    assert "transpose2" not in widened


def test_regions_run_in_float32_with_casts_at_their_boundaries(run):
    original = _model()
    widened = runs_in_float32(original)
    result = run(original, "widen_fp16_cpu")
    final = result.final
    # one Cast where a float16 value enters the region or leaves it: x in, r out (an output, and
    # read by transpose2), y out
    inside = [n.name for n in original.graph.node if n.name in widened]
    assert inside == ["conv", "relu", "transpose", "add", "relu2"]
    casts = [n for n in final.graph.node if n.op_type == "Cast"]
    assert len(casts) == 3
    # onnxruntime has nothing left to insert: every Cast it runs is one of ours
    assert _casts_onnxruntime_runs(final) == 3
    assert _casts_onnxruntime_runs(original) > 3
    # graph outputs keep their names and float16 type; weights read only in a region are float32
    assert [(o.name, o.type.tensor_type.elem_type) for o in final.graph.output] == [("y", F16), ("r", F16), ("t", F16)]
    types = {t.name: t.data_type for t in final.graph.initializer}
    assert types == {"w": onnx.TensorProto.FLOAT, "b": onnx.TensorProto.FLOAT}

    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float16)
    reference = _session(_model(np.float32), ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(
        None, {"x": x.astype(np.float32)})
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before = _session(original, off).run(None, {"x": x})
    after = _session(final, off).run(None, {"x": x})
    at_all = _session(original, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x})
    for ref, b, a, al in zip(reference, before, after, at_all, strict=True):
        assert a.dtype == np.float16
        # this region's roundings are exact ones (Relu, Transpose): what onnxruntime computes off
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a.astype(np.float32), al.astype(np.float32), rtol=1e-2, atol=1e-2)
        # on average no farther from the float32 reference
        assert np.abs(a - ref).mean() <= np.abs(b - ref).mean()


def test_a_model_without_float16_is_skipped(run):
    result = run(_model(np.float32), "widen_fp16_cpu")
    report = next(r for r in result.reports if r.name == "widen_fp16_cpu")
    assert report.skip_reason == "nothing to do: the model has no float16 value"
    assert not report.changes
    assert result.final.graph.node[0].op_type == "Conv"
    assert len(result.final.graph.node) == 6


def test_in_all_as_an_exact_pass():
    assert "widen_fp16_cpu" in registry.default_passes()


def _chain(dtype=np.float16) -> onnx.ModelProto:
    """x -> Add -> Mul -> Sub -> y: no float16 kernel for any."""
    rng = np.random.default_rng(2)
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [onh.from_array(rng.standard_normal(64).astype(np.float16).astype(dtype), n) for n in "bsc"]
    nodes = [oh.make_node("Add", ["x", "b"], ["p"], name="add"), oh.make_node("Mul", ["p", "s"], ["q"], name="mul"),
             oh.make_node("Sub", ["q", "c"], ["y"], name="sub")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", elem, [32, 64])],
                          [oh.make_tensor_value_info("y", elem, [32, 64])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_weights_are_float32_and_results_those_onnxruntime_computes(run):
    original = _chain()
    final = run(original, "widen_fp16_cpu").final
    assert [n.op_type for n in final.graph.node] == ["Cast", "Add", "Mul", "Sub", "Cast"]
    assert {t.data_type for t in final.graph.initializer} == {onnx.TensorProto.FLOAT}
    # onnxruntime, optimizer off, removes its own Cast pairs between the three, but casts each
    # float16 weight on every run: 3 Casts more than ours
    assert _casts_onnxruntime_runs(original) == 5
    assert _casts_onnxruntime_runs(final) == 2
    x = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float16)
    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    (ref,) = _session(_chain(np.float32), off).run(None, {"x": x.astype(np.float32)})
    (before,) = _session(original, off).run(None, {"x": x})
    (after,) = _session(final, off).run(None, {"x": x})
    (at_all,) = _session(original, on).run(None, {"x": x})
    np.testing.assert_array_equal(after, at_all)  # what onnxruntime computes at level all
    np.testing.assert_array_equal(after, before)  # and with its optimizer off
    assert np.abs(after - ref).max() < 1e-2


def _classifier_tail(dtype=np.float16) -> onnx.ModelProto:
    """A PaddleOCR classifier's float16 tail at opset 11: Conv -> GlobalAveragePool -> Reshape to
    a shape computed from Shape (its output's shape unknown to inference) -> MatMul -> Add ->
    Softmax. MatMul has no float16 CPU kernel at opset 11."""
    rng = np.random.default_rng(4)
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [
        onh.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float16).astype(dtype), "w"),
        onh.from_array((rng.standard_normal((8, 2)) * 0.3).astype(np.float16).astype(dtype), "fc_w"),
        onh.from_array(rng.standard_normal(2).astype(np.float16).astype(dtype), "fc_b"),
        onh.from_array(np.array([0], np.int64), "zero"), onh.from_array(np.array([1], np.int64), "one"),
        onh.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
        oh.make_node("Shape", ["p"], ["s"], name="shape"),
        oh.make_node("Slice", ["s", "zero", "one"], ["n"], name="slice"),
        oh.make_node("Concat", ["n", "minus_one"], ["to"], name="concat", axis=0),
        oh.make_node("Reshape", ["p", "to"], ["flat"], name="reshape"),
        oh.make_node("MatMul", ["flat", "fc_w"], ["mm"], name="matmul"),
        oh.make_node("Add", ["mm", "fc_b"], ["logits"], name="add"),
        oh.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", elem, ["n", 3, 8, 8])],
                          [oh.make_tensor_value_info("y", elem, ["n", 2])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def test_nodes_whose_input_shape_inference_cannot_tell_are_asked_too(run):
    original = _classifier_tail()
    typed = onnx.shape_inference.infer_shapes(original)
    flat = next(v for v in typed.graph.value_info if v.name == "flat")
    assert not flat.type.tensor_type.HasField("shape") or any(
        not d.HasField("dim_value") for d in flat.type.tensor_type.shape.dim)
    # the kernel onnxruntime picks depends on element types: the probe declares no shape
    assert {"conv", "pool", "matmul", "add", "softmax"} <= runs_in_float32(original)
    final = run(original, "widen_fp16_cpu").final
    # one Cast in (x), one out (y), none for the Shape: onnxruntime has none of its own to insert
    assert _casts_onnxruntime_runs(final) == 2
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float16)
    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    (after,) = _session(final, off).run(None, {"x": x})
    (before,) = _session(original, off).run(None, {"x": x})
    (at_all,) = _session(original, on).run(None, {"x": x})
    assert after.dtype == np.float16
    np.testing.assert_array_equal(after, before)
    np.testing.assert_allclose(after.astype(np.float32), at_all.astype(np.float32), atol=2e-3)


def test_widened_regions_are_fused_and_laid_out_as_float32_ones(run):
    """Widening runs before the fusions: a float16 Conv + Relu onnxruntime computes in float32
    is fused, and the NCHWc capture takes the widened graph (it leaves float16 Convs alone)."""
    names = registry.default_passes()
    assert names.index("widen_fp16_cpu") < min(names.index(p) for p in ("fold_batchnorm", "fuse_conv_activation",
                                                                         "nchwc_layout"))
    result = run(_model(), *names)
    ops = [(n.domain, n.op_type) for n in result.final.graph.node]
    assert ("com.microsoft", "FusedConv") in ops or ("com.microsoft.nchwc", "Conv") in ops
    assert ("", "Conv") not in ops
    fused = next(r for r in result.reports if r.name == "fuse_conv_activation")
    assert fused.status == "applied"
    layout = next(r for r in result.reports if r.name == "nchwc_layout")
    assert layout.status == "applied", layout.declined or layout.skip_reason
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float16)
    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    after = _session(result.final, off).run(None, {"x": x})
    at_all = _session(_model(), on).run(None, {"x": x})
    for a, b in zip(after, at_all, strict=True):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=1e-2)
