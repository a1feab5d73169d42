"""Reference optimizers in subprocesses, and the `bench` command line."""

from __future__ import annotations

import json

import onnx
import pytest

from fusionviz import errors
from fusionviz.cli import main
from fusionviz.passes.reference import reference_labels, reference_models


def test_reference_models_run_tools_in_subprocesses(tiny):
    refs = reference_models(tiny, tools=["onnxscript"], levels=["basic"])
    assert list(refs) == ["onnxscript", "ort:basic"] == reference_labels(["onnxscript"], ["basic"])
    for m in refs.values():
        assert isinstance(m, onnx.ModelProto)
        assert [n.op_type for n in m.graph.node] == ["Relu", "Sigmoid", "Add"]


def test_reference_timeout_is_a_per_tool_error(tiny):
    refs = reference_models(tiny, tools=["onnxscript"], levels=[], timeout_s=0.01)
    assert isinstance(refs["onnxscript"], errors.PassError)
    assert "timed out" in str(refs["onnxscript"])


def test_reference_rejects_unknown_tool(tiny):
    with pytest.raises(errors.InputSpecError):
        reference_models(tiny, tools=["tvm"])


def test_cli_bench_writes_one_record_per_variant(tiny, tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save_model(tiny, str(path))
    out = tmp_path / "r.json"
    rc = main(["bench", str(path), "--min-time", "0.05", "--variant", "orig=",
               "--variant", "ie=eliminate_identity", "--ort-level", "basic", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [v["label"] for v in data["variants"]] == ["orig", "ie"]
    for v in data["variants"]:
        assert v["latency"]["median_ms"] > 0 and v["settings"]["level"] == "basic"
        assert v["verify"]["ok"] is True and v["error"] is None
    cap = capsys.readouterr()
    assert "median ms" in cap.out and "[100%] done" in cap.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--variant", "nolabel"],
        ["--variant", "x=no_such_pass"],
        ["--threads", "0"],
        ["--ort-level", "turbo"],
    ],
)
def test_cli_bench_bad_input_exits_2_with_one_line(tiny, tmp_path, capsys, argv):
    path = tmp_path / "m.onnx"
    onnx.save_model(tiny, str(path))
    try:
        rc = main(["bench", str(path), *argv])
    except SystemExit as exc:  # argparse choices
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fusionviz: error:")
