"""Many changes of one kind and op pattern are one line on the Passes page, not a wall of text."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from ui_helpers import APP, TIMEOUT, goto

from fusionviz.passes.changes import Change, ChangeKind
from fusionviz.ui.passes_page import GROUP_MIN, group_changes


def _skip_ln(i: int) -> Change:
    return Change(ChangeKind.FUSED, "fuse_skip_layernorm", (f"Add_{i}", f"LayerNormalization_{i}"),
                  (f"SkipLayerNorm_{i}",), ("Add", "LayerNormalization"), ("SkipLayerNormalization",))


def test_eight_skip_layer_norms_are_one_group_in_place():
    other = Change(ChangeKind.REMOVED, "fuse_skip_layernorm", ("Identity_1",), (), ("Identity",), ())
    groups = group_changes([other, *(_skip_ln(i) for i in range(8))])
    assert [len(m) for _, m in groups] == [1, 8]
    pattern, members = groups[1]
    assert pattern == "`fused` Add + LayerNormalization → SkipLayerNormalization"
    assert [j for j, _ in members] == list(range(1, 9))  # indices kept: the focus buttons' keys


def test_the_passes_page_draws_a_group_as_one_line():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "resnet_ts"
    at.run()
    goto(at, "passes")
    lines = [m.value for m in at.markdown if " ×** `" in m.value]
    assert lines, [m.value for m in at.markdown][:40]
    count = int(lines[0].split("**")[1].split(" ")[0])
    assert count >= GROUP_MIN
    outside, inside = [], []

    def walk(node, in_popover: bool) -> None:
        for child in getattr(node, "children", {}).values():
            if getattr(child, "type", "") == "markdown" and str(child.value).startswith("`fused`"):
                (inside if in_popover else outside).append(child.value)
            walk(child, in_popover or getattr(child, "type", "") == "popover")

    walk(at.main, False)
    assert len(inside) >= count  # the group's sites are in its popover...
    assert len(outside) < GROUP_MIN  # ...not one line each on the page
