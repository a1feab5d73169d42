"""fusionviz.report: the JSON/Markdown report and the reproducing CLI command (no Streamlit)."""

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
    cmd = report.cli_command("/srv/models/my model.onnx", ["identity_elimination", "fold_batchnorm"],
                             shapes={"input ids:0": [1, 32]}, values={"sr": 16000, "scale": 0.5, "flag": True},
                             inputs_file="/tmp/x/my data.npz", output="m.fusionviz.onnx")
    argv = shlex.split(cmd)
    assert argv[:8] == ["python", "-m", "fusionviz", "optimize", "my model.onnx", "-o", "m.fusionviz.onnx",
                        "--passes"]
    assert argv[8] == "identity_elimination,fold_batchnorm"
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
    cmd = report.cli_command(str(path), ["identity_elimination", "dropout_elimination"], output=str(out))
    argv = shlex.split(cmd)
    argv[4] = str(path)  # the report names the file only; run it where the file is
    argv[6] = str(out)
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    got = onnx.load(out)
    want = run_pipeline(MODEL, ["identity_elimination", "dropout_elimination"]).final
    assert [n.op_type for n in got.graph.node] == [n.op_type for n in want.graph.node]


def _bench_result(label: str, ms: float, level: str = "off") -> BenchResult:
    return BenchResult(label, (), Settings(level=level), compute_stats([ms] * 6), {"rss_run_mb": 12.0},
                       verify={"ok": True, "max_rel_diff": 0.0}, round_medians_ms=(ms,) * 6)


def test_build_json_and_markdown_carry_everything():
    result = run_pipeline(MODEL, ["identity_elimination", "dropout_elimination", "fold_batchnorm"])
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
    assert data["passes"][0]["changes"] == 1 and data["passes"][0]["change_list"]
    assert data["verification"]["verdict"] == "equal"
    assert data["verification"]["input_sets"] == ["normal", "zeros", "edge"]
    assert {(o["input_set"], o["name"]) for o in data["verification"]["outputs"]} == {
        ("normal", "y"), ("zeros", "y"), ("edge", "y")}
    assert [b["variant"] for b in data["bench"]["variants"]] == ["original", "original @ORT all"]
    assert data["command"] == cmd
    md = report.markdown(rep)
    assert md.startswith("# fusionviz report: tiny.onnx")
    assert cmd in md and "| `identity_elimination` | applied |" in md
    assert "## Verification" in md and "edge" in md and "## Benchmark" in md
    assert "/home/u" not in md and "/home/u" not in report.to_json(rep)


def test_declined_pass_reason_and_failed_verification_are_reported():
    from fusionviz.passes.pipeline import PassReport

    reports = [PassReport("identity_elimination", "Identity elimination", (), 3, 3, 0.01),
               PassReport("constant_folding", "Constant folding", (), 3, 3, 0.01,
                          declined="the ONNX checker rejects the result: shapes differ",
                          after=("identity_elimination",))]
    assert reports[1].status == "declined"
    rep = report.build(model_name="declined.onnx", passes=reports, verification={
        "ok": False, "error": None, "report_only": False, "input_sets": ["normal", "zeros"],
        "failure": "output 'y' on input set 'zeros': 2 of 6 elements beyond tolerance",
        "outputs": [{"input_set": "zeros", "name": "y", "shape": (3, 2), "max_abs_diff": 1.0, "max_rel_diff": 1.0,
                     "cosine": 0.5, "mismatches": 2, "new_nonfinite": 0, "size": 6, "ok": False}]})
    row = rep["passes"][1]
    assert row["status"] == "declined" and "checker" in row["declined"]
    assert row["after"] == ["identity_elimination"]
    assert rep["verification"]["verdict"] == "DIFFERENT"
    md = report.markdown(rep)
    assert "declined" in md and "input set 'zeros'" in md and "| zeros | y |" in md
    assert "No pass selected" not in md


@pytest.mark.parametrize("bad", [object(), 3])
def test_build_refuses_what_it_cannot_read(bad):
    with pytest.raises(TypeError):
        report.build(model_name="m.onnx", verification=bad)


def test_report_module_imports_without_streamlit():
    code = ("import sys; import fusionviz.report, fusionviz.bench.whatif; "
            "assert 'streamlit' not in sys.modules, 'streamlit imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
