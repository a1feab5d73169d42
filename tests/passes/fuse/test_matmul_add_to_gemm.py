"""MatMul + Add into Gemm."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz import samples
from fusionviz.passes.base import ChangeKind
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify


def build(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for i, (name, shape) in enumerate(arrays.items()):
        arr = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    return model


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


FUSE_CASES = {
    "bias_row": ("y = Add (m, C)", "m = MatMul (x, W)", {"W": (3, 4), "C": (4,)}, {}),
    "bias_first": ("y = Add (C, m)", "m = MatMul (x, W)", {"W": (3, 4), "C": (1, 4)}, {}),
    "full_matrix_input": ("y = Add (m, C)", "m = MatMul (x, W)", {"W": (3, 4), "C": (5, 4)}, {}),
    "transposed_weight": ("y = Add (m, C)", "t = Transpose <perm=[1,0]> (W)\n  m = MatMul (x, t)",
                          {"W": (4, 3), "C": (4,)}, {"transB": 1}),
}


@pytest.mark.parametrize("case", sorted(FUSE_CASES))
def test_matmul_add_becomes_gemm(case):
    add, mm, arrays, want_attrs = FUSE_CASES[case]
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[5,3] x) => (float[5,4] y) {{
  {mm}
  {add}
}}"""
    result = run_pipeline(build(text, **arrays), ["fuse_matmul_add"])
    assert ops(result.final) == ["Gemm"]
    for k, v in want_attrs.items():
        assert attrs(result.final.graph.node[0])[k] == v
    (change,) = [c for c in result.reports[0].changes if c.outputs]
    assert change.kind == ChangeKind.FUSED and "MatMul" in change.in_ops
    assert verify(result.original, result.final).ok


NO_FUSE_CASES = {
    "rank3_input": ("float[2,5,3] x", "float[2,5,4] y", "m = MatMul (x, W)\n  y = Add (m, C)", {"W": (3, 4), "C": (4,)}),
    "add_broadcasts_product_up": ("float[5,3] x", "float[2,5,4] y", "m = MatMul (x, W)\n  y = Add (m, C)",
                                  {"W": (3, 4), "C": (2, 5, 4)}),
    "matmul_output_with_two_consumers": ("float[5,3] x", "float[5,4] y",
                                         "m = MatMul (x, W)\n  a = Add (m, C)\n  y = Mul (a, m)", {"W": (3, 4), "C": (4,)}),
    "matmul_output_is_a_graph_output": ("float[5,3] x", "float[5,4] y, float[5,4] m",
                                        "m = MatMul (x, W)\n  y = Add (m, C)", {"W": (3, 4), "C": (4,)}),
}


@pytest.mark.parametrize("case", sorted(NO_FUSE_CASES))
def test_matmul_add_must_not_become_gemm(case):
    inp, out, body, arrays = NO_FUSE_CASES[case]
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g ({inp}) => ({out}) {{
  {body}
}}"""
    result = run_pipeline(build(text, **arrays), ["fuse_matmul_add"])
    assert result.reports[0].error is None
    assert result.reports[0].changes == ()
    assert "Gemm" not in ops(result.final)


@pytest.mark.parametrize("name", ["bert_ts", "bert_dynamo"])
def test_transformer_matmuls_on_3d_activations_are_left_alone(name):
    if name not in samples.sample_names():
        pytest.skip(f"sample_models/{name}.onnx has not been generated")
    model = samples.load_sample(name).proto
    result = run_pipeline(model, ["fuse_matmul_add"])
    assert result.reports[0].error is None
    assert ops(result.final).count("MatMul") == ops(model).count("MatMul")
