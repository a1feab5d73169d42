"""Opening a model by path on the server: which paths the app may open, and the upload limit."""

from __future__ import annotations

import os

import pytest

from fusionviz import errors, model_io, server_paths
from fusionviz.server_paths import OPEN_PATHS_ENV, allowed_dirs, resolve_model_path, upload_limit_mb


@pytest.fixture
def tree(tmp_path):
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    (models / "a.onnx").write_bytes(b"x")
    (models / "sub" / "b.ZIP").write_bytes(b"x")
    (models / "notes.txt").write_text("hi")
    (models / "folder_model").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.onnx").write_bytes(b"x")
    return models, outside


def test_off_when_unset_or_empty():
    assert allowed_dirs({}) == []
    assert allowed_dirs({OPEN_PATHS_ENV: ""}) == []
    assert allowed_dirs({OPEN_PATHS_ENV: f" {os.pathsep} "}) == []
    with pytest.raises(errors.ModelLoadError, match="off on this server.*FUSIONVIZ_OPEN_PATHS="):
        resolve_model_path("/anything.onnx", [])


def test_dirs_are_resolved_and_deduplicated(tree, tmp_path):
    models, outside = tree
    env = {OPEN_PATHS_ENV: os.pathsep.join([str(models), str(tmp_path / "models" / ".." / "models"),
                                            str(outside)])}
    assert allowed_dirs(env) == [models.resolve(), outside.resolve()]


def test_allowed_files_folders_and_relative_paths(tree):
    models, _ = tree
    allowed = [models.resolve()]
    assert resolve_model_path(str(models / "a.onnx"), allowed) == (models / "a.onnx").resolve()
    assert resolve_model_path(f"  {models / 'sub' / 'b.ZIP'}  ", allowed) == (models / "sub" / "b.ZIP").resolve()
    assert resolve_model_path(str(models / "folder_model"), allowed) == (models / "folder_model").resolve()
    assert resolve_model_path("a.onnx", allowed) == (models / "a.onnx").resolve()  # from the first folder


@pytest.mark.parametrize("how", ["absolute", "dotdot", "relative_dotdot"])
def test_outside_the_folders_is_refused(tree, how):
    models, outside = tree
    text = {"absolute": str(outside / "secret.onnx"),
            "dotdot": str(models / ".." / "outside" / "secret.onnx"),
            "relative_dotdot": "../outside/secret.onnx"}[how]
    with pytest.raises(errors.ModelLoadError, match="outside the folders this server opens") as e:
        resolve_model_path(text, [models.resolve()])
    assert str(models.resolve()) in str(e.value)


def test_a_symlink_out_of_the_folder_is_refused(tree):
    models, outside = tree
    link = models / "link.onnx"
    link.symlink_to(outside / "secret.onnx")
    with pytest.raises(errors.ModelLoadError, match="outside the folders"):
        resolve_model_path(str(link), [models.resolve()])


def test_missing_not_onnx_empty_and_nul(tree):
    models, _ = tree
    allowed = [models.resolve()]
    with pytest.raises(errors.ModelLoadError, match="No such file or folder on the server"):
        resolve_model_path(str(models / "nope.onnx"), allowed)
    with pytest.raises(errors.ModelLoadError, match="'notes.txt' is not an ONNX model"):
        resolve_model_path(str(models / "notes.txt"), allowed)
    with pytest.raises(errors.ModelLoadError, match="Type the path"):
        resolve_model_path("   ", allowed)
    with pytest.raises(errors.ModelLoadError, match="NUL"):
        resolve_model_path("a\x00.onnx", allowed)


def test_a_checked_path_loads(tmp_path):
    """What resolve_model_path lets through is what model_io opens."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "relu.onnx")
    p = resolve_model_path("relu.onnx", allowed_dirs({OPEN_PATHS_ENV: str(tmp_path)}))
    assert model_io.load_path(p).proto.graph.node[0].op_type == "Relu"


def test_upload_limit_is_the_model_limit(monkeypatch):
    assert upload_limit_mb(500 * 2**20) == 500
    assert upload_limit_mb(500 * 2**20 + 1) == 501
    assert upload_limit_mb(10) == 1
    monkeypatch.setenv("FUSIONVIZ_MAX_MODEL_MB", "1234")
    assert server_paths.upload_limit_mb() == 1234
