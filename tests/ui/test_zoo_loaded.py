"""The Zoo page sweeps the model loaded in the app, and its heatmap shows node and speed changes."""

from __future__ import annotations

import onnx
from streamlit.testing.v1 import AppTest
from ui_helpers import APP, TIMEOUT, goto

from fusionviz import model_io
from fusionviz.ui import state
from fusionviz.ui.zoo_page import cell_text, colour_modes, heatmap_figure

ROWS = [
    {"model": "m1", "variant": "all", "backend": "ort", "status": "ok", "nodes_before": 412, "nodes_after": 198,
     "latency_ratio": 0.81, "latency_lo": 0.78, "latency_hi": 0.84},
    {"model": "m1", "variant": "fold_batchnorm", "backend": "ort", "status": "ok", "nodes_before": 412,
     "nodes_after": 400, "latency_ratio": 0.97, "latency_lo": 0.9, "latency_hi": 1.02},
    {"model": "m2", "variant": "all", "backend": "ort", "status": "mismatch", "nodes_before": 50,
     "nodes_after": 50, "error": "differs"},
]


def test_cells_say_their_node_and_speed_change():
    assert cell_text(ROWS[0]) == "412→198 · 0.81×"
    assert cell_text(ROWS[2]) == "50→50"
    fig = heatmap_figure(ROWS)
    heat = fig.data[0]
    assert heat.texttemplate == "%{text}" and heat.text[0][0] == "412→198 · 0.81×"


def test_without_timings_the_heatmap_is_coloured_by_node_change():
    untimed = [{k: v for k, v in r.items() if not k.startswith("latency")} for r in ROWS]
    assert colour_modes(untimed) == ["nodes", "status"]
    heat = heatmap_figure(untimed).data[0]
    assert round(heat.z[0][0], 3) == round(198 / 412 - 1, 3)  # not a status code
    assert colour_modes(ROWS) == ["latency", "nodes", "status"]


def test_the_zoo_sweeps_the_loaded_model(tmp_path):
    from gv_model import tiny_cnn

    path = tmp_path / "my_upload.onnx"
    onnx.save(tiny_cnn(), path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "upload", "name": loaded.name}
    goto(at, "zoo")
    models = at.multiselect(key="zoo_run_models")
    assert models.value == ["loaded: my_upload.onnx"], models.options[:5]
    at.multiselect(key="zoo_run_passes").set_value(["fold_batchnorm"]).run()
    at.button(key="zoo_run").click().run()
    assert not at.exception, at.exception
    rows = at.session_state["fv_zoo_rows"]
    assert [r["model"] for r in rows] and all(r["model"] == "my_upload" for r in rows), rows
    assert any(r["nodes_after"] < r["nodes_before"] for r in rows if r["variant"] == "fold_batchnorm")
    assert at.radio(key="zoo_color_by").value == "nodes"
