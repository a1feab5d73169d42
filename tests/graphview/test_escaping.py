"""Hostile names must not break the DOT or inject markup into the SVG."""

from __future__ import annotations

import html
import re

import pytest
from gv_helpers import conv_bn_relu, op_nodes, parse_dot

from fusionviz.graphview import (
    RenderOptions,
    decode_element_id,
    diff_models,
    node_details,
    render_graph,
    render_svg,
)
from fusionviz.graphview.dot import html_text, quote

HOSTILE = [
    'quote"name',
    "<script>alert(1)</script>",
    "a & b &amp; <b>bold</b>",
    "{record|field}",
    "back\\slash\\N\\G\\l",
    "new\nline\r\nand\ttab",
    "]; evil [label=x",
    "x" * 10_000,
    "uni ✓ – 日本 \u202e",
    "\x00ctrl\x07chars\x1b",
    "-->",
    "<!-- comment",
]


def hostile_model(names: list[str]):
    m = conv_bn_relu(tuple(names[:3]))
    # hostile tensor names too
    m.graph.node[0].output[0] = names[0]
    m.graph.node[1].input[0] = names[0]
    return m


@pytest.mark.parametrize("i", range(0, len(HOSTILE), 3))
def test_hostile_names_parse_and_svg_is_clean(i):
    names = (HOSTILE[i:] + HOSTILE)[:3]
    m = hostile_model(names)
    r = render_graph(m, options=RenderOptions(focus=m.graph.node[1].name, hops=1))
    g = parse_dot(r.dot)
    assert len(op_nodes(g)) == 3
    # every op node id maps back to the exact node name
    assert sorted(r.node_ids.values()) == sorted(n.name for n in m.graph.node)
    svg = render_svg(r.dot)
    assert "<script" not in svg.lower()
    assert "<b>bold" not in svg
    assert not re.search(r"<(?!/?(svg|g|title|polygon|path|text|ellipse|a|polyline|\?xml|!DOCTYPE|!--))", svg)
    # element ids in the SVG decode back to the node names
    ids = [html.unescape(x) for x in re.findall(r'<g id="([^"]*)" class="node"', svg)]
    decoded = sorted(decode_element_id(x)[1] for x in ids if decode_element_id(x))
    assert decoded == sorted(n.name for n in m.graph.node)


def test_long_name_is_shortened_in_labels_but_full_in_details():
    long = "L" * 10_000
    m = conv_bn_relu((long, "b", "c"))
    r = render_graph(m)
    assert long not in r.dot.replace(r.dot[r.dot.find("fv-n-L"):r.dot.find("fv-n-L") + 10_010], "")
    assert len(r.dot) < 40_000
    assert node_details(m, long)["name"] == long


def test_diff_with_hostile_names():
    m = conv_bn_relu(("<a>", '"b"', "c\nd"))
    r = render_graph(m, diff=diff_models(m, m), options=RenderOptions(collapse=True))
    parse_dot(r.dot)
    assert "<script" not in render_svg(r.dot)


def test_quote_and_html_text():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert html_text("<b>&\"'") == "&lt;b&gt;&amp;&quot;&#x27;"
    assert "\x00" not in quote("a\x00b") and "\x07" not in html_text("a\x07b")
