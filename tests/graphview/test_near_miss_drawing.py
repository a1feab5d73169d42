"""Near misses drawn on the graph (graphview.build rule 7)."""

from __future__ import annotations

from fusionviz.graphview import RenderOptions, render_graph
from fusionviz.graphview.dot import NEAR_MISS_BLOCKER, NEAR_MISS_MATCHED, NODE_ID_PREFIX, element_id
from fusionviz.passes.pipeline import run_pipeline
from tests.passes import nearmiss_models as nm


def _node_line(dot: str, key: str) -> str:
    eid = element_id(NODE_ID_PREFIX, key)
    return next(line for line in dot.splitlines() if f'id="{eid}"' in line)


def _near(fixture):
    model, expected = fixture()
    rep = run_pipeline(model, [expected["pass"]]).reports[0]
    near = rep.near_misses[0]
    return model, (near.nodes, near.blocker, near.reason)


def test_blocker_is_marked_with_its_reason_and_matched_nodes_are_dashed():
    model, near = _near(nm.tanh_gelu_megatron)
    r = render_graph(model, side="before", options=RenderOptions(near_misses=(near,), hops=1))
    blocker = _node_line(r.dot, "inner")
    assert NEAR_MISS_BLOCKER in blocker and "near miss:" in blocker and "dashed" in blocker
    tanh = _node_line(r.dot, "tanh")
    assert NEAR_MISS_MATCHED in tanh and "near miss:" not in tanh
    assert [t for t, _, _ in r.legend][-2:] == ["near miss: matched so far", "near miss: blocked here"]


def test_one_near_miss_cuts_the_picture_to_its_neighbourhood():
    model, near = _near(nm.guarded_attention)
    whole = render_graph(model, side="before", options=RenderOptions())
    cut = render_graph(model, side="before", options=RenderOptions(near_misses=(near,), hops=1))
    assert cut.drawn < whole.drawn and "isnan" in cut.node_ids.values()


def test_a_blocker_that_is_not_drawn_is_marked_on_the_node_that_reads_it():
    """Paddle's Constant-node weights are folded into the Conv's label, not drawn."""
    model, near = _near(nm.conv_bn_constant_nodes)
    r = render_graph(model, side="before", options=RenderOptions(near_misses=(near,)))
    assert near[1] not in r.node_ids.values()
    assert "near miss:" in _node_line(r.dot, "conv") and NEAR_MISS_MATCHED in _node_line(r.dot, "bn")


def test_without_near_misses_nothing_is_marked():
    model, _ = _near(nm.tanh_gelu_megatron)
    r = render_graph(model, side="before", options=RenderOptions())
    assert NEAR_MISS_BLOCKER not in r.dot and "near miss" not in r.dot
