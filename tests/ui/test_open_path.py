"""Model page: opening a model by its path on the server, and the upload limit (AppTest)."""

from __future__ import annotations

import shutil

from ui_helpers import errors_of, goto

from fusionviz import samples
from fusionviz.server_paths import OPEN_PATHS_ENV
from fusionviz.ui import model_page, state


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


def _open(at, text: str):
    at.text_input(key=model_page.PATH_INPUT).set_value(text)
    at.button(key="open_path_go").click().run()
    assert not at.exception, at.exception
    return at


def test_off_when_unset_and_the_page_says_how_to_turn_it_on(app, monkeypatch):
    monkeypatch.delenv(OPEN_PATHS_ENV, raising=False)
    goto(app, "model")
    assert not [t for t in app.text_input if t.key == model_page.PATH_INPUT]
    text = _captions(app)
    assert "Off on this server" in text and f"{OPEN_PATHS_ENV}=" in text


def test_opens_a_model_under_an_allowed_folder(app, monkeypatch, tmp_path):
    shutil.copy(samples.sample_path("textbook"), tmp_path / "mine.onnx")
    monkeypatch.setenv(OPEN_PATHS_ENV, str(tmp_path))
    goto(app, "model")
    assert str(tmp_path) in _captions(app)
    _open(app, str(tmp_path / "mine.onnx"))
    assert errors_of(app) == []
    assert app.session_state[state.MODEL].name == "mine.onnx"
    assert app.session_state[state.ORIGIN]["kind"] == "path"
    assert any(s.value == "Summary: mine.onnx" for s in app.subheader)
    goto(app, "graph")
    assert errors_of(app) == []


def test_outside_missing_and_not_onnx_are_one_line_each(app, monkeypatch, tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "notes.txt").write_text("hi")
    (tmp_path / "secret.onnx").write_bytes(samples.sample_path("textbook").read_bytes())
    monkeypatch.setenv(OPEN_PATHS_ENV, str(allowed))
    goto(app, "model")
    before = app.session_state[state.MODEL].sha256
    for text, want in ((str(tmp_path / "secret.onnx"), "outside the folders this server opens"),
                       (str(allowed / "nope.onnx"), "No such file or folder on the server"),
                       (str(allowed / "notes.txt"), "is not an ONNX model")):
        _open(app, text)
        errs = errors_of(app)
        assert len(errs) == 1 and want in errs[0] and "\n" not in errs[0], (text, errs)
        assert app.session_state[state.MODEL].sha256 == before


def test_upload_limit_is_the_model_limit_and_says_how_to_open_bigger(app, monkeypatch):
    from streamlit import config

    monkeypatch.setenv("FUSIONVIZ_MAX_MODEL_MB", "321")
    goto(app, "model")
    assert config.get_option("server.maxUploadSize") == 321
    text = _captions(app)
    assert "Uploads up to 321 MB" in text and "by its path on the server" in text and "--model PATH" in text
