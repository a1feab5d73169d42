"""Bisection of onnxruntime's own optimizers (``fusionviz.ortbisect``) and the ``bisect`` command.

The model where onnxruntime's level all changes the outputs is constructed
(``tests/ortbisect_models.py``): a QDQ Conv with a float bias, which onnxruntime's
``WeightBiasQuantization`` quantizes. The bisection must name that transformer, from the names
onnxruntime's own log gives, and disabling it must restore level off's outputs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fv_broken_passes import register
from ortbisect_models import qdq_conv_with_float_bias

from fusionviz import cli
from fusionviz.inputs import InputSpec, plan_inputs
from fusionviz.ortbisect import bisect_ort, modifying_transformers

LOG = """\
2026-01-01 [V:onnxruntime:, graph_transformer_mgr.cc:55 ApplyTransformers] Applying graph transformer ConstantFolding on step 1.
2026-01-01 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantFolding modified: 0 with status: OK
2026-01-01 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer WeightBiasQuantization modified: 1 with status: OK
2026-01-01 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantFolding modified: 1 with status: OK
2026-01-01 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer WeightBiasQuantization modified: 1 with status: OK
"""


def test_names_come_from_the_log_in_first_change_order():
    assert modifying_transformers(LOG) == ["WeightBiasQuantization", "ConstantFolding"]
    assert modifying_transformers("no transformer lines") == []


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ortbisect") / "qdq.onnx"
    onnx.save(qdq_conv_with_float_bias(), str(path))
    return path


def _run(model_path, level, disabled=()):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    kw = {"disabled_optimizers": list(disabled)} if disabled else {}
    s = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"], **kw)
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    return s.run(None, {"x": x})[0]


def test_the_constructed_model_really_changes_at_level_all(qdq_path):
    g = ort.GraphOptimizationLevel
    off = _run(qdq_path, g.ORT_DISABLE_ALL)
    assert np.abs(_run(qdq_path, g.ORT_ENABLE_ALL) - off).max() == pytest.approx(0.5)
    assert np.abs(_run(qdq_path, g.ORT_ENABLE_ALL, ["WeightBiasQuantization"]) - off).max() == 0.0


def test_level_all_bisects_to_the_transformer_responsible(qdq_path):
    model = onnx.load(str(qdq_path))
    lines = []
    found = bisect_ort(qdq_path, plan_inputs(model, InputSpec()), level="all", progress=lines.append)
    assert found.differs and found.error is None
    assert "WeightBiasQuantization" in found.candidates and "QDQSelectorActionTransformer" in found.candidates
    assert found.culprits == (("WeightBiasQuantization",),)
    assert found.restored and found.disabled == ("WeightBiasQuantization",)
    assert len(found.probes) == len(lines) <= 2 * len(found.candidates) + 2
    assert not any(p.ignored for p in found.probes)  # every name disabled was switched off
    first = found.baseline.first
    assert first.name == "y" and first.mismatches > 0 and first.max_abs_diff == pytest.approx(0.5)
    text = found.describe()
    assert "through WeightBiasQuantization alone" in text
    assert "disabled_optimizers=[WeightBiasQuantization] level all gives level off's outputs" in text
    assert json.loads(json.dumps(found.as_dict()))["disabled_optimizers"] == ["WeightBiasQuantization"]


def test_a_model_onnxruntime_does_not_change_has_nothing_to_bisect():
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,3] x) => (float[2,3] y) { a = Identity(x)  y = Relu(a) }""")
    found = bisect_ort(model, plan_inputs(model, InputSpec()), level="all")
    assert not found.differs and found.culprits == () and len(found.probes) == 1
    assert "nothing to bisect" in found.describe()


def test_a_model_that_does_not_run_is_an_error_line():
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,3] x) => (float[3,2] y) { y = Reshape(x, s) }""")
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([4, 4], np.int64), "s"))
    found = bisect_ort(model, plan_inputs(model, InputSpec()), level="all")
    assert found.error and "does not run at level off" in found.describe()


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_bisect_ort_prints_the_transformer_and_how_to_disable_it(qdq_path, capsys, tmp_path):
    code, out, err = _cli(capsys, "bisect", str(qdq_path), "--ort", "--json", str(tmp_path / "b.json"))
    assert code == 0, err
    assert "level all vs off: output 'y' on input set 'normal'" in out
    assert "with disabled_optimizers=[WeightBiasQuantization]" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["culprits"] == [["WeightBiasQuantization"]] and data["restored"] is True


def test_cli_bisect_rejects_level_off_in_one_line(qdq_path, capsys):
    code, _, err = _cli(capsys, "bisect", str(qdq_path), "--ort", "off")
    assert code == 2 and err.count("\n") == 1 and "--ort takes one of basic" in err


def test_cli_bisect_passes_on_request_names_the_broken_pass(monkeypatch, tmp_path, capsys):
    register(monkeypatch)
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,4] y) { a = Identity(x)  m = MatMul(a, W)  y = Relu(m) }""")
    model.graph.initializer.append(onnx.numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W"))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    code, out, err = _cli(capsys, "bisect", str(path), "--passes", "eliminate_identity,test_scale_weight")
    assert code == 0, err
    assert "fails with test_scale_weight alone; passes without it" in out
    assert "test_scale_weight: its result changed output 'y'" in out


def test_a_rule_based_transformer_is_narrowed_to_its_rule():
    """Rule 4 on a simulated onnxruntime: ConvBNFusion (a rule of Level1_RuleBasedTransformer)
    changes the outputs; disabling it alone restores them."""
    from types import SimpleNamespace

    from fusionviz.ortbisect import _rules

    probes = []

    def probe(disabled, label):
        off = set(disabled)
        fails = not ({"ConvBNFusion", "Level1_RuleBasedTransformer"} & off)
        probes.append(label)
        return SimpleNamespace(fails=fails)

    got, hit = _rules([("Level1_RuleBasedTransformer",)], ("Level1_RuleBasedTransformer", "NchwcTransformer"),
                      probe, probes, 32)
    assert got == [("ConvBNFusion",)] and not hit
    assert probes[-1] == "without ConvBNFusion"

    probes.clear()

    def probe_unlisted(disabled, label):  # the rule at fault is not one of REWRITE_RULES
        probes.append(label)
        return SimpleNamespace(fails="Level1_RuleBasedTransformer" not in disabled)

    got, _ = _rules([("Level1_RuleBasedTransformer",)], ("Level1_RuleBasedTransformer",), probe_unlisted, probes, 32)
    assert got == [("Level1_RuleBasedTransformer",)] and probes == ["rules none"]
