"""Zoo sweeps on a local Ray: every cell arrives though a worker dies, reruns resume, bad models are rows.

One local Ray (``num_cpus=2`` plus the benchmark resource) serves the whole module; the sweep
driver sees Ray already connected and leaves it running. The worker kill uses the test-only
hook ``FUSIONVIZ_SWEEP_CRASH=VARIANT@DIR``: the first attempt of every check of VARIANT exits
its worker process (``os._exit``), and Ray retries it on a fresh worker.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx
import onnx.parser
import pytest

from fusionviz.sweep import SweepStore, parse_passes, resolve_models, run_sweep
from fusionviz.sweep.spec import ModelRef
from fusionviz.sweep.work import CRASH_ENV

ray = pytest.importorskip("ray")
BENCH_RESOURCE = pytest.importorskip("fusionviz.sweep.tasks").BENCH_RESOURCE

ROOT = Path(__file__).resolve().parents[2]
TEXTBOOK = ROOT / "sample_models" / "textbook.onnx"
CI_MODEL = "oww_melspectrogram"  # a small corpus model, used when it is already cached

CHAIN_TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
chain (float[1,8] x) => (float[1,8] y) {
    a = Identity(x)
    b = Add(a, a)
    c = Identity(b)
    y = Relu(c)
}
"""


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs and one benchmark slot, shut down after the module."""
    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, resources={BENCH_RESOURCE: 1}, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR,
             runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[ModelRef]:
    """A tiny chain model built from ONNX text, the textbook sample, a broken file (and a
    corpus CI model when cached)."""
    folder = tmp_path_factory.mktemp("models")
    chain = onnx.parser.parse_model(CHAIN_TEXT)
    onnx.checker.check_model(chain)
    onnx.save(chain, folder / "chain.onnx")
    (folder / "broken.onnx").write_bytes(b"this is not an onnx model")
    items = [str(folder / "chain.onnx"), str(TEXTBOOK), str(folder / "broken.onnx")]
    try:
        from fusionviz.corpus import load_manifest, path_of, select

        cached = path_of(select(load_manifest(), only=[CI_MODEL])[0])
    except Exception:  # noqa: BLE001 - the corpus is optional here
        cached = None
    if cached is not None:
        items.append(str(cached))
    return resolve_models(items)


def test_sweep_survives_a_killed_worker_and_resumes(local_ray, models, tmp_path, monkeypatch):
    variants = parse_passes("eliminate_identity,eliminate_common_subexpressions,all")
    crash_dir = tmp_path / "crashes"
    crash_dir.mkdir()
    monkeypatch.setenv(CRASH_ENV, f"eliminate_common_subexpressions@{crash_dir}")
    db = tmp_path / "zoo.sqlite"
    with SweepStore(db) as store:
        first = run_sweep(models, variants, store=store, workers=2)
    good = [m for m in models if m.name != "broken"]
    # The hook killed the worker of every eliminate_common_subexpressions check once, and Ray re-ran each of them.
    assert len(list(crash_dir.iterdir())) == len(good)
    assert first.cells == len(models) * len(variants)
    assert first.executed == first.cells and first.skipped == 0
    assert len(first.rows) == first.cells
    by = {(r["model"], r["variant"]): r for r in first.rows}
    for m in good:
        for v in variants:
            row = by[(m.name, v.label)]
            assert row["status"] == "ok", row
            assert row["valid"] and row["verified"]
    assert by[("chain", "eliminate_identity")]["nodes_after"] == 2
    for v in variants:
        broken = by[("broken", v.label)]
        assert broken["status"] == "error"
        assert "cannot load or run the model" in broken["error"]

    monkeypatch.delenv(CRASH_ENV)
    with SweepStore(db) as store:
        again = run_sweep(models, variants, store=store, workers=2)
    assert again.executed == 0
    assert again.skipped == again.cells
    assert again.rows == first.rows


def test_retries_spent_give_an_error_row_and_timing_runs(local_ray, models, tmp_path, monkeypatch):
    chain = [m for m in models if m.name == "chain"]
    monkeypatch.setenv(CRASH_ENV, "eliminate_identity@always")
    with SweepStore(tmp_path / "s.sqlite") as store:
        summary = run_sweep(chain, parse_passes("eliminate_identity,all"), store=store, workers=2,
                            max_retries=0, time_cells=True, min_time_s=0.05)
    by = {r["variant"]: r for r in summary.rows}
    dead = by["eliminate_identity"]
    assert dead["status"] == "error"
    assert "died" in dead["error"]
    assert dead["latency_ratio"] is None
    timed = by["all"]
    assert timed["status"] == "ok"
    assert summary.timed == 1
    assert timed["latency_ratio"] is not None and timed["latency_ratio"] > 0
    assert timed["latency_lo"] <= timed["latency_ratio"] <= timed["latency_hi"]
