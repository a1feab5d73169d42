"""fusionviz.report_html: one self-contained HTML page from the report dict (and ``optimize --report R.html``)."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from fusionviz import cli, report, report_html
from fusionviz.bench import BenchResult, Settings, compute_stats
from fusionviz.inputs import plan_inputs
from fusionviz.passes import run_pipeline
from fusionviz.verify import verify

PASSES = ["fold_batchnorm", "fuse_conv_activation"]
XMLNS = {'xmlns="http://www.w3.org/2000/svg"', 'xmlns:xlink="http://www.w3.org/1999/xlink"'}


def conv_bn_relu_conv_silu() -> onnx.ModelProto:
    """Conv + BatchNorm + Relu (folds, then fuses) and Conv + SiLU (a near miss: no fused kernel)."""
    rng = np.random.default_rng(0)

    def init(name, arr):
        return onh.from_array(np.asarray(arr, np.float32), name)

    inits = [init("w1", rng.standard_normal((4, 3, 3, 3)) * 0.2), init("scale", 1 + 0.1 * rng.standard_normal(4)),
             init("bias", 0.1 * rng.standard_normal(4)), init("mean", 0.1 * rng.standard_normal(4)),
             init("var", 1 + 0.1 * rng.random(4)), init("w2", rng.standard_normal((4, 4, 3, 3)) * 0.2)]
    nodes = [oh.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             oh.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["b1"], name="bn1"),
             oh.make_node("Relu", ["b1"], ["r1"], name="relu1"),
             oh.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             oh.make_node("Sigmoid", ["c2"], ["s2"], name="sig2"),
             oh.make_node("Mul", ["c2", "s2"], ["y"], name="silu2")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def run():
    model = conv_bn_relu_conv_silu()
    result = run_pipeline(model, PASSES)
    plan = plan_inputs(model)
    v = verify(result.original, result.final, plan=plan)
    rep = report.build(model_name="/home/u/small.onnx", sha256="ab" * 32, source="file", result=result, plan=plan,
                       verification=v, command=report.cli_command("small.onnx", PASSES))
    return result, rep


def _external_urls(text: str) -> list[str]:
    """Every ``http`` in ``text`` that is not an SVG namespace declaration."""
    for ns in XMLNS:
        text = text.replace(ns, "")
    return [text[max(0, m.start() - 30):m.start() + 40] for m in re.finditer(r"https?:", text)]


def _embedded(page: str) -> str:
    m = re.search(r'<script type="application/json" id="fusionviz-report">(.*?)</script>', page, re.DOTALL)
    assert m, "the page embeds its report"
    return m.group(1)


def test_html_holds_both_graphs_the_pass_table_and_no_external_url(run):
    result, rep = run
    page = report_html.render(rep, before=result.original, after=result.final)
    panes = re.findall(r'<div class="pz" tabindex="0">(<svg.*?</svg>)</div>', page, re.DOTALL)
    assert len(panes) == 2, "the before and the after graph"
    before, after = panes
    assert "conv1" in before and "bn1" in before and "silu2" in after
    assert "fused into" in before, "removed nodes say where they went"
    assert "← conv1 + bn1" in after or "conv1 + bn1" in after, "a fused node says what it came from"
    assert "near miss:" in after, "the near miss is drawn on the optimized graph"
    table = re.search(r'<table class="passes">.*?</table>', page, re.DOTALL).group(0)
    for p in rep["passes"]:
        assert f"<code>{p['name']}</code>" in table and f">{p['status']}</span>" in table
    assert "no fused kernel" in page or "no_kernel" in page, "the near miss is listed with its reason"
    assert "Verification" in page and ">equal</b>" in page
    assert rep["command"] in page and f"<code>onnxruntime</code> {rep['environment']['packages']['onnxruntime']}" in page
    assert _external_urls(page) == []
    links = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)""", page)
    assert all(v.startswith("#") for v in links), "nothing is fetched: in-page links only"
    assert "@import" not in page and "url(" not in page
    assert "/home/u" not in page


def test_json_and_html_come_from_the_same_dict(run, tmp_path):
    result, rep = run
    page = report_html.render(rep, before=result.original, after=result.final)
    assert json.loads(_embedded(page)) == json.loads(report.to_json(rep))
    # write() picks the format by extension; both files are that same dict
    report.write(rep, str(tmp_path / "r.json"))
    report.write(rep, str(tmp_path / "r.html"), before=result.original, after=result.final)
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(_embedded((tmp_path / "r.html").read_text()))
    v = rep["verify"]
    for o in v["outputs"]:
        assert f"<code>{o['name']}</code>" in page
    assert f"{rep['nodes_before']} → {rep['nodes_after']}" in page


def test_a_big_graph_is_collapsed_or_capped_and_the_page_says_what_was_left_out(run):
    result, rep = run
    page = report_html.render(rep, before=result.original, after=result.final, max_nodes=2)
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert any("showing" in n or "collapsed" in n for n in notes), notes
    assert re.search(r"\d+ of \d+ nodes drawn", page)


def test_bench_compare_and_bisect_sections_when_the_report_has_them(run):
    from fusionviz.compare import compare_models

    result, rep0 = run
    bench = [BenchResult(label, (), Settings(level=level), compute_stats([ms, ms * 1.1, ms * 0.9] * 3),
                         {"rss_run_mb": 12.0}, verify={"ok": True}, round_medians_ms=(ms,) * 9)
             for label, ms, level in (("original", 2.0, "off"), ("original @ORT all", 1.5, "all"),
                                      ("current", 1.2, "off"))]
    cmp_ = compare_models(result.original, result.final, plan=plan_inputs(result.original))
    bis = {"declined": ["fuse_x"], "findings": [{"passes": ["fuse_x"], "declined": ["fuse_x"], "minimal": True,
                                                 "failure": "DIFFERENT", "reasons": {"fuse_x": "it changed y"}}],
           "probes": [{"passes": ["fuse_x"], "fails": True, "seconds": 0.1, "verify": "DIFFERENT"}],
           "probe_count": 1, "max_probes": 24, "summary": "fails with fuse_x alone; passes without it (1 probe)"}
    rep = report.build(model_name="small.onnx", result=result, verification=None, bench=bench,
                       bench_settings={"level": "off", "threads": 1}, compare=cmp_, bisect=bis)
    page = report_html.render(rep, before=result.original, after=result.final)
    assert 'id="benchmark"' in page and "Median latency" in page
    chart = re.search(r'<svg class="chart"[^>]*>.*?</svg>', page[page.index('id="benchmark"'):], re.DOTALL).group(0)
    assert all(label in chart for label in ("original", "original @ORT all", "current"))
    assert 'id="per-tensor"' in page and cmp_.divergence_line() in page
    assert rep["compare"]["rows"] and all(f"<code>{r['tensor']}</code>" in page for r in rep["compare"]["rows"]
                                          if r["status"] == "compared")
    assert 'id="bisection"' in page and "it changed y" in page
    assert "Not verified." in page
    assert _external_urls(page) == []


def test_text_from_the_model_is_escaped():
    rep = report.build(model_name="<script>alert(1)</script>.onnx", environment={},
                       notes=["<img src=x onerror=alert(1)>"])
    page = report_html.render(rep)
    assert "<script>alert" not in page and "<img" not in page
    assert "graphs were not drawn" in page


def test_optimize_report_html_and_a_bad_extension(tmp_path, capsys):
    path = tmp_path / "small.onnx"
    onnx.save(conv_bn_relu_conv_silu(), path)
    out = tmp_path / "r.html"
    code = cli.main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--passes", ",".join(PASSES),
                     "--report", str(out)])
    assert code == 0
    page = out.read_text()
    data = json.loads(_embedded(page))
    assert data["fusionviz_report"] == report.SCHEMA and data["model"]["name"] == "small.onnx"
    assert data["command"] == f"python -m fusionviz optimize small.onnx -o o.onnx --passes {','.join(PASSES)}"
    assert len(re.findall(r'<div class="pz" tabindex="0"><svg', page)) == 2 and _external_urls(page) == []
    capsys.readouterr()
    code = cli.main(["optimize", str(path), "-o", str(tmp_path / "o2.onnx"), "--report", str(tmp_path / "r.txt")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--report must end in .json, .html or .md" in err and "Traceback" not in err
    assert not (tmp_path / "o2.onnx").exists(), "refused before any work"
