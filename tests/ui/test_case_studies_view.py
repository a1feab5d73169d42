"""The Learn page's case-studies section (AppTest): saved results are shown per case with the
article's claim, latency beside memory and the reason they differ; a page with no saved results
says how to make them."""

from __future__ import annotations

import json

from ui_helpers import errors_of, goto

from fusionviz import casestudies


def _record(key: str) -> dict:
    c = casestudies.case(key)
    rows = [{"label": casestudies.BASELINE, "backend": "ort", "passes": 0, "error": None, "median_ms": 5.0,
             "ratio": 1.0, "ci": [1.0, 1.0], "verified": True, "rss_run_mb": 16.0, "arena_peak_mb": 1.8,
             "static_peak_mb": 1.5, "static_peak_no_reuse_mb": 7.9, "applied": None},
            {"label": "original on OpenVINO", "backend": "openvino", "passes": 0, "error": None, "median_ms": 2.6,
             "ratio": 0.52, "ci": [0.5, 0.56], "verified": True, "rss_run_mb": 64.7, "arena_peak_mb": None,
             "static_peak_mb": 1.5, "static_peak_no_reuse_mb": 7.9, "applied": None}]
    return {"key": c.key, "title": c.title, "sample": c.sample, "technique": c.technique, "claim": c.claim,
            "claim_speedup": c.claim_speedup, "claim_memory": c.claim_memory, "claim_backend": c.claim_backend,
            "shapes": {}, "rows": rows, "notes": {"trt": "TensorRT is not available here: no GPU."},
            "why": "Because this is a CPU.", "load": [1.0], "load_after": [1.0], "seconds": 1.0, "when": "now"}


def test_saved_case_studies_are_shown(app, tmp_path, monkeypatch):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [_record("resnet"), _record("bert")]}))
    monkeypatch.setattr(casestudies, "SAVED", path)
    goto(app, "learn")
    assert not app.exception and errors_of(app) == []
    text = " ".join(m.value for m in app.markdown)
    assert "about 30% faster with TensorRT" in text and "about 20% faster and about 25% less memory" in text
    assert "original on OpenVINO" in text and "1.92× faster (48% less time)" in text and "48% faster" not in text
    assert "Because this is a CPU." in text
    assert any("TensorRT is not available here" in c.value for c in app.caption)
    frames = [d.value for d in app.dataframe]
    assert any("peak RSS MB" in f.columns for f in frames)


def test_no_saved_results_says_how_to_make_them(app, tmp_path, monkeypatch):
    monkeypatch.setattr(casestudies, "SAVED", tmp_path / "none.json")
    monkeypatch.setattr(casestudies, "COMMITTED", tmp_path / "none2.json")
    goto(app, "learn")
    assert not app.exception
    assert any("benchmarks/case_studies.py" in i.value for i in app.info)
