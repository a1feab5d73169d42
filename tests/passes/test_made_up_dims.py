"""A written model declares no dim name the passes' shape inference made up (hygiene rule 8).

onnxruntime reads equal dim names as equal dims: with the names ONNX shape inference makes up
(``unk__N``), its SkipLayerNormFusion fires on a residual Add + LayerNormalization that it
leaves alone in the original, and its float32 CPU SkipLayerNormalization kernel is the slower
form. The fixture is the shipped TorchScript BERT (post-LN blocks: the residual sum feeds only
the LayerNormalization), after the constant folding and attention fusion that give its values
made-up dims.
"""

from __future__ import annotations

import collections

import onnx
import pytest

from fusionviz.passes.hygiene import MADE_UP_DIM_PREFIX, forget_made_up_dims
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.samples import sample_path


def _dim_params(model: onnx.ModelProto) -> list[str]:
    return [d.dim_param for vi in model.graph.value_info for d in vi.type.tensor_type.shape.dim if d.dim_param]


def _ort_ops(model: onnx.ModelProto, tmp_path) -> collections.Counter:
    """Op types of the graph onnxruntime builds at level all."""
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


@pytest.fixture(scope="module")
def bert_result():
    model = onnx.load(sample_path("bert_ts"))
    return run_pipeline(model, ["fold_constants", "fuse_attention"], validate=False, near_misses=False)


def test_result_keeps_inferred_shapes_without_made_up_names(bert_result):
    final = bert_result.final
    assert final.graph.value_info, "the passes' inferred shapes are written"
    params = _dim_params(final)
    assert not [p for p in params if p.startswith(MADE_UP_DIM_PREFIX)]
    assert {"batch", "seq"} <= set(params)  # the model's own names stay
    assert any(d.dim_value == 128 for vi in final.graph.value_info for d in vi.type.tensor_type.shape.dim)
    for snap in bert_result.snapshots:  # every snapshot is written the same way
        assert not [p for p in _dim_params(snap.model) if p.startswith(MADE_UP_DIM_PREFIX)]


def test_onnxruntime_forms_no_skip_layernorm_the_original_does_not_get(bert_result, tmp_path):
    original = _ort_ops(bert_result.original, tmp_path)
    assert original["SkipLayerNormalization"] == 0 and original["LayerNormalization"] == 7
    ours = _ort_ops(bert_result.final, tmp_path)
    assert ours["SkipLayerNormalization"] == 0 and ours["Attention"] == 3
    # the mechanism: with ONNX shape inference's made-up names back, onnxruntime fuses it
    named = onnx.shape_inference.infer_shapes(bert_result.final)
    assert [p for p in _dim_params(named) if p.startswith(MADE_UP_DIM_PREFIX)]
    assert _ort_ops(named, tmp_path)["SkipLayerNormalization"] > 0


def test_forget_made_up_dims_clears_names_only():
    vi = onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, ["unk__3", "seq", 8])
    graph = onnx.helper.make_graph([], "g", [], [], value_info=[vi])
    model = forget_made_up_dims(onnx.helper.make_model(graph))
    (dims,) = [list(v.type.tensor_type.shape.dim) for v in model.graph.value_info]
    assert [(d.HasField("dim_param"), d.HasField("dim_value")) for d in dims] == [(False, False), (True, False),
                                                                                  (False, True)]
    assert dims[1].dim_param == "seq" and dims[2].dim_value == 8
