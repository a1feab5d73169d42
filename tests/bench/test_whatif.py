"""What-if variant builders and reading their results back."""

from __future__ import annotations

import onnx.parser

from fusionviz.bench import BenchResult, Settings, compute_stats
from fusionviz.bench.whatif import cumulative_steps, leave_one_out_table
from fusionviz.experiment.build import Builder
from fusionviz.experiment.variant import Role

MODEL = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) {
  a = Identity(x)
  b = Relu(a)
  c = Dropout(b)
  y = Sigmoid(c)
}""")
PASSES = ["eliminate_identity", "eliminate_dropout", "fold_batchnorm"]


def _node_ops(m):
    return [n.op_type for n in m.graph.node]


def test_cumulative_variants_apply_passes_one_by_one_and_skip_no_ops():
    w = Builder(MODEL, Settings(level="basic")).cumulative(PASSES)
    assert [v.label for v in w.variants] == ["original", "+eliminate_identity", "+eliminate_dropout"]
    assert [v.role for v in w.variants] == [Role("original"), Role("step", "eliminate_identity"),
                                            Role("step", "eliminate_dropout")]
    assert w.skipped == ("fold_batchnorm",)  # nothing to fold: identical model, not measured
    assert [v.passes for v in w.variants] == [(), ("eliminate_identity",),
                                              ("eliminate_identity", "eliminate_dropout")]
    assert _node_ops(w.variants[1].model) == ["Relu", "Dropout", "Sigmoid"]
    assert _node_ops(w.variants[2].model) == ["Relu", "Sigmoid"]
    assert all(v.settings.level == "basic" for v in w.variants)
    assert len(Builder(MODEL).cumulative(PASSES, skip_unchanged=False).variants) == 4


def test_leave_one_out_variants_drop_each_active_pass():
    w = Builder(MODEL).leave_one_out(PASSES)
    assert [v.label for v in w.variants] == ["all passes", "-eliminate_identity", "-eliminate_dropout"]
    assert [v.role.kind for v in w.variants] == ["all", "drop", "drop"]
    assert _node_ops(w.variants[0].model) == ["Relu", "Sigmoid"]
    assert _node_ops(w.variants[1].model) == ["Identity", "Relu", "Sigmoid"]
    assert _node_ops(w.variants[2].model) == ["Relu", "Dropout", "Sigmoid"]


def test_level_variants_say_their_level_and_skip_the_run_level():
    vs = Builder(MODEL, Settings(level="off")).levels(("off", "basic", "all"))
    assert [(v.label, v.settings.level, v.role) for v in vs] == [
        ("original @ORT basic", "basic", Role("level", "basic")), ("original @ORT all", "all", Role("level", "all"))]


def test_labels_are_made_from_roles_and_settings_in_one_place():
    from fusionviz.experiment import labels

    run = Settings(level="off")
    assert labels.label(Role("original"), run, run) == "original"
    assert labels.label(Role("original"), Settings(level="all"), run) == "original @ORT all"
    assert labels.label(Role("selection", "+x"), run, run) == "+x"  # a name that looks like a step is a name
    assert labels.label(Role("backend", "openvino"), Settings(level="all", backend="openvino"), run) == \
        "original @OpenVINO"
    assert labels.label(Role("drop", "p"), Settings(level="off", denormal_as_zero=True), run) == \
        "-p @ORT off, denormals as zero"
    assert labels.label(Role("selection", "ours"), Settings(level="off"), None) == "ours @ORT off"


def test_a_selection_named_like_a_step_is_read_as_a_selection():
    """A CLI ``--variant "+x=..."`` is a selection: what-if reads roles, not labels."""
    from fusionviz.bench import whatif

    rs = [BenchResult("original", (), Settings(), compute_stats([10.0] * 5), {}, round_medians_ms=(10.0,) * 5,
                      role=Role("original")),
          BenchResult("+x", ("eliminate_identity",), Settings(), compute_stats([8.0] * 5), {},
                      round_medians_ms=(8.0,) * 5, role=Role("selection", "+x"))]
    assert whatif.cumulative_effects(rs) == ([], None)


def _res(label, ms, static):
    role = Role("drop", label[1:]) if label.startswith("-") else None
    return BenchResult(label, (), Settings(), compute_stats([ms] * 5),
                       {"static_sum_intermediate_bytes": static, "static_peak_reuse_bytes": static // 2,
                        "rss_run_mb": 10.0}, role=role)


def test_cumulative_steps_give_incremental_deltas():
    steps = cumulative_steps([_res("original", 10.0, 1000), _res("+a", 8.0, 600), _res("+b", 8.0, 600)])
    assert steps[0]["delta_ms"] is None
    assert steps[1]["delta_ms"] == -2.0 and steps[1]["delta_pct"] == -20.0
    assert steps[1]["delta_static_sum_bytes"] == -400 and steps[1]["delta_static_peak_bytes"] == -200
    assert steps[2]["delta_ms"] == 0.0 and steps[2]["delta_rss_mb"] == 0.0


def test_leave_one_out_table_contributions():
    rows = leave_one_out_table([_res("all passes", 8.0, 600), _res("-a", 10.0, 1000)])
    assert rows == [{"pass": "a", "label": "-a", "median_ms": 10.0, "contribution_ms": 2.0,
                     "contribution_pct": 25.0, "static_sum_bytes_saved": 400, "error": None}]


def test_cli_variants_have_roles_and_a_plus_label_stays_a_selection():
    import argparse

    from fusionviz.commands.bench import build_variants

    args = argparse.Namespace(variant=["+x=eliminate_identity"], whatif=None, reference=False, backend="ort,openvino")
    vs = build_variants(MODEL, args, Settings(level="off"), None)
    assert [(v.label, v.role.kind, v.settings.backend) for v in vs] == [
        ("+x", "selection", "ort"), ("+x @OpenVINO", "selection", "openvino")]
    args = argparse.Namespace(variant=[], whatif="cumulative", reference=False, backend="ort")
    vs = build_variants(MODEL, args, Settings(level="off"), None)
    assert [v.role.kind for v in vs] == ["original"] + ["step"] * (len(vs) - 1)
