"""Graph page: the side panel beside the panes (ui/panel_view.py) and the overlay selector
(ui/overlay_view.py), in AppTest."""

from __future__ import annotations

import onnx
from ui_helpers import errors_of, goto

from fusionviz import model_io
from fusionviz.ui import graph_page, overlay_view, state
from tests.test_compare import small_cnn


def _open(at, tmp_path, passes):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    at.session_state[state.PASSES] = passes


def _panel_html(at) -> str:
    return "\n".join(m.value for m in at.markdown if "fv-card" in m.value and "<div class='fv-card'>" in m.value)


def _fused(at) -> str:
    from fusionviz.graphview import diff_models
    from fusionviz.passes import run_pipeline

    r = run_pipeline(small_cnn(), at.session_state[state.PASSES])
    d = diff_models(r.original, r.final)
    return next(k for k, s in d.status_after.items() if s == "fused")


def test_the_panel_shows_the_selected_node_and_its_counterparts_beside_the_panes(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm", "fuse_conv_activation"])
    goto(app, "graph")
    assert not [e for e in app.expander if "Node details" in e.label]  # no block below the panes
    assert any("Click a node in either pane" in c.value for c in app.caption)
    fused = _fused(app)
    app.session_state[state.SELECTED] = fused
    app.session_state[graph_page.SEL_SIDE] = (fused, "after")
    app.run()
    assert not app.exception and errors_of(app) == []
    html = _panel_html(app)
    assert "FusedConv" in html and "Absorbed" in html and "conv1" in html  # what it absorbed
    assert "Inputs" in html and "Weights" in html and "min " in html and "f32" in html
    assert "fused / new" in html  # its change class
    assert any("Before" in m.value and "nodes" in m.value for m in app.markdown)  # the other side
    assert [e for e in app.expander if "Conv" in e.label]
    app.button(key="graph_panel_focus").click().run()
    assert app.session_state[state.FOCUS] == fused and app.query_params["focus"] == fused


def test_without_the_panel_the_details_are_below(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm"])
    goto(app, "graph")
    app.toggle(key="graph_panel_on").set_value(False).run()
    assert not app.exception
    assert [e for e in app.expander if "Node details" in e.label]


def test_time_overlay_from_the_selector_in_the_url_and_in_the_panel(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm", "fuse_conv_activation"])
    goto(app, "graph")
    app.selectbox(key=overlay_view.SELECT).set_value("time").run()
    assert not app.exception and errors_of(app) == []
    assert app.query_params["overlay"] == "time"
    legend = [m for m in app.markdown if "fv-ovl" in m.value]
    assert legend and "Time per node" in legend[0].value and "time ≤ 0.01 ms" in legend[0].value
    assert "kernels" in legend[0].proto.help  # where the numbers come from, on hover
    fused = _fused(app)
    app.session_state[state.SELECTED] = fused
    app.session_state[graph_page.SEL_SIDE] = (fused, "after")
    app.run()
    assert "fv-meas'>time <b>" in _panel_html(app) and " ms</b>" in _panel_html(app)
    other = [m.value for m in app.markdown if m.value.startswith("**Before**: ")]
    assert other and "in total: time " in other[0]  # the nodes it replaced, timed on the before side
    app.selectbox(key=overlay_view.SELECT).set_value("change").run()
    assert "overlay" not in app.query_params


def test_the_overlay_comes_from_a_link(tmp_path):
    from streamlit.testing.v1 import AppTest
    from ui_helpers import APP, TIMEOUT

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    _open(at, tmp_path, ["fold_batchnorm"])
    at.query_params["overlay"] = "memory"
    at.switch_page("fusionviz/ui/graph_page.py").run()
    assert not at.exception and errors_of(at) == []
    assert at.selectbox(key=overlay_view.SELECT).value == "memory"
    legend = [m for m in at.markdown if "fv-ovl" in m.value]
    assert legend and "writes ≤ 16 KB" in legend[0].value and "written by" in legend[0].proto.help


def test_stacked_panes_keep_the_panel_beside_them(app, tmp_path):
    _open(app, tmp_path, ["fold_batchnorm", "fuse_conv_activation"])
    goto(app, "graph")
    app.toggle(key="graph_stacked").set_value(True).run()
    fused = _fused(app)
    app.session_state[state.SELECTED] = fused
    app.session_state[graph_page.SEL_SIDE] = (fused, "after")
    app.run()
    assert not app.exception and errors_of(app) == []
    assert "FusedConv" in _panel_html(app)
