"""Audit one model × pass set: optimize, write, read back, and check what was written.

The independent check behind the wild-corpus table (``benchmarks/wild.py``) and zoo sweeps: it
does not trust the pipeline's own validity rule, it re-checks the *written* file.

A cell's verdict (:attr:`Cell.status`), first match wins:

1. ``error``: the pipeline or the checks raised (a bug: should never happen).
2. ``invalid``: the written model fails the validity rule (:mod:`fusionviz.passes.validity`:
   onnx's full checker where the original passes it, same I/O names/types/ranks, loads in
   onnxruntime).
3. ``new_nan``: an output has NaN/Inf on some input set where the original has none.
4. ``mismatch``: an exact pass set changed outputs beyond tolerance (:mod:`fusionviz.verify`).
5. ``ok``: valid and equal (precision passes: valid, no new NaN; their error is reported).

``declined`` lists the passes the pipeline rolled back (not a failure: the rule at work).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import onnx

from fusionviz import errors
from fusionviz.inputs import InputPlan

logger = logging.getLogger(__name__)

STATUSES = ("ok", "invalid", "new_nan", "mismatch", "error")


@dataclasses.dataclass(frozen=True)
class Cell:
    """The result of one model × variant (one row of a corpus table or a sweep)."""

    model: str
    variant: str
    status: str
    valid: bool
    verified: bool | None  # None: not compared (precision passes report only)
    new_nan: bool
    nodes_before: int
    nodes_after: int
    optimize_s: float
    changes: int = 0
    declined: tuple[str, ...] = ()
    detail: str = ""  # the reason for a non-ok status, or the verification summary
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["declined"] = list(self.declined)
        return d


def audit(model: onnx.ModelProto, model_name: str, variant: str, passes: Sequence[str], plan: InputPlan,
          *, shapes: dict | None = None, rtol: float | None = None) -> Cell:
    """Optimize ``model`` with ``passes``, write and re-read the result, and judge it."""
    from fusionviz import model_io, verify
    from fusionviz.passes import registry, validity
    from fusionviz.passes.pipeline import count_nodes, run_pipeline

    exact = all(p.exact for p in registry.resolve(passes))
    n0 = count_nodes(model)
    t = time.perf_counter()
    try:
        result = run_pipeline(model, list(passes), keep_snapshots=False, shapes=shapes)
    except errors.FusionvizError as exc:
        return Cell(model_name, variant, "error", False, None, False, n0, n0, time.perf_counter() - t,
                    detail=f"pipeline refused: {exc}")
    except Exception as exc:  # noqa: BLE001 - the audit reports bugs, it does not crash on them
        logger.exception("pipeline crashed on %s / %s", model_name, variant)
        return Cell(model_name, variant, "error", False, None, False, n0, n0, time.perf_counter() - t,
                    detail=f"pipeline crashed: {type(exc).__name__}: {exc}"[:400])
    seconds = time.perf_counter() - t
    declined = tuple(r.name for r in result.reports if r.declined)
    failed = [f"{r.name}: {r.error}" for r in result.reports if r.error]
    changes = sum(len(r.changes) for r in result.reports)
    base = dict(model=model_name, variant=variant, nodes_before=n0, nodes_after=result.nodes_after,
                optimize_s=seconds, changes=changes, declined=declined)
    with tempfile.TemporaryDirectory(prefix="fusionviz-audit-") as tmp:
        path = Path(tmp) / "out.onnx"
        model_io.save_model(result.final, str(path))
        written = onnx.load(str(path))
    # Held to what the user's own model passes (before any --shape): a model that loads in
    # onnxruntime must still load once written, whatever fixing its input shapes did.
    why = validity.violation(written, validity.Baseline(model))
    if why:
        return Cell(status="invalid", valid=False, verified=None, new_nan=False, detail=why, **base)
    v = verify.verify(result.original, written, plan=plan, report_only=not exact,
                      **({"rtol": rtol} if rtol else {}))
    if v.error:
        return Cell(status="error", valid=True, verified=False, new_nan=False, detail=v.error, **base)
    new_nan = v.new_nonfinite > 0
    figures = dict(max_abs_diff=v.max_abs_diff, max_rel_diff=v.max_rel_diff)
    if new_nan:
        return Cell(status="new_nan", valid=True, verified=False, new_nan=True, detail=v.summary(),
                    **figures, **base)
    if exact and not v.ok:
        return Cell(status="mismatch", valid=True, verified=False, new_nan=False, detail=v.summary(),
                    **figures, **base)
    detail = v.summary() + (f"; pass errors: {'; '.join(failed)}" if failed else "")
    return Cell(status="ok" if not failed else "error", valid=True, verified=v.ok if exact else None,
                new_nan=False, detail=detail, **figures, **base)
