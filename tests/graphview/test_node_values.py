"""Node values on the graph (graphview.build rule 8): a heat scale, NaN apart, a legend."""

from __future__ import annotations

import math

from gv_helpers import conv_bn_relu

from fusionviz.graphview import RenderOptions, render_graph
from fusionviz.graphview.build import value_fill, value_legend
from fusionviz.graphview.dot import HEAT_FILLS, HEAT_NAN, NODE_ID_PREFIX, element_id

SCALE = ((1e-6, "≤ 1e-6"), (1e-4, "≤ 1e-4"), (1e-2, "≤ 1e-2"), (math.inf, "> 1e-2"))


def _node_line(dot: str, key: str) -> str:
    eid = element_id(NODE_ID_PREFIX, key)
    return next(line for line in dot.splitlines() if f'id="{eid}"' in line)


def _opts(values, **kw) -> RenderOptions:
    return RenderOptions(node_values=tuple(values), value_scale=SCALE, value_title="max rel", **kw)


def test_values_fill_their_nodes_on_the_scale_and_nan_is_apart():
    m = conv_bn_relu()
    r = render_graph(m, options=_opts([("Conv_12", 3e-7), ("BatchNormalization_13", 0.5),
                                       ("Relu_14", math.nan)]))
    conv, bn, relu = (_node_line(r.dot, k) for k in ("Conv_12", "BatchNormalization_13", "Relu_14"))
    assert f'fillcolor="{HEAT_FILLS[0]}"' in conv and "max rel 3e-07" in conv
    assert f'fillcolor="{HEAT_FILLS[-1]}"' in bn and "max rel 0.5" in bn
    assert f'fillcolor="{HEAT_NAN}"' in relu and "NaN/Inf" in relu
    titles = [t for t, _, _ in r.legend]
    assert titles[-5:] == ["max rel ≤ 1e-6", "max rel ≤ 1e-4", "max rel ≤ 1e-2", "max rel > 1e-2",
                           "NaN/Inf introduced"]


def test_nodes_without_a_value_keep_their_fill_and_no_nan_entry_without_nan():
    m = conv_bn_relu()
    plain = render_graph(m)
    r = render_graph(m, options=_opts([("Conv_12", 2e-3)]))
    assert _node_line(r.dot, "Relu_14") == _node_line(plain.dot, "Relu_14")
    assert f'fillcolor="{value_fill(2e-3, SCALE)}"' in _node_line(r.dot, "Conv_12")
    assert not any("NaN" in t for t, _, _ in r.legend)
    assert "max rel" not in plain.dot


def test_a_collapsed_block_takes_its_largest_member_value():
    from fusionviz.graphview import synthetic

    m = synthetic.transformer_model(30)  # big enough that the picture stays collapsed
    keys = [n.name for n in m.graph.node if n.name.startswith("/encoder/layer.1/attention/")]
    values = [(k, 1e-7) for k in keys[:-1]] + [(keys[-1], 0.3)]
    r = render_graph(m, options=_opts(values, collapse=True))
    block = next(line for line in r.dot.splitlines() if 'id="fv-s-encoder%2Flayer.1%2Fattention"' in line)
    assert f'fillcolor="{HEAT_FILLS[-1]}"' in block and "largest max rel 0.3" in block
    other = next(line for line in r.dot.splitlines() if 'id="fv-s-encoder%2Flayer.2%2Fattention"' in line)
    assert "max rel" not in other


def test_scale_defaults_to_decades_of_the_values():
    opts = RenderOptions(node_values=(("a", 3e-5), ("b", 0.02)))
    legend = value_legend(opts, with_nan=False)
    assert [t for t, _, _ in legend] == ["≤ 1e-5", "≤ 1e-4", "≤ 1e-3", "≤ 1e-2", "≤ 1e-1"]
    assert legend[0][1] == HEAT_FILLS[0] and legend[-1][1] == HEAT_FILLS[-1]
