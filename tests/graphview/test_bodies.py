"""Control-flow bodies: paths, a body as a model of its own, the errors, the render CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from fusionviz import errors
from fusionviz.graphview import diff_models, render_graph
from fusionviz.graphview.bodies import body_model, find_body, list_bodies, split_path
from fusionviz.graphview.synthetic import control_flow_model

ROOT = Path(__file__).resolve().parents[2]


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Graph input name -> "elem_type:dims" (dims "?" when the input has no shape)."""
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dims = ",".join(str(d.dim_value) for d in tt.shape.dim) if tt.HasField("shape") else "?"
        out[vi.name] = f"{onnx.TensorProto.DataType.Name(tt.elem_type)}:{dims}"
    return out


@pytest.fixture(scope="module")
def model():
    return control_flow_model()


def test_every_body_is_listed_with_its_node_counts(model):
    got = [(b.path, b.op, b.nodes, b.total_nodes, b.depth) for b in list_bodies(model)]
    assert got == [
        ("If_2/then_branch", "If", 4, 4, 1),
        ("If_2/else_branch", "If", 1, 1, 1),
        ("Loop_5/body", "Loop", 3, 5, 1),
        ("Loop_5/body/steps/If_2/then_branch", "If", 1, 1, 2),
        ("Loop_5/body/steps/If_2/else_branch", "If", 1, 1, 2),
    ]
    assert list_bodies(model)[2].label() == "Loop_5/body (3 nodes, 5 with nested bodies)"


def test_if_branches_become_models_with_outer_weights_and_inputs(model):
    then = body_model(model, "If_2/then_branch")
    assert ops(then) == ["Identity", "MatMul", "Add", "Relu"]
    assert inputs(then) == {"x": "FLOAT:1,8"}  # read from the main graph, typed
    assert sorted(t.name for t in then.graph.initializer) == ["b", "w"]  # outer weights stay weights
    assert [o.name for o in then.graph.output] == ["t_out"]
    assert list(then.opset_import) == list(model.opset_import) and then.ir_version == model.ir_version
    onnx.checker.check_model(then, full_check=True)
    other = body_model(model, "If_2/else_branch")
    assert ops(other) == ["Sigmoid"] and inputs(other) == {"x": "FLOAT:1,8"}


def test_loop_body_keeps_its_own_inputs_first_then_outer_values(model):
    body = body_model(model, "Loop_5/body")
    assert list(inputs(body)) == ["i", "cin", "acc", "x", "c"]
    assert inputs(body)["c"].startswith("BOOL") and inputs(body)["x"] == "FLOAT:1,8"
    assert [o.name for o in body.graph.output] == ["cout", "acc2"]
    assert ops(body) == ["Identity", "Add", "If"]  # the nested If keeps its branches


def test_nested_body_reads_values_of_every_enclosing_graph(model):
    path = "Loop_5/body/steps/If_2/then_branch"  # node names hold '/' themselves
    nested = body_model(model, path)
    assert ops(nested) == ["Relu"]
    assert inputs(nested) == {"s": "FLOAT:1,8"}  # defined in the Loop body, typed by inference
    assert split_path(path, model) == [("Loop_5/body", "Loop_5"), (path, "steps/If_2")]
    assert len(find_body(model, path)) == 3  # main graph, Loop body, branch


def test_outer_constant_is_a_weight_and_unnamed_nodes_use_their_display_key():
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, bool c) => (float[2] y) {
        two = Constant<value = float[2] {2.0, 2.0}>()
        y = If(c) <
            then_branch = a () => (float[2] t) { t = Mul(x, two) },
            else_branch = e () => (float[2] f) { f = Neg(x) }
        >
    }""")
    assert [b.path for b in list_bodies(m)] == ["#1/then_branch", "#1/else_branch"]
    then = body_model(m, "#1/then_branch")
    assert [t.name for t in then.graph.initializer] == ["two"] and list(inputs(then)) == ["x"]
    assert "Mul" in render_graph(then).dot and "two" not in list(inputs(then))


def test_display_machinery_draws_and_diffs_a_body(model):
    from fusionviz.passes import run_pipeline

    result = run_pipeline(model, ["eliminate_identity"])
    before = body_model(result.original, "If_2/then_branch")
    after = body_model(result.final, "If_2/then_branch")
    diff = diff_models(before, after)
    assert diff.status_before["speech/Identity_0"] == "removed"
    rendered = render_graph(after, diff=diff, side="after")
    assert rendered.total == 3 and "speech/MatMul_1" in rendered.item_ids


@pytest.mark.parametrize("path, needle", [
    pytest.param("If_2/then", "its bodies are: If_2/then_branch (4 nodes), If_2/else_branch (1 node), "
                 "Loop_5/body (5 nodes)", id="wrong_attribute_lists_top_level_bodies"),
    pytest.param("Nope/body", "its bodies are: If_2/then_branch", id="unknown_node"),
    pytest.param("Loop_5/body/If_9/then_branch", "'Loop_5/body/' goes on with one of: "
                 "steps/If_2/then_branch (1 node), steps/If_2/else_branch (1 node)", id="nested_lists_children"),
    pytest.param("If_2/then_branch/x/body", "'If_2/then_branch' holds no nested bodies", id="below_a_leaf"),
    pytest.param("", "its bodies are", id="empty_path"),
])
def test_bad_path_is_one_line_naming_the_bodies(model, path, needle):
    with pytest.raises(errors.GraphPathError) as info:
        body_model(model, path)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and info.value.exit_code == 2


def test_model_without_bodies_says_so():
    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[2] x) => (float[2] y) '
                                "{ y = Relu(x) }")
    assert list_bodies(m) == []
    with pytest.raises(errors.GraphPathError, match="this model has no If/Loop/Scan bodies"):
        body_model(m, "Relu_0/body")


# ------------------------------------------------------------------ the render CLI


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusionviz", "render", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory, model):
    from fusionviz.passes import run_pipeline

    d = tmp_path_factory.mktemp("bodies")
    result = run_pipeline(model, ["eliminate_identity"])
    onnx.save(result.original, d / "before.onnx")
    onnx.save(result.final, d / "after.onnx")
    return d


def test_render_draws_a_body(files):
    out = files / "then.svg"
    p = render(str(files / "before.onnx"), "--graph", "If_2/then_branch", "-o", str(out))
    assert p.returncode == 0, p.stderr
    svg = out.read_text()
    assert "<svg" in svg and "MatMul" in svg and "Relu" in svg and "Equal" not in svg
    assert "4 of 4 nodes of body If_2/then_branch drawn" in p.stderr


def test_render_diffs_the_same_body_of_two_models(files):
    out = files / "then_diff.svg"
    p = render(str(files / "before.onnx"), "--diff", str(files / "after.onnx"), "--graph", "If_2/then_branch",
               "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "1 removed" in p.stderr and "Identity" not in out.read_text()


def test_render_bad_body_path_is_exit_2_with_one_line(files):
    p = render(str(files / "before.onnx"), "--graph", "If_2/body", "-o", str(files / "x.svg"))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "If_2/then_branch (4 nodes)" in lines[0] and "Traceback" not in p.stderr
    assert not (files / "x.svg").exists()
