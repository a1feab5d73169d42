"""Sweep parts without Ray: pass sets, model lists, the store and its exports, the inline engine, the CLI."""

from __future__ import annotations

import io
import json

import onnx
import pytest

from fusionviz.passes import registry
from fusionviz.sweep import (
    COLUMNS,
    Progress,
    ProgressBar,
    SweepError,
    SweepStore,
    parse_passes,
    read_results,
    resolve_models,
    run_sweep,
    write_results,
)
from fusionviz.sweep.spec import build_cells, cell_key


def test_parse_passes_items():
    each = parse_passes("each")
    assert [v.label for v in each] == registry.pass_names()
    got = parse_passes("all, fold_batchnorm+fuse_conv_activation ,eliminate_common_subexpressions,eliminate_common_subexpressions,original")
    assert [v.label for v in got] == ["all", "fold_batchnorm+fuse_conv_activation", "eliminate_common_subexpressions", "original"]
    assert got[0].passes == tuple(registry.default_passes())
    assert got[3].passes == ()
    with pytest.raises(SweepError, match="--passes"):
        parse_passes("no_such_pass")
    with pytest.raises(SweepError):
        parse_passes(" , ")


def test_resolve_models_folder_sample_and_errors(tmp_path, tiny_model):
    (tmp_path / "sub").mkdir()
    onnx.save(tiny_model, tmp_path / "a.onnx")
    onnx.save(tiny_model, tmp_path / "sub" / "a.onnx")
    refs = resolve_models([str(tmp_path), "textbook"])
    assert [r.name for r in refs] == ["a", "sub__a", "textbook"]
    assert refs[0].sha256 == refs[1].sha256 and len(refs[0].sha256) == 64
    (tmp_path / "empty").mkdir()
    with pytest.raises(SweepError, match="holds no .onnx"):
        resolve_models([str(tmp_path / "empty")])
    with pytest.raises(SweepError, match="is not a model file"):
        resolve_models([str(tmp_path / "missing.onnx")])


def test_cell_keys_follow_bytes_passes_and_backend():
    a = cell_key("0" * 64, ("eliminate_common_subexpressions",), "ort")
    assert a == cell_key("0" * 64, ("eliminate_common_subexpressions",), "ort")
    assert a != cell_key("1" * 64, ("eliminate_common_subexpressions",), "ort")
    assert a != cell_key("0" * 64, ("eliminate_common_subexpressions", "fold_batchnorm"), "ort")
    assert a != cell_key("0" * 64, ("eliminate_common_subexpressions",), "openvino")


def test_inline_sweep_store_and_exports_round_trip(tmp_path, tiny_model):
    onnx.save(tiny_model, tmp_path / "tiny.onnx")
    models = resolve_models([str(tmp_path / "tiny.onnx")])
    variants = parse_passes("eliminate_identity,all")
    seen = []
    with SweepStore(tmp_path / "r.sqlite") as store:
        summary = run_sweep(models, variants, store=store, engine="inline", progress=seen.append)
        assert store.count() == 2
        again = run_sweep(models, variants, store=store, engine="inline")
    assert summary.executed == 2 and again.executed == 0 and again.skipped == 2
    assert summary.totals["ok"] == 2
    assert seen[-1].phase == "done"
    for suffix in (".csv", ".json"):
        path = write_results(summary.rows, tmp_path / f"r{suffix}", meta={"timed": False})
        rows = read_results(path)
        assert [r["variant"] for r in rows] == ["eliminate_identity", "all"]
        assert rows[0]["valid"] is True and rows[0]["new_nan"] is False
        assert rows[0]["nodes_before"] == 2 and rows[0]["latency_ratio"] is None
        assert set(rows[0]) == set(COLUMNS)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["totals"]["ok"] == 2 and doc["timed"] is False


def test_read_results_refuses_other_files(tmp_path):
    with pytest.raises(SweepError, match="not a sweep results file"):
        read_results(b"a,b\n1,2\n", "x.csv")
    with pytest.raises(SweepError, match="not valid JSON"):
        read_results(b"{oops", "x.json")
    with pytest.raises(SweepError, match=r"\.csv or \.json"):
        write_results([], tmp_path / "r.txt")


def test_progress_bar_line_has_eta():
    buf = io.StringIO()
    bar = ProgressBar(buf, min_interval_s=0)
    bar(Progress("check", 5, 20, 0, 10.0, {"ok": 4, "error": 1}))
    text = buf.getvalue()
    assert text.startswith("\r") and "\n" not in text
    assert "5/20" in text and "ETA 0:30" in text and "error 1" in text
    bar(Progress("done", 20, 20, 0, 40.0, {}))
    assert buf.getvalue().endswith("\n")


def test_build_cells_is_model_major(tmp_path, tiny_model):
    onnx.save(tiny_model, tmp_path / "m.onnx")
    models = resolve_models([str(tmp_path / "m.onnx"), "textbook"])
    cells = build_cells(models, parse_passes("eliminate_common_subexpressions,all"), ("ort",))
    assert [(c.model.name, c.variant.label) for c in cells] == [
        ("m", "eliminate_common_subexpressions"), ("m", "all"), ("textbook", "eliminate_common_subexpressions"), ("textbook", "all")]


@pytest.mark.parametrize("args, message", [
    (["textbook", "--out", "r.txt"], ".csv or .json"),
    (["textbook", "--out", "r.csv", "--passes", "nope"], "--passes"),
    (["textbook", "--out", "r.csv", "--backends", "nope"], "Unknown backend"),
    (["textbook", "--out", "r.csv", "--workers", "0"], "--workers"),
    (["/no/such/model.onnx", "--out", "r.csv"], "is not a model file"),
])
def test_cli_bad_input_is_one_line_exit_2(run_cli, tmp_path, args, message):
    res = run_cli("sweep", *args, cwd=tmp_path)
    assert res.code == 2, res
    assert len(res.stderr_lines) == 1 and message in res.stderr, res.stderr


def test_openvino_rows_compare_on_openvino(tmp_path, tiny_model):
    pytest.importorskip("openvino")
    from fusionviz.sweep import parse_backends

    try:
        backends = parse_backends("ort,openvino")
    except SweepError as exc:
        pytest.skip(str(exc))
    onnx.save(tiny_model, tmp_path / "tiny.onnx")
    with SweepStore(tmp_path / "r.sqlite") as store:
        summary = run_sweep(resolve_models([str(tmp_path / "tiny.onnx")]), parse_passes("eliminate_identity"),
                            store=store, backends=backends, engine="inline")
    by = {r["backend"]: r for r in summary.rows}
    assert set(by) == {"ort", "openvino"}
    assert by["ort"]["status"] == "ok" and by["openvino"]["status"] == "ok", summary.rows
    assert by["openvino"]["detail"].startswith("OpenVINO: equal")
    assert by["ort"]["model_sha256"] == by["openvino"]["model_sha256"]


def test_timing_compares_with_the_original_at_ort_all(tiny_model):
    from fusionviz.sweep.work import _bench_variants

    variants = _bench_variants(tiny_model, tiny_model, parse_passes("eliminate_common_subexpressions")[0], "ort")
    assert [v.label for v in variants] == ["original", "eliminate_common_subexpressions"]
    assert [v.role.kind for v in variants] == ["original", "selection"]
    assert all(v.settings.level == "all" for v in variants)
    variants = _bench_variants(tiny_model, tiny_model, parse_passes("eliminate_common_subexpressions")[0], "openvino")
    assert variants[0].settings.backend == "ort" and variants[0].settings.level == "all"
    assert variants[1].settings.backend == "openvino" and variants[1].label == "eliminate_common_subexpressions @OpenVINO"
