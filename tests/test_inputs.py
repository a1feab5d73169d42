"""Input plans: any input name, sensible dynamic dims, inferred scalars, bounded indices, user data."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz import errors
from fusionviz.inputs import (
    InputSpec,
    load_data,
    parse_shape_arg,
    parse_value_arg,
    plan_inputs,
)


def _model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


IMAGE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 3, H, W] image, float[B, 3, 48, W2] line) => (float[N, 3, H, W] y, float[B, 3, 48, W2] z) {
    y = Relu(image)
    z = Relu(line)
}
"""


@pytest.mark.parametrize(("text", "name", "dims"), [
    ("x=1,3,224,224", "x", [1, 3, 224, 224]),
    ("serving_default_input_2:0=1,224,224,3", "serving_default_input_2:0", [1, 224, 224, 3]),
    ("encoder/input ids=1x32", "encoder/input ids", [1, 32]),
    ("a=b=2,3", "a=b", [2, 3]),
    ("x:1x3", "x", [1, 3]),
])
def test_shape_arg_accepts_any_input_name(text, name, dims):
    assert parse_shape_arg(text) == (name, dims)


@pytest.mark.parametrize("text", ["x", "=1,2", "x=", "x=1,-2", "x=a,b", "x=0"])
def test_bad_shape_arg_is_one_clear_line(text):
    with pytest.raises(errors.InputSpecError) as e:
        parse_shape_arg(text)
    assert "\n" not in str(e.value)


def test_value_arg_types():
    assert parse_value_arg("sr=16000") == ("sr", 16000)
    assert parse_value_arg("t:0=0.5") == ("t:0", 0.5)
    assert parse_value_arg("flag=true") == ("flag", True)
    with pytest.raises(errors.InputSpecError):
        parse_value_arg("sr=fast")


def test_image_inputs_are_not_one_by_one():
    plan = plan_inputs(_model(IMAGE))
    shapes = plan.shapes()
    assert shapes["image"] == [1, 3, 224, 224]
    assert shapes["line"] == [1, 3, 48, 48]  # the free width follows the fixed height
    assert any("--shape image=" in line for line in plan.describe_lines())


def test_nhwc_image_and_tf_names():
    m = _model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[unk__1, unk__2, unk__3, 3] "serving_default_input_2:0") => (float[unk__1, unk__2, unk__3, 3] y) {
    y = Relu("serving_default_input_2:0")
}
""")
    assert plan_inputs(m).shapes()["serving_default_input_2:0"] == [1, 224, 224, 3]
    spec = InputSpec(shapes={"serving_default_input_2:0": (1, 64, 64, 3)})
    assert plan_inputs(m, spec).shapes()["serving_default_input_2:0"] == [1, 64, 64, 3]


TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (int64[batch, seq] input_ids, int64[batch, seq] attention_mask, int64[batch, seq] token_type_ids)
  => (float[batch, seq, 4] y) {
    table = Constant <value = float[100, 4] {""" + ",".join(["0.5"] * 400) + """}> ()
    types = Constant <value = float[2, 4] {1, 2, 3, 4, 5, 6, 7, 8}> ()
    e = Gather(table, input_ids)
    t = Gather(types, token_type_ids)
    mf = Cast <to = 1> (attention_mask)
    s = Add(e, t)
    y = Mul(s, mf)
}
"""


def test_text_inputs_share_dims_and_stay_in_range():
    m = _model(TEXT)
    plan = plan_inputs(m)
    assert plan.shapes() == {"input_ids": [1, 32], "attention_mask": [1, 32], "token_type_ids": [1, 32]}
    by = {c.name: c for c in plan.choices}
    assert by["input_ids"].high == 100 and by["token_type_ids"].high == 2
    for kind in ("normal", "zeros", "edge"):
        feeds = plan.feeds(kind)
        assert feeds["input_ids"].max() < 100 and feeds["token_type_ids"].max() < 2
        assert (feeds["attention_mask"] == 1).all()


SR = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, T] audio, int64 sr) => (float[1, T] y) {
    k = Constant <value = int64 {16000}> ()
    c = Equal(sr, k)
    y = If (c) <then_branch = t () => (float[1, T] a) { a = Identity(audio) },
                else_branch = e () => (float[1, T] b) { b = Neg(audio) }>
}
"""


def test_scalar_compared_with_a_constant_takes_it_and_audio_is_a_second():
    plan = plan_inputs(_model(SR))
    by = {c.name: c for c in plan.choices}
    assert by["sr"].value == 16000 and "compares" in by["sr"].value_note
    assert by["audio"].dims == (1, 16000)
    assert int(plan.feeds("zeros")["sr"]) == 16000  # every input set keeps the value
    given = plan_inputs(_model(SR), InputSpec(values={"sr": 8000}))
    assert int(given.feeds("normal")["sr"]) == 8000


def test_unknown_names_and_contradictions_are_clear():
    m = _model(IMAGE)
    with pytest.raises(errors.InputSpecError, match="model's inputs are: 'image', 'line'"):
        plan_inputs(m, InputSpec(shapes={"imgae": (1, 3, 8, 8)}))
    with pytest.raises(errors.InputSpecError, match="dim 1 is fixed at 3"):
        plan_inputs(m, InputSpec(shapes={"image": (1, 4, 8, 8)}))
    with pytest.raises(errors.InputSpecError, match="rank 4"):
        plan_inputs(m, InputSpec(shapes={"image": (1, 3, 8)}))


def test_huge_declared_dims_fail_before_any_pass():
    m = _model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[100000, 100000] x) => (float[100000, 100000] y) { y = Relu(x) }
""")
    with pytest.raises(errors.InputSpecError, match="elements"):
        plan_inputs(m)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_user_data_is_checked_and_becomes_a_set():
    m = _model(IMAGE)
    good = {"image": np.ones((1, 3, 8, 8), np.float32), "line": np.ones((2, 3, 48, 10), np.float64)}
    data = load_data(_npz(**good), "in.npz", m)
    assert data["line"].dtype == np.float32
    plan = plan_inputs(m, InputSpec(data=data))
    assert plan.shapes()["line"] == [2, 3, 48, 10]
    assert [label for label, _ in plan.input_sets()] == ["normal", "zeros", "edge", "user"]
    with pytest.raises(errors.InputSpecError, match="not inputs of the model"):
        load_data(_npz(imag=good["image"]), "in.npz", m)
    with pytest.raises(errors.InputSpecError, match="fixed at 3"):
        load_data(_npz(image=np.ones((1, 4, 8, 8), np.float32)), "in.npz", m)
    with pytest.raises(errors.InputSpecError, match="int64 but the input is float32"):
        load_data(_npz(image=np.ones((1, 3, 8, 8), np.int64)), "in.npz", m)
    with pytest.raises(errors.InputSpecError, match="Could not read"):
        load_data(b"not a zip", "in.npz", m)
    with pytest.raises(errors.InputSpecError, match="one array but the model has 2 inputs"):
        buf = io.BytesIO()
        np.save(buf, good["image"])
        load_data(buf.getvalue(), "in.npy", m)


def test_probe_keeps_an_image_side_paired_with_a_fixed_one():
    """An OCR line [N,3,48,W]: W is 48 (the fixed side), and the probe's first try is that plan,
    not the first generic candidate (a width of 1, which a 3x3 Conv cannot read)."""
    from fusionviz.verify import probe

    w = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108)
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 48, W] x) => (float[N, 4, 46, M] y) {
            y = Conv(x, w)
        }""")
    model.graph.initializer.append(w)
    plan = plan_inputs(model)
    assert plan.shapes()["x"] == [1, 3, 48, 48]
    assert plan.with_candidate(0).shapes() == plan.shapes()
    assert probe(model, plan, isolated=False).shapes()["x"] == [1, 3, 48, 48]


def test_probe_tries_the_ocr_line_height_before_tiny_images():
    """[N,3,H,W] that only runs at H=48 (a Reshape to 48 rows): 224, 320, 640 fail, 48 runs."""
    from fusionviz.verify import probe

    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, H, W] x) => (float[1, 144, 48] y) {
            s = Constant <value = int64[3] {1, 144, 48}> ()
            y = Reshape(x, s)
        }""")
    assert probe(model, plan_inputs(model), isolated=False).shapes()["x"] == [1, 3, 48, 48]
