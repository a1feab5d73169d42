"""Verification inside a benchmark: every variant's outputs (under its own settings) against the
reference model's, judged by :func:`fusionviz.verify.judge_outputs`, the test ``optimize`` uses.

The reference model runs in its own worker: onnxruntime off, one thread; then at level all, for
the noise floor (:func:`fusionviz.verify.reference_noise`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path

import numpy as np
import onnx

from fusionviz import errors, model_io
from fusionviz.bench.manager import WorkerFailed, WorkerHandle
from fusionviz.bench.records import Settings
from fusionviz.bench.schedule import Job, Pool

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Reference:
    """The reference's outputs and noise floor, or why there are none."""

    outputs: dict | None
    noise: dict
    error: str | None = None


def load_outputs(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[f"o{i}"] for i, name in enumerate(names)}


def reference(pool: Pool, model: onnx.ModelProto) -> Reference:
    """Run ``model`` in its own worker: its outputs (onnxruntime off) and its noise floor."""
    ref_path = pool.tmpdir / "reference.onnx"
    model_io.write_for_child(model, ref_path)  # weights on disk: with its data file beside
    w = pool.worker("reference")
    try:
        w.request(pool.init_msg(ref_path, Settings()))
        out_path = pool.tmpdir / "ref-out.npz"
        reply = w.request({"cmd": "outputs", "path": str(out_path)})
        outputs = load_outputs(out_path, reply["names"])
        return Reference(outputs, _noise(w, pool, ref_path, outputs))
    except WorkerFailed as exc:
        return Reference(None, {}, f"the reference model could not run: {exc}")
    finally:
        w.close()


def _noise(worker: WorkerHandle, pool: Pool, ref_path: Path, ref_outputs: dict) -> dict[str, float]:
    """Per output, how far onnxruntime's own level-all optimizer moves the reference
    (the noise floor ``optimize`` verifies with). The worker is re-initialized at level all; a
    reference that level all cannot run gives none."""
    from fusionviz.verify import reference_noise

    out_path = pool.tmpdir / "ref-all-out.npz"
    try:
        worker.request(pool.init_msg(ref_path, Settings(level="all")))
        reply = worker.request({"cmd": "outputs", "path": str(out_path)})
        return reference_noise(ref_outputs, load_outputs(out_path, reply["names"]))
    except WorkerFailed as exc:
        logger.info("the reference at onnxruntime level all could not run (no noise floor): %s", exc)
        return {}


def check(job: Job, pool: Pool, ref: Reference, rtol: float) -> dict:
    """Judge one variant's outputs against the reference (``|a-b| <= atol + rtol|b| + floor``).

    Returns:
        :meth:`fusionviz.verify.VerifyResult.as_dict`. A worker that fails here fails the job.
    """
    from fusionviz.passes import registry
    from fusionviz.verify import VerifyResult, judge_outputs

    report_only = False
    with contextlib.suppress(errors.FusionvizError):
        report_only = not all(p.exact for p in registry.resolve(job.variant.passes))
    if ref.outputs is None:
        return VerifyResult(False, (), rtol, error=ref.error or "no reference outputs").as_dict()
    out_path = pool.tmpdir / f"out{job.index}.npz"
    try:
        reply = job.worker.request({"cmd": "outputs", "path": str(out_path)})
        got = load_outputs(out_path, reply["names"])
    except WorkerFailed as exc:
        job.fail(exc)
        return VerifyResult(False, (), rtol, error=str(exc)).as_dict()
    finally:
        with contextlib.suppress(OSError):
            out_path.unlink()
    return judge_outputs(ref.outputs, got, input_set="given", rtol=rtol, noise=ref.noise,
                         report_only=report_only).as_dict()
