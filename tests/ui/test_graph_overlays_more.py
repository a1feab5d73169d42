"""Graph page in AppTest: the OpenVINO per-layer overlay (and what the selector says without
OpenVINO), and a selection of several nodes in the side panel and the URL."""

from __future__ import annotations

import importlib.util

import pytest
from test_graph_panel import _open, _panel_html
from ui_helpers import errors_of, goto

from fusionviz.ui import graph_page, overlay_view, state


def test_without_openvino_the_option_says_it_is_unavailable_and_why(app, tmp_path, monkeypatch):
    from fusionviz.backends.openvino import OpenVinoBackend

    monkeypatch.setattr(OpenVinoBackend, "quick_check", lambda self: "OpenVINO is not installed (pip install openvino).")
    _open(app, tmp_path, ["fold_batchnorm"])
    goto(app, "graph")
    box = app.selectbox(key=overlay_view.SELECT)
    assert "Time per layer (OpenVINO) (unavailable)" in box.options
    box.set_value("ov_time").run()
    assert not app.exception and errors_of(app) == []
    said = [i.value for i in app.info]
    assert any("OpenVINO's per-layer times are unavailable: OpenVINO is not installed" in s for s in said), said
    assert not [m for m in app.markdown if "fv-ovl" in m.value]  # nothing drawn as if it had numbers
    assert app.query_params["overlay"] == "ov_time"


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")
def test_openvino_layer_times_fill_both_panes_and_the_panel(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm"])  # standard ops on both sides: OpenVINO reads both
    goto(app, "graph")
    app.selectbox(key=overlay_view.SELECT).set_value("ov_time").run()
    assert not app.exception and errors_of(app) == []
    legend = [m for m in app.markdown if "fv-ovl" in m.value]
    assert legend and "Time per layer (OpenVINO)" in legend[0].value and "(both panes)" in legend[0].value
    assert "not split" in legend[0].value and "OpenVINO layers holding" in legend[0].proto.help
    app.session_state[state.SELECTED] = "relu1"
    app.session_state[graph_page.SEL_SIDE] = ("relu1", "before")
    app.run()
    html = _panel_html(app)
    assert "for the whole layer: in the OpenVINO layer of conv1" in html  # Conv+BN+Relu: one layer


def test_several_selected_nodes_are_one_table_with_totals_and_in_the_url(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm", "fuse_conv_activation"])
    goto(app, "graph")
    app.selectbox(key=overlay_view.SELECT).set_value("memory").run()
    opts = dict(app.session_state[state.GRAPH_OPTS])
    opts["sel"] = ["before:conv1", "before:relu2", "before:no_such_node"]
    app.session_state[state.GRAPH_OPTS] = opts
    app.run()
    assert not app.exception and errors_of(app) == []
    assert app.session_state[state.SELECTED] == "conv1"  # the first one is the page's selection
    assert app.query_params["g.sel"] == ["before:conv1", "before:relu2"]  # the unknown one dropped
    assert any("2 nodes selected" in m.value for m in app.markdown)
    table = next(m.value for m in app.markdown if "<table class='fv-sel'>" in m.value)
    assert "conv1" in table and "relu2" in table and "writes" in table
    assert "Before</b>: 2 selected · in total: writes" in table
    assert any("Counterparts in the after pane" in m.value for m in app.markdown)


def test_a_link_with_a_focus_and_several_selected_keeps_both(tmp_path):
    from streamlit.testing.v1 import AppTest
    from ui_helpers import APP, TIMEOUT

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _open(at, tmp_path, ["fold_batchnorm"])
    at.query_params["focus"] = "relu1"  # read by the page as news
    at.session_state[state.GRAPH_OPTS] = {"collapse": True, "sel": ["before:conv1", "before:relu2"]}  # as init reads g.sel
    at.switch_page("fusionviz/ui/graph_page.py").run()
    assert not at.exception and errors_of(at) == []
    assert at.session_state[state.FOCUS] == "relu1"
    assert at.session_state[state.SELECTED] == "conv1"
    assert at.query_params["g.sel"] == ["before:conv1", "before:relu2"] and at.query_params["focus"] == "relu1"
    assert any("2 nodes selected" in m.value for m in at.markdown)


def test_without_the_side_panel_several_selected_are_listed_below(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm"])
    goto(app, "graph")
    app.toggle(key="graph_panel_on").set_value(False).run()
    opts = dict(app.session_state[state.GRAPH_OPTS])
    opts["sel"] = ["before:conv1", "after:conv2"]
    app.session_state[state.GRAPH_OPTS] = opts
    app.run()
    assert not app.exception and errors_of(app) == []
    assert any("2 nodes selected" in m.value for m in app.markdown)
    assert any("<table class='fv-sel'>" in m.value for m in app.markdown)
