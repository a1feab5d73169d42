"""Passes page: which pass broke the numbers (bisection of the selection) and onnxruntime's own
optimizers (AppTest). The broken pass comes from ``tests/fv_broken_passes.py``; the model where
onnxruntime's level all changes the outputs from ``tests/ortbisect_models.py``."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
from fv_broken_passes import register
from onnx import numpy_helper
from ortbisect_models import qdq_conv_with_float_bias
from ui_helpers import errors_of, goto

from fusionviz import model_io
from fusionviz.ui import state


def _open(at, tmp_path, model, passes):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    loaded = model_io.load_path(str(path))
    at.session_state[state.MODEL] = loaded
    at.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    at.session_state[state.PASSES] = passes


def _dense():
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,4] y) { a = Identity(x)  m = MatMul(a, W)  y = Relu(m) }""")
    model.graph.initializer.append(numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W"))
    return model


def test_a_failing_selection_is_bisected_and_the_pass_turned_off(app, tmp_path, monkeypatch):
    register(monkeypatch)
    _open(app, tmp_path, _dense(), ["eliminate_identity", "test_scale_weight"])
    goto(app, "passes")
    assert any("DIFFERENT" in e.value for e in app.error)
    find = [b for b in app.button if b.key == "bisect_selection"]
    assert find, "no bisect button under a failing verification"
    find[0].click().run()
    assert not app.exception and all("DIFFERENT" in e for e in errors_of(app))
    info = [i.value for i in app.info if "fails with" in i.value]
    assert info and "fails with test_scale_weight alone; passes without it" in info[0]
    off = [b for b in app.button if b.key == "bisect_turn_off"]
    assert off and off[0].label == "Turn off test_scale_weight"
    off[0].click().run()
    assert not app.exception
    assert app.session_state[state.PASSES] == ["eliminate_identity"]
    assert not any("DIFFERENT" in e.value for e in app.error)
    assert not [b for b in app.button if b.key == "bisect_selection"]  # verifies now: nothing to bisect


def test_onnxruntime_level_all_is_bisected_on_the_page(app, tmp_path):
    _open(app, tmp_path, qdq_conv_with_float_bias(), ["eliminate_identity"])
    goto(app, "passes")
    run = [b for b in app.button if b.key == "ort_bisect_run"]
    assert run
    run[0].click().run()
    assert not app.exception
    assert any("Level all changes the outputs" in e.value for e in app.error)
    assert any("WeightBiasQuantization alone" in i.value for i in app.info)
    assert any("disabled_optimizers=['WeightBiasQuantization']" in c.value for c in app.code)
