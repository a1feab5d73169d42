"""Big models: weights stay on disk (model_io rule 9) through loading, hashing, the passes'
snapshots, verification and saving; and a model over 2 GB of external data through the CLI and
the app's loader under memory ceilings.

The small tests force the on-disk form on a few-MB model (``weights_on_disk_bytes=0``); the
slow one writes a synthetic model just over 2 GB to ``tmp_path`` (one weight in memory at a
time) and deletes it after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from fusionviz import errors, model_io, verify
from fusionviz.bigmodel import external_bytes, write_big_model
from fusionviz.model_io import Limits
from fusionviz.passes import registry, run_pipeline

ON_DISK = Limits(weights_on_disk_bytes=0)
GB = 1 << 30
REPO = Path(__file__).resolve().parents[1]


def _small(folder: Path) -> Path:
    # 512 x 512 float32 weights: 1 MiB each, the smallest that stays on disk; 2 KB biases are read
    return write_big_model(folder / "m.onnx", total_bytes=5 << 20, hidden=512, vocab=1024)


def _run(model: onnx.ModelProto, ids: np.ndarray) -> np.ndarray:
    return verify.run_model(verify.make_session(model), {"ids": ids})["y"]


IDS = np.array([[1, 5, 1023, 7]], np.int64)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    # weights read from disk run without onnxruntime's prepacked MatMul: rounding differs by ~1 ulp
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_big_weights_stay_on_disk_and_small_ones_are_read(tmp_path):
    path = _small(tmp_path)
    loaded = model_io.load_path(path, limits=ON_DISK)
    assert loaded.weights_dir == str(tmp_path.resolve())
    inits = {t.name: t for t in loaded.proto.graph.initializer}
    assert inits["layers.0.weight"].data_location == onnx.TensorProto.EXTERNAL
    assert inits["layers.0.bias"].data_location != onnx.TensorProto.EXTERNAL  # 2 KB: in memory
    assert loaded.proto.ByteSize() < 64 * 1024  # the graph, not the 6 MB of weights
    assert 5 << 20 < loaded.size_bytes <= external_bytes(path)  # the file and the data its tensors use
    in_memory = model_io.load_path(path)  # below the default threshold: read as before
    assert in_memory.weights_dir is None
    _same(_run(loaded.proto, IDS), _run(in_memory.proto, IDS))


def test_the_hash_covers_the_graph_and_the_data_files(tmp_path):
    path = _small(tmp_path)
    a = model_io.load_path(path, limits=ON_DISK).sha256
    assert model_io.load_path(path, limits=ON_DISK).sha256 == a
    data = tmp_path / "m.onnx.data"
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the weights file changed
    assert model_io.load_path(path, limits=ON_DISK).sha256 != a


def test_a_models_own_weights_folder_entry_is_ignored(tmp_path):
    path = _small(tmp_path)
    m = onnx.load(str(path), load_external_data=False)
    m.metadata_props.add(key=model_io.WEIGHTS_DIR_KEY, value="/etc")
    path.write_bytes(m.SerializeToString())
    assert model_io.load_path(path).weights_dir is None  # read into memory, the entry dropped
    assert model_io.load_path(path, limits=ON_DISK).weights_dir == str(tmp_path.resolve())


def test_an_ir_model_reads_its_weights_from_their_folder_wherever_it_runs(tmp_path, monkeypatch):
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    monkeypatch.chdir(REPO)  # not the model's folder
    m = model_io.ir_model(loaded.proto)
    w = m.graph.initializers["layers.1.weight"].const_value
    ref = model_io.load_path(tmp_path / "m.onnx").proto
    raw = next(t for t in ref.graph.initializer if t.name == "layers.1.weight").raw_data
    assert w.tobytes() == raw


def test_no_snapshot_copies_an_unchanged_initializer(tmp_path):
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    places = {t.name: model_io._external_place(t) for t in loaded.proto.graph.initializer
              if t.data_location == onnx.TensorProto.EXTERNAL}
    assert len(places) == 4  # the embedding and three layers
    result = run_pipeline(loaded.proto, registry.default_passes(), keep_snapshots=True)
    assert any(r.changes for r in result.reports)  # snapshots were made from changed models
    changed = 0
    for snap in result.snapshots:
        assert model_io.weights_dir(snap.model) == loaded.weights_dir
        assert snap.model.ByteSize() < 64 * 1024, snap.label  # no weight was copied into it
        for t in snap.model.graph.initializer:
            if t.name in places:
                assert t.data_location == onnx.TensorProto.EXTERNAL, (snap.label, t.name)
                assert model_io._external_place(t) == places[t.name], (snap.label, t.name)
        changed += snap.model is not loaded.proto
    assert changed
    v = verify.verify(result.original, result.final, isolated=True)
    assert v.ok, v.summary()


def _fold_on_disk(folder: Path) -> tuple[model_io.LoadedModel, np.ndarray]:
    """y = x · Wᵀ + x · V with W and V (1 MiB each) on disk: folding Transpose(W) makes a new 1 MiB
    weight, V stays as it is."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w, v = (rng.standard_normal((512, 512), dtype=np.float32) * np.float32(0.05) for _ in range(2))
    g = helper.make_graph([helper.make_node("Transpose", ["W"], ["Wt"]), helper.make_node("MatMul", ["x", "Wt"], ["a"]),
                           helper.make_node("MatMul", ["x", "V"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])],
                          "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 512])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    folder.mkdir(parents=True)
    onnx.save_model(m, str(folder / "f.onnx"), save_as_external_data=True, location="f.data")
    x = rng.standard_normal((1, 4, 512), dtype=np.float32)
    return model_io.load_path(folder / "f.onnx", limits=ON_DISK), x


def test_new_weights_the_passes_make_go_to_disk_within_a_command(tmp_path, monkeypatch):
    import tempfile

    from fusionviz.passes.pipeline import new_weights_on_disk

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the new weights' folder goes here
    (tmp_path / "tmp").mkdir()
    loaded, x = _fold_on_disk(tmp_path / "m")
    want = verify.run_model(verify.make_session(loaded.proto), {"x": x})["y"]
    in_memory = run_pipeline(loaded.proto, ["fold_constants"], keep_snapshots=False).final  # outside: as before
    wt = next(t for t in in_memory.graph.initializer if t.name == "Wt")
    assert wt.data_location != onnx.TensorProto.EXTERNAL and len(wt.raw_data) == 1 << 20
    with new_weights_on_disk():
        result = run_pipeline(loaded.proto, ["fold_constants"], keep_snapshots=True)
        final = result.final
        assert result.reports[0].status == "applied"
        assert model_io.weights_dir(result.original) == str(tmp_path / "m")  # the original is left as it was
        assert model_io.weights_dir(final) == str(tmp_path)  # the folder holding the model's and the new one
        assert final.ByteSize() < 4096  # the new 1 MiB weight is not in the proto
        inits = {t.name: model_io._external_place(t) for t in final.graph.initializer}
        location, offset, length = inits["Wt"]
        assert location.startswith("tmp/fusionviz_weights_") and length == 1 << 20 and offset % 4096 == 0
        assert inits["V"][0] == "m/f.data"  # the model's own weight, read where it was
        assert inits["V"][1:] == model_io._external_place(next(t for t in loaded.proto.graph.initializer
                                                               if t.name == "V"))[1:]
        new_folder = tmp_path / Path(location).parent
        got = verify.run_model(verify.make_session(final), {"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert verify.verify(result.original, final, feeds={"x": x}, isolated=True).ok
        again = run_pipeline(final, ["eliminate_dead_code"], keep_snapshots=False)  # a result is a model to run on
        assert again.reports[0].error is None
        out, data = model_io.save_model_files(final, tmp_path / "out" / "r.onnx")
        assert data is not None
    assert not new_folder.exists()  # removed when the block ends; the saved model keeps its weights
    reopened = model_io.load_path(out).proto
    np.testing.assert_allclose(verify.run_model(verify.make_session(reopened), {"x": x})["y"], want,
                               rtol=1e-5, atol=1e-5)


def test_optimize_writes_the_new_weights_to_disk_and_removes_them_at_the_end(tmp_path, monkeypatch, capsys):
    import tempfile

    from fusionviz import cli
    from fusionviz.model_io import spill

    made = []
    real_open = spill.NewWeights._open

    def recorded(self):
        ok = real_open(self)
        made.append(self.folder)
        return ok

    monkeypatch.setattr(spill.NewWeights, "_open", recorded)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("FUSIONVIZ_WEIGHTS_ON_DISK_MB", "0")
    loaded, x = _fold_on_disk(tmp_path / "m")
    out = tmp_path / "out" / "r.onnx"
    assert cli.main(["optimize", loaded.source, "-o", str(out), "--passes", "fold_constants"]) == 0
    assert "verify: equal" in capsys.readouterr().err
    assert made and made[0] is not None and made[0].parent == tmp_path / "tmp"  # the folded weight went there
    assert not any((tmp_path / "tmp").iterdir())  # and it is gone once the command is done
    want = verify.run_model(verify.make_session(loaded.proto), {"x": x})["y"]
    got = verify.run_model(verify.make_session(model_io.load_path(out).proto), {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_new_weights_stay_in_memory_when_no_folder_can_be_made(tmp_path, monkeypatch):
    import tempfile

    from fusionviz.passes.pipeline import new_weights_on_disk

    real = tempfile.mkdtemp

    def mkdtemp(suffix=None, prefix=None, dir=None):
        if prefix and prefix.startswith("fusionviz_weights_"):
            raise PermissionError(13, "Permission denied")  # the temp folder cannot be written
        return real(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    loaded, x = _fold_on_disk(tmp_path / "m")
    with new_weights_on_disk():
        final = run_pipeline(loaded.proto, ["fold_constants"], keep_snapshots=False).final
    wt = next(t for t in final.graph.initializer if t.name == "Wt")
    assert wt.data_location != onnx.TensorProto.EXTERNAL and len(wt.raw_data) == 1 << 20
    assert model_io.weights_dir(final) == str(tmp_path / "m")
    want = verify.run_model(verify.make_session(loaded.proto), {"x": x})["y"]
    np.testing.assert_allclose(verify.run_model(verify.make_session(final), {"x": x})["y"], want,
                               rtol=1e-5, atol=1e-5)


def test_a_new_weights_folder_left_by_a_killed_process_is_removed_by_the_next(tmp_path):
    from fusionviz.model_io.spill import remove_stale_folders

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = int(gone.stdout)
    for name in (f"fusionviz_weights_{dead}_a1", f"fusionviz_weights_{os.getpid()}_b2",
                 f"fusionviz_weights_{os.getppid()}_c3", "fusionviz_weights_d4", "other_1_e5"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "fusionviz_new_weights.data").write_bytes(b"x")
    assert remove_stale_folders(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"fusionviz_weights_{os.getpid()}_b2", f"fusionviz_weights_{os.getppid()}_c3", "fusionviz_weights_d4",
         "other_1_e5"])  # running processes' folders, and names it cannot attribute, are left


def test_a_model_over_one_protobuf_message_goes_to_onnxruntime_as_a_saved_copy(tmp_path, monkeypatch):
    # stands for a result whose passes made over 2 GB of new tensors in memory
    from fusionviz.inputs import plan_inputs
    from fusionviz.passes import validity

    model = model_io.load_path(_small(tmp_path)).proto  # in memory, 6 MB
    monkeypatch.setattr(model_io.save, "PROTO_MAX_BYTES", 1 << 20)  # where for_runtime reads it
    data, folder = model_io.for_runtime(model, tmp_path / "copy")
    assert isinstance(data, str) and folder is None and Path(data + ".data").exists()
    plan = verify.probe(model, plan_inputs(model), isolated=True)
    v = verify.verify(model, model, plan=plan, isolated=True)
    assert v.ok and len(v.input_sets) == 3, v.summary()
    assert validity.violation(model, validity.Baseline(model)) is None
    assert validity.ort_error_at_all(model) is None


def test_verification_and_probe_children_read_the_weights_from_disk(tmp_path):
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    from fusionviz.inputs import plan_inputs

    plan = verify.probe(loaded.proto, plan_inputs(loaded.proto), isolated=True)
    assert plan.probed
    v = verify.verify(loaded.proto, loaded.proto, plan=plan, isolated=True)
    assert v.ok and "normal" in v.input_sets, v.summary()


def test_per_tensor_comparison_reads_the_weights_from_disk(tmp_path):
    from fusionviz.compare import compare_models

    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    result = run_pipeline(loaded.proto, ["eliminate_duplicate_initializers"], keep_snapshots=False)
    got = compare_models(result.original, result.final, isolated=True)
    rows = got.compared
    assert rows and all(r.diff is not None and r.diff.ok for r in rows), [(r.status, r.note) for r in got.rows][:5]


def test_bench_workers_and_node_timing_get_the_weights_from_disk(tmp_path):
    from fusionviz.backends.registry import get_backend
    from fusionviz.bench import Settings, Variant, run_benchmark
    from fusionviz.profile import node_times

    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    variants = [Variant("A", loaded.proto)]
    if get_backend("openvino").quick_check() is None:  # OpenVINO reads the model file and its data
        variants.append(Variant("ov", loaded.proto, Settings(backend="openvino")))
    res = run_benchmark(variants, feeds={"ids": IDS}, min_time_s=0.05, warmup=1, verify_against=loaded.proto)
    for r in res:
        assert r.error is None, (r.label, r.error)
        assert r.verify["ok"] is True, (r.label, r.verify)
    times = node_times(loaded.proto, {"ids": IDS}, runs=2, isolated=True)
    assert any("matmul" in k for k in times.times_ms), times


def _conv_on_disk(folder: Path) -> model_io.LoadedModel:
    """A Conv + Relu whose 2.4 MB weight stays on disk."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((256, 256, 3, 3), dtype=np.float32) * np.float32(0.02)
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 8, 8])],
                          [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save_model(m, str(folder / "conv.onnx"), save_as_external_data=True, location="conv.data")
    return model_io.load_path(folder / "conv.onnx", limits=ON_DISK)


def test_passes_that_build_onnxruntime_sessions_read_the_weights_from_disk(tmp_path):
    from fusionviz.passes.precision.ranges import peak_magnitudes

    loaded = _conv_on_disk(tmp_path)
    assert loaded.weights_dir
    result = run_pipeline(loaded.proto, ["nchwc_layout"], keep_snapshots=False)
    (report,) = result.reports
    assert report.error is None and report.declined is None, report
    assert verify.verify(result.original, result.final, isolated=True).ok
    assert peak_magnitudes(loaded.proto)["y"][0] > 0  # its calibration session runs


@pytest.mark.parametrize("name", ["fp16", "int8_dynamic"])
def test_precision_passes_convert_a_model_whose_weights_stay_on_disk(tmp_path, name):
    path = _small(tmp_path)
    in_memory = run_pipeline(model_io.load_path(path).proto, [name], keep_snapshots=False)
    on_disk = run_pipeline(model_io.load_path(path, limits=ON_DISK).proto, [name], keep_snapshots=False)
    assert in_memory.reports[0].status == on_disk.reports[0].status == "applied"
    assert on_disk.final.ByteSize() == in_memory.final.ByteSize()  # the same conversion
    _same(_run(on_disk.final, IDS), _run(in_memory.final, IDS))


def test_every_pass_does_the_same_whether_the_weights_are_in_memory_or_on_disk(tmp_path):
    # a pass that cannot read weights kept on disk would silently change nothing
    for path in (_small(tmp_path / "s"), _conv_on_disk(tmp_path / "c").source):
        in_memory = model_io.load_path(path).proto
        on_disk = model_io.load_path(path, limits=ON_DISK).proto
        assert model_io.weights_dir(on_disk) and not model_io.weights_dir(in_memory)
        for name in registry.pass_names():
            a = run_pipeline(in_memory, [name], keep_snapshots=False).reports[0]
            b = run_pipeline(on_disk, [name], keep_snapshots=False).reports[0]
            assert (b.status, len(b.changes), b.nodes_after) == (a.status, len(a.changes), a.nodes_after), \
                (Path(path).name, name, b.error or b.declined or b.note)


def test_reference_optimizers_get_a_model_file_with_its_weights(tmp_path):
    from fusionviz.passes.reference import reference_models

    loaded = _conv_on_disk(tmp_path)
    got = reference_models(loaded.proto, tools=["onnxscript"], levels=["basic"])
    assert all(isinstance(m, onnx.ModelProto) for m in got.values()), got


def test_the_graph_diff_reads_weights_on_disk_by_content(tmp_path):
    from fusionviz.graphview.diff import diff_models

    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    inline = model_io.load_path(tmp_path / "m.onnx").proto  # the same weights, in memory
    assert model_io.weights_dir(inline) is None
    d = diff_models(loaded.proto, inline)
    assert set(d.status_after.values()) == {"unchanged"}, d.counts
    changed = onnx.ModelProto()
    changed.CopyFrom(inline)
    w = next(t for t in changed.graph.initializer if t.name == "layers.1.weight")
    w.raw_data = bytes(len(w.raw_data))  # all zeros
    d = diff_models(loaded.proto, changed)
    assert d.status_after["layers.1.matmul"] == "changed", d.counts


def test_the_compiled_view_compiles_a_model_whose_weights_stay_on_disk(tmp_path):
    from fusionviz.backends.registry import get_backend
    from fusionviz.graphview.compiled import compile_executed

    if get_backend("openvino").quick_check() is not None:
        pytest.skip("OpenVINO is not available here")
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    graph, seconds = compile_executed(loaded.proto, "openvino", shapes={"ids": [1, 4]})
    assert graph is not None and seconds > 0


def test_save_writes_the_weights_beside_and_the_result_reopens(tmp_path):
    src = _small(tmp_path / "src")
    loaded = model_io.load_path(src, limits=ON_DISK)
    out, data = model_io.save_model_files(loaded.proto, tmp_path / "out" / "r.onnx")
    assert data == tmp_path / "out" / "r.onnx.data" and data.stat().st_size >= 5 << 20
    onnx.checker.check_model(str(out), full_check=True)
    again = model_io.load_path(out)  # default settings: small, so read into memory
    assert model_io.WEIGHTS_DIR_KEY not in {p.key for p in again.proto.metadata_props}
    _same(_run(again.proto, IDS), _run(loaded.proto, IDS))
    # saved over its own files: the weights are read whole before the data file is replaced
    model_io.save_model(loaded.proto, src)
    _same(_run(model_io.load_path(src).proto, IDS), _run(again.proto, IDS))
    with pytest.raises(errors.InputSpecError, match="external data"):
        model_io.save_model(loaded.proto, tmp_path / "one.onnx", external=False)


def test_optimize_says_where_the_weights_went_on_stderr_and_in_the_report(tmp_path, run_cli):
    import json

    src = _small(tmp_path / "src")
    out = tmp_path / "out" / "r.onnx"
    rep = tmp_path / "r.json"
    code, _, err, _ = run_cli("optimize", src, "-o", out, "--passes", "eliminate_duplicate_initializers", "--report", rep,
                           env={"FUSIONVIZ_WEIGHTS_ON_DISK_MB": "0"})
    assert code == 0, err
    assert f"wrote {out} (weights in {out}.data)" in err
    assert any(f"{out}.data" in n for n in json.loads(rep.read_text())["notes"])
    code, _, err, _ = run_cli("optimize", src, "-o", tmp_path / "e.onnx", "--passes", "eliminate_duplicate_initializers",
                           "--external-data")
    assert code == 0 and f"(weights in {tmp_path / 'e.onnx'}.data)" in err, err
    code, _, err, _ = run_cli("optimize", src, "-o", tmp_path / "one.onnx", "--passes", "eliminate_duplicate_initializers")
    assert code == 0 and "weights in" not in err and not (tmp_path / "one.onnx.data").exists(), err


def test_a_download_is_one_file_with_the_weights_read_into_it(tmp_path):
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    data = model_io.one_file_bytes(loaded.proto)
    m = onnx.ModelProto.FromString(data)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)
    assert model_io.WEIGHTS_DIR_KEY not in {p.key for p in m.metadata_props}
    assert model_io.bytes_on_disk(loaded.proto) >= 5 << 20 and model_io.bytes_on_disk(m) == 0
    _same(_run(m, IDS), _run(loaded.proto, IDS))
    assert model_io.one_file_bytes(m) == m.SerializeToString()


def test_external_data_on_request_and_none_when_nothing_is_large(tmp_path, tiny_model):
    loaded = model_io.load_path(_small(tmp_path / "src"))  # in memory
    out, data = model_io.save_model_files(loaded.proto, tmp_path / "e.onnx", external=True)
    assert data is not None and data.exists() and out.stat().st_size < 64 * 1024
    _same(_run(model_io.load_path(out).proto, IDS), _run(loaded.proto, IDS))
    _, data = model_io.save_model_files(tiny_model, tmp_path / "t.onnx", external=True)
    assert data is None and not (tmp_path / "t.onnx.data").exists()


def _one_file(tmp_path: Path) -> tuple[Path, onnx.ModelProto]:
    inline = model_io.load_path(_small(tmp_path / "src")).proto
    one = tmp_path / "one" / "one.onnx"
    model_io.save_model(inline, one, external=False)
    return one, inline


def test_a_one_file_models_weights_are_read_where_they_lie_in_the_file(tmp_path):
    one, inline = _one_file(tmp_path)
    loaded = model_io.load_path(one, limits=ON_DISK)
    assert loaded.weights_dir == str(one.parent.resolve())
    assert loaded.proto.ByteSize() < 64 * 1024
    w = next(t for t in loaded.proto.graph.initializer if t.name == "layers.2.weight")
    location, offset, length = model_io._external_place(w)
    assert location == "one.onnx" and length == 512 * 512 * 4
    ref = next(t for t in inline.graph.initializer if t.name == "layers.2.weight")
    with open(one, "rb") as f:
        f.seek(offset)
        assert f.read(length) == ref.raw_data  # the very bytes of the tensor in the file
    assert loaded.size_bytes == one.stat().st_size
    _same(_run(loaded.proto, IDS), _run(inline, IDS))
    result = run_pipeline(loaded.proto, registry.default_passes(), keep_snapshots=False)
    out, data = model_io.save_model_files(result.final, tmp_path / "out" / "r.onnx")
    assert data is not None
    _same(_run(model_io.load_path(out).proto, IDS), _run(inline, IDS))
    # saved over the very file its weights are read from: copied out first, then replaced
    session = verify.make_session(loaded.proto)  # holds the old file
    model_io.save_model(loaded.proto, one)
    _same(_run(model_io.load_path(one).proto, IDS), _run(inline, IDS))
    _same(verify.run_model(session, {"ids": IDS})["y"], _run(inline, IDS))


def test_a_big_upload_keeps_its_weights_in_a_file_fusionviz_owns(tmp_path):
    one, inline = _one_file(tmp_path)
    loaded = model_io.load_bytes(one.read_bytes(), name="one.onnx", limits=ON_DISK)
    assert loaded.source == "upload" and loaded.name == "one.onnx"
    folder = Path(loaded.weights_dir)
    assert folder.is_dir() and folder != one.parent.resolve()
    assert loaded.proto.ByteSize() < 64 * 1024
    _same(_run(loaded.proto, IDS), _run(inline, IDS))
    small = model_io.load_bytes(one.read_bytes(), name="one.onnx")  # below the threshold: in memory
    assert small.weights_dir is None


def test_a_one_file_model_that_also_points_outside_its_folder_is_refused(tmp_path):
    one, inline = _one_file(tmp_path)
    m = onnx.ModelProto()
    m.CopyFrom(inline)
    t = m.graph.initializer.add()
    t.name, t.data_type = "stolen", onnx.TensorProto.FLOAT
    t.dims.append(4)
    model_io._make_external(t, "../../etc/passwd", 0, 16)
    one.write_bytes(m.SerializeToString())
    with pytest.raises(errors.UnsafePathError):
        model_io.load_path(one, limits=ON_DISK)


def test_a_weight_kept_on_disk_must_hold_the_bytes_its_dims_declare(tmp_path):
    one, inline = _one_file(tmp_path)
    m = onnx.ModelProto()
    m.CopyFrom(inline)
    w = next(t for t in m.graph.initializer if t.name == "layers.0.weight")
    w.dims[0] = 1 << 20  # claims 2**29 floats, holds 2**18
    one.write_bytes(m.SerializeToString())
    with pytest.raises(errors.TensorDataError, match="holds 1,048,576 bytes"):
        model_io.load_path(one, limits=ON_DISK)
    path = _small(tmp_path / "ext")
    m = onnx.load(str(path), load_external_data=False)
    w = next(t for t in m.graph.initializer if t.name == "layers.0.weight")
    w.dims[0] = 1 << 20
    path.write_bytes(m.SerializeToString())
    with pytest.raises(errors.TensorDataError):
        model_io.load_path(path, limits=ON_DISK)


def test_a_zip_keeps_its_extracted_weights_while_they_are_used(tmp_path):
    src = _small(tmp_path / "src")
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in src.parent.iterdir():
            zf.write(f, f.name)
    loaded = model_io.load_path(archive, limits=ON_DISK)
    assert loaded.weights_dir and Path(loaded.weights_dir, "m.onnx.data").exists()
    assert loaded.source == "zip:m.zip"
    _same(_run(loaded.proto, IDS), _run(model_io.load_path(src).proto, IDS))


def test_the_verification_memory_cap_is_named_when_it_fails(tmp_path, monkeypatch):
    loaded = model_io.load_path(_small(tmp_path), limits=ON_DISK)
    monkeypatch.setattr(verify, "VERIFY_MEM_MB", 64)  # too little to even start onnxruntime
    v = verify.verify(loaded.proto, loaded.proto, isolated=True)
    assert not v.ok and "FUSIONVIZ_VERIFY_MEM_MB" in v.error and "64 MB" in v.error, v.error


def test_a_limit_message_gives_the_size_the_limit_and_the_setting(tmp_path):
    path = _small(tmp_path)
    with pytest.raises(errors.ModelTooLargeError) as info:
        model_io.load_path(path, limits=Limits(max_model_bytes=1 << 20))
    text = str(info.value)
    found = model_io.load_path(path).size_bytes
    assert f"is {model_io._size(found)}, over the {model_io._size(1 << 20)} limit" in text, text
    assert "FUSIONVIZ_MAX_MODEL_MB" in text


# --------------------------------------------------------------------------- over 2 GB


_MEASURE = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stdout.write(p.stdout)\n"
            "sys.stderr.write(p.stderr)\n"
            "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.exit(p.returncode)\n")


def _measured(argv: list[str], env: dict | None = None, timeout: float = 300) -> tuple[int, str, str, int]:
    """Run ``argv`` in a fresh process; (exit code, stdout, stderr, peak RSS in bytes of the
    largest process of its tree, from getrusage(RUSAGE_CHILDREN))."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FUSIONVIZ_")}
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True,
                       timeout=timeout, env=e, cwd=REPO)
    out, _, tail = p.stdout.rpartition("MAXRSS_KB ")
    return p.returncode, out, p.stderr, int(tail.split()[0]) * 1024


_CHECK_RUN = """
import sys, numpy as np, onnxruntime as ort
outs = []
for path in sys.argv[1:]:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    outs.append(s.run(None, {"ids": np.array([[3, 1, 4, 1, 5]], np.int64)})[0])
    del s
assert outs[0].shape == (1, 5, 4096), outs[0].shape
np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)
print("SAME")
"""


@pytest.mark.slow
def test_a_model_over_2gb_of_external_data_opens_optimizes_and_reopens(tmp_path):
    py = sys.executable
    try:
        model = write_big_model(tmp_path / "big" / "big.onnx", total_bytes=(2 << 30) + (64 << 20))
        size = external_bytes(model)
        assert size > 2 << 30

        code, out, err, rss = _measured([py, "-m", "fusionviz", "info", str(model)])
        assert code == 0, err
        assert "big.onnx" in out and "MatMul" in out
        assert rss <= 0.5 * size + 0.5 * GB, f"info peak {rss / GB:.2f} GB"
        print(f"info: peak {rss / GB:.2f} GB for {size / GB:.2f} GB")

        result = tmp_path / "out" / "big.onnx"
        code, out, err, rss = _measured([py, "-m", "fusionviz", "optimize", "--all", str(model), "-o", str(result)])
        assert code == 0, err[-2000:]
        assert "verify: equal" in err, err[-2000:]
        assert f"weights in {result}.data" in err
        assert rss <= 2 * size + 1 * GB, f"optimize peak {rss / GB:.2f} GB"
        print(f"optimize --all: peak {rss / GB:.2f} GB")
        onnx.checker.check_model(str(result), full_check=True)  # by path: external data checked there

        # reopened by fusionviz with default settings, and computing what the original does
        code, out, err, _ = _measured([py, "-m", "fusionviz", "info", str(result)])
        assert code == 0, err
        code, out, err, _ = _measured([py, "-c", _CHECK_RUN, str(model), str(result)])
        assert code == 0 and "SAME" in out, err[-2000:]

        # the app's loader (the cached function the pages call), outside Streamlit
        load = ("import sys\nfrom fusionviz.ui import cache\nm = cache.load_path(sys.argv[1])\n"
                "print('LOADED', m.weights_dir is not None, m.proto.ByteSize())\n")
        code, out, err, rss = _measured([py, "-c", load, str(model)])
        assert code == 0, err[-2000:]
        assert "LOADED True" in out, out
        assert rss <= 0.5 * size + 0.5 * GB, f"app loader peak {rss / GB:.2f} GB"
        print(f"app loader: peak {rss / GB:.2f} GB")
    finally:
        shutil.rmtree(tmp_path / "big", ignore_errors=True)
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
