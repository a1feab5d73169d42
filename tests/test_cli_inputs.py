"""The CLI with real-model inputs: odd input names, scalar values, user data, declined passes."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnx.parser
import pytest

from fusionviz import cli

TF = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[unk__1, unk__2, unk__3, 3] "serving_default_input_2:0", int64 sr) => (float[unk__1, unk__2, unk__3, 3] y) {
    k = Constant <value = int64 {16000}> ()
    c = Equal(sr, k)
    i = Identity("serving_default_input_2:0")
    y = If (c) <then_branch = t () => (float[unk__1, unk__2, unk__3, 3] a) { a = Relu(i) },
                else_branch = e () => (float[unk__1, unk__2, unk__3, 3] b) { b = Neg(i) }>
}
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tf_model(tmp_path):
    path = tmp_path / "tf.onnx"
    onnx.save(onnx.parser.parse_model(TF), str(path))
    return path


def test_optimize_with_no_flags_says_what_it_chose(tf_model, tmp_path, capsys):
    report = tmp_path / "r.json"
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--report", str(report))
    assert code == 0, err
    assert "input serving_default_input_2:0: float32[1,224,224,3]" in err
    assert "sr: int64[]" in err and "16000" in err
    data = json.loads(report.read_text())
    assert data["verify"]["ok"] and data["verify"]["input_sets"] == ["normal", "zeros", "edge"]
    assert all("status" in p for p in data["passes"])


def test_shape_and_input_accept_tf_names(tf_model, tmp_path, capsys):
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--shape", "serving_default_input_2:0=1,32,32,3", "--input", "sr=8000")
    assert code == 0, err
    assert "verify: equal" in err


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_user_inputs_file_is_an_extra_set(tf_model, tmp_path, capsys):
    data = tmp_path / "in.npz"
    data.write_bytes(_npz(**{"serving_default_input_2:0": np.ones((1, 8, 8, 3), np.float32),
                             "sr": np.array(16000, np.int64)}))
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--inputs", str(data))
    assert code == 0, err
    assert "normal/zeros/edge/user" in err


@pytest.mark.parametrize(("arrays", "needle"), [
    ({"input_2": np.ones((1, 8, 8, 3), np.float32)}, "not inputs of the model"),
    ({"serving_default_input_2:0": np.ones((1, 8, 8, 4), np.float32)}, "fixed at 3"),
    ({"serving_default_input_2:0": np.ones((1, 8, 8, 3), np.int32)}, "int32 but the input is float32"),
])
def test_bad_inputs_file_is_one_line_exit_2(tf_model, tmp_path, capsys, arrays, needle):
    data = tmp_path / "in.npz"
    data.write_bytes(_npz(**arrays))
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--inputs", str(data))
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


@pytest.mark.parametrize(("args", "needle"), [
    (["--shape", "nope=1,2,3,4"], "model's inputs are"),
    (["--shape", "serving_default_input_2:0=1,2,2,4"], "fixed at 3"),
    (["--input", "sr=fast"], "must be a number"),
    (["--shape", "serving_default_input_2:0=100000,100000,100,3"], "elements"),
])
def test_bad_input_flags_are_one_line_exit_2(tf_model, tmp_path, capsys, args, needle):
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), *args)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "o.onnx").exists()  # refused before any pass ran


def test_model_that_needs_a_value_says_which(tmp_path, capsys):
    # Range(0, n) is reshaped to 2x4: only n = 8 runs.
    m = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 4] x, int64 n) => (float[2, 4] y) {
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    shape = Constant <value = int64[2] {2, 4}> ()
    r = Range(zero, n, one)
    f = Cast <to = 1> (r)
    f2 = Reshape(f, shape)
    y = Add(x, f2)
}
""")
    path = tmp_path / "n.onnx"
    onnx.save(m, str(path))
    code, _, err = _run(capsys, "optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--all")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1
    assert "needs a specific value for 'n': give it with --input n=VALUE" in lines[0]
    code, _, err = _run(capsys, "optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--all", "--input", "n=8")
    assert code == 0, err


@pytest.mark.parametrize(("rate", "op"), [("16000", "Relu"), ("8000", "Neg")])
def test_freeze_specializes_the_model_for_one_value(tf_model, tmp_path, capsys, rate, op):
    out = tmp_path / "o.onnx"
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(out), "--all", "--freeze", f"sr={rate}")
    assert code == 0, err
    assert "verify: equal" in err  # against the user's model fed sr=rate
    m = onnx.load(str(out))
    assert [i.name for i in m.graph.input] == ["serving_default_input_2:0"]
    assert [n.op_type for n in m.graph.node] == [op]  # the If folded to the branch for that rate


def test_freeze_and_input_must_agree(tf_model, tmp_path, capsys):
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--input", "sr=8000", "--freeze", "sr=16000")
    assert code == 2
    assert err.strip().splitlines()[-1] == "fusionviz: error: --input sr=8000 and --freeze sr=16000 disagree."


def test_freeze_of_an_unknown_input_is_one_line(tf_model, tmp_path, capsys):
    code, _, err = _run(capsys, "optimize", str(tf_model), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--freeze", "rate=16000")
    assert code == 2
    assert "Traceback" not in err
    assert "rate" in err.strip().splitlines()[-1]


def test_tune_with_freeze_says_what_it_froze(tf_model, capsys):
    from fusionviz.tune import tune, tuned_model

    model = onnx.load(str(tf_model))
    feeds = {"serving_default_input_2:0": np.ones((1, 8, 8, 3), np.float32), "sr": np.array(16000, np.int64)}
    r = tune(model, feeds=feeds, freeze={"sr": feeds["sr"]}, budget_s=3, min_time_s=0.05,
             shapes={"serving_default_input_2:0": [1, 8, 8, 3]})
    d = r.as_dict()["best"]
    assert d["frozen"] == ({"sr": 16000} if r.best.passes else {})
    built = tuned_model(model, r, shapes={"serving_default_input_2:0": [1, 8, 8, 3]}, freeze={"sr": feeds["sr"]})
    assert ("sr" in [i.name for i in built.graph.input]) == (not r.best.passes)


def test_if_switches_names_the_scalar_an_if_picks_its_branch_by(tf_model):
    from fusionviz.inputs import if_switches
    from fusionviz.tune.search import freeze_hint as _freeze_hint

    model = onnx.load(str(tf_model))
    assert if_switches(model) == ["sr"]
    assert "--freeze sr=VALUE" in _freeze_hint(model, None)
    assert _freeze_hint(model, {"sr": np.array(16000)}) == ""


def _ocr_recognizer_like(tmp_path):
    """x float[N, 3, h, w] read through a Reshape to height 48: it runs at 48×48, not 224×224."""
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    rec (float[N, 3, h, w] x) => (float[N, 3, 48, W] y) {
        shape = Constant <value = int64[4] {1, 3, 48, -1}> ()
        y = Reshape (x, shape)
    }
    """)
    path = tmp_path / "rec.onnx"
    onnx.save(m, path)
    return path


def test_info_and_optimize_plan_the_same_inputs(tmp_path, capsys):
    path = _ocr_recognizer_like(tmp_path)
    code, out, err = _run(capsys, "info", str(path))
    assert code == 0, err
    code2, _, err2 = _run(capsys, "optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--passes", "eliminate_identity")
    assert code2 == 0, err2
    assert "x: float32[1,3,48,48]" in out, out
    assert "float32[1,3,48,48]" in err2, err2
