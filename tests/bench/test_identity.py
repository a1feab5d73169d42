"""fusionviz.bench.identity: a variant is its model and settings; identical variants are measured once."""

from __future__ import annotations

import dataclasses
import json

import onnx
import onnx.parser
import pytest

import fusionviz.bench as bench
from fusionviz import errors
from fusionviz.bench import BenchResult, Settings, Variant, compute_stats, identity, whatif
from fusionviz.cli import main
from fusionviz.experiment.build import Builder
from fusionviz.passes import run_pipeline

MODEL = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) {
  a = Identity(x)
  b = Relu(a)
  c = Dropout(b)
  y = Sigmoid(c)
}""")
# fold_batchnorm changes nothing here: the selection of three passes is the same model as the
# cumulative what-if's last step, which has two.
SELECTION = ["eliminate_identity", "eliminate_dropout", "fold_batchnorm"]
ORIGINAL = run_pipeline(MODEL, []).original  # as the pipeline hands it on (its nodes named)


def _fake_run(seen: list):
    """run_benchmark stand-in: records what it was asked to measure; 10 ms for the original,
    8 ms for anything else, every round."""

    def run(variants, **kw):
        seen.append(list(variants))
        out = []
        for v in variants:
            ms = 10.0 if not v.passes else 8.0
            out.append(BenchResult(v.label, v.passes, v.settings, compute_stats([ms] * 6), {},
                                   verify={"ok": True, "max_rel_diff": 0.0}, round_medians_ms=(ms,) * 6))
        return out

    return run


def test_the_selection_and_the_what_ifs_last_steps_are_one_variant():
    s = Settings("off")
    final = run_pipeline(MODEL, SELECTION).final
    variants = [Variant("current (3 passes)", final, s, tuple(SELECTION)),
                Variant("original", ORIGINAL, s),
                *Builder(MODEL, s).cumulative(SELECTION).variants,
                *Builder(MODEL, s).leave_one_out(SELECTION).variants]
    m = identity.measure_once(variants)
    labels = [v.label for v in m.requested]
    assert labels == ["current (3 passes)", "original", "+eliminate_identity", "+eliminate_dropout",
                      "all passes", "-eliminate_identity", "-eliminate_dropout"]
    assert m.same_as == {"+eliminate_dropout": "current (3 passes)", "all passes": "current (3 passes)",
                         "-eliminate_dropout": "+eliminate_identity"}
    assert len(m.variants) == 4 and len({identity.variant_key(v) for v in m.variants}) == 4
    assert "'all passes' is the same model and settings as 'current (3 passes)': measured once" in m.notes()
    results = m.expand(_fake_run([])(list(m.variants)))
    assert [r.label for r in results] == labels
    by = {r.label: r for r in results}
    assert by["+eliminate_dropout"].passes == ("eliminate_identity", "eliminate_dropout")
    assert whatif.paired_ratio(by["all passes"], by["current (3 passes)"])[:3] == (1.0, 1.0, 1.0)


def test_settings_and_models_tell_variants_apart_labels_do_not():
    s = Settings("off")
    other_model = run_pipeline(MODEL, ["eliminate_identity"]).final
    m = identity.measure_once([Variant("original", MODEL, s), Variant("original @ORT all", MODEL, Settings("all")),
                               Variant("onnxslim", other_model, s),  # no fusionviz passes, another model
                               Variant("original again", MODEL, s)])
    assert [v.label for v in m.variants] == ["original", "original @ORT all", "onnxslim"]
    assert m.same_as == {"original again": "original"}
    assert m.labels_of(MODEL) == ["original", "original @ORT all", "original again"]


def test_one_label_for_two_variants_is_refused():
    with pytest.raises(errors.InputSpecError, match="names two different variants"):
        identity.measure_once([Variant("x", MODEL), Variant("x", MODEL, Settings("all"))])
    assert len(identity.measure_once([Variant("x", MODEL), Variant("x", MODEL)]).requested) == 1


def test_original_at_the_same_settings():
    def res(label, level, backend="ort"):
        return BenchResult(label, (), Settings(level, backend=backend), compute_stats([1.0] * 5), {})

    results = [res("original", "off"), res("original @ORT all", "all"), res("current", "all"),
               res("original @OpenVINO", "all", "openvino")]
    originals = ["original", "original @ORT all", "original @OpenVINO"]
    assert identity.original_at(results, originals, Settings("all")).label == "original @ORT all"
    assert identity.original_at(results, originals, Settings("all", backend="openvino")).label == "original @OpenVINO"
    assert identity.original_at(results, originals, Settings("basic")) is None


def test_benchmark_page_measures_an_identical_variant_once(monkeypatch):
    from fusionviz.experiment import jobs
    from fusionviz.experiment.plan import Plan

    seen: list = []
    monkeypatch.setattr(bench, "run_benchmark", _fake_run(seen))
    result = run_pipeline(MODEL, SELECTION)
    plan = Plan(True, True, True, False, False, True, True, "off", 1, "CPUExecutionProvider", False, 0.2, False)
    job = jobs.Job(cancel=__import__("threading").Event())
    jobs.run_bench(job, plan, SELECTION, result, {})
    assert job.error is None
    (measured,) = seen
    keys = [identity.variant_key(v) for v in measured]
    assert len(keys) == len(set(keys)), "an identical variant was measured twice"
    labels = [r.label for r in job.results]
    assert {"current (3 passes)", "+eliminate_dropout", "all passes"} <= set(labels)
    assert len(labels) == len(set(labels)) > len(measured)
    assert job.context["same_as"]["all passes"] == "current (3 passes)"
    assert set(job.context["originals"]) == {"original", "original @ORT all"}


def test_cli_bench_measures_two_labels_of_one_variant_once(tmp_path, capsys, monkeypatch):
    seen: list = []
    monkeypatch.setattr(bench, "run_benchmark", _fake_run(seen))
    path = tmp_path / "m.onnx"
    onnx.save_model(MODEL, str(path))
    out = tmp_path / "r.json"
    assert main(["bench", str(path), "--variant", "a=eliminate_identity,eliminate_dropout",
                 "--variant", "b=eliminate_dropout,eliminate_identity,fold_batchnorm",
                 "--variant", "orig=", "--json", str(out)]) == 0
    assert [v.label for v in seen[0]] == ["a", "orig"]
    data = json.loads(out.read_text())
    assert [v["label"] for v in data["variants"]] == ["a", "b", "orig"] and data["same_as"] == {"b": "a"}
    cap = capsys.readouterr()
    assert "'b' is the same model and settings as 'a': measured once" in cap.err
    # Against the original at the same settings, in words: 8 ms / 10 ms every round.
    row_a = next(line for line in cap.out.splitlines() if line.startswith("a "))
    assert "1.25× faster (20% less time); 0.800 [0.800, 0.800]" in row_a and "(the original)" in next(
        line for line in cap.out.splitlines() if line.startswith("orig "))


def test_expand_keeps_each_labels_own_passes():
    m = identity.measure_once([Variant("a", MODEL, passes=("p",)), Variant("b", MODEL, passes=("p", "q"))])
    r = BenchResult("a", ("p",), Settings(), compute_stats([1.0] * 5), {})
    a, b = m.expand([r])
    assert a is r and b == dataclasses.replace(r, label="b", passes=("p", "q"), role=m.requested[1].role)
    assert b.role.name == "b"  # each label keeps its own role too
