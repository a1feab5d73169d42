"""The pass contract and pipeline: change grouping, provenance through passes, error isolation."""

from __future__ import annotations

import onnx
import onnx.parser
import onnx_ir as ir
import pytest

from fusionviz import errors
from fusionviz.passes import base, registry
from fusionviz.passes.base import Category, ChangeKind, Pass
from fusionviz.passes.pipeline import run_pipeline, to_ir
from fusionviz.verify import verify

CHAIN = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[2,3] x) => (float[2,3] y) {
  a = Identity(x)
  b = Relu(a)
  c = Identity(b)
  y = Abs(c)
}"""


def _fuse_relu_abs(model: ir.Model) -> None:
    """Test pass: Relu -> Abs becomes one Relu (Abs of a Relu output is a no-op)."""
    for node in list(model.graph):
        if node.op_type != "Abs":
            continue
        prod = node.inputs[0].producer()
        if prod is None or prod.op_type != "Relu":
            continue
        new = ir.node("Relu", [prod.inputs[0]], name="")
        model.graph.insert_after(node, new)
        new.outputs[0].name = "fused_out"
        ir.convenience.replace_all_uses_with(node.outputs[0], new.outputs[0], replace_graph_outputs=True)
        model.graph.remove([node, prod], safe=True)


class _FuseReluAbs(Pass):
    name = "test_fuse_relu_abs"
    title = "test"
    category = Category.FUSE

    def transform(self, model: ir.Model) -> None:
        _fuse_relu_abs(model)


class _Boom(Pass):
    name = "test_boom"
    title = "raises"

    def transform(self, model: ir.Model) -> None:
        model.graph.remove(list(model.graph)[0])  # leaves a dangling graph, then fails
        raise RuntimeError("broken rule")


def test_removed_nodes_are_grouped_per_vanished_tensor():
    model = onnx.parser.parse_model(CHAIN)
    result = run_pipeline(model, ["eliminate_identity"])
    changes = result.reports[0].changes
    assert [c.kind for c in changes] == [ChangeKind.REMOVED, ChangeKind.REMOVED]
    assert all(c.in_ops == ("Identity",) for c in changes)
    assert result.nodes_before == 4 and result.nodes_after == 2
    assert verify(result.original, result.final).ok


def test_fusion_groups_removed_and_new_nodes_and_stamps_provenance():
    work = to_ir(onnx.parser.parse_model(CHAIN))
    work, _ = registry.get_pass("eliminate_identity").apply(work)
    work, changes = _FuseReluAbs().apply(work)
    assert len(changes) == 1
    (c,) = changes
    assert c.kind == ChangeKind.FUSED
    assert sorted(c.in_ops) == ["Abs", "Relu"]
    (new_name,) = c.outputs
    node = next(n for n in work.graph if n.name == new_name)
    assert base.node_sources(node) == list(c.inputs)
    assert base.node_passes(node) == ["test_fuse_relu_abs"]


def test_provenance_accumulates_across_passes():
    work = to_ir(onnx.parser.parse_model(CHAIN))
    work, _ = registry.get_pass("eliminate_identity").apply(work)
    work, _ = _FuseReluAbs().apply(work)  # Relu + Abs -> Relu'
    (fused,) = [n for n in work.graph if n.op_type == "Relu"]

    class _Rename(Pass):
        name = "test_rebuild"
        title = "rebuild Relu'"

        def transform(self, model: ir.Model) -> None:
            (old,) = [n for n in model.graph if n.op_type == "Relu"]
            new = ir.node("Relu", list(old.inputs))
            model.graph.insert_after(old, new)
            ir.convenience.replace_all_uses_with(old.outputs[0], new.outputs[0], replace_graph_outputs=True)
            model.graph.remove(old, safe=True)

    work, changes = _Rename().apply(work)
    (c,) = changes
    assert c.kind == ChangeKind.REPLACED and c.inputs == (fused.name,)
    node = next(n for n in work.graph if n.name == c.outputs[0])
    # Sources resolve to the *original* names, passes list both.
    assert sorted(base.node_sources(node)) == sorted(["Relu_fv2", "Abs_fv4"])
    assert base.node_passes(node) == ["test_fuse_relu_abs", "test_rebuild"]


def test_pipeline_isolates_a_failing_pass(monkeypatch):
    passes = [_Boom(), registry.get_pass("eliminate_identity")]
    monkeypatch.setattr(registry, "resolve", lambda names: passes)
    result = run_pipeline(onnx.parser.parse_model(CHAIN), ["x"])
    boom, ident = result.reports
    assert boom.error and "broken rule" in boom.error and not boom.changes
    assert boom.nodes_after == 4  # model restored to the snapshot before the failing pass
    assert ident.error is None and ident.nodes_after == 2
    assert verify(result.original, result.final).ok


def test_unknown_pass_name_is_a_user_error_with_suggestion():
    with pytest.raises(errors.InputSpecError, match="eliminate_identity"):
        registry.get_pass("identity_eliminaton")


def test_canonical_order_is_kept_whatever_the_request_order():
    names = registry.pass_names()
    assert names == [p.name for p in registry.resolve(list(reversed(names)))]
    orders = [getattr(p, "order", 0) for p in registry.all_passes()]
    assert orders == sorted(orders)


def test_every_pass_has_contract_fields():
    for p in registry.all_passes():
        assert p.name and p.name.replace("_", "").isalnum() and p.name.islower(), p.name
        assert p.title and p.explain.strip(), p.name
        assert isinstance(p.category, Category)
        assert 100 <= p.order < 600, p.name


def test_snapshots_one_per_pass_plus_original():
    model = onnx.parser.parse_model(CHAIN)
    names = ["eliminate_identity"]
    result = run_pipeline(model, names)
    assert [s.label for s in result.snapshots] == ["original", *names]
    assert all(isinstance(s.model, onnx.ModelProto) for s in result.snapshots)
    d = result.as_dict()
    assert {"passes", "nodes_before", "nodes_after"} <= set(d)


def test_pass_without_its_trigger_ops_is_skipped_with_a_reason(monkeypatch):
    """A pass whose trigger ops are absent does not run at all (no shape inference, no diff)."""
    calls = []
    bn = registry.get_pass("fold_batchnorm")
    monkeypatch.setattr(type(bn), "transform", lambda self, m: calls.append(1))
    result = run_pipeline(onnx.parser.parse_model(CHAIN), ["fold_batchnorm", "eliminate_identity"])
    ident, fold = result.reports  # canonical order: eliminate_identity runs first
    assert not calls and not fold.changes and fold.error is None
    assert "BatchNormalization" in fold.skip_reason
    assert ident.skip_reason == "" and ident.nodes_after == 2


def test_without_snapshots_the_result_is_the_same_and_errors_still_restore(monkeypatch):
    model = onnx.parser.parse_model(CHAIN)
    full = run_pipeline(model, ["eliminate_identity"])
    lean = run_pipeline(model, ["eliminate_identity"], keep_snapshots=False)
    assert [s.label for s in lean.snapshots] == ["original", "eliminate_identity"]
    assert lean.final.SerializeToString() == full.final.SerializeToString()
    # A failing pass: the lean run falls back to the careful one and reports the same thing.
    passes = [_Boom(), registry.get_pass("eliminate_identity")]
    monkeypatch.setattr(registry, "resolve", lambda names: passes)
    lean = run_pipeline(model, ["x"], keep_snapshots=False)
    boom, ident = lean.reports
    assert boom.error and boom.nodes_after == 4 and ident.nodes_after == 2
    assert verify(lean.original, lean.final).ok


def test_rule_filter_keeps_only_rules_whose_ops_are_present():
    from onnxscript.rewriter import pattern as orp

    from fusionviz.passes import rulefilter

    def pat(op, x):
        return op.Relu(op.Abs(x))

    def rep(op, x):
        return op.Abs(x)

    rule = orp.RewriteRule(pat, rep)
    assert rulefilter.required_ops(rule) == {"Relu", "Abs"}
    assert rulefilter.applicable_rules([rule], {"Relu"}) == []
    (kept,) = rulefilter.applicable_rules([rule], {"Relu", "Abs", "Add"})
    # the fast root check refuses a node of another op type without matching
    node = ir.node("Abs", [ir.Value(name="x")])
    assert kept.try_rewrite(None, None, node) is None


def test_rule_filter_drops_commuted_copies_whose_skeleton_no_node_has():
    """Of a rule's commuted copies only those whose fixed-op skeleton stands above some node
    are kept (the model's node shapes are interned once), and the kept one still fires."""
    from onnxscript.rewriter import pattern as orp

    from fusionviz.passes import rulefilter

    def pat(op, x, y):
        return op.Add(op.Relu(x), op.Abs(y))

    def rep(op, x, y):
        return op.Sub(op.Relu(x), op.Neg(op.Abs(y)))

    rule = orp.RewriteRule(pat, rep)
    model = ir.from_proto(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x, float[2] y) => (float[2] z) {
            a = Abs(y)
            r = Relu(x)
            z = Add(a, r)
        }"""))
    shapes = rulefilter.ModelShapes(model)
    copies = rule.commute()
    assert len(copies) == 2
    ops = rulefilter.model_ops(model)
    kept = rulefilter.applicable_rules(copies, ops, shapes=shapes)
    assert len(kept) == 1  # only Add(Abs, Relu): the operand order this model has
    assert len(rulefilter.applicable_rules(copies, ops)) == 2  # without shapes: no skeleton test
    from fusionviz.passes.rewrite import apply_rules

    assert apply_rules(model, [rule], commute=True) == 1
    assert "Sub" in {n.op_type for n in model.graph}


def _model(nodes, inits=(), x_shape=(2, 3)):
    from onnx import TensorProto, helper

    g = onnx.helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _bad_string_pad():
    import numpy as np
    from onnx import helper, numpy_helper

    pad = helper.make_node("Pad", ["x", "p"], ["y"])
    pad.attribute.append(helper.make_attribute("mode", b"\xff\xfe"))
    return _model([pad], [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "p")])


@pytest.mark.parametrize(("build", "needle"), [
    # each crashed a wrapped library rule before (found by tests/hostile/test_fuzz.py)
    (lambda: _model([onnx.helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
                     onnx.helper.make_node("Transpose", ["a"], ["y"], perm=[-5, 0])]), "perm=[-5, 0]"),
    (lambda: _model([onnx.helper.make_node("Cast", ["x"], ["y"], to=-5)]), "to=-5"),
    (_bad_string_pad, "'mode' that is not UTF-8"),
])
def test_spec_breaking_attributes_are_refused_with_the_node_named(build, needle):
    model = build()
    with pytest.raises(errors.CheckerError, match="breaks the ONNX spec") as info:
        run_pipeline(model, registry.default_passes())
    assert needle in str(info.value) and "\n" not in str(info.value)
    # Viewing the model (no passes) still works.
    assert run_pipeline(model, []).nodes_before >= 1


def test_pipelines_in_threads_give_the_sequential_results():
    """The app runs pipelines in two threads (page + prefetch) and for two sessions; rule
    objects are shared and onnxscript's matcher keeps its state on them, so rewriting is
    serialized (rulefilter.REWRITE_LOCK). Results must not depend on the interleaving."""
    import threading

    from fusionviz import samples

    names = [n for n in ("textbook", "bert_dynamo") if n in samples.sample_names()]
    if len(names) < 2:
        pytest.skip("samples not generated")
    models = {n: samples.load_sample(n).proto for n in names}
    passes = [p for p in registry.default_passes() if p != "nchwc_layout"]
    expected = {n: run_pipeline(m, passes, keep_snapshots=False).final.SerializeToString() for n, m in models.items()}
    got: dict[str, list[bytes]] = {n: [] for n in names}
    errors_seen: list[BaseException] = []

    def work(name: str) -> None:
        try:
            for _ in range(3):
                got[name].append(run_pipeline(models[name], passes, keep_snapshots=False).final.SerializeToString())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors_seen.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_seen
    for n in names:
        assert got[n] and all(b == expected[n] for b in got[n]), n
