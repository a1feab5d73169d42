"""The page legends show "lifted to initializer" only when a diff lifted Constant nodes."""

from __future__ import annotations

from fusionviz.graphview.dot import STATUS_STYLE
from fusionviz.ui import common


def test_lifted_swatch_only_when_something_was_lifted():
    style = "style='background:{fill};border-color:{border}'"
    assert common.lifted_swatch(None, style) == ""
    assert common.lifted_swatch({"removed": 3, "lifted": 0}, style) == ""
    text = common.lifted_swatch({"lifted": 1342}, style)
    assert "lifted to initializer <b>1,342</b>" in text
    assert STATUS_STYLE["lifted"][0] in text and STATUS_STYLE["lifted"][1] in text
