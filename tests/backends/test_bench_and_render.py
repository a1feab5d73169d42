"""Benchmarks across backends in one interleaved run, and ``render --compiled``."""

from __future__ import annotations

import html
import json
import re

import pytest

from fusionviz.bench import Settings, Variant, run_benchmark
from fusionviz.cli import main
from tests.backends.conftest import needs_openvino

pytestmark = needs_openvino


def test_bench_runs_ort_and_openvino_in_one_run(elementwise):
    res = run_benchmark([Variant("x", elementwise, Settings(level="all")),
                         Variant("x @OpenVINO", elementwise, Settings(backend="openvino", denormal_as_zero=True))],
                        min_time_s=0.05, verify_against=elementwise, timeout_s=60)
    by = {r.label: r for r in res}
    for label in by:
        assert by[label].error is None, by[label].error
        assert by[label].stats.n > 0 and by[label].verify["ok"]
    ov = by["x @OpenVINO"]
    assert ov.backend == "openvino" and ov.backend_info["CPU_DENORMALS_OPTIMIZATION"] == "True"
    assert ov.backend_info["version"] and ov.settings.describe().startswith("OpenVINO CPU f32, 1 thread")
    assert ov.as_dict()["backend"] == "openvino" and by["x"].as_dict()["backend"] == "ort"
    assert by["x"].backend_info["session.set_denormal_as_zero"] == "0"


def test_cli_bench_json_has_a_variant_per_backend(tmp_path, elementwise, capsys):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(elementwise, path)
    out = tmp_path / "r.json"
    rc = main(["bench", str(path), "--backend", "ort,openvino", "--variant", "orig=", "--min-time", "0.05",
               "--ort-level", "all", "--json", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    data = json.loads(out.read_text())
    rows = {v["label"]: v for v in data["variants"]}
    assert set(rows) == {"orig", "orig @OpenVINO"}
    assert rows["orig @OpenVINO"]["backend"] == "openvino" and rows["orig @OpenVINO"]["settings"]["backend"] == "openvino"
    for v in rows.values():  # the fields earlier versions wrote are all still there
        assert {"label", "passes", "settings", "latency", "memory", "verify", "error", "session_s"} <= set(v)
        assert v["error"] is None and v["latency"]["median_ms"] > 0
    assert "openvino: OpenVINO" in cap.out and "CPU_DENORMALS_OPTIMIZATION=False" in cap.out


def test_a_model_openvino_cannot_compile_fails_only_its_variant(tmp_path, dynamic_rank_if, capsys):
    import onnx

    path = tmp_path / "if.onnx"
    onnx.save(dynamic_rank_if, path)
    rc = main(["bench", str(path), "--backend", "ort,openvino,trt", "--variant", "orig=", "--min-time", "0.05",
               "--no-verify", "--json", str(tmp_path / "r.json")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rows = {v["label"]: v for v in json.loads((tmp_path / "r.json").read_text())["variants"]}
    assert rows["orig"]["error"] is None and rows["orig"]["latency"]["n"] > 0
    err = rows["orig @OpenVINO"]["error"]
    assert err.startswith("OpenVINO failed: ") and "dynamic rank" in err and "\n" not in err
    assert rows["orig @TensorRT"]["error"].startswith("TensorRT is not available here:")
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("orig @OpenVINO: ")]
    assert len(lines) == 1 and "dynamic rank" in lines[0]


def test_bench_rejects_an_unknown_backend(tmp_path, capsys):
    rc = main(["bench", "resnet_ts", "--backend", "ort,nope", "--min-time", "0.05"])
    assert rc == 2 and "Unknown backend 'nope'" in capsys.readouterr().err


def _svg_nodes(svg: str) -> list[list[str]]:
    """The text lines of each drawn node of an SVG from Graphviz (one entry per node group)."""
    out = []
    for chunk in svg.split("<!-- ")[1:]:
        if 'class="node"' in chunk:
            out.append([html.unescape(t) for t in re.findall(r">([^<]+)</text>", chunk)])
    return out


def test_render_compiled_openvino_lists_conv_bn_relu_in_one_node(tmp_path, capsys):
    from fusionviz.graphview import svg_available

    if not svg_available():
        pytest.skip("pygraphviz is not installed")
    out = tmp_path / "ov.svg"
    rc = main(["render", "resnet_ts", "--compiled", "openvino", "--layer-times", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "executed layers drawn" in err and "layers absorbed 2+ ONNX nodes" in err
    nodes = _svg_nodes(out.read_text())
    hit = [t for t in nodes if {"/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu"} <= set(t)]
    assert len(hit) == 1 and hit[0][0] == "Convolution" and any(x.endswith(" ms") for x in hit[0])
    assert any(x.startswith("layout change") for t in nodes for x in t)


def test_render_compiled_dot_and_original_view(tmp_path, capsys):
    dot = tmp_path / "ov.dot"
    assert main(["render", "resnet_ts", "--compiled", "openvino", "-o", str(dot)]) == 0
    text = dot.read_text()
    assert "layout change abcd" in text and 'style="filled,dashed,bold"' in text
    before = tmp_path / "before.dot"
    assert main(["render", "resnet_ts", "--compiled", "openvino", "--side", "before", "-o", str(before)]) == 0
    text = before.read_text()
    assert "fused into Multiply_" in text and "absorbs 2 nodes" in text
    capsys.readouterr()


def test_render_compiled_refuses_other_view_flags(tmp_path, capsys):
    rc = main(["render", "resnet_ts", "--compiled", "openvino", "--collapse", "-o", str(tmp_path / "x.dot")])
    assert rc == 2 and "cannot be combined" in capsys.readouterr().err
    rc = main(["render", "resnet_ts", "--layer-times", "-o", str(tmp_path / "x.dot")])
    assert rc == 2 and "--layer-times needs --compiled" in capsys.readouterr().err
