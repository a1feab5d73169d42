"""Registry, settings, the onnxruntime backend and the TensorRT backend's refusal here."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fusionviz import errors
from fusionviz.backends import (
    BackendError,
    BackendSettings,
    backend_names,
    get_backend,
    parse_backends,
)
from fusionviz.backends.base import ExecutedGraph, ExecutedLayer, first_sentence
from tests.conftest import REPO_ROOT


def test_names_parse_in_order_without_repeats():
    assert backend_names() == ("ort", "openvino", "tvm", "trt")
    assert parse_backends("ort, OpenVINO,ort,tvm") == ("ort", "openvino", "tvm")
    assert parse_backends("") == ("ort",)
    assert parse_backends("onnxruntime,ov,tensorrt") == ("ort", "openvino", "trt")


def test_unknown_backend_is_one_input_error():
    with pytest.raises(errors.InputSpecError, match="Unknown backend 'cuda'; use one of ort, openvino"):
        parse_backends("ort,cuda")


def test_settings_from_mapping_ignore_unknown_keys():
    s = BackendSettings.from_mapping({"level": "basic", "denormal_as_zero": True, "threads": 4,
                                      "input_shapes": {"x": (1, 2)}, "output_names": ["y"]})
    assert s.level == "basic" and s.denormal_as_zero and s.input_shapes == {"x": [1, 2]}
    assert s.output_names == ("y",)


def test_ort_backend_runs_and_reports_settings(elementwise, inputs_for):
    feeds = inputs_for(elementwise)
    c = get_backend("ort").compile(elementwise.SerializeToString(), threads=1,
                                   settings={"level": "all", "denormal_as_zero": True})
    out = c.run(feeds)
    x = feeds["x"]
    want = 1.0 / (1.0 + np.exp(-np.maximum(x, 0))) * x + 1
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)
    applied = c.applied()
    assert applied["session.set_denormal_as_zero"] == "1" and applied["graph_optimization_level"] == "all"
    prof = c.profile(feeds, 2)
    assert prof["runs"] == 2 and prof["by_node"] and prof["run_ms"] is not None
    assert c.executed_graph() is None
    call = c.prepare(feeds)
    call()


def test_ort_backend_error_is_one_sentence():
    with pytest.raises(BackendError) as info:
        get_backend("ort").compile(b"not a model")
    text = str(info.value)
    assert text.startswith("onnxruntime cannot load the model:") and "\n" not in text


def test_trt_is_unavailable_here_with_a_reason():
    why = get_backend("trt").available()
    import onnxruntime as ort

    if {"TensorrtExecutionProvider", "CUDAExecutionProvider"} & set(ort.get_available_providers()):
        pytest.skip("this onnxruntime has GPU providers")
    assert why is not None and why.endswith(".") and "TensorRT or CUDA" in why
    with pytest.raises(errors.InputSpecError, match="The TensorRT backend is not available here"):
        get_backend("trt").compile(b"")


def test_first_sentence_drops_cpp_frames():
    exc = RuntimeError("Exception from src/inference/src/cpp/core.cpp:117:\n"
                       "Check '!shape.rank().is_dynamic()' failed at src/plugins/intel_cpu/src/node.cpp:108:\n"
                       "Unexpected: CPU plug-in doesn't support If operation with dynamic rank. Operation name: y\n")
    assert first_sentence(exc) == ("Unexpected: CPU plug-in doesn't support If operation with dynamic rank. "
                                   "Operation name: y")


def test_executed_graph_mapping_skips_constants_and_io():
    g = ExecutedGraph("x", (
        ExecutedLayer("in", "Input", absorbed=("a",)),
        ExecutedLayer("w", "Const", absorbed=("b",)),
        ExecutedLayer("conv", "Convolution", absorbed=("b", "c")),
        ExecutedLayer("r", "Reshape", absorbed=("d",), folded=True),
    ))
    assert g.onnx_to_layer() == {"b": "conv", "c": "conv"}
    timed = g.with_times({"conv": 1.5})
    assert timed.timed and timed.by_name["conv"].time_ms == 1.5


def test_an_onnxruntime_worker_never_loads_openvino_or_tvm():
    code = ("import sys; import fusionviz.bench.worker as w; from fusionviz.backends.registry import get_backend;"
            "get_backend('ort').preload(); print(sorted(m for m in ('openvino', 'tvm', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
