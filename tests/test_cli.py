"""The CLI contract: ``info`` on every sample and onnx light model, ``info --json``,
``passes``, and usage errors (exit 2, one line, no traceback).

Most runs call :func:`fusionviz.cli.main` in-process (fast); a few go through a real
``python -m fusionviz`` subprocess to prove the entry point itself.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import onnx
import pytest

from fusionviz import cli, samples
from fusionviz.inputs import graph_inputs
from fusionviz.passes import registry

SAMPLES = samples.list_samples()
LIGHT = samples.light_models()


def _info_cases():
    cases = [pytest.param(samples.SAMPLE_DIR / s.file, id=f"sample-{s.name}") for s in SAMPLES]
    cases += [pytest.param(p, id=f"light-{p.stem}") for p in LIGHT]
    return cases


def test_sample_and_light_model_lists_are_not_empty():
    # The parametrized tests below must not pass vacuously.
    assert len(LIGHT) >= 5, "onnx's light models are missing from the environment"
    if (samples.SAMPLE_DIR / "samples.json").exists():
        catalog = json.loads((samples.SAMPLE_DIR / "samples.json").read_text())
        assert SAMPLES, "samples.json exists but no sample model file is present"
        assert {s.name for s in SAMPLES} == {d["name"] for d in catalog}, "a sample's file is missing"


def _run_main(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


def _expected(path: Path) -> tuple[list[str], list[str], str]:
    model = onnx.load(str(path))
    ins = [vi.name for vi in graph_inputs(model)]
    outs = [vi.name for vi in model.graph.output]
    ops = collections.Counter(n.op_type for n in model.graph.node)
    return ins, outs, ops.most_common(1)[0][0]


@pytest.mark.parametrize("path", _info_cases())
def test_info_text(path, capsys):
    code, out, err = _run_main(capsys, "info", str(path))
    assert code == 0, err
    assert "Traceback" not in err
    ins, outs, top_op = _expected(path)
    lines = out.splitlines()
    i_in, i_out = lines.index("inputs"), lines.index("outputs")
    assert [ln.split(":")[0].strip() for ln in lines[i_in + 1:i_out]] == ins
    for name in outs:
        assert f"  {name}: " in out
    ops_line = next(ln for ln in lines if ln.startswith("ops "))
    assert f"{top_op}×" in ops_line
    assert any(ln.startswith("nodes ") for ln in lines) and any(ln.startswith("params ") for ln in lines)


@pytest.mark.parametrize("path", _info_cases())
def test_info_json(path, capsys):
    code, out, err = _run_main(capsys, "info", str(path), "--json")
    assert code == 0, err
    data = json.loads(out)
    ins, outs, top_op = _expected(path)
    assert [i["name"] for i in data["inputs"]] == ins
    assert [o["name"] for o in data["outputs"]] == outs
    assert data["op_histogram"][top_op] >= 1
    assert data["node_count"] == sum(data["op_histogram"].values()) >= 1
    assert len(data["sha256"]) == 64 and data["opsets"]
    for i in data["inputs"]:
        assert isinstance(i["shape"], list) and i["dtype"]


def test_info_shows_symbolic_dims_as_names(tmp_path, capsys):
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, seq_len, 8] x) => (float[batch, seq_len, 8] y) { y = Relu(x) }
    """)
    path = tmp_path / "sym.onnx"
    path.write_bytes(model.SerializeToString())
    code, out, _ = _run_main(capsys, "info", str(path))
    assert code == 0 and "x: float [batch, seq_len, 8]" in out


def test_real_entry_point_info_and_json(run_cli):
    target = str(SAMPLES and samples.SAMPLE_DIR / SAMPLES[0].file or LIGHT[0])
    res = run_cli("info", target, timeout=60)
    assert res.code == 0 and "inputs" in res.stdout and "ops " in res.stdout, res.stderr
    res = run_cli("info", str(LIGHT[0]), "--json", timeout=60)
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["node_count"] > 0


def test_info_accepts_a_sample_name(capsys):
    if not SAMPLES:
        pytest.skip("no sample models yet")
    code, out, err = _run_main(capsys, "info", SAMPLES[0].name)
    assert code == 0, err
    assert SAMPLES[0].file in out


def test_passes_lists_every_registered_pass(capsys, run_cli):
    res = run_cli("passes", timeout=60)
    assert res.code == 0, res.stderr
    names = registry.pass_names()
    assert len(names) >= 5
    listed = [ln.split()[0] for ln in res.stdout.splitlines() if ln.strip()]
    assert listed == names
    code, out, _ = _run_main(capsys, "passes", "--json")
    data = json.loads(out)
    assert code == 0 and [d["name"] for d in data] == names
    assert all(d["title"] and d["category"] and d["explain"] for d in data)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param([], "required", id="no-command"),
        pytest.param(["frobnicate"], "invalid choice", id="unknown-command"),
        pytest.param(["info"], "required", id="info-no-model"),
        pytest.param(["info", "/definitely/not/here.onnx"], "no such file", id="missing-file"),
        pytest.param(["optimize", "x.onnx"], "required", id="optimize-no-output"),
        pytest.param(["optimize", "LIGHT", "-o", "OUT", "--passes", "no_such_pass"], "unknown pass",
                     id="unknown-pass"),
        pytest.param(["optimize", "LIGHT", "-o", "OUT", "--shape", "x=1,,a"], "--shape", id="bad-shape"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, tmp_path, argv, words):
    argv = [str(LIGHT[0]) if a == "LIGHT" else str(tmp_path / "o.onnx") if a == "OUT" else a for a in argv]
    code, out, err = _run_main(capsys, *argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("fusionviz: error: "), err
    assert words in lines[0].lower()
    assert not (tmp_path / "o.onnx").exists()


def test_bad_file_through_the_real_entry_point(run_cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model\n")
    res = run_cli("info", str(bad), timeout=60)
    assert res.code == 2 and res.stdout == ""
    assert res.stderr_lines == ["fusionviz: error: 'bad.onnx' is not an ONNX model: it looks like a text file."]
