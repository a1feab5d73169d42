"""Where a lossy pass loses the most (``fusionviz.lossy``) and the float32 list the precision
passes accept (``--keep-fp32``, ``fusionviz.passes.precision.keep``).

The model: three dense layers; the middle one's weights hold one outlier (50 among values of
~0.1), so int8's per-tensor scale leaves its other weights about two bits. That layer is where
int8_dynamic loses the most, although the largest max-abs error is seen at the last layer.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionviz import cli
from fusionviz.compare import compare_models
from fusionviz.inputs import InputSpec, plan_inputs
from fusionviz.lossy import keep_fp32, node_losses
from fusionviz.passes import run_pipeline
from fusionviz.passes.precision.keep import keeping_fp32, requested
from fusionviz.verify import verify


def dense_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(64, 64)).astype(np.float32) * 0.1
    w2 = rng.normal(size=(64, 64)).astype(np.float32) * 0.1
    w2[0, 0] = 50.0
    w3 = rng.normal(size=(64, 16)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="dense1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="dense2_outlier"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "w3"], ["y"], name="dense3"),
    ]
    graph = helper.make_graph(nodes, "dense3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])],
                              [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _error(original, converted) -> float:
    return verify(original, converted, plan=plan_inputs(original, InputSpec()), report_only=True).max_abs_diff


@pytest.fixture(scope="module")
def int8():
    model = dense_model()
    return model, run_pipeline(model, ["int8_dynamic"], keep_snapshots=False).final


def test_the_node_that_adds_the_most_error_is_the_outlier_layer(int8):
    model, converted = int8
    result = compare_models(model, converted, plan=plan_inputs(model, InputSpec()))
    assert result.first_divergence is not None
    largest = result.largest()
    assert largest.pair.node_a == "dense3"  # the largest max-abs ratio is downstream ...
    losses = node_losses(result, model)
    assert losses[0].node == "dense2_outlier"  # ... where the error appears is the outlier layer
    assert losses[0].added > 3 * max(x.added for x in losses[1:])
    assert next(x for x in losses if x.node == "relu2").added == 0.0  # passes its input's error on
    assert keep_fp32(losses)[0] == "dense2_outlier"
    assert keep_fp32(losses, top=1) == ["dense2_outlier"]


def test_keep_list_is_empty_when_nothing_adds_beyond_tolerance():
    assert keep_fp32([]) == []


def test_int8_keeps_the_requested_node_in_float32_and_loses_less(int8):
    model, converted = int8
    with keeping_fp32(["dense2_outlier"]):
        assert requested() == ("dense2_outlier",)
        kept = run_pipeline(model, ["int8_dynamic"], keep_snapshots=False).final
    assert requested() == ()
    ops = {n.name: n.op_type for n in kept.graph.node}
    assert ops["dense2_outlier"] == "MatMul"
    assert "MatMulInteger" in {n.op_type for n in kept.graph.node}  # the others still quantized
    assert _error(model, kept) < 0.5 * _error(model, converted)


def test_fp16_keeps_the_requested_node_in_float32():
    model = dense_model()
    with keeping_fp32(["dense2_outlier"]):
        result = run_pipeline(model, ["fp16"], keep_snapshots=False).final
    types = {i.name: i.data_type for i in result.graph.initializer}
    assert types["w2"] == TensorProto.FLOAT
    assert types["w1"] == TensorProto.FLOAT16 and types["w3"] == TensorProto.FLOAT16


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_compare_lists_the_nodes_and_optimize_takes_the_list(tmp_path, capsys):
    src, q, qk = tmp_path / "m.onnx", tmp_path / "q.onnx", tmp_path / "qk.onnx"
    onnx.save(dense_model(), str(src))
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(q), "--passes", "int8_dynamic")
    assert code == 0, err
    code, out, err = _cli(capsys, "compare", str(src), str(q))
    assert code == 0, err
    assert "nodes of A that add the most error" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("to keep them in float32"))
    names = line.split("--keep-fp32 ")[1]
    assert names.split(",")[0] == "dense2_outlier"
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(qk), "--passes", "int8_dynamic",
                        "--keep-fp32", "dense2_outlier", "--report", str(tmp_path / "r.json"))
    assert code == 0, err
    assert {n.name: n.op_type for n in onnx.load(str(qk)).graph.node}["dense2_outlier"] == "MatMul"
    assert "--keep-fp32 dense2_outlier" in (tmp_path / "r.json").read_text()


def test_cli_keep_fp32_errors_are_one_line(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(dense_model(), str(src))
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--passes", "int8_dynamic",
                        "--keep-fp32", "nope")
    assert code == 2 and err.count("\n") == 1 and "no node named 'nope'" in err
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--all",
                        "--keep-fp32", "dense1")
    assert code == 2 and "for precision passes" in err


def test_report_carries_the_per_tensor_rows_for_a_lossy_pass_and_on_request(tmp_path, capsys):
    import json

    src = tmp_path / "m.onnx"
    onnx.save(dense_model(), str(src))
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(tmp_path / "q.onnx"), "--passes", "int8_dynamic",
                        "--report", str(tmp_path / "q.json"))
    assert code == 0, err
    rows = json.loads((tmp_path / "q.json").read_text())["compare"]["rows"]
    assert {r["tensor"] for r in rows} == {"h1", "r1", "h2", "r2", "y"}
    assert any(not r["ok"] for r in rows)
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(tmp_path / "e.onnx"), "--all",
                        "--report", str(tmp_path / "e.json"))
    assert code == 0, err
    assert not json.loads((tmp_path / "e.json").read_text()).get("compare")  # exact and verified: not needed
    code, _, err = _cli(capsys, "optimize", str(src), "-o", str(tmp_path / "c.onnx"), "--all", "--compare",
                        "--report", str(tmp_path / "c.html"))
    assert code == 0, err
    assert "Per-tensor comparison" in (tmp_path / "c.html").read_text()
