"""The app's pipeline cache: what its budget counts (cache rule 5) and the validity check of a
big model's result after it is shown (cache rule 7)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionviz import model_io
from fusionviz.passes import registry
from fusionviz.passes.base import Category, Pass
from fusionviz.ui import cache
from tests.passes.test_validity import _RenameOutput as _BreaksValidity

WEIGHT = (512, 1024)  # 2 MiB of float32: above the on-disk and weightless thresholds


def _graph(weight: onnx.TensorProto) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
             helper.make_node("Identity", ["a"], ["b"], name="id"),
             helper.make_node("Relu", ["b"], ["c"], name="relu"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WEIGHT[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WEIGHT[1]])], [weight])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _in_memory() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal(WEIGHT).astype(np.float32)
    return _graph(numpy_helper.from_array(w, "W"))


@pytest.fixture()
def on_disk(tmp_path, monkeypatch):
    """The model saved with its weight as external data and loaded with weights on disk."""
    path = tmp_path / "m.onnx"
    onnx.save(_in_memory(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.onnx.data", size_threshold=0)
    monkeypatch.setenv("FUSIONVIZ_WEIGHTS_ON_DISK_MB", "1")
    loaded = model_io.load_path(path)
    assert model_io.weights_dir(loaded.proto) is not None
    return loaded


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.PIPELINES.clear()
    cache._CHECKS.clear()
    cache._REVISION.clear()
    cache._CHECK_NOW.clear()
    yield
    cache.PIPELINES.clear()
    cache._CHECKS.clear()
    cache._REVISION.clear()
    cache._CHECK_NOW.clear()


# ------------------------------------------------------------------ the budget (rule 5)


def test_held_bytes_counts_weights_in_memory_and_not_on_disk(on_disk):
    weight = WEIGHT[0] * WEIGHT[1] * 4
    assert weight <= cache.held_bytes(_in_memory()) < weight + 16_384
    assert cache.held_bytes(on_disk.proto) < 16_384


def _results(proto: onnx.ModelProto, monkeypatch):
    """Two results the app's cache makes: one pass, and the same with a second pass that changes
    nothing (its snapshot is the first result's final model)."""
    monkeypatch.setenv("FUSIONVIZ_CHECK_LATER", "0")
    short = cache.pipeline("m", ("eliminate_identity",), (), proto)
    longer = cache.pipeline("m", ("eliminate_identity", "fuse_matmul_add"), (), proto)
    cache.PIPELINES.clear()
    return short, longer


def test_results_sharing_their_weights_fit_a_budget_of_one_copy(on_disk, monkeypatch):
    weight = WEIGHT[0] * WEIGHT[1] * 4
    short, longer = _results(on_disk.proto, monkeypatch)
    assert longer.snapshots[-1].model is short.final  # a pass that changed nothing shares the model
    store = cache._PipelineCache(max_entries=8, max_bytes=weight)
    store.put(("m", ("a",), ()), short)
    store.put(("m", ("a", "b"), ()), longer)
    assert len(store) == 2  # both kept: the weight is on disk, shared by every snapshot
    distinct = {id(s.model): s.model for s in longer.snapshots}
    assert store.held_bytes() == sum(cache.held_bytes(m) for m in distinct.values())


def test_copies_of_a_weight_in_memory_are_each_counted(monkeypatch):
    weight = WEIGHT[0] * WEIGHT[1] * 4
    short, longer = _results(_in_memory(), monkeypatch)
    store = cache._PipelineCache(max_entries=8, max_bytes=int(1.5 * weight))
    store.put(("m", ("a",), ()), short)  # two snapshots, each holding its own copy of the weight
    assert len(store) == 1  # the newest entry always stays
    assert store.held_bytes() >= 2 * weight
    store = cache._PipelineCache(max_entries=8, max_bytes=3 * weight)
    store.put(("m", ("a",), ()), short)
    store.put(("m", ("a", "b"), ()), longer)
    assert len(store) == 2 and store.held_bytes() < 3 * weight  # the shared final model once


# ------------------------------------------------------------------ validity after the result (rule 7)


class _RenameOutput(_BreaksValidity):
    """Breaks the validity rule (renames the graph output), under a name of this module's own."""

    name = "test_rename_output_late"


@pytest.fixture()
def with_bad_pass(monkeypatch):
    passes = registry.all_passes() + [_RenameOutput()]
    passes.sort(key=lambda p: getattr(p, "order", 1000))
    monkeypatch.setattr(registry, "_CACHE", passes)


def _run_check(sha: str, passes: tuple, shapes: tuple = ()) -> None:
    thread = cache._CHECKS[(sha, passes, shapes)]
    cache.start_checks()
    thread.join(60)
    assert not cache.checking(sha, passes, shapes)


def test_a_valid_result_is_shown_before_its_check_and_stays(on_disk):
    passes = ("eliminate_identity",)
    got = cache.pipeline(on_disk.sha256, passes, (), on_disk.proto)
    assert got.reports[0].status == "applied"
    assert cache.checking(on_disk.sha256, passes, ())
    _run_check(on_disk.sha256, passes)
    assert cache.revision(on_disk.sha256) == 0
    assert cache.pipeline(on_disk.sha256, passes, (), on_disk.proto) is got


def test_a_result_that_breaks_the_rule_is_replaced_after_its_check(on_disk, with_bad_pass):
    passes = ("eliminate_identity", "test_rename_output_late")
    shown = cache.pipeline(on_disk.sha256, passes, (), on_disk.proto)
    assert [r.status for r in shown.reports] == ["applied", "applied"]  # not checked yet
    key_before = cache.keyed_sha(on_disk.sha256)
    _run_check(on_disk.sha256, passes)
    assert cache.revision(on_disk.sha256) == 1
    assert cache.keyed_sha(on_disk.sha256) != key_before  # what was computed from the shown result is not reused
    checked = cache.pipeline(on_disk.sha256, passes, (), on_disk.proto)
    by = {r.name: r for r in checked.reports}
    assert by["eliminate_identity"].status == "applied"
    assert by["test_rename_output_late"].status == "declined"
    assert [o.name for o in checked.final.graph.output] == ["y"]
    # This model's next results are checked before they are shown.
    assert not cache._check_later(on_disk.sha256, on_disk.proto)


def test_models_in_memory_are_checked_before_they_are_shown(with_bad_pass):
    proto = _in_memory()
    passes = ("eliminate_identity", "test_rename_output_late")
    got = cache.pipeline("mem", passes, (), proto)
    assert not cache.checking("mem", passes, ())
    assert got.reports[-1].status == "declined"


def test_check_later_can_be_switched_off(on_disk, monkeypatch):
    monkeypatch.setenv("FUSIONVIZ_CHECK_LATER", "0")
    assert not cache._check_later(on_disk.sha256, on_disk.proto)


# ------------------------------------------------------------------ new weights on disk (rule 8)


class _NewWeight(Pass):
    """Makes a new large weight: the MatMul reads twice its weight from a new initializer."""

    name = "test_new_weight"
    title = "test: a new large weight"
    category = Category.FUSE
    order = 202

    def transform(self, model: ir.Model):
        from fusionviz.passes.base import Change, ChangeKind, Outcome

        mm = next(n for n in model.graph if n.op_type == "MatMul")
        old = mm.inputs[1]
        new = ir.Value(name="W2", type=old.type, shape=old.shape,
                       const_value=ir.tensor(old.const_value.numpy() * 2, name="W2"))
        model.graph.register_initializer(new)
        mm.replace_input_with(1, new)
        return Outcome(changes=(Change(ChangeKind.CHANGED, self.name, (), (), (), (), "weight doubled"),))


@pytest.fixture()
def with_new_weight(monkeypatch):
    passes = registry.all_passes() + [_NewWeight()]
    passes.sort(key=lambda p: getattr(p, "order", 1000))
    monkeypatch.setattr(registry, "_CACHE", passes)


def test_new_weights_go_to_a_folder_the_cache_counts_once_and_removes(on_disk, with_new_weight, monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("FUSIONVIZ_CHECK_LATER", "0")
    weight = WEIGHT[0] * WEIGHT[1] * 4
    got = cache.pipeline(on_disk.sha256, ("eliminate_identity", "test_new_weight"), (), on_disk.proto)
    assert got.reports[-1].status == "applied"
    final = got.final
    assert cache.held_bytes(final) < 16_384  # the new weight is read from disk, not held
    folders = [Path(f) for f in cache.weight_folders(final)]
    new = [f for f in folders if f.name.startswith("fusionviz_weights_")]
    assert len(new) == 1 and new[0].is_dir()
    assert weight <= cache.PIPELINES.disk_bytes() < 2 * weight  # once, though two entries read it
    w2 = next(t for t in final.graph.initializer if t.name == "W2")
    assert w2.data_location == onnx.TensorProto.EXTERNAL
    cache.PIPELINES.clear()  # nothing reads the folder any more
    assert not new[0].exists()
