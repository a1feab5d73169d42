"""Graph page: colour by error (ui/error_view.py), off by default, on from the overlay selector."""

from __future__ import annotations

import onnx
from ui_helpers import errors_of, goto

from fusionviz import model_io
from fusionviz.ui import error_view, overlay_view, state
from tests.test_compare import small_cnn


def _open(at, tmp_path, passes):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    at.session_state[state.PASSES] = passes


def _texts(elements) -> list[str]:
    return [e.value for e in elements]


def test_off_by_default_and_on_from_the_selector_without_divergence(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm", "fuse_conv_activation"])
    goto(app, "graph")
    assert app.selectbox(key=overlay_view.SELECT).value == "change"
    assert not any("tensor" in t for t in _texts(app.success) + _texts(app.warning))
    app.selectbox(key=overlay_view.SELECT).set_value("error").run()
    assert not app.exception and errors_of(app) == []
    assert app.session_state[state.GRAPH_OPTS]["overlay"] == "error" and app.query_params["overlay"] == "error"
    ok = [t for t in _texts(app.success) if "No tensor beyond tolerance" in t]
    assert ok and "tensors compared on input set 'normal'" in ok[0]
    assert any("After pane, largest error" in m.value for m in app.markdown)


def test_a_divergence_is_named_and_the_button_focuses_its_node(app, tmp_path):
    _open(app, tmp_path, ["int8_dynamic"])
    goto(app, "graph")
    app.selectbox(key=overlay_view.SELECT).set_value("error").run()
    warn = [t for t in _texts(app.warning) if "First tensor beyond tolerance" in t]
    assert warn and "`c1` (Conv conv1 in before," in warn[0]
    app.button(key="graph_error_focus").click().run()
    assert not app.exception
    from fusionviz.compare import compare_models
    from fusionviz.passes import run_pipeline

    r = run_pipeline(small_cnn(), ["int8_dynamic"])
    expected = compare_models(r.original, r.final).first_divergence.pair.node_b
    assert expected and expected != "conv1"  # the node of the after side that computes c1
    assert app.session_state[state.FOCUS] == expected and app.query_params["focus"] == expected


def test_the_after_pane_is_coloured_by_the_comparison():
    from fusionviz.compare import compare_models
    from fusionviz.graphview import RenderOptions, render_graph
    from fusionviz.graphview.dot import HEAT_FILLS
    from fusionviz.passes import run_pipeline

    r = run_pipeline(small_cnn(), ["int8_dynamic"])
    res = compare_models(r.original, r.final)
    drawn = render_graph(r.final, options=RenderOptions(**error_view.overlay(res)))
    assert any(f'fillcolor="{fill}"' in drawn.dot for fill in HEAT_FILLS[-2:])
    assert "max rel" in drawn.dot and error_view.overlay("no comparison") == {}
