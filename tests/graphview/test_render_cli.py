"""`python -m fusionviz render ...` end to end (subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from gv_helpers import conv_bn_relu, fused_after

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusionviz", "render", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("render")
    before, after = d / "before.onnx", d / "after.onnx"
    onnx.save(conv_bn_relu(), before)
    onnx.save(fused_after(conv_bn_relu()), after)
    return d, before, after


def test_dot_output(models):
    d, before, _ = models
    out = d / "g.dot"
    p = run(str(before), "-o", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert text.startswith("digraph") and "Conv_12" in text


def test_svg_with_diff(models):
    d, before, after = models
    out = d / "g.svg"
    p = run(str(before), "--diff", str(after), "-o", str(out))
    assert p.returncode == 0, p.stderr
    svg = out.read_text()
    assert "<svg" in svg and "FusedConv" in svg and "<script" not in svg
    assert "1 fused, 3 removed" in p.stderr


def test_focus_and_collapse_flags(models):
    d, before, _ = models
    out = d / "f.dot"
    p = run(str(before), "--focus", "Relu_14", "--hops", "1", "--collapse", "-o", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert "fv-n-Relu_14" in text and "fv-n-Conv_12" not in text and "from Conv_12" in text


@pytest.mark.parametrize("args, needle", [
    (["{d}/missing.onnx", "-o", "{d}/x.dot"], "No such file"),
    (["{before}", "-o", "{d}/x.png"], ".dot or .svg"),
    (["{before}", "--focus", "nope", "-o", "{d}/x.dot"], "No node named"),
    (["{before}", "--changed-only", "-o", "{d}/x.dot"], "--diff"),
    (["{d}/garbage.onnx", "-o", "{d}/x.dot"], ""),
], ids=["missing", "bad-suffix", "bad-focus", "changed-only-without-diff", "not-onnx"])
def test_bad_input_exits_2_with_one_line(models, args, needle):
    d, before, _ = models
    (d / "garbage.onnx").write_bytes(b"not a model at all")
    p = run(*[a.format(d=d, before=before) for a in args])
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fusionviz: error:") and needle in lines[0]
    assert "Traceback" not in p.stderr
