"""AppTest for every page: no exception, widgets change results, bad input shows st.error."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from ui_helpers import APP, TIMEOUT, errors_of, goto

from fusionviz import samples
from fusionviz.passes import run_pipeline
from fusionviz.summary import summarize
from fusionviz.ui import state

pytestmark = pytest.mark.skipif(not samples.sample_names(), reason="sample models not built")


def _metric(at, label: str) -> str:
    for m in at.metric:
        if m.label == label:
            return m.value
    raise AssertionError(f"no metric {label!r}; have {[m.label for m in at.metric]}")


def _graph_dots(at) -> list[str]:
    """DOT texts drawn by st.graphviz_chart (fallback) or SVG handed to the pan/zoom component."""
    out = [c.proto.spec for c in at.get("graphviz_chart")]
    for el in at.get("component_instance") if hasattr(at, "get") else []:
        out.append(str(el.proto))
    return out


def _open_textbook(at) -> None:
    goto(at, "model")
    at.button(key="sample_textbook").click().run()
    assert not at.exception
    assert at.session_state[state.ORIGIN]["name"] == "textbook"


# ------------------------------------------------------------------ app entry


def test_app_opens_on_default_sample_with_passes_and_graph(app):
    assert errors_of(app) == []
    loaded = app.session_state[state.MODEL]
    assert loaded.name == "resnet_ts.onnx"
    assert app.session_state[state.PASSES], "no pass selected on the first screen"
    assert _graph_dots(app), "the first screen draws no graph"
    assert app.query_params["sample"] == ["resnet_ts"] or app.query_params["sample"] == "resnet_ts"


def test_query_params_choose_sample_and_passes():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "textbook"
    at.query_params["passes"] = "eliminate_identity"
    at.run()
    assert not at.exception
    assert at.session_state[state.ORIGIN]["name"] == "textbook"
    assert at.session_state[state.PASSES] == ["eliminate_identity"]


def test_cli_args_after_double_dash():
    assert state.parse_cli(["app.py", "--sample", "bert_ts"]) == {"sample": "bert_ts", "model": None}
    assert state.parse_cli(["app.py", "--", "--model", "/x.onnx"]) == {"sample": None, "model": "/x.onnx"}
    assert state.parse_cli(["app.py", "--unknown", "1"]) == {"sample": None, "model": None}


# ------------------------------------------------------------------ model page


def test_model_page_sample_gallery_switches_model_and_summary(app):
    _open_textbook(app)
    want = summarize(samples.load_sample("textbook").proto).node_count
    assert _metric(app, "Nodes") == f"{want:,}"
    assert errors_of(app) == []


def test_bad_upload_shows_error_and_app_keeps_working(app):
    goto(app, "model")
    before = app.session_state[state.MODEL].sha256
    app.file_uploader(key="upload").set_value(("broken.onnx", b"\x08\x01garbage" * 10,
                                               "application/octet-stream")).run()
    assert not app.exception
    errs = errors_of(app)
    assert len(errs) == 1 and "not an ONNX model" in errs[0] and "\n" not in errs[0]
    assert app.session_state[state.MODEL].sha256 == before
    # A good upload afterwards works and replaces the model.
    data = samples.sample_path("textbook").read_bytes()
    app.file_uploader(key="upload").set_value(("textbook.onnx", data, "application/octet-stream")).run()
    assert not app.exception
    assert errors_of(app) == []
    assert app.session_state[state.MODEL].name == "textbook.onnx"
    assert app.session_state[state.ORIGIN]["kind"] == "upload"
    goto(app, "passes")
    assert errors_of(app) == []


def test_empty_upload_shows_error(app):
    goto(app, "model")
    app.file_uploader(key="upload").set_value(("empty.onnx", b"", "application/octet-stream")).run()
    assert not app.exception
    assert any("empty" in e for e in errors_of(app))


def test_symbolic_dims_are_set_once_and_used(app):
    goto(app, "model")
    app.button(key="sample_bert_ts").click().run()
    sym = state.symbolic_dims(app.session_state[state.MODEL])
    assert sym, "bert_ts should have symbolic dims"
    dim = next(name for _, name, _ in sym if "seq" in name.lower() or "len" in name.lower())
    app.number_input(key=f"dim_{dim}").set_value(16).run()
    assert not app.exception
    assert app.session_state[state.DIMS][dim] == 16
    # The value survives a page switch and back.
    goto(app, "passes")
    goto(app, "model")
    assert app.number_input(key=f"dim_{dim}").value == 16


# ------------------------------------------------------------------ passes page


def test_passes_toggle_changes_node_count_and_graph(app):
    _open_textbook(app)
    goto(app, "passes")
    app.button(key="preset_none").click().run()
    assert app.session_state[state.PASSES] == []
    n0 = int(_metric(app, "Nodes").replace(",", ""))
    dots0 = _graph_dots(app)
    app.toggle(key="pass_eliminate_identity").set_value(True).run()
    assert not app.exception
    assert app.session_state[state.PASSES] == ["eliminate_identity"]
    n1 = int(_metric(app, "Nodes").replace(",", ""))
    assert n1 < n0
    assert _graph_dots(app) != dots0
    assert errors_of(app) == []


def test_presets_select_categories(app):
    goto(app, "passes")
    from fusionviz.passes import all_passes

    app.button(key="preset_simplify").click().run()
    assert set(app.session_state[state.PASSES]) == {p.name for p in all_passes() if p.category.value == "simplify"}
    app.button(key="preset_everything").click().run()
    assert set(app.session_state[state.PASSES]) == {p.name for p in all_passes() if p.exact}
    app.button(key="preset_ort_basic").click().run()
    basic = set(app.session_state[state.PASSES])
    assert "eliminate_identity" in basic and "fuse_attention" not in basic
    assert not app.exception


def test_passes_verification_and_change_focus(app):
    _open_textbook(app)
    goto(app, "passes")
    app.button(key="preset_fusions").click().run()
    assert _metric(app, "Verification") == "equal"
    buttons = [b for b in app.button if (b.key or "").startswith("chg_")]
    assert buttons, "no change listed"
    buttons[0].click().run()
    assert not app.exception
    assert app.session_state[state.FOCUS]
    assert app.session_state[state.COMPARE].startswith("step:")


# ------------------------------------------------------------------ graph page


def test_graph_page_search_focus_and_compare(app):
    _open_textbook(app)
    goto(app, "graph")
    assert errors_of(app) == []
    app.text_input(key="graph_search").input("Conv").run()
    pick = app.selectbox(key="graph_search_pick").value
    app.button(key="graph_focus_btn").click().run()
    assert app.session_state[state.FOCUS] == pick
    assert not app.exception and errors_of(app) == []
    app.button(key="graph_clear_focus").click().run()
    assert app.session_state[state.FOCUS] is None
    app.selectbox(key="graph_compare").set_value("step:1").run()
    assert app.session_state[state.COMPARE] == "step:1"
    assert any("step 1" in m.value for m in app.markdown)
    app.toggle(key="graph_collapse").set_value(False).run()
    assert app.session_state[state.GRAPH_OPTS]["collapse"] is False
    assert not app.exception and errors_of(app) == []


# ------------------------------------------------------------------ benchmark page


@pytest.mark.slow
def test_benchmark_short_run_gives_results_table_and_downloads(app):
    _open_textbook(app)
    goto(app, "bench")
    app.slider(key="bench_min_time").set_value(0.2).run()
    app.checkbox(key="bench_v_original").uncheck().run()
    app.checkbox(key="bench_v_reference").uncheck().run()
    app.button(key="bench_run").click().run(timeout=180)
    assert not app.exception
    bench = app.session_state[state.BENCH]
    assert bench is not None, errors_of(app)
    labels = [r.label for r in bench["results"]]
    assert len(labels) == 1 and labels[0].startswith("current")
    assert all(r.stats is not None for r in bench["results"])
    assert len(app.dataframe) >= 1
    assert {"dl_json", "dl_md", "dl_model"} <= {d.key for d in app.get("download_button")}


@pytest.mark.slow
def test_benchmark_also_on_openvino_times_both_runtimes_in_one_run(app):
    pytest.importorskip("openvino")
    _open_textbook(app)
    goto(app, "bench")
    app.slider(key="bench_min_time").set_value(0.2).run()
    app.checkbox(key="bench_v_reference").uncheck().run()
    app.multiselect(key="bench_backends").set_value(["openvino"]).run()
    app.button(key="bench_run").click().run(timeout=180)
    assert not app.exception
    bench = app.session_state[state.BENCH]
    assert bench is not None, errors_of(app)
    by = {r.label: r for r in bench["results"]}
    assert {"original", "original @OpenVINO"} <= set(by)
    assert any(k.startswith("current") and k.endswith("@OpenVINO") for k in by)
    assert by["original @OpenVINO"].settings.backend == "openvino"
    assert by["original @OpenVINO"].stats is not None and by["original @OpenVINO"].verify["ok"]


def test_tune_winner_on_another_backend_is_applied_as_that_backend(app):
    from fusionviz.tune import TuneConfig, TuneResult, TuneStep

    best = TuneConfig(passes=(), backend="openvino")
    res = TuneResult(best=best, best_ms=1.0, baseline_ms=1.5, steps=(TuneStep("backend openvino", best, 1.0, True),),
                     seconds=3.0, budget_s=20.0, inactive_passes=(), budget_exhausted=False,
                     recommendation="confirmed: 0 passes @ OpenVINO runs at x0.667")
    _show_tune(app, res)
    assert any("confirmed: 0 passes @ OpenVINO" in c.value for c in app.caption)
    app.button(key="tune_apply").click().run()
    assert app.session_state[state.WIDGETS]["bench_backends"] == ["openvino"]
    assert "bench_level" not in app.session_state[state.WIDGETS] or \
        app.session_state[state.WIDGETS]["bench_level"] is not None


# ------------------------------------------------------------------ learn page


def test_learn_show_me_sets_model_passes_and_view(app):
    goto(app, "learn")
    app.button(key="learn_operation_fusion").click().run()
    assert not app.exception
    assert app.session_state[state.ORIGIN]["name"] == "resnet_ts"
    assert app.session_state[state.PASSES]
    assert errors_of(app) == []


def test_guided_tour_next_and_previous(app):
    goto(app, "learn")
    from fusionviz.ui.learn_page import CONCEPTS

    # A click that calls st.switch_page runs the target page; AppTest itself stays on the page
    # it was told, so each step follows the switch with goto() (widget ids include the page).
    app.button(key="tour_start").click().run()
    assert app.session_state[state.TOUR] == 0
    goto(app, CONCEPTS[0].view)
    app.button(key="tour_next").click().run()
    assert app.session_state[state.TOUR] == 1
    goto(app, CONCEPTS[1].view)
    app.button(key="tour_prev").click().run()
    assert app.session_state[state.TOUR] == 0
    goto(app, CONCEPTS[0].view)
    app.button(key="tour_exit").click().run()
    assert app.session_state[state.TOUR] is None
    assert not app.exception


# ------------------------------------------------------------------ cache and guard


def test_prefix_cached_pipeline_equals_one_full_run():
    from fusionviz.ui import cache

    loaded = samples.load_sample("textbook")
    names = state.canonical([p.name for p in __import__("fusionviz.passes", fromlist=["x"]).all_passes()
                             if p.exact])
    full = run_pipeline(loaded.proto, names)
    got = cache.pipeline(loaded.sha256, tuple(names), (), loaded.proto)
    assert [s.node_count for s in got.snapshots] == [s.node_count for s in full.snapshots]
    assert [len(r.changes) for r in got.reports] == [len(r.changes) for r in full.reports]


def test_guard_turns_exceptions_into_one_error_line():
    def script():
        import streamlit as st

        from fusionviz import errors
        from fusionviz.ui.common import guard

        with guard("testing"):
            raise errors.InputSpecError("Bad thing.")
        with guard("testing"):
            raise RuntimeError("internal detail")
        st.write("still running")

    at = AppTest.from_function(script).run()
    assert not at.exception
    assert errors_of(at)[0] == "Bad thing."
    assert "internal detail" not in errors_of(at)[1] and "server log" in errors_of(at)[1]
    assert at.markdown[-1].value == "still running"


def test_graph_page_shows_onnxruntime_own_graph(app):
    _open_textbook(app)
    goto(app, "graph")
    app.selectbox(key="graph_compare").set_value("ort:basic").run()
    assert not app.exception
    assert errors_of(app) == []
    assert any("onnxruntime itself produces" in m.value for m in app.markdown)


def _show_tune(app, res) -> None:
    """The Benchmark page with ``res`` as the textbook model's auto what-if result."""
    _open_textbook(app)
    app.session_state["fv_tune"] = {"result": res, "sha256": app.session_state[state.MODEL].sha256}
    app.session_state["fv_tune_open"] = True
    goto(app, "bench")


def test_tune_result_is_shown_and_applied(app):
    from fusionviz.tune import Confirmed, TuneConfig, TuneResult, TuneStep

    best = TuneConfig(passes=("eliminate_identity",), level="basic")
    confirmation = (Confirmed("baseline", TuneConfig((), "all"), 1.5, 1.0, 1.0, 1.0, True),
                    Confirmed("candidate", best, 1.0, 0.667, 0.64, 0.70, True))
    res = TuneResult(best=best, best_ms=1.0, baseline_ms=1.5,
                     steps=(TuneStep("start", best, 1.2, True), TuneStep("level", best, 1.0, True, chosen=True)),
                     seconds=3.0, budget_s=20.0, inactive_passes=(), budget_exhausted=False,
                     confirmation=confirmation)
    _show_tune(app, res)
    assert any("1.5× faster (33% less time; ratio 0.667, 95% interval [0.640, 0.700])" in s.value
               for s in app.success)
    app.button(key="tune_apply").click().run()
    assert app.session_state[state.PASSES] == ["eliminate_identity"]
    assert app.session_state[state.WIDGETS]["bench_level"] == "basic"
