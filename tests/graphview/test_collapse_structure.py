"""Collapse by structure (collapse rule 5): models whose names have no scopes to collapse."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionviz.graphview import RenderOptions, diff_models, render_graph
from fusionviz.graphview.build import _display_graph
from fusionviz.graphview.collapse import name_scopes_useful, structural_blocks

BLOCKS = 50


def residual_chain(blocks: int = BLOCKS, names: str = "p2o") -> onnx.ModelProto:
    """``blocks`` residual blocks (Conv, BatchNorm, Relu, Conv, BatchNorm, Add, Relu), flat names.

    ``names``: "p2o" (Paddle2ONNX's ``p2o.Conv.12``), "tf2onnx" (``Conv__12``) or "" (unnamed).
    """
    rng = np.random.default_rng(0)
    c = 4
    nodes, inits = [], []
    count: dict[str, int] = {}

    def node(op: str, ins: list[str], **attrs) -> str:
        i = count[op] = count.get(op, -1) + 1
        name = {"p2o": f"p2o.{op}.{i}", "tf2onnx": f"{op}__{i}", "": ""}[names]
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn(x: str, k: str) -> str:
        w = init(f"W{k}", rng.standard_normal((c, c, 3, 3)) * 0.1)
        y = node("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        bn = [init(f"{p}{k}", v) for p, v in (("s", np.ones(c)), ("b", np.zeros(c)),
                                               ("m", np.zeros(c)), ("v", np.ones(c)))]
        return node("BatchNormalization", [y, *bn])

    x = "x"
    for b in range(blocks):
        h = node("Relu", [conv_bn(x, f"{b}a")])
        h = conv_bn(h, f"{b}b")
        x = node("Relu", [node("Add", [h, x])])
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _folded(before: onnx.ModelProto) -> onnx.ModelProto:
    from fusionviz.passes.pipeline import run_pipeline

    return run_pipeline(before, ["fold_batchnorm"], validate=False, near_misses=False).snapshots[-1].model


@pytest.mark.parametrize("names", ["p2o", "tf2onnx", ""])
def test_flat_names_get_one_block_per_residual_block(names):
    dg = _display_graph(residual_chain(names=names))
    assert not name_scopes_useful(dg)
    blocks = structural_blocks(dg)
    per_block: dict[tuple, list[str]] = {}
    for key, sc in blocks.items():
        per_block.setdefault(sc, []).append(dg.by_key[key].op)
    assert len(per_block) == BLOCKS
    assert all(sc[0].startswith("block A.") for sc in per_block)
    assert {len(ops) for ops in per_block.values()} == {7}
    assert all(sorted(ops).count("Conv") == 2 and "Add" in ops for ops in per_block.values())


def test_name_scopes_are_kept_where_there_are_some():
    from fusionviz.graphview.synthetic import transformer_model

    assert name_scopes_useful(_display_graph(transformer_model(2)))


def test_a_block_opens_in_both_panes_together():
    before = residual_chain()
    after = _folded(before)
    assert len(after.graph.node) < len(before.graph.node)
    diff = diff_models(before, after)

    def both(expanded=()):
        opts = RenderOptions(collapse=True, expanded=expanded)
        return (render_graph(before, diff=diff, side="before", options=opts, structure=before),
                render_graph(after, diff=diff, side="after", options=opts, structure=before))

    rb, ra = both()
    closed_b, closed_a = set(rb.scope_ids.values()), set(ra.scope_ids.values())
    assert "block A.3" in closed_b and closed_b == closed_a  # the same blocks closed on both sides
    assert rb.drawn < 120 and ra.drawn < 120
    box = next(line for line in rb.dot.splitlines() if "block A.3" in line)
    assert "7 nodes" in box
    rb2, ra2 = both(("block A.3",))
    assert "block A.3" not in set(rb2.scope_ids.values()) | set(ra2.scope_ids.values())
    assert rb2.drawn == rb.drawn + 6 and ra2.drawn == ra.drawn + 4  # 7 nodes; 5 once BN is folded


def test_small_flat_model_opens_whole_on_both_sides():
    before = residual_chain(blocks=8)  # 56 nodes: the whole picture fits
    after = _folded(before)
    diff = diff_models(before, after)
    opts = RenderOptions(collapse=True)
    for side, m in (("before", before), ("after", after)):
        r = render_graph(m, diff=diff, side=side, options=opts, structure=before)
        assert not r.scope_ids and r.drawn == len(m.graph.node)
