"""Big graphs laid out by parts: cuts, one SVG with every node once, PNG export, compaction."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import pytest
from gv_helpers import conv_bn_relu, fused_after

from fusionviz.graphview import RenderOptions, diff_models, render_graph, render_png, render_svg
from fusionviz.graphview import parts as P
from fusionviz.graphview.svg import compact, name_titles
from fusionviz.graphview.synthetic import NODES_PER_LAYER, transformer_model

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def big():
    """About 1,000 nodes, flat names: drawn node by node, laid out in several parts."""
    m = transformer_model(30, scoped=False)
    return m, render_graph(m, options=RenderOptions(legend=False))


def _node_ids(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode("utf-8"))
    return [g.get("id") for g in root.iter(f"{SVG}g") if g.get("class") == "node" and g.get("id")]


def test_parse_dot_reads_what_render_graph_writes(big):
    _, r = big
    pd = P.parse_dot(r.dot)
    assert pd is not None and pd.op_count == r.drawn
    assert pd.header[0].startswith("digraph") and any(h.startswith("  graph [") for h in pd.header)
    assert P.parse_dot("graph { a -- b }") is None  # not ours: laid out in one piece
    assert P.parse_dot('digraph G {\n  a -> b;\n  subgraph x { c }\n}\n') is None


def test_cuts_fall_where_fewest_edges_cross():
    # a chain of 40 with a long skip edge 5 -> 25: cutting at 26..35 crosses one edge, elsewhere two
    spans = [(i, i + 1) for i in range(39)] + [(5, 25)]
    cuts = P.choose_cuts(40, spans, part_items=20)
    assert cuts[0] == 0 and len(cuts) == 2 and 26 <= cuts[1] <= 28
    assert P.choose_cuts(10, [], part_items=20) == [0]


def test_parts_hold_every_op_node_once(big):
    _, r = big
    pd = P.parse_dot(r.dot)
    plan = P.plan_parts(pd)
    assert len(plan.dots) >= 3
    seen: list[str] = []
    for dot in plan.dots:
        seen += re.findall(r'^  (n\d+) \[id="fv-', dot, flags=re.MULTILINE)
    assert sorted(seen) == sorted(pd.ops)
    # a transformer is cut between layers: one edge crosses each cut
    assert len(plan.cross) == len(plan.dots) - 1


def test_svg_by_parts_is_one_valid_drawing(big):
    m, r = big
    whole_ids = set(r.node_ids)
    svg = render_svg(r.dot)
    assert svg.count('class="fv-part-slot"') == len(P.plan_parts(P.parse_dot(r.dot)).dots)
    ids = _node_ids(svg)
    assert len(ids) == len(set(ids)), "element ids must stay unique across parts"
    assert whole_ids <= set(ids)
    for box in re.findall(r'data-box="([^"]*)"', svg):
        x, y, w, h = (float(v) for v in box.split())
        assert w > 0 and h > 0 and x >= 0 and y >= 0
    # titles say the node's name (the browser's tooltip), not the DOT name
    assert "<title>encoder_layer_3_attention_self_Softmax</title>" in svg
    assert "<a " not in svg  # no per-node link wrappers
    # laid out in one piece, the same nodes come out
    one = render_svg(r.dot, parts=False)
    assert set(_node_ids(one)) >= whole_ids and 'fv-part-slot' not in one


def test_small_graphs_stay_in_one_piece():
    before = conv_bn_relu()
    after = fused_after(before)
    r = render_graph(after, diff=diff_models(before, after))
    svg = render_svg(r.dot)
    assert "fv-part-slot" not in svg
    assert [i for i in _node_ids(svg) if i.startswith("fv-")] == ["fv-n-FusedConv_fv1"]


def test_workers_draw_the_same(big, monkeypatch):
    _, r = big
    monkeypatch.setenv("FUSIONVIZ_LAYOUT_WORKERS", "0")
    here = render_svg(r.dot)
    monkeypatch.setenv("FUSIONVIZ_LAYOUT_WORKERS", "2")
    assert P.layout_workers() == 2
    assert render_svg(r.dot) == here


def test_png_opens_and_stays_within_limits(big):
    from PIL import Image

    small = render_graph(conv_bn_relu())
    data = render_png(small.dot)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as img:
        assert img.size[0] > 50 and img.size[1] > 100
    _, r = big
    data = render_png(r.dot, max_side=4000)
    with Image.open(io.BytesIO(data)) as img:
        assert max(img.size) <= 4000 and min(img.size) > 10


def test_compact_and_titles_keep_the_drawing():
    raw = ('<svg width="10pt" height="10pt" xmlns="http://www.w3.org/2000/svg">'
           '<g id="fv&#45;n&#45;%2Fa%2FConv" class="node">\n<title>n0</title>'
           '<text text-anchor="start" x="1" y="2" font-family="Helvetica,sans-Serif">Conv</text>'
           '<text text-anchor="middle" x="1" y="2" font-family="Helvetica,sans-Serif">x</text></g></svg>')
    out = compact(name_titles(raw))
    ET.fromstring(out)
    assert "<title>/a/Conv</title>" in out
    assert out.count("font-family") == 1 and out.startswith('<svg font-family="Helvetica,sans-Serif"')
    assert 'text-anchor="start"' not in out and 'text-anchor="middle"' in out


def test_synthetic_flat_names_have_no_scopes():
    m = transformer_model(2, scoped=False)
    assert all("/" not in n.name and "." not in n.name for n in m.graph.node)
    assert len(m.graph.node) == 2 * NODES_PER_LAYER + 7
