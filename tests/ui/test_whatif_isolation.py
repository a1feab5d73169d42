"""What-if isolates passes: one onnxruntime level per run, effects as paired ratios with intervals."""

from __future__ import annotations

import dataclasses

import onnx.parser
import pytest

from fusionviz.bench import BenchResult, Settings, Variant, compute_stats, whatif
from fusionviz.experiment.build import Builder, WhatIf, check_isolated
from fusionviz.experiment.variant import Role
from fusionviz.ortlevels import LEVELS

MODEL = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) {
  a = Identity(x)
  b = Relu(a)
  c = Dropout(b)
  y = Sigmoid(c)
}""")
PASSES = ["eliminate_identity", "eliminate_dropout", "fold_batchnorm"]


@pytest.mark.parametrize("level", LEVELS)
def test_no_cumulative_step_changes_the_level(level):
    s = Settings(level=level, threads=2)
    w = Builder(MODEL, s).cumulative(PASSES)
    assert {v.settings for v in w.variants} == {s}
    assert w.settings == s and f"level '{level}'" in w.title() and "2 threads" in w.title()
    # Neighbouring steps differ by exactly one pass, never by a setting.
    for a, b in zip(w.variants, w.variants[1:], strict=False):
        assert a.settings == b.settings
        assert len(b.passes) == len(a.passes) + 1 and b.passes[: len(a.passes)] == a.passes


@pytest.mark.parametrize("level", LEVELS)
def test_no_leave_one_out_variant_changes_the_level(level):
    s = Settings(level=level)
    w = Builder(MODEL, s).leave_one_out(PASSES)
    assert {v.settings for v in w.variants} == {s}
    full = set(w.variants[0].passes)
    for v in w.variants[1:]:
        assert len(full - set(v.passes)) == 1 and set(v.passes) <= full


def test_a_what_if_with_another_level_inside_is_refused():
    s = Settings(level="off")
    vs = [Variant("original", MODEL, s), Variant("+eliminate_identity", MODEL, Settings(level="all"))]
    with pytest.raises(ValueError, match="differ only by passes"):
        check_isolated(vs, s)
    with pytest.raises(ValueError):
        WhatIf(tuple(vs), (), s)


def _res(label: str, rounds: list[float], level: str = "off", passes: tuple[str, ...] = (),
         role: Role | None = None) -> BenchResult:
    return BenchResult(label, passes, Settings(level=level), compute_stats(rounds), {},
                       round_medians_ms=tuple(rounds), role=role)


def test_effects_read_only_the_what_if_steps_among_other_variants():
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.0]
    faster = [x * 0.8 for x in base]
    same = [x * f for x, f in zip(faster, [1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99], strict=True)]
    results = [
        _res("current (2 passes)", faster, passes=("a", "b")),
        _res("original", base, role=Role("original")),
        _res("original @ORT all", [x * 0.5 for x in base], level="all", role=Role("level", "all")),
        _res("+a", faster, passes=("a",), role=Role("step", "a")),
        _res("+b", same, passes=("a", "b"), role=Role("step", "b")),
    ]
    effects, settings = whatif.cumulative_effects(results)
    assert settings == Settings(level="off")
    assert [e.name for e in effects] == ["a", "b"]  # the ORT-all reference is not a step
    a, b = effects
    assert a.baseline == "original" and a.ratio == pytest.approx(0.8)
    assert a.ci_low <= a.ratio <= a.ci_high and not a.within_noise
    assert a.describe().startswith("1.25× faster (20% less time; ratio 0.800, 95% interval [")
    assert b.baseline == "+a" and b.within_noise and b.describe().startswith("no measurable difference (ratio 1.0")
    assert "faster" not in b.describe() and "slower" not in b.describe()
    levels = whatif.level_effects(results)
    assert [(e.name, round(e.ratio, 3)) for e in levels] == [("ORT all", 0.5)]


def test_a_step_measured_under_another_level_is_refused():
    base = [10.0] * 6
    results = [_res("original", base, role=Role("original")),
               _res("+a", base, level="all", passes=("a",), role=Role("step", "a"))]
    with pytest.raises(ValueError, match="differ only by passes"):
        whatif.cumulative_effects(results)


def test_leave_one_out_effects_and_failed_variants():
    base = [8.0, 8.1, 7.9, 8.0, 8.2, 7.8]
    results = [_res("all passes", base, passes=("a", "b"), role=Role("all")),
               _res("-a", [x * 1.25 for x in base], passes=("b",), role=Role("drop", "a")),
               BenchResult("-b", ("a",), Settings(), None, {}, error="worker crashed", role=Role("drop", "b"))]
    effects, settings = whatif.leave_one_out_effects(results)
    assert settings.level == "off"
    assert effects[0].name == "a" and effects[0].pct == pytest.approx(25.0)
    assert effects[1].ratio is None and effects[1].describe() == "worker crashed"
    assert not effects[1].within_noise


def test_paired_ratio_pairs_rounds_so_drift_cancels():
    # The machine slows down over the run; both variants slow alike, round by round.
    drift = [1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1]
    a = _res("+a", [9.0 * d for d in drift])
    b = _res("original", [10.0 * d for d in drift])
    ratio, lo, hi, n = whatif.paired_ratio(a, b)
    assert n == 8 and ratio == pytest.approx(0.9) and lo == pytest.approx(0.9) and hi == pytest.approx(0.9)
    # Compared by their overall medians, the spread would hide it.
    assert a.stats.ci_high_ms > b.stats.ci_low_ms


def test_effect_as_dict_is_plain():
    e = whatif.effect(_res("+a", [9.0] * 6), _res("original", [10.0] * 6), "a")
    d = e.as_dict()
    assert d["pct"] == pytest.approx(-10.0) and d["within_noise"] is False
    assert dataclasses.is_dataclass(e)
