"""`diff BEFORE AFTER [--json OUT]`: counts, each changed node with what changed, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fusionviz import cli

W = np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float32)


def _model(*, lifted: bool, alpha: float = 0.1, w: np.ndarray = W) -> onnx.ModelProto:
    """Conv (weight as a Constant node, or lifted to an initializer) then LeakyRelu."""
    nodes = [] if lifted else [helper.make_node("Constant", [], ["W"], name="Constant_W",
                                                value=numpy_helper.from_array(w))]
    nodes += [helper.make_node("Conv", ["x", "W_init" if lifted else "W"], ["c"], name="Conv_1", kernel_shape=[3, 3]),
              helper.make_node("LeakyRelu", ["c"], ["y"], name="LeakyRelu_2", alpha=alpha)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
                              initializer=[numpy_helper.from_array(w, "W_init")] if lifted else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _save(model: onnx.ModelProto, path: Path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _run_main(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


def test_lifted_weights_are_no_change(tmp_path, capsys):
    before = _save(_model(lifted=False), tmp_path / "before.onnx")
    after = _save(_model(lifted=True), tmp_path / "after.onnx")
    code, out, err = _run_main(capsys, "diff", before, after)
    assert code == 0, err
    assert "fused 0  removed 0  added 0  changed 0  lifted 1  unchanged 2" in out
    assert "changed nodes" not in out


def test_changed_nodes_are_listed_with_what_changed(tmp_path, capsys):
    w = W.copy()
    w[0, 0, 0, 0] = 9.0
    before = _save(_model(lifted=False), tmp_path / "before.onnx")
    after = _save(_model(lifted=True, alpha=0.2, w=w), tmp_path / "after.onnx")
    out_json = tmp_path / "diff.json"
    code, out, err = _run_main(capsys, "diff", before, after, "--json", str(out_json))
    assert code == 0, err
    assert "changed 2" in out and "removed 1" in out and "lifted 0" in out
    assert "  Conv_1 (Conv)\n    - input 1 (W) values changed, shape [4,3,3,3]\n" in out
    assert "  LeakyRelu_2 (LeakyRelu)\n    - attribute alpha 0.1 → 0.2\n" in out
    data = json.loads(out_json.read_text())
    assert data["counts"] == {"fused": 0, "removed": 1, "added": 0, "changed": 2, "lifted": 0, "unchanged": 0,
                              "absorbed": 0}
    assert {c["node"]: c["what"] for c in data["changed"]} == {
        "Conv_1": ["input 1 (W) values changed, shape [4,3,3,3]"],
        "LeakyRelu_2": ["attribute alpha 0.1 → 0.2"]}
    assert data["removed"] == [{"node": "Constant_W", "into": None}]


def test_json_to_stdout_is_json_only(tmp_path, capsys):
    before = _save(_model(lifted=False), tmp_path / "before.onnx")
    after = _save(_model(lifted=True), tmp_path / "after.onnx")
    code, out, err = _run_main(capsys, "diff", before, after, "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    assert data["counts"]["lifted"] == 1 and data["lifted"] == [{"node": "Constant_W", "initializer": "W_init"}]


def test_a_sample_name_is_a_model(capsys):
    from fusionviz import samples

    names = samples.sample_names()
    if not names:
        pytest.skip("no sample models")
    code, out, err = _run_main(capsys, "diff", names[0], names[0])
    assert code == 0, err
    assert "changed 0" in out and "removed 0" in out


@pytest.mark.parametrize("which", ["before", "after"])
def test_bad_path_exits_2_with_one_line(tmp_path, capsys, which):
    good = _save(_model(lifted=False), tmp_path / "m.onnx")
    missing = str(tmp_path / "missing.onnx")
    argv = ["diff", missing, good] if which == "before" else ["diff", good, missing]
    code, out, err = _run_main(capsys, *argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("fusionviz: error: ") and "missing.onnx" in lines[0], err
    assert "Traceback" not in err and out == ""


def test_missing_argument_is_a_usage_error(capsys):
    code, _, err = _run_main(capsys, "diff", "only_one.onnx")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fusionviz: error: ")


def test_bad_file_through_the_real_entry_point(run_cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model\n")
    good = _save(_model(lifted=False), tmp_path / "m.onnx")
    res = run_cli("diff", good, str(bad), timeout=60)
    assert res.code == 2 and res.stdout == ""
    assert len(res.stderr_lines) == 1 and res.stderr_lines[0].startswith("fusionviz: error: 'bad.onnx'")
    res = run_cli("diff", good, good, timeout=60)
    assert res.code == 0 and "changed 0" in res.stdout
