"""The validity rule: a pass whose result is not a valid model is rolled back and declined."""

from __future__ import annotations

import onnx
import onnx.parser
import onnx_ir as ir
import pytest

from fusionviz.passes import registry
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.pipeline import run_pipeline
from fusionviz.passes.validity import Baseline, violation

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 4] x) => (float[1, 4] y) {
    a = Identity(x)
    b = Relu(a)
    y = Sigmoid(b)
}
"""


class _RenameOutput(Pass):
    """Breaks rule 2: renames the graph output."""

    name = "test_rename_output"
    title = "test: rename the graph output"
    category = Category.SIMPLIFY
    order = 121

    def transform(self, model: ir.Model) -> None:
        graph = model.graph
        old = next(n for n in graph if n.op_type == "Sigmoid")
        new = ir.node("Sigmoid", inputs=[old.inputs[0]], outputs=[ir.Value(name="renamed")])
        new.outputs[0].dtype, new.outputs[0].shape = graph.outputs[0].dtype, graph.outputs[0].shape
        graph.insert_after(old, new)
        graph.outputs[0] = new.outputs[0]
        graph.remove(old, safe=True)


class _UnknownOp(Pass):
    """Breaks rule 1/3: writes an op that exists in no opset."""

    name = "test_unknown_op"
    title = "test: write an op that does not exist"
    category = Category.FUSE
    order = 201

    def transform(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.op_type == "Relu":
                node.op_type = "NoSuchOp"


@pytest.fixture()
def with_bad_passes(monkeypatch):
    passes = registry.all_passes() + [_RenameOutput(), _UnknownOp()]
    passes.sort(key=lambda p: getattr(p, "order", 1000))
    monkeypatch.setattr(registry, "_CACHE", passes)
    yield


def _model() -> onnx.ModelProto:
    return onnx.parser.parse_model(MODEL)


@pytest.mark.parametrize("keep", [True, False])
def test_invalid_result_is_declined_and_the_other_passes_go_on(with_bad_passes, keep):
    result = run_pipeline(_model(), ["eliminate_identity", "test_rename_output", "test_unknown_op"],
                          keep_snapshots=keep)
    by = {r.name: r for r in result.reports}
    assert by["eliminate_identity"].status == "applied"
    assert by["test_rename_output"].status == "declined"
    assert "outputs changed" in by["test_rename_output"].declined
    assert by["test_unknown_op"].status == "declined"
    assert "NoSuchOp" in by["test_unknown_op"].declined
    assert by["test_unknown_op"].after == ("eliminate_identity", "test_rename_output")
    final = result.final
    assert [o.name for o in final.graph.output] == ["y"]
    assert {n.op_type for n in final.graph.node} == {"Relu", "Sigmoid"}
    assert violation(final, Baseline(result.original)) is None
    assert result.as_dict()["passes"][1]["status"] == "declined"


def test_valid_run_is_checked_once(with_bad_passes, monkeypatch):
    from fusionviz.passes import validity

    calls = []
    real = validity.violation
    monkeypatch.setattr(validity, "violation", lambda m, b: calls.append(1) or real(m, b))
    result = run_pipeline(_model(), ["eliminate_identity", "eliminate_dead_code"], keep_snapshots=False)
    assert all(r.status in ("applied", "unchanged", "skipped") for r in result.reports)
    assert len(calls) == 1


def test_rank_and_type_changes_are_violations():
    before = _model()
    after = onnx.parser.parse_model(MODEL.replace("float[1, 4] y", "double[1, 4] y"))
    assert "changed type" in violation(after, Baseline(before))
    after = onnx.parser.parse_model(MODEL.replace("float[1, 4] y", "float[4] y"))
    assert "changed rank" in violation(after, Baseline(before))


def test_model_failing_the_full_check_before_is_held_to_the_plain_check():
    # A stale value_info that contradicts the graph: the full check fails, the plain one passes.
    m = _model()
    vi = onnx.helper.make_tensor_value_info("b", onnx.TensorProto.INT64, [7])
    m.graph.value_info.append(vi)
    base = Baseline(m)
    assert not base.full_check
    assert violation(m, base) is None
