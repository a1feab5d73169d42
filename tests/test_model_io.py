"""Safe loading: paths, bytes, folders and zips; typed one-sentence errors;
nothing read outside the model's folder; nothing written outside a temp dir the loader owns."""

from __future__ import annotations

import builtins
import io
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile import corpus  # tests/ is on sys.path (rootdir conftest)
from onnx import TensorProto, helper, numpy_helper

from fusionviz import errors, model_io, samples
from fusionviz.errors import printable
from fusionviz.model_io import Limits

# --------------------------------------------------------------------------- helpers


def _save_external(folder: Path, location: str, *, write: bytes | None = None, offset: int = 0,
                   length: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if write is not None:
        (folder / "weights.bin").write_bytes(write)
    path = folder / "model.onnx"
    path.write_bytes(corpus._external(corpus.tiny_model(), location, offset, length).SerializeToString())
    return path


WEIGHTS = np.array([1, 2, 3, 4], np.float32).tobytes()


@pytest.fixture
def open_log(monkeypatch):
    """Every path opened through builtins.open / io.open while the test runs."""
    opened: list[str] = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            opened.append(os.path.realpath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy)
    return opened


@pytest.fixture
def own_tempdir(tmp_path, monkeypatch):
    """Point tempfile at a watched folder and record every dir made by mkdtemp."""
    watched = tmp_path / "watched_tmp"
    watched.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(watched))
    made: list[Path] = []
    real = tempfile.mkdtemp

    def spy(*args, **kwargs):
        d = real(*args, **kwargs)
        made.append(Path(d))
        return d

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    return watched, made


def _assert_one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text.isprintable() and 0 < len(text) <= errors.MAX_MESSAGE_CHARS
    return text


# --------------------------------------------------------------------------- happy paths and hash


def test_load_path_and_bytes_agree_and_hash_is_content_based(tiny_model_path, tiny_model_bytes):
    a = model_io.load_path(tiny_model_path)
    b = model_io.load_bytes(tiny_model_bytes, name="upload.onnx")
    assert a.name == "tiny.onnx" and b.name == "upload.onnx"
    assert a.sha256 == b.sha256 == model_io.model_hash(a.proto)
    assert len(a.sha256) == 64 and a.short_hash == a.sha256[:12]
    assert a.size_bytes == len(tiny_model_bytes) and b.source == "upload"
    changed = corpus.tiny_model()
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([1, 2, 3, 5], np.float32), "W"))
    assert model_io.load_bytes(changed.SerializeToString()).sha256 != a.sha256


def test_folder_and_zip_with_external_data_load_like_the_inline_model(tmp_path, tiny_model):
    inline = model_io.load_bytes(tiny_model.SerializeToString())
    path = _save_external(tmp_path / "m", "weights.bin", write=WEIGHTS)
    from_file = model_io.load_path(path)
    from_folder = model_io.load_path(tmp_path / "m")
    zpath = tmp_path / "m.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.write(path, "model/model.onnx")
        z.write(tmp_path / "m" / "weights.bin", "model/weights.bin")
    from_zip = model_io.load_path(zpath)
    from_zip_bytes = model_io.load_bytes(zpath.read_bytes(), name="m.zip")
    for loaded in (from_file, from_folder, from_zip, from_zip_bytes):
        w = loaded.proto.graph.initializer[0]
        assert w.data_location == TensorProto.DEFAULT and not w.external_data
        np.testing.assert_array_equal(numpy_helper.to_array(w), [1, 2, 3, 4])
        assert loaded.sha256 == inline.sha256  # external data inlined: same content, same hash
    assert from_zip.source == "zip:m.zip" and from_file.size_bytes == path.stat().st_size + 16


def test_folder_prefers_the_single_top_level_model(tmp_path, tiny_model_bytes):
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.onnx").write_bytes(tiny_model_bytes)
    (tmp_path / "sub" / "other.onnx").write_bytes(tiny_model_bytes)
    assert model_io.load_path(tmp_path).name == "top.onnx"
    (tmp_path / "top2.onnx").write_bytes(tiny_model_bytes)
    with pytest.raises(errors.ModelLoadError, match="choose one"):
        model_io.load_path(tmp_path)


def test_folder_search_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(model_io, "MAX_FOLDER_ENTRIES", 10)
    for i in range(12):
        (tmp_path / f"f{i}.txt").write_text("x")
    with pytest.raises(errors.ModelLoadError, match="more than 10 entries"):
        model_io.load_path(tmp_path)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in
                                  samples.light_models()])
def test_light_models_load(path):
    loaded = model_io.load_path(path)
    assert model_io.count_nodes(loaded.proto) > 0


def test_save_model_round_trip_and_unwritable_target(tmp_path, tiny_model):
    out = model_io.save_model(tiny_model, tmp_path / "a" / "b" / "out.onnx")
    assert model_io.load_path(out).sha256 == model_io.load_bytes(tiny_model.SerializeToString()).sha256
    (tmp_path / "file").write_text("x")
    with pytest.raises(errors.InputSpecError):
        model_io.save_model(tiny_model, tmp_path / "file" / "out.onnx")


# --------------------------------------------------------------------------- not a model


@pytest.mark.parametrize(
    ("data", "cls", "words"),
    [
        pytest.param(b"", errors.EmptyModelError, "empty", id="empty"),
        pytest.param(os.urandom(0) + bytes(range(256)) * 8, errors.NotOnnxError, "not an onnx model", id="bytes"),
        pytest.param(b"hello, I am a text file\nwith two lines\n", errors.NotOnnxError, "text file", id="text"),
        pytest.param(numpy_helper.from_array(np.ones((2, 2), np.float32), "t").SerializeToString(),
                     errors.NotOnnxError, "TensorProto", id="tensor"),
        pytest.param(corpus.tiny_model().graph.SerializeToString(), errors.NotOnnxError, "GraphProto",
                     id="graph"),
        pytest.param(helper.make_node("Relu", ["x"], ["y"]).SerializeToString(), errors.NotOnnxError,
                     "NodeProto", id="node"),
        pytest.param(corpus.deep_model_bytes(200), errors.NotOnnxError, "nested", id="nested200"),
        pytest.param(b"PK\x03\x04" + b"\x00" * 100, errors.ArchiveError, "zip", id="broken-zip"),
    ],
)
def test_not_a_model(data, cls, words):
    with pytest.raises(cls) as info:
        model_io.load_bytes(data, name="up.onnx")
    assert words.lower() in _assert_one_sentence(info.value).lower()


def test_truncated_model_is_refused_at_every_cut(tiny_model_bytes):
    for cut in range(1, len(tiny_model_bytes)):
        with pytest.raises(errors.ModelLoadError):
            model_io.load_bytes(tiny_model_bytes[:cut])


def test_fifo_and_devices_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)  # opening it for reading would block forever
    with pytest.raises(errors.ModelLoadError, match="not a regular file"):
        model_io.load_path(fifo)
    with pytest.raises(errors.ModelLoadError, match="not a regular file"):
        model_io.load_path("/dev/zero")


def test_empty_file_and_missing_path(tmp_path):
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(errors.EmptyModelError):
        model_io.load_path(tmp_path / "e.onnx")
    with pytest.raises(errors.ModelLoadError, match="No such file"):
        model_io.load_path(tmp_path / "nope.onnx")


# --------------------------------------------------------------------------- limits


def test_size_limit_is_configurable(tmp_path, tiny_model_path, tiny_model_bytes, monkeypatch):
    small = Limits(max_model_bytes=50)
    with pytest.raises(errors.ModelTooLargeError, match="limit"):
        model_io.load_path(tiny_model_path, limits=small)
    with pytest.raises(errors.ModelTooLargeError):
        model_io.load_bytes(tiny_model_bytes, limits=small)
    monkeypatch.setenv("FUSIONVIZ_MAX_MODEL_MB", "0.00001")
    assert Limits().max_model_bytes == 10
    with pytest.raises(errors.ModelTooLargeError):
        model_io.load_path(tiny_model_path)
    monkeypatch.setenv("FUSIONVIZ_MAX_MODEL_MB", "lots")  # a bad setting falls back, no crash
    assert Limits().max_model_bytes == int(model_io.default_model_mb() * 1024 * 1024)
    # the default: half this machine's memory, never below 500 MB
    assert Limits().max_model_bytes >= max(500 * 1024 * 1024, model_io.machine_memory_bytes() // 2 - 1024 * 1024)
    assert model_io.load_path(tiny_model_path).name == "tiny.onnx"


def test_external_data_counts_toward_the_size_limit(tmp_path):
    path = _save_external(tmp_path / "m", "weights.bin", write=WEIGHTS)
    size = path.stat().st_size
    assert model_io.load_path(path, limits=Limits(max_model_bytes=size + 16)).size_bytes == size + 16
    with pytest.raises(errors.ModelTooLargeError):
        model_io.load_path(path, limits=Limits(max_model_bytes=size + 15))


def test_node_limit(tiny_model_path):
    with pytest.raises(errors.ModelTooLargeError, match="nodes"):
        model_io.load_path(tiny_model_path, limits=Limits(max_nodes=1))


# --------------------------------------------------------------------------- external data


@pytest.mark.parametrize(
    ("location", "words"),
    [
        pytest.param("/etc/passwd", "absolute", id="absolute"),
        pytest.param("../../etc/passwd", "outside", id="dotdot"),
        pytest.param("a/../../secret.bin", "outside", id="dotdot-inner"),
        pytest.param("..\\secret.bin", "outside", id="dotdot-backslash"),
        pytest.param("C:/Windows/secret.bin", "absolute", id="drive"),
    ],
)
def test_external_location_outside_folder_is_refused_and_never_read(tmp_path, location, words, open_log):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S" * 16)
    path = _save_external(tmp_path / "m", location)
    open_log.clear()  # count only what the loader opens
    with pytest.raises(errors.UnsafePathError) as info:
        model_io.load_path(path)
    assert words in _assert_one_sentence(info.value)
    assert str(secret.resolve()) not in open_log and "/etc/passwd" not in open_log
    assert str(path.resolve()) in open_log  # the spy works: the model itself was opened


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_external_symlink_out_of_folder_is_refused_and_never_read(tmp_path, kind, open_log):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "weights.bin"
    secret.write_bytes(WEIGHTS)
    folder = tmp_path / "m"
    folder.mkdir()
    if kind == "file":
        os.symlink(secret, folder / "weights.bin")
        location = "weights.bin"
    else:
        os.symlink(outside, folder / "data")
        location = "data/weights.bin"
    path = _save_external(folder, location)
    open_log.clear()
    with pytest.raises(errors.UnsafePathError, match="outside the model folder"):
        model_io.load_path(path)
    assert str(secret.resolve()) not in open_log


def test_symlink_inside_folder_is_fine(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "real.bin").write_bytes(WEIGHTS)
    os.symlink(folder / "real.bin", folder / "weights.bin")
    loaded = model_io.load_path(_save_external(folder, "weights.bin"))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.proto.graph.initializer[0]), [1, 2, 3, 4])


@pytest.mark.parametrize(
    ("kwargs", "write", "cls", "words"),
    [
        pytest.param({"offset": 1 << 30}, WEIGHTS, errors.ExternalDataError, "past the end", id="offset"),
        pytest.param({"length": 17}, WEIGHTS, errors.ExternalDataError, "past the end", id="length"),
        pytest.param({"offset": 8, "length": 16}, WEIGHTS, errors.ExternalDataError, "past the end",
                     id="offset+length"),
        pytest.param({}, None, errors.ExternalDataError, "missing", id="missing"),
    ],
)
def test_external_data_bad_ranges_and_missing(tmp_path, kwargs, write, cls, words):
    path = _save_external(tmp_path / "m", "weights.bin", write=write, **kwargs)
    with pytest.raises(cls) as info:
        model_io.load_path(path)
    assert words in _assert_one_sentence(info.value)


def test_external_data_in_an_upload_is_refused(tmp_path):
    model = corpus._external(corpus.tiny_model(), "weights.bin")
    with pytest.raises(errors.ExternalDataError, match="zip"):
        model_io.load_bytes(model.SerializeToString())


def test_non_numeric_offset(tmp_path):
    model = corpus._external(corpus.tiny_model(), "weights.bin")
    for e in model.graph.initializer[0].external_data:
        if e.key == "offset":
            e.value = "12abc"
    (tmp_path / "weights.bin").write_bytes(WEIGHTS)
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(errors.ExternalDataError, match="non-numeric"):
        model_io.load_path(tmp_path / "model.onnx")


def test_check_false_still_refuses_unsafe_paths_and_lying_tensors(tmp_path):
    path = _save_external(tmp_path / "m", "../../etc/passwd")
    with pytest.raises(errors.UnsafePathError):
        model_io.load_path(path, check=False)
    m = corpus._graph_model([helper.make_node("Add", ["x", "W"], ["y"])], [corpus._vi("x")], [corpus._vi("y")],
                            initializers=[corpus._lying_tensor("W", [corpus.HUGE], b"\0" * 4)])
    with pytest.raises(errors.TensorDataError):
        model_io.load_bytes(m.SerializeToString(), check=False)


# --------------------------------------------------------------------------- zips


def _zip_bytes(members) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def test_zip_extracts_into_own_temp_dir_and_cleans_up(tmp_path, own_tempdir, tiny_model_bytes):
    watched, made = own_tempdir
    data = _zip_bytes([("m/model.onnx", tiny_model_bytes)])
    before = set(tmp_path.rglob("*"))
    loaded = model_io.load_bytes(data, name="m.zip")
    assert loaded.name == "model.onnx"
    assert made and all(d.parent == watched for d in made)  # it used a temp dir it made ...
    assert not any(d.exists() for d in made) and not list(watched.iterdir())  # ... and removed it
    assert set(tmp_path.rglob("*")) == before  # nothing written anywhere else under tmp_path


@pytest.mark.parametrize(
    ("members", "cls", "words"),
    [
        pytest.param([("../evil.onnx", b"x")], errors.UnsafePathError, "escapes", id="dotdot"),
        pytest.param([("ok/../../evil.onnx", b"x")], errors.UnsafePathError, "escapes", id="dotdot-inner"),
        pytest.param([("..\\evil.onnx", b"x")], errors.UnsafePathError, "escapes", id="backslash"),
        pytest.param([("C:/evil.onnx", b"x")], errors.UnsafePathError, "escapes", id="drive"),
        pytest.param([("a/one.onnx", b"x"), ("b/two.onnx", b"x")], errors.ModelLoadError, "choose one",
                     id="two-models"),
    ],
)
def test_bad_zip_members_are_refused_before_extraction(tmp_path, own_tempdir, tiny_model_bytes,
                                                       members, cls, words):
    watched, made = own_tempdir
    data = _zip_bytes([("sub/good.onnx", tiny_model_bytes), *members])
    with pytest.raises(cls) as info:
        model_io.load_bytes(data, name="bad.zip")
    assert words in _assert_one_sentence(info.value)
    assert not list(watched.iterdir()) and not (tmp_path / "evil.onnx").exists()
    assert not (watched.parent / "evil.onnx").exists()


def test_zip_without_a_model(own_tempdir):
    watched, _ = own_tempdir
    with pytest.raises(errors.ModelLoadError, match="holds no .onnx file"):
        model_io.load_bytes(_zip_bytes([("readme.txt", b"hi")]), name="docs.zip")
    assert not list(watched.iterdir())


def test_absolute_and_symlink_zip_members(tmp_path, own_tempdir):
    watched, _ = own_tempdir
    for name, words in (("zip_entry_absolute", "escapes"), ("zip_entry_symlink", "symlink")):
        case_dir = tmp_path / name
        case_dir.mkdir()
        builder = dict((b[0], b[1]) for b in corpus._BUILDERS)[name]
        with pytest.raises(errors.UnsafePathError, match=words):
            model_io.load_path(builder(case_dir))
    assert not list(watched.iterdir()) and not Path("/tmp/fusionviz_evil.onnx").exists()


def test_zip_bombs_are_refused_without_extracting(tmp_path, own_tempdir):
    watched, _ = own_tempdir
    bomb = corpus.zip_bomb(tmp_path / "bomb.zip")  # 2 GiB of zeros, ~2 MB compressed
    assert bomb.stat().st_size < 4_000_000
    with pytest.raises(errors.ModelTooLargeError, match="zip bomb"):
        model_io.load_path(bomb)
    ratio = corpus.zip_bomb(tmp_path / "ratio.zip", expanded=1 << 26)  # 64 MiB: under the total limit
    with pytest.raises(errors.ModelTooLargeError, match="200:1"):
        model_io.load_path(ratio)
    liar = corpus.zip_bomb(tmp_path / "liar.zip", expanded=1 << 26, declared=1000)
    with pytest.raises(errors.ModelLoadError):
        model_io.load_path(liar)
    assert not list(watched.iterdir())


def test_zip_total_expanded_limit(tmp_path, tiny_model_bytes):
    data = _zip_bytes([("model.onnx", tiny_model_bytes), ("pad.bin", os.urandom(5000))])
    with pytest.raises(errors.ModelTooLargeError):
        model_io.load_bytes(data, limits=Limits(max_archive_bytes=4000))


# --------------------------------------------------------------------------- versions, checker, tensors


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        pytest.param({"ir_version": 99}, "IR version 99", id="ir-high"),
        pytest.param({"ir_version": 2}, "IR version 2", id="ir-low"),
        pytest.param({"opsets": (("", 999),)}, "opset 999", id="opset-high"),
        pytest.param({"opsets": (("", 5),)}, "opset 5", id="opset-low"),
        pytest.param({"opsets": (("", 17), ("ai.onnx.ml", 99))}, "ai.onnx.ml opset 99", id="ml-high"),
        pytest.param({"opsets": (("", 17), ("com.x", -3))}, "invalid version", id="custom-negative"),
    ],
)
def test_unsupported_versions(kwargs, words):
    m = corpus._relu_model(**kwargs)
    with pytest.raises(errors.UnsupportedVersionError) as info:
        model_io.load_bytes(m.SerializeToString())
    assert words in _assert_one_sentence(info.value)


@pytest.mark.parametrize(
    ("case", "words"),
    [
        pytest.param("cycle", "input 'b' of node 'add_a' (Add) is produced by a later node", id="cycle"),
        pytest.param("dangling_input", "input 'ghost' of node 'add_ghost' (Add) is produced by no node",
                     id="dangling"),
        pytest.param("duplicate_output_names", "'y' has been used as output names multiple times",
                     id="duplicate"),
        pytest.param("unknown_op", "No Op registered for Frobnicate with domain_version of 17 (node 'frob'",
                     id="unknown-op"),
        pytest.param("unknown_domain_not_imported", "No opset import for domain 'com.nowhere' (node 'r'",
                     id="unknown-domain"),
    ],
)
def test_checker_errors_name_the_node(tmp_path, case, words):
    builder = dict((b[0], b[1]) for b in corpus._BUILDERS)[case]
    path = builder(tmp_path)
    with pytest.raises(errors.CheckerError) as info:
        model_io.load_path(path)
    assert words in _assert_one_sentence(info.value)
    # check=False loads it (for tools that want to show a broken graph), rules 1-6 still ran
    assert model_io.load_path(path, check=False).proto.graph.node


def _with_initializer(t: onnx.TensorProto) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info("y", t.data_type, list(t.dims))
    return corpus._graph_model([helper.make_node("Identity", [t.name], ["y"])], [], [vi], initializers=[t],
                               opsets=(("", 23),), ir_version=11)


def test_tensors_that_claim_more_than_they_hold_are_refused():
    bad = [
        corpus._lying_tensor("W", [corpus.HUGE], b"\0" * 4),
        corpus._lying_tensor("W", [4], b"\0" * 20),  # holds more than declared
        helper.make_tensor("W", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0]),
    ]
    del bad[2].float_data[-1]  # typed field one short
    neg = helper.make_tensor("W", TensorProto.FLOAT, [1], [1.0])
    neg.dims[0] = -5
    bad.append(neg)
    nodata = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1 << 20])
    bad.append(nodata)
    for t in bad:
        with pytest.raises(errors.TensorDataError) as info:
            model_io.load_bytes(_with_initializer(t).SerializeToString(), check=False)
        _assert_one_sentence(info.value)


def test_unknown_data_types_are_refused():
    t = numpy_helper.from_array(np.ones(4, np.float32), "W")
    t.data_type = 29  # unknown to onnx and onnx-ir (found by the fuzz test: onnx-ir raised)
    with pytest.raises(errors.TensorDataError, match="unknown data type 29"):
        model_io.load_bytes(_with_initializer(t).SerializeToString(), check=False)
    m = corpus._relu_model()
    m.graph.input[0].type.tensor_type.elem_type = 77
    with pytest.raises(errors.TensorDataError, match="unknown element type 77"):
        model_io.load_bytes(m.SerializeToString(), check=False)


def test_lying_constant_inside_a_subgraph_is_refused():
    big = corpus._lying_tensor("c", [1 << 16, 1 << 16], b"\0" * 16)
    then = helper.make_graph([helper.make_node("Constant", [], ["k"], value=big)], "then", [],
                             [corpus._vi("k", [1 << 16, 1 << 16])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "else", [], [corpus._vi("z")])
    node = helper.make_node("If", ["c0"], ["y"], then_branch=then, else_branch=other)
    m = corpus._graph_model([node], [corpus._vi("x"), helper.make_tensor_value_info("c0", TensorProto.BOOL, [])],
                            [corpus._vi("y", [1 << 16, 1 << 16])])
    with pytest.raises(errors.TensorDataError, match="4,294,967,296 elements"):
        model_io.load_bytes(m.SerializeToString())


_DTYPES = [dt for name, dt in TensorProto.DataType.items() if dt != TensorProto.UNDEFINED]


@pytest.mark.parametrize("dtype", _DTYPES, ids=[TensorProto.DataType.Name(d) for d in _DTYPES])
def test_honest_tensors_of_every_dtype_pass_the_data_check(dtype):
    # a guard against refusing real models: raw and typed storage, every type onnx knows
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    except (KeyError, ValueError):
        pytest.skip("no numpy type")
    tensors = []
    for shape in ([2, 3], [5], []):
        n = int(np.prod(shape))
        if dtype == TensorProto.STRING:
            tensors.append(helper.make_tensor("W", dtype, shape, [b"a"] * n))
            continue
        arr = np.zeros(shape, dtype=np_dtype)
        tensors.append(numpy_helper.from_array(arr, "W"))
        tensors.append(helper.make_tensor("W", dtype, shape, arr.flatten().tolist()))
    for t in tensors:
        model_io._check_tensor_data(_with_initializer(t), "m")


def test_nested_subgraphs_are_walked_without_recursion():
    m = corpus.nested_if_model(30)
    loaded = model_io.load_bytes(m.SerializeToString())
    assert model_io.count_nodes(loaded.proto) == 61
    assert len(list(model_io.iter_graphs(loaded.proto))) == 61


# --------------------------------------------------------------------------- messages


def test_invalid_utf8_text_is_refused():
    m = corpus.tiny_model()
    m.graph.node[1].output[0] = "OUTNAME"
    m.graph.output[0].name = "OUTNAME"
    data = m.SerializeToString().replace(b"OUTNAME", b"OUT\xc3(ME")
    assert isinstance(onnx.load_from_string(data).graph.output[0].name, bytes)  # what protobuf does
    with pytest.raises(errors.NotOnnxError, match="not valid UTF-8"):
        model_io.load_bytes(data)


def test_messages_are_one_bounded_printable_line(tmp_path):
    long_evil = "W" * 10_000 + "\x1b[2J\n\u202e"
    model = corpus._external(corpus.tiny_model(), "../" + long_evil)
    model.graph.initializer[0].name = long_evil
    model.graph.node[1].input[1] = long_evil
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(errors.UnsafePathError) as info:
        model_io.load_path(tmp_path / "model.onnx")
    text = _assert_one_sentence(info.value)
    assert "\x1b" not in text and "\u202e" not in text


def test_printable_escapes_control_and_bidi_characters():
    assert printable("plain <b>{x}</b> \"q\" \\") == "plain <b>{x}</b> \"q\" \\"
    assert printable("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert printable("\x1b[31mred\x00") == "\\x1b[31mred\\x00"
    assert printable("left\u202eright\u200b") == "left\\u202eright\\u200b"
    assert printable("x" * 50, 10) == "x" * 10 + "...(+40 chars)"
    assert str(errors.FusionvizError("two\nlines\x07 " + "y" * 1000)).startswith("two lines\\x07 y")
    assert len(str(errors.FusionvizError("y" * 1000))) == errors.MAX_MESSAGE_CHARS


def test_nodes_out_of_topological_order_are_sorted_on_load_and_said():
    """onnxruntime runs a file whose nodes are stored out of order; the checker refuses it, so
    loading sorts it (stably) and says so instead of refusing the model."""
    import onnx.helper as oh

    nodes = [oh.make_node("Neg", ["a"], ["y"], name="late"), oh.make_node("Relu", ["x"], ["a"], name="early"),
             oh.make_node("Abs", ["x"], ["z"], name="side")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", 1, [2])],
                      [oh.make_tensor_value_info("y", 1, [2]), oh.make_tensor_value_info("z", 1, [2])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    loaded = model_io.load_bytes(m.SerializeToString())
    assert [n.name for n in loaded.proto.graph.node] == ["early", "late", "side"]
    (note,) = loaded.notes
    assert "topological order" in note


def test_a_sorted_model_loads_without_a_note():
    m = corpus._relu_model()
    assert model_io.load_bytes(m.SerializeToString()).notes == ()


@pytest.mark.parametrize(("limits", "setting"), [
    pytest.param(model_io.Limits(max_model_bytes=16), "FUSIONVIZ_MAX_MODEL_MB", id="size"),
    pytest.param(model_io.Limits(max_nodes=0), "FUSIONVIZ_MAX_NODES", id="nodes"),
])
def test_a_limit_message_says_what_was_found_the_limit_and_the_setting(limits, setting):
    m = corpus._relu_model()
    with pytest.raises(errors.ModelTooLargeError) as info:
        model_io.load_bytes(m.SerializeToString(), limits=limits)
    text = _assert_one_sentence(info.value)
    assert setting in text and "limit" in text


def test_weights_past_protobufs_limit_stay_on_disk_whatever_the_setting(tmp_path, monkeypatch):
    # external data at protobuf's limit cannot be read into the in-memory proto (the checker and
    # the hash would fail to serialise it): it stays on disk even when the setting says read it
    from fusionviz.bigmodel import write_big_model

    path = write_big_model(tmp_path / "m.onnx", total_bytes=5 << 20, hidden=512, vocab=1024)
    keep_all_in_memory = Limits(weights_on_disk_bytes=1 << 40)
    assert model_io.weights_dir(model_io.load_path(path, limits=keep_all_in_memory).proto) is None
    monkeypatch.setattr(model_io, "PROTO_MAX_BYTES", 4 << 20)
    model = model_io.load_path(path, limits=keep_all_in_memory).proto
    assert model_io.weights_dir(model) is not None
    assert model.ByteSize() < 1 << 20
