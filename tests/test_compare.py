"""Per-tensor comparison (fusionviz/compare.py): a perturbed weight is found at its node, fused
pairs compare through provenance without a divergence, chunks give the rows of one run, and the
CLI's exit codes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz import errors
from fusionviz.compare import (
    compare_models,
    match_tensors,
    nchwc_block_size,
    unblock,
)
from fusionviz.graphview import synthetic
from fusionviz.inputs import plan_inputs
from fusionviz.passes import registry, run_pipeline
from fusionviz.verify import verify

F = onnx.TensorProto.FLOAT


# ------------------------------------------------------------------ models


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def small_cnn() -> onnx.ModelProto:
    """conv1 → bn1 → relu1 → conv2 → bn2 → relu2 → GlobalAveragePool → Flatten → Gemm."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(onh.from_array(np.asarray(arr, np.float32), name))
        return name

    def bn(prefix, c):
        return [init(f"{prefix}_scale", 1 + 0.1 * rng.standard_normal(c)), init(f"{prefix}_bias", 0.1 * rng.standard_normal(c)),
                init(f"{prefix}_mean", 0.1 * rng.standard_normal(c)), init(f"{prefix}_var", 1 + 0.1 * rng.random(c))]

    nodes += [
        oh.make_node("Conv", ["x", init("W1", _w(rng, 16, 3, 3, 3)), init("B1", _w(rng, 16))], ["c1"], name="conv1",
                     pads=[1, 1, 1, 1]),
        oh.make_node("BatchNormalization", ["c1", *bn("bn1", 16)], ["b1"], name="bn1"),
        oh.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", init("W2", _w(rng, 16, 16, 3, 3, scale=0.1))], ["c2"], name="conv2",
                     pads=[1, 1, 1, 1]),
        oh.make_node("BatchNormalization", ["c2", *bn("bn2", 16)], ["b2"], name="bn2"),
        oh.make_node("Relu", ["b2"], ["r2"], name="relu2"),
        oh.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        oh.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        oh.make_node("Gemm", ["flat", init("Wfc", _w(rng, 10, 16)), init("Bfc", _w(rng, 10))], ["y"], name="fc",
                     transB=1),
    ]
    g = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                      [oh.make_tensor_value_info("y", F, [1, 10])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def if_model() -> onnx.ModelProto:
    """pre (MatMul) → If (then: MatMul with an outer weight → Relu; else: Sigmoid) → post (Add).
    The condition is computed (always true for real inputs)."""
    rng = np.random.default_rng(1)
    then_g = oh.make_graph([oh.make_node("MatMul", ["h", "W1"], ["t1"], name="then_mm"),
                            oh.make_node("Relu", ["t1"], ["t_out"], name="then_relu")],
                           "then_branch", [], [oh.make_tensor_value_info("t_out", F, [1, 8])])
    else_g = oh.make_graph([oh.make_node("Sigmoid", ["h"], ["e_out"], name="else_sig")],
                           "else_branch", [], [oh.make_tensor_value_info("e_out", F, [1, 8])])
    nodes = [
        oh.make_node("MatMul", ["x", "W0"], ["h"], name="pre"),
        oh.make_node("ReduceSum", ["h"], ["s"], name="sum", keepdims=0),
        oh.make_node("Greater", ["s", "lo"], ["cond"], name="cond"),
        oh.make_node("If", ["cond"], ["branch"], name="if_node", then_branch=then_g, else_branch=else_g),
        oh.make_node("Add", ["branch", "Bpost"], ["y"], name="post"),
    ]
    inits = [onh.from_array(_w(rng, 8, 8), "W0"), onh.from_array(_w(rng, 8, 8), "W1"),
             onh.from_array(np.array(-1e30, np.float32), "lo"), onh.from_array(_w(rng, 8), "Bpost")]
    g = oh.make_graph(nodes, "with_if", [oh.make_tensor_value_info("x", F, [1, 8])],
                      [oh.make_tensor_value_info("y", F, [1, 8])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def perturb(model: onnx.ModelProto, node: str, index: int = 1, factor: float = 1.02,
            graph: onnx.GraphProto | None = None) -> onnx.ModelProto:
    """A copy of ``model`` in which input ``index`` of ``node`` (an initializer of the main graph)
    is scaled by ``factor`` for that node only (a new initializer, so no other node sees it)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graphs = [out.graph]
    if graph is not None:  # a body: find it in the copy
        graphs = [a.g for n in out.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    for g in graphs:
        for n in g.node:
            if n.name == node:
                name = n.input[index]
                arr = next(onh.to_array(t) for t in out.graph.initializer if t.name == name)
                out.graph.initializer.append(onh.from_array((arr * factor).astype(arr.dtype), name + "_perturbed"))
                n.input[index] = name + "_perturbed"
                return out
    raise AssertionError(f"no node {node}")


def _feeds(model, seed=0):
    return plan_inputs(model).feeds("normal", seed)


# ------------------------------------------------------------------ a perturbed weight is found at its node


def test_small_cnn_first_divergence_is_the_perturbed_conv():
    a = small_cnn()
    res = compare_models(a, perturb(a, "conv2"))
    first = res.first_divergence
    assert first is not None
    assert (first.pair.name, first.pair.node_a, first.pair.node_b, first.pair.op_b) == ("c2", "conv2", "conv2", "Conv")
    assert [r.pair.name for r in res.rows if r.compared and r.ok] [:3] == ["c1", "b1", "r1"]
    assert first.diff.max_rel_diff > 1e-3 and not first.diff.ok
    assert res.divergence_line().startswith("first tensor beyond tolerance: c2 (Conv conv2 in A, Conv conv2 in B)")


def test_a_perturbation_too_small_for_the_tolerance_is_no_divergence():
    a = small_cnn()
    res = compare_models(a, perturb(a, "conv2", factor=1 + 1e-7))
    assert res.first_divergence is None and res.counts()["compared"] == len(res.rows)


def test_transformer_block_first_divergence_is_the_perturbed_matmul():
    a = synthetic.transformer_model(1)
    matmuls = [n for n in a.graph.node if n.op_type == "MatMul" and len(n.input) > 1
               and any(t.name == n.input[1] for t in a.graph.initializer)]
    target = matmuls[len(matmuls) // 2]  # one in the middle of the block
    res = compare_models(a, perturb(a, target.name, factor=1.05))
    first = res.first_divergence
    assert first is not None, res.divergence_line()
    assert first.pair.node_a == target.name and first.pair.name == target.output[0]
    earlier = [r for r in res.rows if r.pair.index < first.pair.index and r.compared]
    assert earlier and all(r.ok for r in earlier)


def test_if_model_divergence_in_a_body_is_found_at_the_if_node():
    a = if_model()
    inside = compare_models(a, perturb(a, "then_mm", graph=a.graph))
    assert inside.first_divergence is not None
    assert (inside.first_divergence.pair.node_a, inside.first_divergence.pair.op_a) == ("if_node", "If")
    assert any("bodies cannot be exposed" in n and "If ×1" in n for n in inside.notes)
    before = compare_models(a, perturb(a, "pre"))
    assert before.first_divergence.pair.node_a == "pre"


# ------------------------------------------------------------------ fused pairs: provenance, no divergence


def test_fused_cnn_compares_through_provenance_without_divergence():
    a = small_cnn()
    b = run_pipeline(a, registry.default_passes()).final
    res = compare_models(a, b)
    c = res.counts()
    assert res.first_divergence is None, res.divergence_line()
    assert c["through_provenance"] >= 2 and c["compared"] >= 4
    rows = {r.pair.name: r for r in res.rows}
    assert rows["r1"].compared and rows["r1"].pair.how == "provenance"
    assert rows["c1"].status == "unmatched" and rows["c1"].note.startswith("absorbed into ")
    assert rows["y"].compared and rows["y"].pair.how == "name"


def test_fused_node_with_a_perturbed_weight_is_the_first_divergence():
    a = small_cnn()
    b = run_pipeline(a, ["fold_batchnorm", "fuse_conv_activation"]).final
    fused = [n for n in b.graph.node if "conv2" in "".join(p.value for p in n.metadata_props)]
    assert fused, "conv2 was not fused"
    res = compare_models(a, perturb(b, fused[0].name))
    first = res.first_divergence
    assert first is not None and first.pair.node_b == fused[0].name
    assert first.pair.node_a == "relu2"  # the last node the fused node absorbed


def test_blocked_nchwc_tensors_are_unblocked_with_onnxruntime_block_size():
    a = small_cnn()
    b = run_pipeline(a, ["fold_batchnorm", "fuse_conv_activation", "nchwc_layout"]).final
    res = compare_models(a, b)
    blocked = [r for r in res.rows if r.pair.blocked_b]
    assert blocked and all(r.compared and r.ok for r in blocked), [r.figures() for r in blocked]
    bad = compare_models(a, perturb(b, next(n.name for n in b.graph.node if n.domain == "com.microsoft.nchwc"
                                            and n.op_type == "Conv" and "conv2" in "".join(
                                                p.value for p in n.metadata_props)), index=1))
    assert bad.first_divergence is not None and bad.first_divergence.pair.node_a == "relu2"


def test_a_concat_of_blocked_tensors_is_blocked_too():
    """onnxruntime runs a plain Concat on NCHWc tensors as they are: its output is blocked."""
    rng = np.random.default_rng(0)
    inits = [onh.from_array(_w(rng, *shape, scale=0.2), name)
             for name, shape in (("Wa", (16, 3, 3, 3)), ("Wb", (16, 3, 3, 3)), ("Wc", (8, 32, 3, 3)))]
    nodes = [oh.make_node("Conv", ["x", "Wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             oh.make_node("Conv", ["x", "Wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             oh.make_node("Concat", ["a", "b"], ["cat"], name="concat", axis=1),
             oh.make_node("Conv", ["cat", "Wc"], ["y"], name="conv_c", pads=[1, 1, 1, 1])]
    g = oh.make_graph(nodes, "cat", [oh.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                      [oh.make_tensor_value_info("y", F, [1, 8, 16, 16])], inits)
    a = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    a.ir_version = 8
    b = run_pipeline(a, ["nchwc_layout"]).final
    concat = next(n for n in b.graph.node if n.op_type == "Concat")
    assert concat.domain == "" and concat.output[0] != "cat", "the NCHWc capture no longer concatenates blocked tensors"
    res = compare_models(a, b)
    row = next(r for r in res.rows if r.pair.name == "cat")
    assert row.pair.b_name == concat.output[0] and row.pair.blocked_b
    assert res.first_divergence is None and all(r.compared for r in res.rows)


def test_a_reshape_target_folded_with_minus_one_is_compared_through_the_reshape():
    a = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[2,12] y) {
        s = Shape(x)
        n = Gather(s, zero)
        n1 = Unsqueeze(n, axes)
        target = Concat<axis = 0>(n1, twelve)
        y = Reshape(x, target)
    }""")
    a.graph.initializer.extend([onh.from_array(np.array(0, np.int64), "zero"),
                                onh.from_array(np.array([0], np.int64), "axes"),
                                onh.from_array(np.array([12], np.int64), "twelve")])
    b = onnx.ModelProto()
    b.CopyFrom(a)
    del b.graph.node[:4]  # constant folding wrote the target as [-1, 12]
    b.graph.initializer.append(onh.from_array(np.array([-1, 12], np.int64), "target"))
    res = compare_models(a, b)
    rows = {r.pair.name: r for r in res.rows}
    assert rows["target"].status == "skipped" and "Reshape's shape" in rows["target"].note
    assert rows["y"].compared and rows["y"].ok and res.first_divergence is None
    assert any("Reshape shape argument" in n for n in res.notes)
    b.graph.initializer[-1].CopyFrom(onh.from_array(np.array([-1, 6], np.int64), "target"))
    wrong = compare_models(a, b)  # a wrong fold shows at the Reshape's output
    assert wrong.first_divergence.pair.name == "y"


def test_unblock_matches_onnxruntime_reorder_output():
    from fusionviz.verify import make_session, run_model

    block = nchwc_block_size()
    assert block in (8, 16)
    x = np.random.default_rng(0).standard_normal((1, 20, 3, 5)).astype(np.float32)
    g = oh.make_graph([oh.make_node("ReorderInput", ["x"], ["blocked"], domain="com.microsoft.nchwc")], "g",
                      [oh.make_tensor_value_info("x", F, list(x.shape))], [oh.make_tensor_value_info("blocked", F, None)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft.nchwc", 1)])
    raw = run_model(make_session(m), {"x": x})["blocked"]
    assert raw.shape[1] % block == 0 and raw.shape[1] >= 20
    np.testing.assert_array_equal(unblock(raw, 20, block), x)
    assert unblock(raw[:, :, :, :4].reshape(1, -1, 3, 2)[:, :3], 20, block) is None


def test_transformer_sample_with_coarse_provenance_has_no_false_divergence():
    """The attention and SkipLayerNormalization fusions stamp every node of a change group with
    every source; matching must not pair an Add with another layer's LayerNormalization."""
    from fusionviz import samples

    a = samples.load_sample("bert_ts").proto
    res = compare_models(a, run_pipeline(a, registry.default_passes()).final)
    assert res.first_divergence is None, res.divergence_line()
    assert res.counts()["through_provenance"] >= 6
    assert all(r.diff.max_rel_diff < 1e-4 for r in res.compared)


def test_matching_needs_no_onnxruntime_and_keeps_a_order():
    a = small_cnn()
    b = run_pipeline(a, ["fold_batchnorm", "fuse_conv_activation"]).final
    pairs = match_tensors(a, b)
    assert [p.name for p in pairs] == ["c1", "b1", "r1", "c2", "b2", "r2", "gap", "flat", "y"]
    assert [p.index for p in pairs] == list(range(9))


# ------------------------------------------------------------------ chunks, verdict, types


def test_chunks_give_the_rows_of_one_run():
    a = small_cnn()
    b = perturb(run_pipeline(a, ["fold_batchnorm"]).final, "fc", factor=1.5)
    one = compare_models(a, b)
    many = compare_models(a, b, chunk_tensors=2)
    assert one.runs == 1 and many.runs >= 3

    def key(r):
        d = r.diff
        return (r.pair.name, r.status, r.pair.b_name, r.ok,
                None if d is None else (d.shape, d.max_abs_diff, d.max_rel_diff, d.cosine, d.new_nonfinite))

    assert [key(r) for r in one.rows] == [key(r) for r in many.rows]
    assert one.first_divergence.pair.name == many.first_divergence.pair.name == "y"


def test_chunks_are_bounded_by_bytes_too():
    from fusionviz.compare import TensorPair, chunks

    pairs = [TensorPair(i, f"t{i}", "n", "Op", b_name=f"t{i}", nbytes=400 * 1024) for i in range(6)]
    got = chunks(pairs, max_tensors=100, max_mb=1.0)
    assert [len(c) for c in got] == [2, 2, 2]
    assert [len(c) for c in chunks(pairs, max_tensors=4, max_mb=100)] == [4, 2]


def test_verdict_on_graph_outputs_is_verifys():
    a = small_cnn()
    b = perturb(a, "fc", factor=1.0004)
    plan = plan_inputs(a)
    res = compare_models(a, b, plan=plan, input_set="edge")
    v = verify(a, b, feeds=plan.feeds("edge"))
    out = next(r for r in res.rows if r.pair.name == "y")
    assert out.diff.ok == v.outputs[0].ok
    assert out.diff.floor == pytest.approx(v.outputs[0].floor)
    assert out.diff.max_abs_diff == v.outputs[0].max_abs_diff


def test_new_nan_is_reported_and_non_numeric_tensors_are_skipped():
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,4] x) => (float[1,4] y) {
        seq = SequenceConstruct(x, x)
        first = SequenceAt(seq, zero)
        l = Abs(first)
        y = Sqrt(l)
    }"""
    a, b = onnx.parser.parse_model(text), onnx.parser.parse_model(text)
    for m in (a, b):
        m.graph.initializer.append(onh.from_array(np.array(0, np.int64), "zero"))
        for n, name in zip(m.graph.node, ("construct", "at", "abs", "sqrt"), strict=True):
            n.name = name
    b.graph.node[2].op_type = "Neg"  # l = -x: y = sqrt(-x) is NaN where x > 0
    res = compare_models(a, b, feeds={"x": np.array([[-1.0, 0.5, 2.0, 4.0]], np.float32)})
    rows = {r.pair.name: r for r in res.rows}
    assert rows["seq"].status == "skipped" and "sequence" in rows["seq"].note
    assert any("not numeric" in n for n in res.notes)
    assert rows["first"].compared and rows["first"].ok
    assert res.first_divergence.pair.name == "l" and rows["l"].new_nonfinite == 0
    assert rows["y"].new_nonfinite == 3 and not rows["y"].ok
    values = dict(res.node_values("b"))
    assert values["abs"] > 1.0 and values["sqrt"] != values["sqrt"]  # NaN: marked apart
    assert "at" in values and "construct" not in values


def test_unknown_input_set_and_a_model_that_does_not_run_are_errors():
    a = small_cnn()
    with pytest.raises(errors.InputSpecError, match="Unknown input set"):
        compare_models(a, a, input_set="noise")
    broken = onnx.ModelProto()
    broken.CopyFrom(a)
    broken.graph.node[1].input[1] = "W1"  # a BatchNormalization with a 4-d scale
    with pytest.raises(errors.RuntimeLoadError, match="model B"):
        compare_models(a, broken)


def test_isolated_comparison_runs_each_chunk_in_the_child():
    a = small_cnn()
    res = compare_models(a, perturb(a, "conv2"), isolated=True, chunk_tensors=5)
    assert res.runs == 2 and res.first_divergence.pair.name == "c2"


# ------------------------------------------------------------------ the CLI


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    a = small_cnn()
    onnx.save(a, d / "a.onnx")
    onnx.save(perturb(a, "conv2"), d / "b.onnx")
    np.savez(d / "inputs.npz", x=np.ones((1, 3, 16, 16), np.float32))
    return d


def test_cli_prints_the_first_divergence_and_the_largest_errors(run_cli, pair):
    out = pair / "rows.json"
    code, stdout, stderr, _ = run_cli("compare", pair / "a.onnx", pair / "b.onnx", "--top", "3", "--json", out,
                                   timeout=120)
    assert code == 0, stderr
    assert "first tensor beyond tolerance: c2 (Conv conv2 in A, Conv conv2 in B), max rel" in stdout
    assert "largest per-tensor errors (3 of 9)" in stdout
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 9 and data["first_divergence"]["tensor"] == "c2"
    assert {r["status"] for r in data["rows"]} == {"compared"}


def test_cli_with_user_inputs_and_no_divergence(run_cli, pair):
    code, stdout, stderr, _ = run_cli("compare", pair / "a.onnx", pair / "a.onnx", "--inputs", pair / "inputs.npz",
                                   timeout=120)
    assert code == 0, stderr
    assert "input set user" in stdout and "no tensor beyond tolerance: 9 compared" in stdout


@pytest.mark.parametrize("args, says", [
    (["missing.onnx", "{a}"], "missing.onnx"),
    (["{a}", "{a}", "--set", "user"], "--set user needs your data"),
    (["{a}", "{a}", "--top", "-1"], "--top"),
    (["{a}", "{a}", "--chunk", "0"], "--chunk"),
], ids=["missing_model", "user_set_without_data", "negative_top", "empty_chunk"])
def test_cli_bad_input_is_one_line_and_exit_2(run_cli, pair, args, says):
    argv = [x.format(a=pair / "a.onnx") for x in args]
    code, stdout, stderr, _ = run_cli("compare", *argv, timeout=60)
    assert code == 2
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in stderr
