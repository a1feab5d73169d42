"""Provenance links: what a node became, or came from, on the other side of a pair."""

from __future__ import annotations

import dataclasses

import onnx
from gv_helpers import conv_bn_relu, fused_after

from fusionviz.graphview import Links, diff_models, fates_from_reports
from fusionviz.passes import registry
from fusionviz.passes.pipeline import run_pipeline


def test_fused_node_links_to_what_it_came_from_and_back():
    before = conv_bn_relu()
    after = fused_after(before)
    links = Links(before, after, diff_models(before, after))
    cp = links.counterpart("after", "FusedConv_fv1")
    assert cp.others == ("Conv_12", "BatchNormalization_13", "Relu_14")
    assert cp.other_ops == ("Conv", "BatchNormalization", "Relu")
    assert cp.status == "fused" and cp.relation.startswith("Fused from 3 nodes")
    assert cp.passes == ("fold_batchnorm", "fuse_conv_activation")
    for name in ("Conv_12", "BatchNormalization_13", "Relu_14"):
        back = links.counterpart("before", name)
        assert back.others == ("FusedConv_fv1",) and back.status == "removed"
        assert back.relation.startswith("Fused into FusedConv FusedConv_fv1")
    assert links.counterpart("after", "nope") is None and links.counterpart("sideways", "Conv_12") is None


def test_unchanged_node_links_to_itself_and_removed_node_says_why():
    before = conv_bn_relu()
    after = onnx.ModelProto()
    after.CopyFrom(before)
    del after.graph.node[1]  # BatchNormalization gone, nothing stands for it
    after.graph.node[1].input[0] = "c"
    d = diff_models(before, after)

    @dataclasses.dataclass
    class Change:
        kind: str
        inputs: tuple
        outputs: tuple = ()

    @dataclasses.dataclass
    class Report:
        title: str
        changes: list

    fates = fates_from_reports([Report("Constant folding", [Change("folded", ("BatchNormalization_13",))])])
    links = Links(before, after, d, fates)
    assert links.counterpart("after", "Relu_14").others == ("Relu_14",)
    gone = links.counterpart("before", "BatchNormalization_13")
    assert gone.others == () and "Folded into a constant by Constant folding" in gone.relation
    plain = Links(before, after, d).counterpart("before", "BatchNormalization_13")
    assert plain.relation.startswith("Removed")
    ort = Links(before, after, d, provenance=False).counterpart("before", "BatchNormalization_13")
    assert "records no provenance" in ort.relation


def test_real_pipeline_links_every_fused_conv_to_conv_bn_relu_and_its_residual_add(monkeypatch):
    from fusionviz import samples
    from fusionviz.passes.fuse import fuse_conv_activation

    # as on a CPU where onnxruntime keeps every Add apart from its Convs (no NCHWc kernels): on
    # one with them, fuse_conv_activation leaves the residual Adds to onnxruntime (its rule 5)
    monkeypatch.setattr(fuse_conv_activation, "nchwc_absorbed", lambda model: set())

    if "resnet_ts" not in samples.sample_names():
        import pytest

        pytest.skip("sample models not built")
    names = [p.name for p in registry.all_passes() if p.category.value in ("simplify", "fuse")]
    res = run_pipeline(samples.load_sample("resnet_ts").proto, names)
    d = diff_models(res.original, res.final)
    links = Links(res.original, res.final, d, fates_from_reports(res.reports))
    fused = [k for k in links.keys("after") if links.op("after", k) == "FusedConv"]
    assert fused
    kinds = set()
    for k in fused:
        cp = links.counterpart("after", k)
        ops = tuple(sorted(cp.other_ops))
        # a block's first Conv (+BN+Relu), or its last one with the residual Add (FusedConv's Z input)
        assert ops in (("BatchNormalization", "Conv", "Relu"), ("Add", "BatchNormalization", "Conv", "Relu")), (k, cp)
        kinds.add(ops)
        # the Conv kept its name: it is the before node of the same key, and links back
        assert k in cp.others and links.counterpart("before", k).others == (k,)
    assert len(kinds) == 2  # both forms occur in a ResNet
