"""AppTest of the app as a daily tool: inputs, shareable URLs, the sidebar, exports, statuses."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from streamlit.testing.v1 import AppTest
from ui_helpers import APP, ROOT, TEST_PASSES, TIMEOUT, errors_of, goto

from fusionviz import samples
from fusionviz.ui import state

pytestmark = pytest.mark.skipif(not samples.sample_names(), reason="sample models not built")

UI = ROOT / "fusionviz" / "ui"


def small_model() -> bytes:
    """A three-node model to upload."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["a"], name="id"),
         helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture
def declining_pass(tmp_path, monkeypatch):
    """``test_break_signature`` in the registry: a pass whose result the validity rule declines
    (a real pass that breaks the rule is a bug that gets fixed, so the test brings its own)."""
    import sys

    from fusionviz.passes import registry

    (tmp_path / "fv_test_passes.py").write_text(TEST_PASSES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_MODULES", (*registry._MODULES, "fv_test_passes"))
    monkeypatch.setattr(registry, "_CACHE", None)
    yield "test_break_signature"
    sys.modules.pop("fv_test_passes", None)


def scalar_model() -> bytes:
    """A model with a scalar sample-rate input it compares with 16000, and a free dim."""
    c = numpy_helper.from_array(np.array(16000, dtype=np.int64), "c")
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x1"], name="id"),
         helper.make_node("Equal", ["sr", "c"], ["eq"], name="eq"),
         helper.make_node("Neg", ["x1"], ["nx"], name="neg"),
         helper.make_node("Where", ["eq", "x1", "nx"], ["y"], name="where")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "samples"])], [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _upload(at: AppTest, name: str, data: bytes) -> None:
    goto(at, "model")
    at.file_uploader(key="upload").set_value((name, data, "application/octet-stream")).run()
    assert not at.exception, at.exception


def _texts(at: AppTest) -> list[str]:
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "subheader"):
        out += [str(e.value) for e in at.get(kind)]
    out += [str(e.value) for e in at.sidebar.markdown] + [str(e.value) for e in at.sidebar.caption]
    return out


# ------------------------------------------------------------------ URLs


def test_link_to_a_model_the_server_no_longer_has_opens_the_default_sample():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["model"] = "0123456789abcdef0123"
    at.query_params["focus"] = "some_node"
    at.run()
    assert not at.exception
    assert at.session_state[state.ORIGIN] == {"kind": "sample", "name": "resnet_ts"}
    assert any("no longer on this server" in i.value for i in at.info)
    qp = dict(at.query_params)
    assert "model" not in qp and qp["sample"] in ("resnet_ts", ["resnet_ts"])
    assert "focus" in qp, "a parameter the app does not own was cleared"


def test_link_to_an_upload_opens_it_in_another_session(app):
    _upload(app, "small.onnx", small_model())
    ref = state.model_ref(app.session_state[state.MODEL])
    other = AppTest.from_file(APP, default_timeout=TIMEOUT)
    other.query_params["model"] = ref
    other.query_params["passes"] = "eliminate_identity"
    other.run()
    assert not other.exception
    assert other.session_state[state.MODEL].name == "small.onnx"
    assert other.session_state[state.PASSES] == ["eliminate_identity"]


def test_level_lives_in_the_url():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "textbook"
    at.query_params["level"] = "basic"
    at.run()
    goto(at, "bench")
    assert at.selectbox(key="bench_level").value == "basic"
    at.selectbox(key="bench_level").set_value("extended").run()
    assert at.query_params["level"] in ("extended", ["extended"])


# ------------------------------------------------------------------ first screen


def test_sidebar_names_the_uploaded_model_at_once_and_no_path_is_shown(app):
    assert any("resnet_ts.onnx" in m.value for m in app.sidebar.markdown)
    _upload(app, "small.onnx", small_model())
    side = " ".join(m.value for m in app.sidebar.markdown)
    assert "small.onnx" in side and "resnet_ts.onnx" not in side
    for page in ("model", "passes"):
        goto(app, page)
        texts = _texts(app)
        assert not [t for t in texts if str(ROOT) in t or "/tmp/" in t], "a server path reached the page"


def test_bench_compares_with_onnxruntime_level_all_by_default(app):
    goto(app, "bench")
    assert app.checkbox(key="bench_v_reference").value is True
    from fusionviz.experiment.plan import Plan, build_variants

    loaded = app.session_state[state.MODEL]
    from fusionviz.passes import run_pipeline

    result = run_pipeline(loaded.proto, ["eliminate_identity"])
    plan = Plan(True, True, True, False, False, True, False, "off", 1, "CPUExecutionProvider", False, 0.2, False)
    variants, _ = build_variants(plan, ["eliminate_identity"], result, {})
    by = {v.label: v.settings.level for v in variants}
    assert by["original @ORT all"] == "all"
    # Everything else, the per-pass steps included, runs at the run's one level.
    assert {lv for label, lv in by.items() if label != "original @ORT all"} == {"off"}


# ------------------------------------------------------------------ inputs


def test_inputs_file_becomes_an_extra_verification_set(app):
    goto(app, "model")
    app.button(key="sample_textbook").click().run()
    proto = app.session_state[state.MODEL].proto
    name = proto.graph.input[0].name
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    good = _npz(**{name: np.random.default_rng(1).standard_normal(dims).astype(np.float32)})
    app.file_uploader(key="inputs_upload").set_value(("mine.npz", good, "application/octet-stream")).run()
    assert not app.exception and errors_of(app) == []
    assert any("mine.npz" in s.value for s in app.success)
    goto(app, "passes")
    assert any("Input sets used: normal, zeros, edge, user" in c.value for c in app.caption)
    # A bad file: one error line, the app keeps running and keeps the good data.
    goto(app, "model")
    app.file_uploader(key="inputs_upload").set_value(
        ("bad.npz", _npz(nope=np.zeros(3, np.float32)), "application/octet-stream")).run()
    assert not app.exception
    errs = errors_of(app)
    assert len(errs) == 1 and "nope" in errs[0] and "\n" not in errs[0]
    app.file_uploader(key="inputs_upload").set_value(("junk.npz", b"not a zip", "application/octet-stream")).run()
    errs = errors_of(app)
    assert len(errs) == 1 and "junk.npz" in errs[0]


def test_scalar_input_value_is_inferred_shown_and_settable(app):
    _upload(app, "scalar.onnx", scalar_model())
    assert app.number_input(key="value_sr").value == 16000
    assert any("16000 (the value the model compares it with)" in str(t.value.to_dict()) for t in app.table)
    app.number_input(key="dim_samples").set_value(64).run()
    app.number_input(key="value_sr").set_value(8000).run()
    assert not app.exception and errors_of(app) == []
    assert app.session_state[state.VALUES] == {"sr": 8000}
    assert app.session_state[state.DIMS]["samples"] == 64
    goto(app, "passes")
    texts = " ".join(c.value for c in app.code)
    assert "--input sr=8000" in texts and "--shape x=1,64" in texts


def huge_input_model() -> bytes:
    """A model whose fixed input would take 10 GB: no input set can be made for it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [50_000, 50_000])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["a"], name="id"),
                           helper.make_node("Relu", ["a"], ["y"], name="relu")], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [50_000, 50_000])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_inputs_that_cannot_be_made_are_one_error_line_and_verification_says_why(app):
    _upload(app, "huge.onnx", huge_input_model())
    errs = errors_of(app)
    assert len(errs) == 1 and "would have" in errs[0] and "\n" not in errs[0], errs
    app.session_state[state.PASSES] = ["eliminate_identity"]
    goto(app, "passes")
    assert not app.exception
    assert any("Not verified: no inputs to run" in w.value for w in app.warning)
    assert app.session_state[state.PASSES] == ["eliminate_identity"]


def test_symbolic_dims_of_bert_drive_verification(app):
    goto(app, "model")
    app.button(key="sample_bert_ts").click().run()
    sym = state.symbolic_dims(app.session_state[state.MODEL])
    dim = next(name for _, name, _ in sym if "seq" in name.lower())
    app.number_input(key=f"dim_{dim}").set_value(8).run()
    goto(app, "passes")
    assert not app.exception
    inputs = dict(app.session_state[state.DIMS])
    assert inputs[dim] == 8
    assert any("--shape input_ids=1,8" in c.value for c in app.code)


# ------------------------------------------------------------------ passes page


def test_declined_pass_is_shown_with_its_reason(declining_pass):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "textbook"
    at.query_params["passes"] = f"eliminate_identity,{declining_pass}"
    at.run()
    goto(at, "passes")
    warn = [w.value for w in at.warning]
    assert any("was declined and rolled back" in w and "outputs changed" in w for w in warn), warn
    assert any("(declined)" in w for w in warn)
    assert {d.key for d in at.get("download_button")} >= {"dl_model", "dl_json", "dl_md"}
    assert errors_of(at) == [] and not at.exception


def test_a_failed_pass_names_the_passes_before_it_in_the_prefix_cache():
    from fusionviz.passes.pipeline import PassReport
    from fusionviz.ui import cache

    rep = PassReport("p", "P", (), 3, 3, 0.1, error="boom")
    assert rep.failure == "boom (after: no other pass)"
    got = cache._in_context(rep, ("a", "b"))
    assert got.after == ("a", "b") and got.error == "boom" and got.status == "failed"
    assert got.failure == "boom (after: a, b)"


# ------------------------------------------------------------------ structure


def _ui_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in UI.glob("*.py"):
        mod = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "fusionviz.ui":
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fusionviz.ui."):
                deps.add(node.module.split(".")[2])
        graph[mod] = deps & {p.stem for p in UI.glob("*.py")}
    return graph


def test_ui_modules_have_no_import_cycles():
    graph = _ui_imports()
    for a in ("cache", "state", "common", "learn_page"):
        seen, stack = set(), list(graph.get(a, ()))
        while stack:
            m = stack.pop()
            if m in seen:
                continue
            seen.add(m)
            stack += graph.get(m, ())
        assert a not in seen, f"{a} imports itself through {sorted(seen)}"


def test_every_streamlit_cache_is_bounded():
    for path in [*UI.glob("*.py"), Path(APP)]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("cache_data", "cache_resource"):
                kw = {k.arg for k in node.keywords}
                assert "max_entries" in kw, f"{path.name}:{node.lineno} has an unbounded cache"


def test_no_process_wide_state_changes_in_the_ui():
    for path in [*UI.glob("*.py"), Path(APP)]:
        text = path.read_text()
        for bad in ("os.chdir", "os.environ[", "os.environ.update", "sys.path.insert", "np.seterr"):
            assert bad not in text, f"{path.name} changes process-wide state ({bad})"
