"""Graph page: near misses drawn, picked, linked and cleared (AppTest)."""

from __future__ import annotations

import onnx
from ui_helpers import errors_of, goto

from fusionviz import model_io
from fusionviz.graphview.dot import NEAR_MISS_BLOCKER
from fusionviz.ui import nearmiss_view, state
from tests.passes import nearmiss_models


def _open(at, tmp_path, fixture, passes):
    model, expected = fixture()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    at.session_state[state.PASSES] = passes
    return expected


def test_picker_draws_a_near_miss_and_puts_it_in_the_url(app, tmp_path):
    expected = _open(app, tmp_path, nearmiss_models.convtranspose_add_bn, ["fold_batchnorm"])
    goto(app, "graph")
    pick = app.selectbox(key=nearmiss_view.PICK)
    assert pick.options[0] == "(no near miss drawn)" and len(pick.options) == 3  # none, all, one
    pick.set_value(pick.options[2]).run()
    assert not app.exception and errors_of(app) == []
    assert app.session_state[state.NEAR_MISS] == "fold_batchnorm:0"
    assert app.query_params["nearmiss"] == "fold_batchnorm:0"
    assert app.session_state[state.COMPARE] == "step:1"
    banner = [w.value for w in app.warning if "Near miss of" in w.value]
    assert banner and expected["blocker"] in banner[0] and "ConvTranspose" in banner[0]


def test_choosing_another_pair_clears_the_near_miss(app, tmp_path):
    _open(app, tmp_path, nearmiss_models.convtranspose_add_bn, ["fold_constants", "fold_batchnorm"])
    goto(app, "graph")
    pick = app.selectbox(key=nearmiss_view.PICK)
    pick.set_value(pick.options[2]).run()
    assert app.session_state[state.COMPARE] == "step:2"
    app.selectbox(key="graph_compare").set_value("current").run()
    assert not app.exception
    assert app.session_state[state.NEAR_MISS] is None and "nearmiss" not in app.query_params
    assert not [w for w in app.warning if "Near miss of" in w.value]


def test_a_link_to_a_near_miss_the_selection_does_not_have_is_said(app, tmp_path):
    _open(app, tmp_path, nearmiss_models.convtranspose_add_bn, ["fold_batchnorm"])
    app.query_params["nearmiss"] = "fuse_gelu:3"
    goto(app, "graph")
    assert any("fuse_gelu:3" in i.value for i in app.info)
    assert app.session_state[state.NEAR_MISS] is None


def test_the_blocker_is_drawn_in_pink(app, tmp_path):
    from fusionviz.graphview import RenderOptions, render_graph
    from fusionviz.passes.pipeline import run_pipeline

    model, expected = nearmiss_models.convtranspose_add_bn()
    result = run_pipeline(model, ["fold_batchnorm"])
    shown = nearmiss_view.listing(result)[0]
    r = render_graph(result.snapshots[0].model, side="before",
                     options=RenderOptions(near_misses=(shown.option(),)))
    assert NEAR_MISS_BLOCKER in r.dot and shown.near.blocker == expected["blocker"]
