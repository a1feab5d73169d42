"""A model whose planned inputs are too large is told how to fix it on the page, with the control
to do it (not the command line's ``--shape`` syntax)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper
from ui_helpers import errors_of, goto

from fusionviz import errors, model_io
from fusionviz.inputs import InputSpec, plan_inputs
from fusionviz.ui import state


def wide_image() -> onnx.ModelProto:
    """x float[1, 3, h, 100000]: fusionviz mirrors the fixed width into h (3e10 elements)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", 100_000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "h", 100_000])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "wide", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_cli_and_the_page_say_it_each_in_their_words():
    try:
        plan_inputs(wide_image(), InputSpec())
    except errors.InputSpecError as exc:
        assert "--shape x=" in str(exc)
        assert exc.page and "--shape" not in exc.page and "Set a smaller size for h" in exc.page
    else:
        raise AssertionError("planned 3e10 elements")


def test_the_model_page_offers_the_dim_to_set_and_setting_it_fixes_the_plan(app, tmp_path):
    path = tmp_path / "wide.onnx"
    onnx.save(wide_image(), path)
    loaded = model_io.load_path(str(path))
    app.session_state[state.MODEL] = loaded
    app.session_state[state.ORIGIN] = {"kind": "path", "name": loaded.name}
    app.session_state[state.PASSES] = []
    goto(app, "model")
    text = " ".join(errors_of(app))
    assert "would have" in text and "--shape" not in text and "Set a smaller size for h" in text
    box = app.number_input(key="dim_h")  # the control is on the page
    box.set_value(32).run()
    assert not app.exception
    assert not any("would have" in e for e in errors_of(app))
    assert app.session_state[state.DIMS] == {"h": 32}


def test_audio_dims_say_how_long_they_are():
    from fusionviz.ui.model_page import kind_words

    assert kind_words("audio", 512) == "audio samples, 32 ms at 16 kHz"
    assert kind_words("audio", 16000) == "audio samples, 1 s at 16 kHz"
    assert kind_words("audio", 48000) == "audio samples, 3 s at 16 kHz"
    assert kind_words("image", 224) == "image side"
