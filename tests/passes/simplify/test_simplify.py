"""Simplification passes: each fires on a tiny model and keeps outputs equal; each negative case
is named for what must not happen."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser
import pytest

from fusionviz.passes.base import PASSES_KEY, SOURCES_KEY, Category, ChangeKind
from fusionviz.passes.registry import all_passes
from fusionviz.samples import light_models, load_sample, sample_names
from fusionviz.verify import verify
from tests.passes.conftest import changes_of, inputs_of, kinds, ops, parse

PASSES = [type(p) for p in all_passes() if p.category is Category.SIMPLIFY]

H = '<ir_version: 10, opset_import: ["" : 18]>\n'
H13 = '<ir_version: 8, opset_import: ["" : 13]>\n'


def _equal(result) -> bool:
    v = verify(result.original, result.final)
    assert v.error is None, v.error
    return v.ok


def _names(model: onnx.ModelProto, *op_types: str) -> set[str]:
    return {n.name for n in model.graph.node if n.op_type in op_types}


def _meta(node: onnx.NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


# ------------------------------------------------------------------ fold_constants

SHAPE_CHAIN = H + """
g (float[2,4] x) => (float[2,4] y) {
  s = Shape(x)
  i = Constant<value = int64[1] {1}>()
  d = Gather<axis=0>(s, i)
  w = ConstantOfShape<value = float[1] {0.5}>(d)
  y = Mul(x, w)
}"""


def test_constant_folding_folds_shape_gather_constant_of_shape_chain(run):
    result = run(parse(SHAPE_CHAIN), "fold_constants")
    changes = changes_of(result, "fold_constants")
    assert kinds(changes) == {ChangeKind.FOLDED}
    assert {"ConstantOfShape", "Shape", "Gather"} <= {op for c in changes for op in c.in_ops}
    assert ops(result.final) == ["Mul"]
    assert _equal(result)


def test_constant_folding_lifts_constant_node_to_initializer(run):
    model = parse(H + """
g (float[3] x) => (float[3] y) {
  c = Constant<value = float[3] {1, 2, 3}>()
  y = Add(x, c)
}""")
    result = run(model, "fold_constants")
    assert [c.in_ops for c in changes_of(result, "fold_constants")] == [("Constant",)]
    assert [i.name for i in result.final.graph.initializer] == ["c"]
    assert _equal(result)


def test_constant_folding_keeps_random_ops(run):
    model = parse(H + """
g (float[2] x) => (float[2] y) {
  r = RandomNormal<shape = [2], seed = 1.0>()
  y = Add(x, r)
}""")
    result = run(model, "fold_constants")
    assert changes_of(result, "fold_constants") == []
    assert "RandomNormal" in ops(result.final)


def test_constant_folding_leaves_runtime_identity_to_identity_elimination(run):
    model = parse(H + """
g (float[2] x) => (float[2] y) {
  a = Identity(x)
  y = Relu(a)
}""")
    result = run(model, "fold_constants")
    assert changes_of(result, "fold_constants") == []
    assert ops(result.final) == ["Identity", "Relu"]


def test_constant_folding_respects_byte_budget(run, monkeypatch):
    monkeypatch.setenv("FUSIONVIZ_FOLD_MAX_MB", "0")
    text = H + "g (float[4] x) => (float[4] y) { w = ConstantOfShape<value = float[1] {2}>(s)\n y = Mul(x, w) }"
    result = run(_with_inits(text, s=np.array([4], np.int64)), "fold_constants")
    assert changes_of(result, "fold_constants") == []
    assert "ConstantOfShape" in ops(result.final)


def test_constant_folding_on_light_resnet50_removes_constant_of_shape(run):
    path = next(p for p in light_models() if p.name == "light_resnet50.onnx")
    model = onnx.load(str(path))
    assert "ConstantOfShape" in ops(model)
    result = run(model, "fold_constants")
    final = result.final
    assert "ConstantOfShape" not in ops(final)
    # What BatchNorm folding needs: Conv weights and every BatchNorm parameter are initializers.
    inits = {i.name for i in final.graph.initializer}
    for n in final.graph.node:
        if n.op_type in ("Conv", "BatchNormalization"):
            assert all(i in inits for i in n.input[1:] if i), n.name
    assert _equal(result)


@pytest.mark.skipif("resnet_dynamo" not in sample_names(), reason="sample not built")
def test_dynamo_resnet_batchnorms_sit_on_conv_after_folding(run):
    model = load_sample("resnet_dynamo").proto
    assert "CastLike" in ops(model)
    result = run(model, "fold_constants", "eliminate_cast_expand", "eliminate_dead_code")
    final = result.final
    assert not {"CastLike", "Expand", "Shape"} & set(ops(final))
    producer = {o: n for n in final.graph.node for o in n.output}
    inits = {i.name for i in final.graph.initializer}
    bns = [n for n in final.graph.node if n.op_type == "BatchNormalization"]
    assert bns
    for bn in bns:
        conv = producer[bn.input[0]]
        assert conv.op_type == "Conv", bn.name
        assert all(i in inits for i in [*bn.input[1:], *conv.input[1:]] if i), bn.name
    assert _equal(result)


# ------------------------------------------------------------------ eliminate_cast_expand


@pytest.mark.parametrize(
    ("body", "in_op", "out_ops"),
    [
        pytest.param("(float[2,3] x, float[2,3] z) => (float[2,3] y) { c = CastLike(x, z)\n y = Neg(c) }",
                     "CastLike", ["Neg"], id="castlike_same_type_removed"),
        pytest.param("(int32[2,3] x, float[2,3] z) => (float[2,3] y) { y = CastLike(x, z) }",
                     "CastLike", ["Cast"], id="castlike_to_cast"),
        pytest.param("(float[2,3] x) => (float[2,3] y) { c = Cast<to=1>(x)\n y = Relu(c) }",
                     "Cast", ["Relu"], id="cast_to_same_type_removed"),
        pytest.param("(float16[2,3] x) => (double[2,3] y) { a = Cast<to=1>(x)\n y = Cast<to=11>(a) }",
                     "Cast", ["Cast"], id="lossless_cast_chain_merged"),
        pytest.param("(float[2,3] x) => (float[2,3] y) { e = Expand(x, <int64[2] s = {1, 3}>)\n y = Neg(e) }",
                     "Expand", ["Neg"], id="noop_expand_removed"),
        pytest.param("(float[3] b, float[2,3] x) => (float[2,3] y) "
                     "{ e = Expand(b, <int64[2] s = {2, 3}>)\n y = Add(e, x) }",
                     "Expand", ["Add"], id="expand_before_add_removed"),
    ],
)
def test_cast_expand_simplify_fires(run, body, in_op, out_ops):
    model = parse(_inline_consts(H + "g " + body))
    result = run(model, "eliminate_cast_expand")
    changes = changes_of(result, "eliminate_cast_expand")
    assert in_op in {op for c in changes for op in c.in_ops}
    assert _names(result.original, in_op) <= inputs_of(changes)
    assert [o for o in ops(result.final) if o != "Constant"] == out_ops
    assert _equal(result)


def test_cast_expand_simplify_keeps_lossy_cast_chain(run):
    model = parse(H + "g (float[3] x) => (float[3] y) { a = Cast<to=10>(x)\n y = Cast<to=1>(a) }")
    result = run(model, "eliminate_cast_expand")
    assert changes_of(result, "eliminate_cast_expand") == []
    assert ops(result.final) == ["Cast", "Cast"]


def test_cast_expand_simplify_keeps_expand_that_broadcasts(run):
    model = parse(_inline_consts(H + "g (float[3] x) => (float[2,3] y) { y = Expand(x, <int64[2] s = {2, 3}>) }"))
    result = run(model, "eliminate_cast_expand")
    assert changes_of(result, "eliminate_cast_expand") == []


def test_cast_made_after_constant_folding_carries_provenance(run):
    model = parse(H + """
g (int32[2,3] x, float[2,3] z) => (float[2,3] y) {
  c = Constant<value = float[1] {1}>()
  k = CastLike(x, z)
  y = Mul(k, c)
}""")
    result = run(model, "fold_constants", "eliminate_cast_expand")
    assert kinds(changes_of(result, "fold_constants")) == {ChangeKind.FOLDED}
    change = changes_of(result, "eliminate_cast_expand")
    assert [(c.kind, c.in_ops, c.out_ops) for c in change] == [(ChangeKind.REPLACED, ("CastLike",), ("Cast",))]
    cast = next(n for n in result.final.graph.node if n.op_type == "Cast")
    meta = _meta(cast)
    assert meta[PASSES_KEY].split(",") == ["eliminate_cast_expand"]
    assert meta[SOURCES_KEY] == change[0].inputs[0]
    assert _equal(result)


# ------------------------------------------------------------------ eliminate_identity


def test_identity_elimination_removes_inner_identity(run):
    model = parse(H + "g (float[2] x) => (float[2] y) { a = Relu(x)\n b = Identity(a)\n y = Neg(b) }")
    result = run(model, "eliminate_identity")
    changes = changes_of(result, "eliminate_identity")
    assert [(c.kind, c.in_ops) for c in changes] == [(ChangeKind.REMOVED, ("Identity",))]
    assert inputs_of(changes) == _names(result.original, "Identity")
    assert ops(result.final) == ["Relu", "Neg"]
    assert _equal(result)


def test_identity_kept_when_output_is_graph_output_and_input_is_graph_input(run):
    model = parse(H + "g (float[2] x) => (float[2] y) { y = Identity(x) }")
    result = run(model, "eliminate_identity")
    assert changes_of(result, "eliminate_identity") == []
    assert ops(result.final) == ["Identity"]


def test_identity_kept_when_both_values_are_graph_outputs(run):
    # onnx-ir 1.1 removes this Identity and loses the output 'a'.
    model = parse(H + "g (float[2] x) => (float[2] a, float[2] b) { a = Relu(x)\n b = Identity(a) }")
    result = run(model, "eliminate_identity")
    assert [o.name for o in result.final.graph.output] == ["a", "b"]
    assert _equal(result)


# ------------------------------------------------------------------ eliminate_dropout


@pytest.mark.parametrize(
    "dropout",
    [
        pytest.param("y = Dropout(x, <float r = {0.3}>)", id="ratio_only"),
        pytest.param("y = Dropout(x, <float r = {0.3}>, <bool t = {0}>)", id="training_mode_false"),
    ],
)
def test_dropout_elimination_removes_inference_dropout(run, dropout):
    model = parse(_inline_consts(H13 + "g (float[2,3] x) => (float[2,3] z) { " + dropout + "\n z = Relu(y) }"))
    result = run(model, "eliminate_dropout")
    changes = changes_of(result, "eliminate_dropout")
    assert kinds(changes) == {ChangeKind.REMOVED}
    assert "Dropout" in {op for c in changes for op in c.in_ops}
    assert ops(result.final) == ["Relu"]  # the ratio/training_mode constants went with it
    assert _equal(result)


def test_dropout_elimination_rebuilds_used_mask(run):
    model = parse(_inline_consts(H13 + """
g (float[2,3] x) => (float[2,3] y, bool[2,3] m) {
  y, m = Dropout(x, <float r = {0.5}>)
}"""))
    result = run(model, "eliminate_dropout")
    assert "Dropout" not in ops(result.final)
    assert "ConstantOfShape" in ops(result.final)
    assert [o.name for o in result.final.graph.output] == ["y", "m"]
    assert _equal(result)


def test_dropout_kept_in_training_mode(run):
    model = parse(_inline_consts(H13 + "g (float[2,3] x) => (float[2,3] y) "
                                 "{ y = Dropout(x, <float r = {0.5}>, <bool t = {1}>) }"))
    result = run(model, "eliminate_dropout")
    assert changes_of(result, "eliminate_dropout") == []
    assert "Dropout" in ops(result.final)


def test_dropout_kept_when_training_mode_is_an_input(run):
    model = parse(_inline_consts(H13 + "g (float[2,3] x, bool t) => (float[2,3] y) "
                                 "{ y = Dropout(x, <float r = {0.5}>, t) }"))
    result = run(model, "eliminate_dropout")
    assert changes_of(result, "eliminate_dropout") == []


# ------------------------------------------------------------------ eliminate_noop

NOOPS = {
    "add_zero_scalar": ("float[2,3] x", "y = Add(x, <float z = {0}>)", "Add"),
    "add_zero_tensor_same_shape": ("float[2,3] x", "y = Add(x, <float[1,3] z = {0, 0, 0}>)", "Add"),
    "zero_plus_x": ("float[2,3] x", "y = Add(<float[3] z = {0, 0, 0}>, x)", "Add"),
    "sub_zero": ("float[2,3] x", "y = Sub(x, <float z = {0}>)", "Sub"),
    "mul_one_tensor": ("float[2,3] x", "y = Mul(x, <float[2,1] o = {1, 1}>)", "Mul"),
    "one_times_x": ("float[2,3] x", "y = Mul(<float o = {1}>, x)", "Mul"),
    "div_one": ("float[2,3] x", "y = Div(x, <float o = {1}>)", "Div"),
    "int_add_zero": ("int64[2,3] x", "y = Add(x, <int64 z = {0}>)", "Add"),
    "reshape_same_shape": ("float[2,3] x", "y = Reshape(x, <int64[2] s = {0, -1}>)", "Reshape"),
    "identity_transpose": ("float[2,3] x", "y = Transpose<perm = [0, 1]>(x)", "Transpose"),
    "cast_same_type": ("float[2,3] x", "y = Cast<to = 1>(x)", "Cast"),
    "pad_all_zero": ("float[2,3] x", "y = Pad(x, <int64[4] p = {0, 0, 0, 0}>)", "Pad"),
    "pad_zero_with_value": ("float[2,3] x", "y = Pad(x, <int64[4] p = {0, 0, 0, 0}>, <float v = {5}>)", "Pad"),
    "concat_single": ("float[2,3] x", "y = Concat<axis = 0>(x)", "Concat"),
    "slice_everything": ("float[2,3] x", "y = Slice(x, <int64[1] s = {0}>, <int64[1] e = {9223372036854775807}>, "
                                          "<int64[1] a = {1}>)", "Slice"),
    "expand_same_shape": ("float[2,3] x", "y = Expand(x, <int64[2] s = {2, 3}>)", "Expand"),
}


@pytest.mark.parametrize(("inp", "stmt", "op"), list(NOOPS.values()), ids=list(NOOPS))
def test_noop_elimination_removes(run, inp, stmt, op):
    dtype = inp.split("[")[0]
    model = parse(_inline_consts(H + f"g ({inp}) => ({dtype}[2,3] r) {{ {stmt}\n r = Neg(y) }}"))
    result = run(model, "eliminate_noop")
    changes = changes_of(result, "eliminate_noop")
    assert op in {o for c in changes for o in c.in_ops}
    assert kinds(changes) == {ChangeKind.REMOVED}
    assert _names(result.original, op) <= inputs_of(changes)
    assert ops(result.final) == ["Neg"]
    assert _equal(result)


def test_noop_removed_when_its_output_is_a_graph_output(run):
    model = parse(_inline_consts(H + "g (float[2,3] x) => (float[2,3] y) { a = Relu(x)\n y = Mul(a, <float o = {1}>) }"))
    result = run(model, "eliminate_noop")
    assert ops(result.final) == ["Relu"]
    assert [o.name for o in result.final.graph.output] == ["y"]
    assert _equal(result)


KEPT = {
    "test_noop_add_keeps_broadcasting_add": ("float[3] x", "y = Add(x, <float[2,3] z = {0, 0, 0, 0, 0, 0}>)", "[2,3]"),
    "test_noop_add_keeps_rank_raising_scalar_tensor": ("float x", "y = Add(x, <float[1] z = {0}>)", "[1]"),
    "test_noop_keeps_zero_minus_x": ("float[3] x", "y = Sub(<float z = {0}>, x)", "[3]"),
    "test_noop_keeps_mul_by_two": ("float[3] x", "y = Mul(x, <float o = {2}>)", "[3]"),
    "test_noop_keeps_div_of_one_by_x": ("float[3] x", "y = Div(<float o = {1}>, x)", "[3]"),
    "test_pad_with_nonzero_pads_is_not_noop": ("float[3] x", "y = Pad(x, <int64[2] p = {1, 0}>, <float v = {0}>)", "[4]"),
    "test_reshape_that_changes_shape_is_kept": ("float[2,3] x", "y = Reshape(x, <int64[2] s = {3, 2}>)", "[3,2]"),
    "test_transpose_that_permutes_is_kept": ("float[2,3] x", "y = Transpose<perm = [1, 0]>(x)", "[3,2]"),
    "test_slice_that_drops_elements_is_kept": ("float[2,3] x", "y = Slice(x, <int64[1] s = {1}>, <int64[1] e = {3}>, "
                                               "<int64[1] a = {1}>)", "[2,2]"),
    "test_expand_that_broadcasts_is_kept": ("float[3] x", "y = Expand(x, <int64[2] s = {2, 3}>)", "[2,3]"),
}


@pytest.mark.parametrize(("inp", "stmt", "out"), list(KEPT.values()), ids=list(KEPT))
def test_noop_elimination_keeps(run, inp, stmt, out):
    model = parse(_inline_consts(H + f"g ({inp}) => (float{out} y) {{ {stmt} }}"))
    result = run(model, "eliminate_noop")
    assert changes_of(result, "eliminate_noop") == []
    assert len([o for o in ops(result.final) if o != "Constant"]) == 1


def test_pad_with_nonconstant_pads_is_not_noop(run):
    model = parse(H + "g (float[3] x, int64[2] p) => (float[?] y) { y = Pad(x, p) }")
    result = run(model, "eliminate_noop")
    assert changes_of(result, "eliminate_noop") == []


# ------------------------------------------------------------------ fold_chains

CHAINS = {
    "transpose_pair_cancels": ("float[2,3,4] x", "a = Transpose<perm=[1,2,0]>(x)\n y = Transpose<perm=[2,0,1]>(a)",
                               "[2,3,4]", {"Transpose"}, ["Identity"]),  # kept: graph input -> graph output
    "transpose_pair_composes": ("float[2,3,4] x", "a = Transpose<perm=[1,0,2]>(x)\n y = Transpose<perm=[0,2,1]>(a)",
                                "[3,4,2]", {"Transpose"}, ["Transpose"]),
    "reshape_pair": ("float[2,3,4] x", "a = Reshape(x, <int64[2] s1 = {6, 4}>)\n y = Reshape(a, <int64[2] s2 = {4, 6}>)",
                     "[4,6]", {"Reshape"}, ["Reshape"]),
    "unsqueeze_pair": ("float[3] x", "a = Unsqueeze(x, <int64[1] a1 = {0}>)\n y = Unsqueeze(a, <int64[1] a2 = {2}>)",
                       "[1,3,1]", {"Unsqueeze"}, ["Unsqueeze"]),
    "slice_pair_disjoint_axes": ("float[4,6] x", "a = Slice(x, <int64[1] s1 = {1}>, <int64[1] e1 = {3}>, "
                                 "<int64[1] x1 = {0}>)\n y = Slice(a, <int64[1] s2 = {2}>, <int64[1] e2 = {5}>, "
                                 "<int64[1] x2 = {1}>)", "[2,3]", {"Slice"}, ["Slice"]),
    "lossless_cast_pair": ("int32[3] x", "a = Cast<to=7>(x)\n y = Cast<to=11>(a)", "[3]", {"Cast"}, ["Cast"]),
}


@pytest.mark.parametrize(("inp", "body", "out", "in_ops", "out_ops"), list(CHAINS.values()), ids=list(CHAINS))
def test_chain_merging_merges(run, inp, body, out, in_ops, out_ops):
    dtype = "double" if "lossless" in body or "Cast<to=11>" in body else "float"
    model = parse(_inline_consts(H + f"g ({inp}) => ({dtype}{out} y) {{ {body} }}"))
    result = run(model, "fold_chains")
    changes = changes_of(result, "fold_chains")
    assert in_ops <= {o for c in changes for o in c.in_ops}
    assert [o for o in ops(result.final) if o != "Constant"] == out_ops
    assert _equal(result)


def test_chain_merging_keeps_slices_on_the_same_axis(run):
    model = parse(_inline_consts(H + "g (float[6] x) => (float[2] y) { a = Slice(x, <int64[1] s1 = {1}>, "
                                 "<int64[1] e1 = {5}>, <int64[1] x1 = {0}>)\n y = Slice(a, <int64[1] s2 = {1}>, "
                                 "<int64[1] e2 = {3}>, <int64[1] x2 = {0}>) }"))
    result = run(model, "fold_chains")
    assert changes_of(result, "fold_chains") == []


def test_chain_merging_keeps_inner_transpose_used_elsewhere(run):
    model = parse(H + """
g (float[2,3] x) => (float[2,3] y, float[3,2] t) {
  t = Transpose<perm=[1,0]>(x)
  y = Transpose<perm=[1,0]>(t)
}""")
    result = run(model, "fold_chains")
    assert "Transpose" in ops(result.final)  # t is still needed
    assert [o.name for o in result.final.graph.output] == ["y", "t"]
    assert _equal(result)


# ------------------------------------------------------------------ eliminate_common_subexpressions, dedup, dead code


def test_cse_removes_duplicate_node(run):
    model = parse(H + "g (float[2] x) => (float[2] y) { a = Relu(x)\n b = Relu(x)\n y = Add(a, b) }")
    result = run(model, "eliminate_common_subexpressions")
    changes = changes_of(result, "eliminate_common_subexpressions")
    assert [(c.kind, c.in_ops) for c in changes] == [(ChangeKind.REMOVED, ("Relu",))]
    second_relu = [n.name for n in result.original.graph.node if n.op_type == "Relu"][1]
    assert inputs_of(changes) == {second_relu}
    assert ops(result.final) == ["Relu", "Add"]
    assert _equal(result)


def test_cse_keeps_random_ops(run):
    model = parse(H + "g (float[2] x) => (float[2] y) "
                  "{ a = RandomNormalLike(x)\n b = RandomNormalLike(x)\n y = Add(a, b) }")
    result = run(model, "eliminate_common_subexpressions")
    assert changes_of(result, "eliminate_common_subexpressions") == []


def _with_inits(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for name, arr in arrays.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


def test_dedup_initializers_merges_equal_weights(run):
    text = H + "g (float[3] x) => (float[3] y) { a = Mul(x, w1)\n y = Add(a, w2) }"
    model = _with_inits(text, w1=np.array([1, 2, 3], np.float32), w2=np.array([1, 2, 3], np.float32))
    result = run(model, "eliminate_duplicate_initializers")
    changes = changes_of(result, "eliminate_duplicate_initializers")
    node_changes = [c for c in changes if c.in_ops]
    assert [(c.kind, c.in_ops) for c in node_changes] == [(ChangeKind.CHANGED, ("Add",))]
    assert "w2 → w1" in node_changes[0].detail
    (init_change,) = [c for c in changes if not c.in_ops]
    assert init_change.kind == ChangeKind.REMOVED and "w2" in init_change.detail
    assert [i.name for i in result.final.graph.initializer] == ["w1"]
    assert _equal(result)


def test_dedup_initializers_keeps_different_weights(run):
    text = H + "g (float[3] x) => (float[3] y) { a = Mul(x, w1)\n y = Add(a, w2) }"
    model = _with_inits(text, w1=np.array([1, 2, 3], np.float32), w2=np.array([1, 2, 4], np.float32))
    result = run(model, "eliminate_duplicate_initializers")
    assert changes_of(result, "eliminate_duplicate_initializers") == []
    assert len(result.final.graph.initializer) == 2


def test_dead_code_elimination_removes_dead_nodes_and_initializers(run):
    text = H + "g (float[3] x) => (float[3] y) { d = Mul(x, w)\n e = Neg(d)\n y = Relu(x) }"
    model = _with_inits(text, w=np.ones(3, np.float32), unused=np.zeros(2, np.float32))
    result = run(model, "eliminate_dead_code")
    changes = changes_of(result, "eliminate_dead_code")
    node_changes = [c for c in changes if c.in_ops]
    assert [(c.kind, set(c.in_ops)) for c in node_changes] == [(ChangeKind.REMOVED, {"Mul", "Neg"})]
    assert inputs_of(node_changes) == _names(result.original, "Mul", "Neg")
    # 'w' fed the removed Mul (part of that change); 'unused' fed nothing and is reported alone.
    (init_change,) = [c for c in changes if not c.in_ops]
    assert "unused" in init_change.detail and "w," not in init_change.detail
    assert ops(result.final) == ["Relu"]
    assert list(result.final.graph.initializer) == []
    assert _equal(result)


def test_dead_code_elimination_keeps_nodes_that_feed_outputs(run):
    model = parse(H + "g (float[3] x) => (float[3] y, float[3] z) { y = Relu(x)\n z = Neg(y) }")
    result = run(model, "eliminate_dead_code")
    assert changes_of(result, "eliminate_dead_code") == []


def test_passes_leave_dead_code_they_did_not_make(run):
    model = parse(_inline_consts(H + "g (float[3] x) => (float[3] y) "
                                 "{ dead = Neg(x)\n y = Add(x, <float z = {0}>) }"))
    result = run(model, "eliminate_noop")
    assert {op for c in changes_of(result, "eliminate_noop") for op in c.in_ops} == {"Add", "Constant"}
    assert "Neg" in ops(result.final)


# ------------------------------------------------------------------ every pass


@pytest.mark.parametrize("pass_cls", PASSES, ids=[p.name for p in PASSES])
def test_pass_that_does_not_apply_changes_nothing(run, pass_cls):
    model = parse(H + "g (float[2,3] x) => (float[3,2] y) { a = Relu(x)\n y = Transpose<perm=[1,0]>(a) }")
    result = run(model, pass_cls.name)
    assert changes_of(result, pass_cls.name) == []
    assert ops(result.final) == ["Relu", "Transpose"]


@pytest.mark.parametrize("pass_cls", PASSES, ids=[p.name for p in PASSES])
def test_pass_contract_fields(pass_cls):
    assert pass_cls.name and pass_cls.title and pass_cls.explain.startswith("**What:**")
    # simplifications run first; eliminate_duplicate_initializers runs after the fusions (see registry)
    assert 100 <= pass_cls.order < 200 or (pass_cls.name == "eliminate_duplicate_initializers" and pass_cls.order < 400)


# ------------------------------------------------------------------ helpers


def _inline_consts(text: str) -> str:
    """Rewrite ``<dtype[dims] name = {...}>`` operands into Constant nodes placed before use.

    Lets a test write ``Add(x, <float z = {0}>)`` instead of a separate Constant line.
    """
    import re

    lines = text.split("\n")
    out: list[str] = []
    pat = re.compile(r"<(\w+)(\[[\d,]*\])? (\w+) = \{([^}]*)\}>")
    for line in lines:
        consts = []
        for m in pat.finditer(line):
            dtype, dims, name, vals = m.group(1), m.group(2) or "", m.group(3), m.group(4)
            consts.append(f"{name} = Constant<value = {dtype}{dims} {{{vals}}}>()")
        line = pat.sub(lambda m: m.group(3), line)
        if consts:
            brace = line.find("{") + 1 if line.lstrip().startswith("g ") and "{" in line else 0
            if brace:
                out.append(line[:brace])
                out.extend(consts)
                out.append(line[brace:])
            else:
                out.extend(consts)
                out.append(line)
        else:
            out.append(line)
    return "\n".join(out)
