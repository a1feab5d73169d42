"""Focus, changed-only, collapse by scope, and the hard cap."""

from __future__ import annotations

import pytest
from gv_helpers import op_nodes, parse_dot

from fusionviz import errors
from fusionviz.graphview import RenderOptions, diff_models, render_graph
from fusionviz.graphview.synthetic import NODES_PER_LAYER, transformer_model, transformer_with_nodes


@pytest.fixture(scope="module")
def tf4():
    return transformer_model(8)  # 8 layers: the mask is a hub


def test_focus_hops(tf4):
    name = "/encoder/layer.2/attention/self/Softmax"
    r0 = render_graph(tf4, options=RenderOptions(focus=name, hops=0))
    assert r0.drawn == 1 and r0.focus == name
    r1 = render_graph(tf4, options=RenderOptions(focus=name, hops=1))
    assert set(r1.node_ids.values()) == {name, "/encoder/layer.2/attention/self/Add",
                                         "/encoder/layer.2/attention/self/MatMul_1"}
    r2 = render_graph(tf4, options=RenderOptions(focus=name, hops=2))
    assert r2.drawn > r1.drawn
    # hub tensor (attention mask) is not walked: nothing from other layers comes in
    assert all("layer.2" in k for k in r2.node_ids.values())
    # cut edges are shown as stubs
    assert "⋯" in r2.dot


def test_focus_by_short_unique_name_and_unknown(tf4):
    r = render_graph(tf4, options=RenderOptions(focus="embeddings/word_embeddings/Gather", hops=1))
    assert r.focus == "/embeddings/word_embeddings/Gather"
    with pytest.raises(errors.RenderError, match="No node named"):
        render_graph(tf4, options=RenderOptions(focus="does_not_exist"))


def test_collapse_boxes_and_expand():
    m = transformer_model(90)  # ~3,000 nodes
    r = render_graph(m, options=RenderOptions(collapse=True))
    assert r.total == len(m.graph.node)
    assert "encoder/layer.5" in r.scope_ids.values()
    assert r.drawn < 120 and r.note is None
    g = parse_dot(r.dot)
    box = next(n for n in g.nodes() if r.scope_ids.get(n.attr.get("id")) == "encoder/layer.5")
    assert f"{NODES_PER_LAYER} nodes" in box.attr["label"]
    r2 = render_graph(m, options=RenderOptions(collapse=True, expanded=("encoder/layer.5",)))
    assert "encoder/layer.5" not in r2.scope_ids.values()
    assert r2.drawn > r.drawn
    assert any(k.startswith("encoder/layer.5/") for k in r2.scope_ids.values())


def test_changed_only_with_context():
    m = transformer_model(3)
    after = transformer_model(3)
    node = next(n for n in after.graph.node if n.name == "/encoder/layer.1/attention/self/Softmax")
    node.attribute[0].i = 3  # axis -1 -> 3: same meaning, different attribute: "changed"
    target = node.name
    d = diff_models(m, after)
    changed = [k for k, s in d.status_after.items() if s != "unchanged"]
    assert changed == [target]
    r = render_graph(after, diff=d, options=RenderOptions(changed_only=True, context_hops=1))
    assert target in r.node_ids.values() and 1 < r.drawn <= 5
    with pytest.raises(errors.RenderError):
        render_graph(after, options=RenderOptions(changed_only=True))


def test_cap_holds_on_5000_nodes(monkeypatch):
    m = transformer_with_nodes(5000)
    assert len(m.graph.node) >= 5000
    r = render_graph(m)
    assert r.drawn == 4000 and r.total == len(m.graph.node)
    assert r.note and "showing 4,000" in r.note and f"{r.total:,} nodes" in r.note
    g = parse_dot(r.dot)
    assert len(op_nodes(g)) == 4000
    monkeypatch.setenv("FUSIONVIZ_MAX_DRAW_NODES", "50")
    r50 = render_graph(m)
    assert r50.drawn == 50
    small = render_graph(m, options=RenderOptions(collapse=True, max_nodes=20))
    assert small.drawn <= 20 and small.note is None  # auto-open stays within the cap
    rc = render_graph(m, options=RenderOptions(collapse=True, max_nodes=20, expanded=("encoder",)))
    assert rc.drawn == 20 and "expand fewer scopes" in rc.note


def test_three_thousand_nodes_drawn_uncapped_by_default():
    m = transformer_with_nodes(3000, scoped=False)
    r = render_graph(m)
    assert r.drawn == r.total == len(m.graph.node) >= 3000 and r.note is None
    # flat names: collapsing folds the repeated layers found by structure (collapse rule 5)
    rc = render_graph(m, options=RenderOptions(collapse=True, auto_collapse=True))
    assert rc.drawn < 300 and not rc.auto_collapsed
    assert len(rc.scope_ids) >= 80 and all(s.startswith(("block ", "region ")) for s in rc.scope_ids.values())


def test_twenty_thousand_nodes_collapse_automatically():
    m = transformer_with_nodes(20000)
    r = render_graph(m, options=RenderOptions(auto_collapse=True, legend=False))
    assert r.auto_collapsed and r.total >= 20000
    assert 100 < r.drawn <= 1000 and "encoder/layer.7" in r.scope_ids.values()
    assert r.note and "collapsed into blocks" in r.note and "focus a node" in r.note
    # every node maps to what stands for it in the drawing (its block)
    assert r.item_ids["/encoder/layer.7/attention/self/Softmax"] == next(
        k for k, v in r.scope_ids.items() if v == "encoder/layer.7")
    # without auto-collapse the cap cuts, and says so
    cut = render_graph(m, options=RenderOptions(legend=False))
    assert cut.drawn == 4000 and "collapse or focus" in cut.note
    # a focus draws a neighbourhood whatever the size
    f = render_graph(m, options=RenderOptions(focus="/encoder/layer.300/attention/self/Softmax", hops=2,
                                              auto_collapse=True))
    assert 3 <= f.drawn <= 10 and not f.auto_collapsed


def test_one_scope_for_everything_is_opened():
    """A model whose every node sits in one scope (``p2o.*``) is drawn node by node, not as a box."""
    m = transformer_model(2, scoped=False)
    for n in m.graph.node:
        n.name = "p2o." + n.name.replace(".", "_")
    r = render_graph(m, options=RenderOptions(collapse=True))
    assert not r.scope_ids and r.drawn == len(m.graph.node)
