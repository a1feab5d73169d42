"""The Benchmark page's claims (AppTest, seeded results): the results table compares every
variant with the original at its own settings, the tune winner is called faster only when its
interval says so, and the what-if table beside the chart reads the chart's own effects."""

from __future__ import annotations

from ui_helpers import errors_of, goto

from fusionviz.bench import BenchResult, Settings, compute_stats
from fusionviz.experiment.variant import Role
from fusionviz.ui import state
from fusionviz.ui.bench_page import SAME_SETTINGS

DRIFT = (1.0, 1.4, 1.1, 1.8, 1.2, 1.5, 1.0, 1.3)


ROLES = {"original": Role("original"), "original @ORT all": Role("level", "all"),
         "original @ORT basic": Role("level", "basic"), "+eliminate_identity": Role("step", "eliminate_identity")}


def _res(label: str, ms: float, level: str, passes: tuple[str, ...] = ()) -> BenchResult:
    rounds = tuple(ms * d for d in DRIFT)
    return BenchResult(label, passes, Settings(level=level), compute_stats(list(rounds)), {},
                       verify={"ok": True, "max_rel_diff": 0.0}, round_medians_ms=rounds, role=ROLES.get(label))


def _seed(app, results, originals) -> None:
    goto(app, "model")
    app.button(key="sample_textbook").click().run()
    app.session_state[state.BENCH] = {
        "results": results,
        "context": {"sha256": app.session_state[state.MODEL].sha256, "settings": {"level": "off"},
                    "originals": originals, "same_as": {}}}
    goto(app, "bench")
    assert not app.exception and errors_of(app) == []


def _table(app):
    return next(d.value for d in app.dataframe if SAME_SETTINGS in d.value.columns)


def test_results_table_compares_with_the_original_at_the_same_level(app):
    results = [_res("current (1 pass)", 8.0, "off", ("eliminate_identity",)), _res("original", 10.0, "off"),
               _res("original @ORT all", 6.0, "all"), _res("original @ORT basic", 7.0, "basic")]
    _seed(app, results, ["original", "original @ORT all", "original @ORT basic"])
    df = _table(app).set_index("variant")
    # The current selection at level off: against the original at off, and against the reference (all).
    assert df.loc["current (1 pass)", SAME_SETTINGS].startswith("1.25× faster (20% less time; ratio 0.800")
    assert df.loc["current (1 pass)", "vs original @ORT all"].startswith("1.33× slower (33% more time")
    assert df.loc["original @ORT basic", SAME_SETTINGS] == "(the original)"


def test_a_variant_with_no_original_at_its_settings_says_so(app):
    results = [_res("current (1 pass)", 8.0, "basic", ("eliminate_identity",)), _res("original", 10.0, "off")]
    _seed(app, results, ["original"])
    df = _table(app).set_index("variant")
    assert df.loc["current (1 pass)", SAME_SETTINGS].startswith("not measured (no original under ORT basic")


def test_what_if_table_reads_the_charts_effects(app):
    results = [_res("original", 10.0, "off"), _res("+eliminate_identity", 8.0, "off", ("eliminate_identity",))]
    _seed(app, results, ["original"])
    frame = next(d.value for d in app.dataframe if "claim" in d.value.columns)
    assert list(frame["variant"]) == ["+eliminate_identity"] and list(frame["vs"]) == ["original"]
    assert list(frame["claim"]) == ["1.25× faster (20% less time)"]


def test_tune_without_an_established_gain_is_not_called_faster(app):
    from fusionviz.tune import Confirmed, TuneConfig, TuneResult

    base = TuneConfig((), "all")
    cand = TuneConfig(("eliminate_identity",), "basic")
    confirmation = (Confirmed("baseline", base, 10.0, 1.0, 1.0, 1.0, True),
                    Confirmed("candidate", cand, 9.09, 0.909, 0.543, 1.026, True))
    res = TuneResult(best=cand, best_ms=9.09, baseline_ms=10.0, steps=(), seconds=3.0, budget_s=20.0,
                     inactive_passes=(), budget_exhausted=False, confirmation=confirmation)
    goto(app, "model")
    app.button(key="sample_textbook").click().run()
    app.session_state["fv_tune"] = {"result": res, "sha256": app.session_state[state.MODEL].sha256}
    app.session_state["fv_tune_open"] = True
    goto(app, "bench")
    assert not app.exception
    assert not any("faster" in s.value for s in app.success)
    assert any("no measurable difference (ratio 0.909, 95% interval [0.543, 1.026])" in i.value for i in app.info)
