"""verify(): tolerance, report-only, and isolation of models that exhaust memory."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest

from fusionviz import errors
from fusionviz import verify as V

ADD = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[2,3] x) => (float[2,3] y) { y = Add(x, x) }"""
MUL = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[2,3] x) => (float[2,3] y) { two = Constant<value = float {2.0}>()\n y = Mul(x, two) }"""
OFF = """
<ir_version: 10, opset_import: ["" : 18]>
g (float[2,3] x) => (float[2,3] y) { c = Constant<value = float {2.001}>()\n y = Mul(x, c) }"""


def test_equal_models_verify_in_process_and_isolated():
    a, b = onnx.parser.parse_model(ADD), onnx.parser.parse_model(MUL)
    for isolated in (False, True):
        v = V.verify(a, b, isolated=isolated)
        assert v.ok and v.error is None and v.max_abs_diff == 0.0 and v.min_cosine > 0.999999


def test_difference_beyond_rtol_fails_and_report_only_still_reports():
    a, b = onnx.parser.parse_model(ADD), onnx.parser.parse_model(OFF)
    v = V.verify(a, b)
    assert not v.ok and 4e-4 < v.max_rel_diff < 6e-4
    r = V.verify(a, b, report_only=True)
    assert r.report_only and "report only" in r.summary()


def test_isolated_verification_survives_a_model_that_allocates_gigabytes(monkeypatch):
    monkeypatch.setattr(V, "VERIFY_MEM_MB", 1024)
    shape = oh.make_tensor("s", onnx.TensorProto.INT64, [2], [65536, 65536])  # 16 GiB of fp32
    g = oh.make_graph(
        [oh.make_node("ConstantOfShape", ["s"], ["big"], name="cos"),
         oh.make_node("ReduceSum", ["big"], ["r"], name="sum", keepdims=0),
         oh.make_node("Add", ["x", "r"], ["y"], name="add")],
        "bomb", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])], [shape])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    v = V.verify(m, m, isolated=True, feeds={"x": np.zeros(1, np.float32)})
    assert not v.ok and v.error
    assert "memory" in v.error.lower() or "allocate" in v.error.lower(), v.error


def test_a_crashed_worker_is_named_not_called_out_of_memory(tmp_path, monkeypatch):
    """A model that crashes onnxruntime kills only the child, and the sentence says it crashed."""
    import sys

    from fusionviz import verify
    from fusionviz.passes import validity

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nkill -SEGV $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    with pytest.raises(errors.RuntimeLoadError, match=r"onnxruntime crashed \(SIGSEGV\)"):
        verify._child(("verify", b"", b"", []))
    assert validity.ort_error_at_all(b"a model no real child ever sees") == "onnxruntime crashed (SIGSEGV)"
