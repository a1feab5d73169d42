"""fusionviz.tune: the search logic (with a deterministic fake benchmark) and one real tiny run."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

import fusionviz.bench as bench
from fusionviz import cli, errors
from fusionviz.bench import BenchResult, compute_stats
from fusionviz.passes import run_pipeline
from fusionviz.tune import tune
from fusionviz.verify import verify


def _tiny() -> onnx.ModelProto:
    """Conv + BatchNorm + Relu behind an Identity: several exact passes change it."""
    rng = np.random.default_rng(0)
    inits = [
        onh.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
        onh.from_array(np.ones(4, np.float32), "g"),
        onh.from_array(np.zeros(4, np.float32), "b"),
        onh.from_array(np.zeros(4, np.float32), "mean"),
        onh.from_array(np.ones(4, np.float32), "var"),
    ]
    nodes = [
        oh.make_node("Identity", ["x"], ["xi"], name="id"),
        oh.make_node("Conv", ["xi", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("BatchNormalization", ["c", "g", "b", "mean", "var"], ["bn"], name="bn"),
        oh.make_node("Relu", ["bn"], ["y"], name="relu"),
    ]
    g = oh.make_graph(nodes, "tiny", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _fake_bench(cost):
    """A run_benchmark stand-in: latency = cost(passes, settings); verification always ok."""
    calls = []

    def run(variants, **kw):
        calls.append([v.label for v in variants])
        out = []
        for v in variants:
            ms = cost(v.passes, v.settings)
            out.append(BenchResult(v.label, v.passes, v.settings, compute_stats([ms] * 5), {},
                                   verify={"ok": True, "max_rel_diff": 0.0}))
        return out

    return run, calls


def test_greedy_drops_a_pass_that_slows_things_down_then_picks_the_level(monkeypatch):
    def cost(passes, settings):
        ms = 10.0 - 0.5 * len(passes)
        if "fold_batchnorm" in passes:
            ms += 3.0  # pretend this fusion hurts: the search must drop it
        if settings.level == "extended":
            ms -= 1.0
        return ms

    run, calls = _fake_bench(cost)
    monkeypatch.setattr(bench, "run_benchmark", run)
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01)
    assert "fold_batchnorm" not in result.best.passes
    assert result.best.level == "extended"
    drops = [s for s in result.steps if s.chosen and s.phase.startswith("drop")]
    assert [s.phase for s in drops] == ["drop fold_batchnorm"]
    assert len(calls) >= 4  # greedy rounds, the level round, the confirmation
    assert result.best_ms == pytest.approx(cost(result.best.passes, bench.Settings("extended")))
    assert json.dumps(result.as_dict())


def test_unverified_variants_never_win(monkeypatch):
    def run(variants, **kw):
        out = []
        for v in variants:
            bad = v.settings.level == "off"  # fastest, but wrong
            out.append(BenchResult(v.label, v.passes, v.settings, compute_stats([1.0 if bad else 5.0] * 5), {},
                                   verify={"ok": not bad, "max_rel_diff": 1.0 if bad else 0.0}))
        return out

    monkeypatch.setattr(bench, "run_benchmark", run)
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01)
    assert result.best.level != "off"
    assert any(s.config.level == "off" and not s.verified for s in result.steps)


def test_budget_bounds_the_greedy_phase(monkeypatch):
    run, calls = _fake_bench(lambda passes, settings: 10.0 - len(passes))
    monkeypatch.setattr(bench, "run_benchmark", run)
    result = tune(_tiny(), budget_s=0.001, min_time_s=0.01)
    assert result.budget_exhausted
    assert len(calls) == 2  # only the level round ran, then the confirmation


def test_tune_rejects_precision_passes():
    with pytest.raises(errors.InputSpecError):
        tune(_tiny(), passes=["fp16"], budget_s=10)


def test_cli_tune_on_tiny_model_returns_verified_winner(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_tiny().SerializeToString())
    out = tmp_path / "tune.json"
    assert cli.main(["tune", str(path), "--budget-s", "8", "--min-time-s", "0.05", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["best"]["level"] in ("off", "basic", "extended", "all")
    assert data["steps"] and "best:" in capsys.readouterr().err
    # a real (tiny) search: the chosen variant verified, and its passes keep the outputs equal
    (winner,) = [s for s in data["steps"] if s["chosen"] and s["phase"] in ("level", "denormal", "baseline")]
    assert winner["verified"] and winner["median_ms"] > 0 and data["baseline_ms"] > 0
    model = _tiny()
    assert verify(model, run_pipeline(model, data["best"]["passes"]).final).ok
    assert cli.main(["tune", str(path), "--budget-s", "0"]) == 2


def _by_backend(cost_of_backend, *, fail=()):
    """A fake benchmark where latency depends on (call number, backend, passes); ``fail`` backends
    cannot compile the model."""
    calls = []

    def run(variants, **kw):
        calls.append([v.label for v in variants])
        out = []
        for v in variants:
            b = v.settings.backend
            if b in fail:
                out.append(BenchResult(v.label, v.passes, v.settings, None, {},
                                       error="OpenVINO cannot compile the model: input rank has to be static"))
                continue
            ms = cost_of_backend(len(calls), b, v.passes, v.settings)
            out.append(BenchResult(v.label, v.passes, v.settings, compute_stats([ms] * 5), {"rss_run_mb": 1.0},
                                   verify={"ok": True, "max_rel_diff": 0.0}, round_medians_ms=(ms,) * 5,
                                   backend_info={"backend": b, "title": b, "version": "1",
                                                 "CPU_DENORMALS_OPTIMIZATION": v.settings.denormal_as_zero}))
        return out

    return run, calls


def test_search_spans_backends_and_the_confirmation_reports_the_interval(monkeypatch):
    def cost(call, backend, passes, settings):
        return {"ort": 10.0 - 0.1 * len(passes), "openvino": 6.0 + 0.2 * len(passes)}[backend]

    run, calls = _by_backend(cost)
    monkeypatch.setattr(bench, "run_benchmark", run)
    monkeypatch.setattr("fusionviz.tune.available_backends", lambda names: (("ort", "openvino"), {}))
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01, backends=("ort", "openvino"))
    assert result.best.backend == "openvino" and result.best.passes == ()
    assert result.ratio == pytest.approx(0.6)
    lo, hi = result.ratio_ci
    assert lo <= result.ratio <= hi
    roles = [c.role for c in result.confirmation]
    assert roles[0] == "baseline" and "single" in roles
    data = result.as_dict()
    assert data["best"]["backend"] == "openvino" and data["best"]["level"] is None
    assert data["best"]["applied"]["CPU_DENORMALS_OPTIMIZATION"] in (True, False)
    assert data["ratio_vs_best_single"] == pytest.approx(1.0)
    assert any(s["phase"] == "backend openvino" for s in data["steps"])
    assert json.dumps(data)


def test_a_winner_slower_in_the_confirmation_gives_way_to_the_best_single_backend(monkeypatch):
    confirming = {"now": False}

    def cost(call, backend, passes, settings):
        if backend == "openvino":
            return 7.0
        if passes and settings.level == "extended":
            return 8.0 if confirming["now"] else 5.0  # lucky in the search, slow when measured again
        return 10.0

    run, calls = _by_backend(cost)

    def watching(variants, **kw):
        confirming["now"] = any(v.role.name == "candidate" for v in variants)
        return run(variants, **kw)

    monkeypatch.setattr(bench, "run_benchmark", watching)
    monkeypatch.setattr("fusionviz.tune.available_backends", lambda names: (("ort", "openvino"), {}))
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01, backends=("ort", "openvino"))
    assert result.candidate is not None and result.candidate.backend == "ort"
    assert result.best == bench_single("openvino")
    assert result.ratio == pytest.approx(0.7)
    assert "recommending that" in result.recommendation


def test_a_winner_within_the_margin_of_a_single_backend_gives_way_to_it(monkeypatch):
    """OpenVINO with flush-to-zero 1% faster than OpenVINO alone is noise: the plain backend wins."""
    from fusionviz.tune import CONFIRM_MARGIN

    def cost(call, backend, passes, settings):
        if backend == "openvino":
            return 7.0 * (1 - CONFIRM_MARGIN / 2) if settings.denormal_as_zero else 7.0
        return 10.0

    run, calls = _by_backend(cost)
    monkeypatch.setattr(bench, "run_benchmark", run)
    monkeypatch.setattr("fusionviz.tune.available_backends", lambda names: (("ort", "openvino"), {}))
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01, backends=("ort", "openvino"))
    assert result.candidate is not None and result.candidate.denormal_as_zero
    assert result.best == bench_single("openvino")
    assert "within 2%" in result.recommendation


def test_another_backend_within_the_margin_of_onnxruntime_is_not_recommended(monkeypatch):
    def cost(call, backend, passes, settings):
        return 9.95 if backend == "openvino" else 10.0

    run, calls = _by_backend(cost)
    monkeypatch.setattr(bench, "run_benchmark", run)
    monkeypatch.setattr("fusionviz.tune.available_backends", lambda names: (("ort", "openvino"), {}))
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01, backends=("ort", "openvino"))
    assert result.best.backend == "ort" and result.best.passes == () and result.best.level == "all"


def bench_single(backend):
    from fusionviz.tune import TuneConfig

    return TuneConfig((), backend=backend)


def test_a_backend_that_cannot_compile_is_one_line_and_the_others_run(monkeypatch):
    run, calls = _by_backend(lambda call, b, passes, s: 10.0 - len(passes), fail=("openvino",))
    monkeypatch.setattr(bench, "run_benchmark", run)
    monkeypatch.setattr("fusionviz.tune.available_backends",
                        lambda names: (("ort", "openvino"), {"trt": "TensorRT is not available here: no GPU."}))
    lines = []
    result = tune(_tiny(), budget_s=1000, min_time_s=0.01, backends=("ort", "openvino", "trt"), progress=lines.append)
    assert result.best.backend == "ort" and result.best.passes
    assert set(result.backend_notes) == {"openvino", "trt"}
    assert "input rank has to be static" in result.backend_notes["openvino"]
    assert sum("input rank has to be static" in ln for ln in lines) == 1
    assert all(c.config.backend != "openvino" for c in result.confirmation)


def test_unavailable_backends_are_named_without_starting_anything():
    from fusionviz.tune import available_backends

    usable, notes = available_backends(["trt"])
    assert usable[0] == "ort"
    if "trt" not in usable:
        assert notes["trt"].startswith("TensorRT is not available here:")


# ------------------------------------------------------------------ the words of a recommendation


def _conf(role, config, ratio, lo, hi, verified=True):
    from fusionviz.tune import Confirmed

    return Confirmed(role, config, 10.0 * ratio, ratio, lo, hi, verified)


def _result(best, confirmation):
    from fusionviz.tune import TuneResult

    c = next(c for c in confirmation if c.config == best)
    return TuneResult(best, c.median_ms, 10.0, (), 1.0, 10.0, (), False, confirmation=tuple(confirmation),
                      candidate=best)


def _base():
    from fusionviz.tune import TuneConfig

    return TuneConfig((), "all")


def test_an_interval_holding_1_is_not_called_faster_and_the_simpler_variant_is_recommended():
    """The run a user saw: 1.10× "faster, verified" with a 95% interval [0.543, 1.026]."""
    from fusionviz.tune import TuneConfig
    from fusionviz.tune import recommend as _recommend

    cand = TuneConfig(("fold_batchnorm",), "extended")
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("candidate", cand, 0.909, 0.543, 1.026)]
    best, why = _recommend(cand, confirmation)
    assert best == _base()
    assert "no measurable difference" in why and "[0.543, 1.026]" in why and "faster" not in why
    res = _result(best, confirmation)
    assert not res.established and "faster" not in res.claim()
    # Even were it recommended, its claim would not say "faster".
    kept = _result(cand, confirmation)
    assert kept.claim().endswith("no measurable difference (ratio 0.909, 95% interval [0.543, 1.026]), verified")
    assert not kept.established and kept.as_dict()["established"] is False


def test_a_clear_win_is_said_as_times_faster_and_less_time():
    from fusionviz.tune import TuneConfig
    from fusionviz.tune import recommend as _recommend

    cand = TuneConfig(("fold_batchnorm",), "extended")
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("candidate", cand, 0.3853, 0.371, 0.402)]
    best, why = _recommend(cand, confirmation)
    assert best == cand and why.startswith("confirmed:") and "2.6× faster (61% less time" in why
    res = _result(best, confirmation)
    assert res.established
    assert res.claim() == ("1 passes @ extended: 3.853 ms vs the original @ORT all 10.000 ms: 2.6× faster "
                           "(61% less time; ratio 0.385, 95% interval [0.371, 0.402]), verified")
    assert "61% faster" not in res.claim()


def test_single_backends_whose_intervals_overlap_are_tied_not_fastest():
    from fusionviz.tune import TuneConfig
    from fusionviz.tune import recommend as _recommend

    ov, tvm = TuneConfig((), backend="openvino"), TuneConfig((), backend="tvm")
    cand = TuneConfig(("fold_batchnorm",), backend="openvino")
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("single", ov, 0.60, 0.55, 0.66),
                    _conf("single", tvm, 0.62, 0.58, 0.70), _conf("candidate", cand, 0.58, 0.54, 0.63)]
    best, why = _recommend(cand, confirmation)
    assert best == ov
    assert "tied with 0 passes @ TVM alone" in why and "0 passes @ OpenVINO" in why
    assert "slower" not in why  # the candidate's interval overlaps OpenVINO's: not shown slower, nor faster
    assert "no measurable difference" in why


def test_a_backend_whose_interval_holds_1_does_not_replace_onnxruntime():
    from fusionviz.tune import TuneConfig
    from fusionviz.tune import recommend as _recommend

    ov = TuneConfig((), backend="openvino")
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("single", ov, 0.9, 0.7, 1.1)]
    best, why = _recommend(ov, confirmation)
    assert best == _base() and "faster" not in why
    assert _result(best, confirmation).claim().startswith("the original under onnxruntime level all")


def test_slower_only_when_established():
    from fusionviz.tune import TuneConfig
    from fusionviz.tune import recommend as _recommend

    cand = TuneConfig(("fold_batchnorm",), "extended")
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("candidate", cand, 1.3, 1.2, 1.4)]
    _, why = _recommend(cand, confirmation)
    assert "was slower" in why
    confirmation = [_conf("baseline", _base(), 1.0, 1.0, 1.0), _conf("candidate", cand, 1.05, 0.9, 1.2)]
    _, why = _recommend(cand, confirmation)
    assert "slower" not in why and "no measurable difference" in why
