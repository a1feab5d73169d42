"""fusionviz.report: one report schema for the CLI and the app, its JSON/Markdown, the reproducing command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import onnx
import onnx.parser
import pytest

from fusionviz import report
from fusionviz.bench import BenchResult, Settings, compute_stats
from fusionviz.inputs import plan_inputs
from fusionviz.passes import run_pipeline
from fusionviz.verify import verify

MODEL = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) {
  a = Identity(x)
  b = Relu(a)
  c = Dropout(b)
  y = Sigmoid(c)
}""")


def test_cli_command_is_exact_and_quoted():
    cmd = report.cli_command("/srv/models/my model.onnx", ["eliminate_identity", "fold_batchnorm"],
                             shapes={"input ids:0": [1, 32]}, values={"sr": 16000, "scale": 0.5, "flag": True},
                             inputs_file="/tmp/x/my data.npz", output="m.fusionviz.onnx")
    argv = shlex.split(cmd)
    assert argv[:8] == ["python", "-m", "fusionviz", "optimize", "my model.onnx", "-o", "m.fusionviz.onnx",
                        "--passes"]
    assert argv[8] == "eliminate_identity,fold_batchnorm"
    assert argv[argv.index("--shape") + 1] == "input ids:0=1,32"
    inputs = [argv[i + 1] for i, a in enumerate(argv) if a == "--input"]
    assert inputs == ["flag=true", "scale=0.5", "sr=16000"]
    assert argv[argv.index("--inputs") + 1] == "my data.npz"
    assert "/srv" not in cmd and "/tmp" not in cmd


def test_cli_command_without_passes_is_none():
    assert report.cli_command("textbook", []) is None


def test_cli_command_parses_with_the_real_cli(tmp_path):
    """The command is accepted by the CLI's own parser and reproduces the pipeline's model."""
    path = tmp_path / "m.onnx"
    onnx.save(MODEL, path)
    out = tmp_path / "out.onnx"
    cmd = report.cli_command(str(path), ["eliminate_identity", "eliminate_dropout"], output=str(out))
    argv = shlex.split(cmd)
    argv[4] = str(path)  # the report names the file only; run it where the file is
    argv[6] = str(out)
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    got = onnx.load(out)
    want = run_pipeline(MODEL, ["eliminate_identity", "eliminate_dropout"]).final
    assert [n.op_type for n in got.graph.node] == [n.op_type for n in want.graph.node]


def _bench_result(label: str, ms: float, level: str = "off") -> BenchResult:
    return BenchResult(label, (), Settings(level=level), compute_stats([ms] * 6), {"rss_run_mb": 12.0},
                       verify={"ok": True, "max_rel_diff": 0.0}, round_medians_ms=(ms,) * 6)


def test_build_json_and_markdown_carry_everything():
    result = run_pipeline(MODEL, ["eliminate_identity", "eliminate_dropout", "fold_batchnorm"])
    plan = plan_inputs(MODEL)
    v = verify(result.original, result.final, plan=plan)
    cmd = report.cli_command("tiny.onnx", [r.name for r in result.reports])
    rep = report.build(model_name="/home/u/tiny.onnx", sha256="ab" * 32, source="upload", passes=result.reports,
                       nodes_before=result.nodes_before, nodes_after=result.nodes_after,
                       inputs=plan.describe_lines(), input_sets=["normal", "zeros", "edge"], verification=v,
                       bench=[_bench_result("original", 2.0), _bench_result("original @ORT all", 1.5, "all")],
                       bench_settings={"level": "off"}, command=cmd)
    data = json.loads(report.to_json(rep))
    assert data["model"]["name"] == "tiny.onnx"
    assert [p["status"] for p in data["passes"]] == ["applied", "applied", "skipped"]
    assert len(data["passes"][0]["changes"]) == 1 and data["passes"][0]["changes"][0]["description"]
    assert data["verify"]["verdict"] == "equal"
    assert data["verify"]["input_sets"] == ["normal", "zeros", "edge"]
    assert {(o["input_set"], o["name"]) for o in data["verify"]["outputs"]} == {
        ("normal", "y"), ("zeros", "y"), ("edge", "y")}
    assert [b["variant"] for b in data["bench"]["variants"]] == ["original", "original @ORT all"]
    assert data["command"] == cmd
    md = report.markdown(rep)
    assert md.startswith("# fusionviz report: tiny.onnx")
    assert cmd in md and "| `eliminate_identity` | applied |" in md
    assert "## Verification" in md and "edge" in md and "## Benchmark" in md
    assert "/home/u" not in md and "/home/u" not in report.to_json(rep)


def test_declined_pass_reason_and_failed_verification_are_reported():
    from fusionviz.passes.pipeline import PassReport

    reports = [PassReport("eliminate_identity", "Identity elimination", (), 3, 3, 0.01),
               PassReport("fold_constants", "Constant folding", (), 3, 3, 0.01,
                          declined="the ONNX checker rejects the result: shapes differ",
                          after=("eliminate_identity",))]
    assert reports[1].status == "declined"
    rep = report.build(model_name="declined.onnx", passes=reports, verification={
        "ok": False, "error": None, "report_only": False, "input_sets": ["normal", "zeros"],
        "failure": "output 'y' on input set 'zeros': 2 of 6 elements beyond tolerance",
        "outputs": [{"input_set": "zeros", "name": "y", "shape": (3, 2), "max_abs_diff": 1.0, "max_rel_diff": 1.0,
                     "cosine": 0.5, "mismatches": 2, "new_nonfinite": 0, "size": 6, "ok": False}]})
    row = rep["passes"][1]
    assert row["status"] == "declined" and "checker" in row["declined"]
    assert row["after"] == ["eliminate_identity"]
    assert rep["verify"]["verdict"] == "DIFFERENT"
    md = report.markdown(rep)
    assert "declined" in md and "input set 'zeros'" in md and "| zeros | y |" in md
    assert "No pass selected" not in md


@pytest.mark.parametrize("bad", [object(), 3])
def test_build_refuses_what_it_cannot_read(bad):
    with pytest.raises(TypeError):
        report.build(model_name="m.onnx", verification=bad)


def test_report_module_imports_without_streamlit():
    code = ("import sys; import fusionviz.report, fusionviz.report_html, fusionviz.environment, fusionviz.bench.whatif; "
            "assert 'streamlit' not in sys.modules, 'streamlit imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ one schema: the CLI's report is the app's


def _shape(obj, depth: int = 0):
    """The keys of a report, nested (lists by their first element): what two reports must share."""
    if isinstance(obj, dict) and depth < 3:
        return {k: _shape(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and depth < 3:
        return [_shape(obj[0], depth + 1)]
    return None


def test_cli_report_and_app_report_have_the_same_keys(tmp_path, monkeypatch):
    """The same model and passes through ``optimize --report`` and the app's Passes page export."""
    from streamlit.testing.v1 import AppTest
    from ui_helpers import APP, TIMEOUT, goto

    passes = "eliminate_identity,eliminate_dropout"
    built = []
    real = report.build
    monkeypatch.setattr(report, "build", lambda **kw: built.append(real(**kw)) or built[-1])
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "textbook"
    at.query_params["passes"] = passes
    at.run()
    goto(at, "passes")
    assert {"dl_json", "dl_html", "dl_md"} <= {d.key for d in at.get("download_button")}
    app_rep = json.loads(report.to_json(built[-1]))

    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "fusionviz", "optimize", "textbook", "-o", str(tmp_path / "o.onnx"),
                           "--passes", passes, "--report", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cli_rep = json.loads(out.read_text())

    assert list(cli_rep) == list(report.KEYS) == list(app_rep)
    # bisect, compare and bench were run by neither: null in both (rule 4), so their keys agree too
    assert _shape(cli_rep) == _shape(app_rep)
    assert cli_rep["command"] == app_rep["command"].replace("textbook.fusionviz.onnx", "o.onnx")
    assert [p["name"] for p in cli_rep["passes"]] == [p["name"] for p in app_rep["passes"]]
    assert cli_rep["model"]["sha256"] == app_rep["model"]["sha256"] and cli_rep["model"]["source"] == "sample"
    assert cli_rep["nodes_after"] == app_rep["nodes_after"]
    assert cli_rep["verify"]["input_sets"] == app_rep["verify"]["input_sets"] == ["normal", "zeros", "edge"]


def test_every_key_is_there_when_nothing_ran():
    rep = report.build(model_name="m.onnx", environment={})
    assert list(rep) == list(report.KEYS)
    assert rep["verify"] is None and rep["bisect"] is None and rep["compare"] is None and rep["bench"] is None
    assert rep["passes"] == [] and rep["inputs"] == {"lines": [], "sets": [], "plan": []}


def test_json_is_strict_nan_and_inf_are_strings():
    rep = report.build(model_name="m.onnx", environment={}, verification={
        "ok": False, "report_only": True, "input_sets": ["normal"], "max_rel_diff": float("inf"),
        "outputs": [{"input_set": "normal", "name": "y", "shape": (2,), "max_abs_diff": float("nan"),
                     "max_rel_diff": float("inf"), "cosine": 1.0, "ok": False}]})
    text = report.to_json(rep)
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["verify"]["max_rel_diff"] == "inf" and data["verify"]["outputs"][0]["max_abs_diff"] == "nan"


def test_environment_names_versions_cpu_and_threads():
    env = report.build(model_name="m.onnx")["environment"]
    assert {"fusionviz", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "numpy"} <= set(env["packages"])
    assert env["cpu_count"] >= 1 and env["python"] and "cpu" in env and "usable_cpus" in env


def test_cli_command_carries_freeze_and_tolerances():
    import numpy as np

    cmd = report.cli_command("silero.onnx", ["fold_constants"], freeze={"sr": np.array(16000, np.int64)},
                             rtol=1e-3, atol=1e-5)
    argv = shlex.split(cmd)
    assert argv[argv.index("--freeze") + 1] == "sr=16000"
    assert argv[argv.index("--rtol") + 1] == "0.001" and "--atol" not in argv


@pytest.mark.parametrize("name, fmt", [("r.json", "json"), ("R.HTML", "html"), ("r.htm", "html"), ("r.md", "markdown"),
                                       ("r.txt", None), ("report", None)])
def test_the_extension_picks_the_format(name, fmt):
    assert report.format_of(name) == fmt
