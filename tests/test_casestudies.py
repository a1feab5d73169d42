"""fusionviz.casestudies: the article's case studies (variants, rows, the explanation, save/load),
with a deterministic stand-in for the benchmark; the real measurement is benchmarks/case_studies.py."""

from __future__ import annotations

import pytest

import fusionviz.bench as bench
from fusionviz import casestudies, samples
from fusionviz.bench import BenchResult, compute_stats

pytestmark = pytest.mark.skipif("efficientnet" not in samples.sample_names(), reason="sample models not built")


def _fake(variants, **kw):
    out = []
    for v in variants:
        ms = 10.0 if v.settings.level == "off" and not v.passes else 7.0 if v.settings.backend == "ort" else 6.0
        out.append(BenchResult(v.label, v.passes, v.settings, compute_stats([ms] * 5),
                               {"rss_run_mb": 12.0, "static_peak_reuse_bytes": 2 * 1024 * 1024,
                                "static_peak_no_reuse_bytes": 8 * 1024 * 1024, "static_unknown_tensors": 0},
                               verify={"ok": True}, round_medians_ms=(ms,) * 5, role=v.role))
    return out


@pytest.mark.parametrize("key", [c.key for c in casestudies.CASES])
def test_each_case_measures_ort_levels_passes_and_backends_with_memory(monkeypatch, key):
    monkeypatch.setattr(bench, "run_benchmark", _fake)
    rec = casestudies.run_case(casestudies.case(key))
    labels = [r["label"] for r in rec["rows"]]
    assert labels[:5] == [casestudies.BASELINE, "original @ORT basic", "original @ORT all",
                          "our passes @ORT off", "our passes @ORT all"]
    assert rec["rows"][0]["ratio"] == pytest.approx(1.0)
    assert rec["rows"][2]["ratio"] == pytest.approx(0.7)
    assert all(r["rss_run_mb"] == 12.0 and r["static_peak_no_reuse_mb"] == pytest.approx(8.0) for r in rec["rows"])
    assert labels[:5] == [casestudies.BASELINE, "original @ORT basic", casestudies.ORT_ALL,
                          casestudies.OURS_OFF, casestudies.OURS_ALL]  # the names explain() looks up
    assert [r.get("role") for r in rec["rows"][:2]] == [{"kind": "original", "name": ""},
                                                        {"kind": "level", "name": "basic"}]
    assert "tvm" in rec["notes"]  # TVM is timed only when asked
    assert "not available here" in rec["notes"].get("trt", "not available here") or "original @TensorRT" in labels
    assert rec["claim"] and rec["why"].startswith("The article's figure comes from")
    if key == "efficientnet":
        assert "8.0 MB" in rec["why"] and "2.0 MB" in rec["why"]  # the in-place figure


def test_save_merges_by_case_and_load_reads_it_back(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "run_benchmark", _fake)
    path = tmp_path / "cases.json"
    casestudies.save([casestudies.run_case(casestudies.case("resnet"))], path)
    casestudies.save([casestudies.run_case(casestudies.case("efficientnet"))], path)
    assert [r["key"] for r in casestudies.load(path)] == ["resnet", "efficientnet"]
    assert casestudies.load(tmp_path / "missing.json") == []


def _row(label, ratio, lo, hi, verified=True):
    return {"label": label, "ratio": ratio, "ci": [lo, hi], "verified": verified}


def test_fastest_names_the_tied_set_when_intervals_overlap():
    rows = [_row(casestudies.BASELINE, 1.0, 1.0, 1.0), _row("original @ORT all", 0.385, 0.37, 0.40),
            _row("our passes @ORT all", 0.39, 0.38, 0.41), _row("original @OpenVINO", 0.6, 0.55, 0.65)]
    text = casestudies.fastest_sentence(rows)
    assert text.startswith("original @ORT all and our passes @ORT all are tied for fastest here")
    assert "the fastest here is" not in text and "62% less time" in text


def test_fastest_and_the_words_for_a_ratio():
    rows = [_row(casestudies.BASELINE, 1.0, 1.0, 1.0), _row("original @ORT all", 0.3853, 0.37, 0.40),
            _row("our passes @ORT off", 0.95, 0.90, 1.02)]
    assert casestudies.fastest_sentence(rows) == \
        "the fastest here is original @ORT all, 2.6× faster (61% less time) than ORT off"
    assert casestudies.row_claim(rows[2]) == "no measurable difference"
    assert casestudies.fastest_sentence([_row("x", 0.95, 0.9, 1.02)]).startswith("nothing is measurably faster")
