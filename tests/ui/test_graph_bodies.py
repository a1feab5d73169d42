"""Graph page: If/Loop/Scan bodies opened in both panes (AppTest)."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest
from ui_helpers import errors_of, goto

from fusionviz import model_io
from fusionviz.graphview.synthetic import control_flow_model
from fusionviz.ui import state

#: An If on a constant: constant folding inlines the branch it takes into the main graph.
FOLDED_IF = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) {
    c = Constant<value = bool {1}>()
    y = If(c) <
        then_branch = a () => (float[1,8] t) { t1 = Relu(x) t = Neg(t1) },
        else_branch = e () => (float[1,8] f) { f = Sigmoid(x) }
    >
}"""


def _named(m: onnx.ModelProto) -> onnx.ModelProto:
    for i, n in enumerate(m.graph.node):
        n.name = f"{n.op_type}_{i}"
        for a in n.attribute:
            for j, b in enumerate(a.g.node):
                b.name = f"{a.name}/{b.op_type}_{j}"
    return m


def _open_model(at, model: onnx.ModelProto, tmp_path) -> None:
    path = tmp_path / "cf.onnx"
    onnx.save(model, path)
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    at.session_state[state.PASSES] = state.default_passes()
    at.session_state[state.BODY] = None


def test_picker_opens_a_body_in_both_panes_and_the_url(app, tmp_path):
    _open_model(app, control_flow_model(), tmp_path)
    goto(app, "graph")
    pick = app.selectbox(key="graph_body_pick")
    assert pick.options[0] == "Main graph" and len(pick.options) == 6
    pick.set_value("Loop_5/body/steps/If_2/then_branch").run()
    assert not app.exception and errors_of(app) == []
    assert app.session_state[state.BODY] == "Loop_5/body/steps/If_2/then_branch"
    assert app.query_params["body"] == "Loop_5/body/steps/If_2/then_branch"
    assert {b.label for b in app.button} >= {"Main graph", "Loop_5 · body"}
    app.button(key="graph_body_up_0").click().run()  # the breadcrumb of the Loop's body
    assert app.session_state[state.BODY] == "Loop_5/body"
    app.button(key="graph_body_up_main").click().run()
    assert app.session_state[state.BODY] is None and "body" not in app.query_params


def test_a_body_the_passes_removed_is_said_in_its_pane(app, tmp_path):
    _open_model(app, _named(onnx.parser.parse_model(FOLDED_IF)), tmp_path)
    goto(app, "graph")
    app.selectbox(key="graph_body_pick").set_value("If_1/then_branch").run()
    assert not app.exception and errors_of(app) == []
    notes = [i.value for i in app.info]
    assert any("is gone from the after graph" in n and "inlined in the main graph" in n for n in notes), notes


@pytest.mark.parametrize("path", ["Nope/body", "If_2/body"])
def test_a_link_to_a_missing_body_shows_the_main_graph_and_says_so(app, tmp_path, path):
    _open_model(app, control_flow_model(), tmp_path)
    app.query_params["body"] = path
    goto(app, "graph")
    assert any(f"No body `{path}`" in w.value for w in app.warning)
    assert app.selectbox(key="graph_body_pick").value == ""
