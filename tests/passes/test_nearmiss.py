"""Near misses: a pass that changes nothing says where it almost did, which node blocked it and why.

The fixtures (``nearmiss_models``) are shaped like real exports: Paddle2ONNX's Constant-node
weights, a PP-OCR ConvTranspose head with an Add of a position map before its BatchNorm,
Megatron's factored tanh GELU, a QDQ-quantized attention block and torch dynamo's IsNaN/Where
guard after Softmax. Fixtures that used to be near misses and now fuse are tested as such.
"""

from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

from fusionviz.passes import nearmiss
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.verify import verify
from tests.passes import nearmiss_models as nm


def _report(result, name):
    return next(r for r in result.reports if r.name == name)


@pytest.mark.parametrize("fixture", sorted(nm.ALL))
def test_near_miss_names_the_blocking_node_and_the_kind_of_reason(fixture):
    model, expected = nm.ALL[fixture]()
    rep = _report(run_pipeline(model, [expected["pass"]]), expected["pass"])
    assert rep.status == "unchanged"
    assert rep.near_miss_total >= 1
    blockers = {(m.blocker, m.kind) for m in rep.near_misses}
    assert (expected["blocker"], expected["kind"]) in blockers, [m.describe() for m in rep.near_misses]
    names = {n.name for n in model.graph.node}
    for m in rep.near_misses:
        assert m.reason and set(m.site) <= names  # every node it names is in the model the pass got


def test_constant_node_weights_say_which_pass_to_turn_on_and_then_fold():
    model, _ = nm.conv_bn_constant_nodes()
    alone = _report(run_pipeline(model, ["fold_batchnorm"]), "fold_batchnorm")
    assert "fold_constants" in alone.near_misses[0].hint
    with_folding = _report(run_pipeline(model, ["fold_constants", "fold_batchnorm"]), "fold_batchnorm")
    assert with_folding.status == "applied" and with_folding.near_miss_total == 0


def test_node_in_between_is_the_blocker_and_the_ops_around_it_are_matched():
    model, _ = nm.convtranspose_add_bn()
    m = _report(run_pipeline(model, ["fold_batchnorm"]), "fold_batchnorm").near_misses[0]
    assert m.blocker == "up_bias" and set(m.nodes) == {"up", "up_bn"}
    assert "ConvTranspose" in m.reason and "BatchNormalization" in m.reason and "(1, 4, 16, 16)" in m.reason


def test_former_near_miss_convtranspose_bias_add_bn_now_folds():
    model, _ = nm.convtranspose_bias_add_bn()
    result = run_pipeline(model, ["fold_batchnorm"])
    rep = _report(result, "fold_batchnorm")
    assert rep.status == "applied" and rep.near_miss_total == 0
    assert [n.op_type for n in result.final.graph.node] == ["ConvTranspose"]
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


def test_gelu_near_miss_keeps_the_deepest_partial_match():
    model, _ = nm.tanh_gelu_megatron()
    m = _report(run_pipeline(model, ["fuse_gelu"]), "fuse_gelu").near_misses[0]
    assert m.blocker == "inner" and "computed value" in m.reason
    assert {"gelu_out", "tanh"} <= set(m.nodes) and len(m.nodes) >= 5


@pytest.mark.parametrize("fixture", ["tanh_gelu_cubed_by_mul", "tanh_gelu_jax_order"])
def test_former_gelu_near_misses_now_fuse(fixture):
    model, _ = getattr(nm, fixture)()
    result = run_pipeline(model, ["fuse_gelu"])
    rep = _report(result, "fuse_gelu")
    assert rep.status == "applied" and rep.near_miss_total == 0
    assert [n.op_type for n in result.final.graph.node] == ["MatMul", "FastGelu"]
    v = verify(result.original, result.final)
    assert v.ok, v.summary()


def test_torch_guard_without_a_mask_now_fuses_and_with_a_maybe_infinite_mask_stays():
    model, _ = nm.guarded_attention_unmasked()
    result = run_pipeline(model, ["fuse_attention"])
    assert _report(result, "fuse_attention").status == "applied"
    assert [n.op_type for n in result.final.graph.node] == ["Attention"]
    v = verify(result.original, result.final)
    assert v.ok, v.summary()
    model, _ = nm.guarded_attention()
    (m,) = _report(run_pipeline(model, ["fuse_attention"]), "fuse_attention").near_misses
    assert m.blocker == "isnan" and "-inf" in m.reason and m.hint


def test_a_site_the_pass_rewrote_after_all_is_dropped():
    """Another rule (or a commuted copy, or a later round) that rewrote the site wins: a near
    miss naming a node that is gone after the pass is not reported."""
    with nearmiss.recording() as rec:
        nearmiss.note(["bn1", "conv1"], "conv1", "weight shared")
        nearmiss.note(["bn2", "conv2"], "add2", "an Add sits between")
    kept, total = rec.result({"bn2", "conv2", "add2", "conv1"})  # bn1 was folded by another rule
    assert [m.blocker for m in kept] == ["add2"] and total == 1


def test_deepest_failure_per_site_wins():
    with nearmiss.recording() as rec:
        nearmiss.note(["mul"], "a", "shallow")
        nearmiss.note(["mul", "add", "tanh"], "b", "deep")
        nearmiss.note(["mul", "add"], "c", "middle")
    (kept,), _ = rec.result({"mul", "add", "tanh", "a", "b", "c"})
    assert kept.reason == "deep"


def test_sites_are_bounded_per_pass():
    with nearmiss.recording() as rec:
        for i in range(nearmiss.LIMIT + 30):
            nearmiss.note([f"a{i}", f"b{i}"], f"c{i}", "why", depth=i % 5)
    kept, total = rec.result({f"{p}{i}" for p in "abc" for i in range(200)})
    assert total == nearmiss.LIMIT + 30 and len(kept) == nearmiss.LIMIT
    assert kept[0].nodes[0] in {f"a{i}" for i in range(4, 200, 5)}  # deepest first


def test_nothing_is_recorded_without_a_recorder():
    assert not nearmiss.active()
    nearmiss.note(["x"], "y", "why")  # no recorder: a no-op, no error


def test_report_json_carries_near_misses(tmp_path):
    model, _ = nm.guarded_attention()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "explain.json"
    proc = subprocess.run([sys.executable, "-m", "fusionviz", "explain", str(path), "--passes", "fuse_attention",
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "near miss  at isnan [other_uses]" in proc.stdout
    data = json.loads(out.read_text())
    (entry,) = data["passes"]
    assert entry["near_misses"][0]["blocker"] == "isnan" and entry["near_miss_total"] == 1


def test_explain_refuses_an_unknown_pass_in_one_line(tmp_path):
    model, _ = nm.guarded_attention()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    proc = subprocess.run([sys.executable, "-m", "fusionviz", "explain", str(path), "--passes", "no_such_pass"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_folding_a_tied_weight_is_declined_with_a_reason():
    """GPT-2 style: the embedding table is also the LM head through Transpose; folding the
    Transpose would store a second copy of a weight that stays in use."""
    import numpy as np
    import onnx.helper as oh
    import onnx.numpy_helper as onh

    w = onh.from_array(np.random.default_rng(0).standard_normal((600, 512)).astype(np.float32), "wte")
    nodes = [oh.make_node("Gather", ["wte", "ids"], ["emb"], name="embed"),
             oh.make_node("Transpose", ["wte"], ["wte_t"], name="lm_head_t", perm=[1, 0]),
             oh.make_node("MatMul", ["emb", "wte_t"], ["logits"], name="lm_head")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("ids", onnx.TensorProto.INT64, [1, 4])],
                      [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 4, 600])], [w])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    result = run_pipeline(model, ["fold_constants"])
    assert "Transpose" in [n.op_type for n in result.final.graph.node]  # the weight is stored once
    (m,) = _report(result, "fold_constants").near_misses
    assert m.blocker == "lm_head_t" and "second" in m.reason and "wte" in m.reason


def test_an_identity_kept_for_the_interface_says_why():
    import onnx.parser

    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y, float[2] z) { y = Identity(x) z = Relu(x) }""")
    (m,) = _report(run_pipeline(model, ["eliminate_identity"]), "eliminate_identity").near_misses
    assert m.nodes == (m.blocker,)  # the Identity itself
    assert "graph output 'y'" in m.reason and "graph input 'x'" in m.reason


def test_a_dropout_in_training_mode_says_why_it_stays():
    import onnx.parser

    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) { r = Constant<value = float {0.5}>() t = Constant<value = bool {1}>()
      y = Dropout(x, r, t) }""")
    (m,) = _report(run_pipeline(model, ["eliminate_dropout"]), "eliminate_dropout").near_misses
    assert "training_mode is true" in m.reason
