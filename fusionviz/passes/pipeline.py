"""Run a subset of passes in canonical order, snapshot after each, and report.

Observation lives here, not in the passes (like TVM's pass instruments): each pass sees an
onnx-ir model; the pipeline records a ModelProto snapshot after it, its changes, node counts and
wall time. A pass that raises is reported (``error``) and skipped: the model is restored to the
snapshot before it, so one broken rule never loses the user's work.

Each pass's own contract (:mod:`fusionviz.passes.base`) is checked by its ``apply``: an unmet
precondition is reported as *skipped* with its sentence, a broken postcondition as *declined*
(the pass is rolled back). A pass failure names the pass and the passes that ran before it.

The validity rule (:mod:`fusionviz.passes.validity`) is every pass's postcondition: no invalid
model leaves the pipeline. It is checked on the final model of a run; only when that fails is
the run repeated with the rule checked after every pass that changed something, and a pass
whose result breaks it is rolled back and reported as *declined* with the reason, while the
other passes go on. So a run of valid passes pays for one check, not one per pass.

Within :func:`new_weights_on_disk` (the CLI's ``optimize``), a run on a model whose weights stay
on disk writes the large tensors each pass makes to a data file of the process's own
(``fusionviz.model_io`` rule 10), so a fused attention's packed weights are memory-mapped, not
held beside the model's.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from fusionviz import errors
from fusionviz.passes import nearmiss, registry, validity
from fusionviz.passes.base import Change, Pass, PostconditionError, PreconditionError
from fusionviz.passes.nearmiss import NearMiss
from fusionviz.passes.provenance import ensure_unique_names
from fusionviz.passes.walk import all_nodes, count_nodes

logger = logging.getLogger(__name__)

#: Within :func:`new_weights_on_disk`: the folders its runs wrote new weights into.
_NEW_WEIGHTS_ON_DISK: contextvars.ContextVar[list | None] = contextvars.ContextVar("new_weights_on_disk",
                                                                                  default=None)


@contextlib.contextmanager
def new_weights_on_disk(owned: list | None = None):
    """Within: runs on a model whose weights stay on disk write the large tensors the passes make
    to disk (``fusionviz.model_io`` rule 10); the files are removed when the block ends, so the
    models made within are used within (the CLI's ``optimize`` saves its result there). Given
    ``owned``, the folders written are appended to it and kept: the caller removes them (the
    app, when no cached result reads them any more)."""
    import shutil

    folders: list = [] if owned is None else owned
    token = _NEW_WEIGHTS_ON_DISK.set(folders)
    try:
        yield
    finally:
        _NEW_WEIGHTS_ON_DISK.reset(token)
        for folder in folders if owned is None else ():
            shutil.rmtree(folder, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class PassReport:
    name: str
    title: str
    changes: tuple[Change, ...]
    nodes_before: int
    nodes_after: int
    seconds: float
    error: str | None = None
    #: Why the pass did not run (its trigger ops are absent, or its precondition is unmet): the
    #: status is then "skipped". Written as ``note`` in :meth:`as_dict` (the report's key).
    skip_reason: str = ""
    declined: str | None = None  # why it was rolled back: the validity rule its result broke, or
    # (optimize's bisection, fusionviz.bisect) the outputs it changed
    after: tuple[str, ...] = ()  # the passes that ran before it (a failure's context; see failure)
    near_misses: tuple[NearMiss, ...] = ()  # where it almost changed something, and why not
    near_miss_total: int = 0  # how many sites there were (near_misses keeps the deepest)

    @property
    def status(self) -> str:
        """One word: applied, unchanged, skipped, declined or failed."""
        if self.error:
            return "failed"
        if self.declined:
            return "declined"
        if self.skip_reason:
            return "skipped"
        return "applied" if self.changes else "unchanged"

    @property
    def note(self) -> str:
        """:attr:`skip_reason` under the report's key name (``note`` in :meth:`as_dict`)."""
        return self.skip_reason

    @property
    def failure(self) -> str | None:
        """The error with its context, for display: ``boom (after: a, b)``; None when it did not fail."""
        if not self.error:
            return None
        return f"{self.error} (after: {', '.join(self.after) or 'no other pass'})"

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "changes": [c.as_dict() for c in self.changes],
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "seconds": round(self.seconds, 4),
            "error": self.error,
            "declined": self.declined,
            "after": list(self.after),
            "note": self.skip_reason,
            "near_misses": [m.as_dict() for m in self.near_misses],
            "near_miss_total": self.near_miss_total,
        }


@dataclasses.dataclass(frozen=True)
class Snapshot:
    label: str  # "original" or the pass name that produced it
    model: onnx.ModelProto
    node_count: int


@dataclasses.dataclass(frozen=True)
class PipelineResult:
    snapshots: tuple[Snapshot, ...]
    reports: tuple[PassReport, ...]
    seconds: float
    notes: tuple[str, ...] = ()  # what the run did not do as asked, and why (one sentence each)

    @property
    def original(self) -> onnx.ModelProto:
        return self.snapshots[0].model

    @property
    def final(self) -> onnx.ModelProto:
        return self.snapshots[-1].model

    @property
    def nodes_before(self) -> int:
        return self.snapshots[0].node_count

    @property
    def nodes_after(self) -> int:
        return self.snapshots[-1].node_count

    def changes(self) -> list[Change]:
        return [c for r in self.reports for c in r.changes]

    def as_dict(self) -> dict:
        return {
            "passes": [r.as_dict() for r in self.reports],
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "seconds": round(self.seconds, 4),
            "notes": list(self.notes),
        }


def _named_inputs(model: ir.Model, names: Sequence[str], flag: str) -> dict[str, ir.Value]:
    """The graph inputs ``names`` name; a name that is not one is ``flag``'s one-line error."""
    by_name = {v.name: v for v in model.graph.inputs}
    for name in names:
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise errors.InputSpecError(f"{flag} names input '{name}', but the model's inputs are: {known}.")
    return by_name


def fix_input_shapes(model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> None:
    """Replace symbolic input dims with the given concrete ones (like onnxsim's overwrite_input_shapes)."""
    by_name = _named_inputs(model, list(shapes), "--shape")
    for name, dims in shapes.items():
        v = by_name[name]
        if v.shape is not None and len(v.shape) != len(dims):
            raise errors.InputSpecError(
                f"--shape {name} has {len(dims)} dims but the input has rank {len(v.shape)}."
            )
        v.shape = ir.Shape(list(dims))


def freeze_inputs(model: ir.Model, values: Mapping[str, np.ndarray]) -> None:
    """Make each named graph input a constant (an initializer holding the given value), in place.

    The model is specialized: it no longer takes those inputs, and a pass can fold what depends
    on them (an ``If`` on a sample rate becomes the branch for that rate). The value must have
    the input's element type and fit its declared shape.
    """
    by_name = _named_inputs(model, list(values), "--freeze")
    for name, value in values.items():
        v = by_name[name]
        arr = np.asarray(value)
        if v.dtype is not None and arr.dtype != v.dtype.numpy():
            arr = arr.astype(v.dtype.numpy())
        if v.shape is not None:
            dims = list(v.shape)
            if len(dims) != arr.ndim or any(isinstance(d, int) and d != n for d, n in zip(dims, arr.shape, strict=False)):
                raise errors.InputSpecError(f"--freeze {name}: a value of shape {list(arr.shape)} does not fit the "
                                            f"input's shape {[d if isinstance(d, int) else str(d) for d in dims]}.")
        model.graph.inputs.remove(v)
        v.shape = ir.Shape(list(arr.shape))
        v.const_value = ir.tensor(arr, name=name)
        model.graph.register_initializer(v)


def fixed_shapes_refused(model: onnx.ModelProto, fixed: onnx.ModelProto) -> str | None:
    """Why onnxruntime at its default level refuses ``fixed`` (a pipeline result on ``model``
    with its input shapes fixed) though it loads ``model``; None when it loads both or neither.

    Only a model with control flow is checked: onnxruntime's level-all folding makes shapes
    concrete inside every branch, and a branch that cannot run with those shapes (silero's 8 kHz
    path fed 16 kHz frames; the If picks it by the *value* of an input) then fails type
    inference, though the branch never runs.
    """
    if not validity.has_subgraphs(model):
        return None
    why = validity.ort_error_at_all(fixed)
    if why is None or validity.ort_error_at_all(model) is not None:
        return None
    return why


def infer_shapes(model: ir.Model) -> ir.Model:
    """onnx shape inference on the IR model, in place; failures leave the model as it was."""
    from fusionviz.passes.shapes import infer_shapes as infer

    infer(model)
    return model


def to_ir(model: onnx.ModelProto) -> ir.Model:
    """The onnx-ir model of ``model``. Weights that stay on disk (``fusionviz.model_io``
    rule 9) become onnx-ir external tensors read (memory-mapped) from their folder when a pass
    needs their values; serialized again (:func:`to_proto`), an unchanged one is the same
    external reference, so snapshots share it instead of copying it."""
    from fusionviz.model_io import ir_model

    try:
        return ir_model(model)
    except Exception as exc:  # noqa: BLE001 - SerdeError, ValueError, ... on malformed protos
        raise errors.ModelLoadError(
            f"The model cannot be converted for the passes: {type(exc).__name__}: {exc}"
        ) from None


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """The proto of ``model``, as every snapshot and result is written: without the dim names
    the passes' shape inference made up (:func:`fusionviz.passes.hygiene.forget_made_up_dims`)."""
    from fusionviz.passes.hygiene import forget_made_up_dims

    return forget_made_up_dims(ir.serde.serialize_model(model))


def _values_by_id(model: ir.Model) -> dict[int, ir.Value]:
    return {id(v): v for n in all_nodes(model) for v in n.outputs}


def _shapes_still_fresh(p, model: ir.Model, inferred: dict[int, ir.Value]) -> bool:
    """Whether shape inference after pass ``p`` could tell later passes nothing new.

    True when every node output either existed at the last inference (its shape is what
    inference said; passes keep a value's meaning) or is new and was given a type and shape by
    the pass (fusions copy them from the value they replace). A pass that can make existing
    values' shapes more precise (``refines_shapes``: constant folding turns a computed Reshape
    target into a constant) always leaves them stale.
    """
    if p.refines_shapes:
        return False
    for n in all_nodes(model):
        for v in n.outputs:
            if id(v) not in inferred and (v.dtype is None or v.shape is None):
                return False
    return True


def _restored(p: Pass, work: ir.Model, before: onnx.ModelProto) -> ir.Model:
    """The model as it was before ``p``: ``work`` itself when ``p`` is functional and leaves its
    input alone, else a fresh copy of the snapshot."""
    if not p.in_place and not p.changes_input:
        return work
    return to_ir(before)


def run_pipeline(
    model: onnx.ModelProto,
    pass_names: Sequence[str],
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    freeze: Mapping[str, np.ndarray] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    keep_snapshots: bool = True,
    validate: bool = True,
    near_misses: bool = True,
) -> PipelineResult:
    """Run ``pass_names`` (any order given; canonical order used) on a copy of ``model``.

    ``keep_snapshots=False`` (the CLI: it needs only the original and the result) keeps two
    snapshots, "original" and the last pass's, and skips serializing the model after every
    pass. The restore-on-error rule needs those per-pass snapshots, so when a pass fails in
    that mode the pipeline is simply run again with them: the result is the same either way.

    ``shapes`` fixes input shapes (``--shape``) and ``freeze`` makes inputs constants
    (``--freeze``) before the first pass; the "original" snapshot is the model so specialized.

    ``validate`` applies the validity rule (module docstring): when the result breaks it, the
    passes run again, checked one by one (``_specialized_run``). ``near_misses`` records, per pass, where a
    rewrite almost fired and why it did not (:mod:`fusionviz.passes.nearmiss`).
    """
    passes = registry.resolve(pass_names)
    if freeze:  # a frozen input's shape is its value's
        shapes = {k: v for k, v in (shapes or {}).items() if k not in freeze} or None
    result = _specialized_run(model, passes, shapes, freeze, progress, keep_snapshots, validate, near_misses)
    if shapes:
        refused = fixed_shapes_refused(model, result.final)
        if refused:  # the shapes, not a pass, broke it (passes are checked against the fixed model)
            note = ("The input shapes were not fixed in the model: with them fixed, onnxruntime (level all) refuses "
                    f"the result ({refused}); the passes ran on the model's own input dims.")
            logger.info(note)
            again = _specialized_run(model, passes, None, freeze, progress, keep_snapshots, validate, near_misses)
            result = dataclasses.replace(again, notes=(note, *again.notes))
    if progress:
        progress(len(passes), len(passes), "done")
    return result


class _NeedsSnapshots(Exception):
    """A pass failed or was declined in a run without per-pass snapshots: nothing to restore from."""


def _trimmed(result: PipelineResult, keep_snapshots: bool) -> PipelineResult:
    """``result`` with only its first and last snapshots when the caller keeps no others."""
    snaps = result.snapshots
    if keep_snapshots or len(snaps) <= 2:
        return result
    return dataclasses.replace(result, snapshots=(snaps[0], snaps[-1]))


def _specialized_run(model, passes, shapes, freeze, progress, keep_snapshots, validate, near_misses) -> PipelineResult:
    """One run on ``model`` specialized by ``shapes`` / ``freeze``, and the runs the rules ask for:
    again with per-pass snapshots when a pass must be restored and there were none (the CLI's
    lean mode), and pass by pass (``careful``) when the result breaks the validity rule."""
    def run(keep: bool, careful: bool) -> tuple[PipelineResult, validity.Baseline | None]:
        return _run(model, passes, shapes=shapes, freeze=freeze, progress=progress, keep_snapshots=keep,
                    validate=validate, near_misses=near_misses, careful=careful)

    try:
        result, base = run(keep_snapshots, False)
    except _NeedsSnapshots:
        result, base = run(True, False)
        result = _trimmed(result, keep_snapshots)
    if validate and any(r.changes for r in result.reports):
        why = validity.violation(result.final, base)
        if why:  # some pass broke the rule: find which, pass by pass
            logger.info("the result breaks the validity rule (%s); checking pass by pass", why)
            result = _trimmed(run(True, True)[0], keep_snapshots)
    return result


def _run(model: onnx.ModelProto, passes: Sequence, *, shapes, freeze, progress, keep_snapshots: bool, validate: bool,
         near_misses: bool, careful: bool) -> tuple[PipelineResult, validity.Baseline | None]:
    """The passes over one copy of ``model``: the result and the validity baseline of its original."""
    t0 = time.perf_counter()
    work = to_ir(model)
    if freeze:
        shapes = {k: v for k, v in (shapes or {}).items() if k not in freeze} or None
    if shapes:
        fix_input_shapes(work, shapes)
        from fusionviz.passes.hygiene import forget_negative_dims

        forget_negative_dims(work)  # Paddle's -1 dims would contradict the fixed input shapes
    if freeze:
        freeze_inputs(work, freeze)
    renamed = ensure_unique_names(work)
    if passes:
        from fusionviz.passes.validate import malformed

        why = malformed(work)
        if why:
            raise errors.CheckerError(f"The model breaks the ONNX spec, so no pass can run on it: {why}.")
    if shapes or renamed or freeze:
        original = to_proto(work)
    else:  # the IR holds exactly the input: a C-level copy instead of a serialization
        original = onnx.ModelProto()
        original.CopyFrom(model)
    snapshots = [Snapshot("original", original, count_nodes(work))]
    base = validity.Baseline(original) if validate else None
    new_weights = None
    if _NEW_WEIGHTS_ON_DISK.get() is not None:
        from fusionviz.model_io.spill import NewWeights

        new_weights = NewWeights.for_model(original, _NEW_WEIGHTS_ON_DISK.get())
    reports: list[PassReport] = []
    shapes_fresh = False  # shape inference is re-run only when a pass left values without it
    inferred: dict[int, ir.Value] = {}  # the values the last shape inference saw (held: ids stay unique)
    ops: set[str] | None = None  # op types present; recomputed only after a change
    for i, p in enumerate(passes):
        if progress:
            progress(i, len(passes), p.name)
        t = time.perf_counter()
        if ops is None:
            ops = {n.op_type for n in all_nodes(work)}
        n0 = snapshots[-1].node_count
        if not p.applicable(ops):
            reports.append(PassReport(p.name, p.title, (), n0, n0, time.perf_counter() - t,
                                      skip_reason=p.skip_reason()))
            snapshots.append(Snapshot(p.name, snapshots[-1].model, n0))
            continue
        error = declined = None
        changes: list[Change] = []
        near: tuple[NearMiss, ...] = ()
        near_total = 0
        try:
            if p.needs_shapes and not shapes_fresh:
                work = infer_shapes(work)
                shapes_fresh = True
                inferred = _values_by_id(work)
            with nearmiss.recording() if near_misses else contextlib.nullcontext() as recorder:
                work, changes = p.apply(work)
            if recorder is not None:
                near, near_total = recorder.result({n.name for n in all_nodes(work)})
        except PreconditionError as exc:  # nothing was changed: skipped, with the reason
            reports.append(PassReport(p.name, p.title, (), n0, n0, time.perf_counter() - t,
                                      skip_reason=str(exc)))
            snapshots.append(Snapshot(p.name, snapshots[-1].model, n0))
            continue
        except PostconditionError as exc:  # rolled back like a result that breaks the validity rule
            declined = str(exc)
        except errors.FusionvizError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a broken rule must not lose the user's work
            logger.exception("pass %s failed", p.name)
            error = f"{type(exc).__name__}: {exc}"
        if (error is not None or declined is not None) and not keep_snapshots:
            raise _NeedsSnapshots  # nothing to restore from: the caller runs again with snapshots
        if error is not None:
            work = _restored(p, work, snapshots[-1].model)
            changes = []
        elif declined is not None:  # its own postcondition: rolled back like a broken validity rule
            logger.info("pass %s declined: %s", p.name, declined)
            work = _restored(p, work, snapshots[-1].model)
            changes = []
        if changes and new_weights is not None:
            new_weights.take(work)  # the large tensors it made: to disk, memory-mapped
        proto = None
        if changes and careful:
            proto = to_proto(work)
            declined = validity.violation(proto, base)
            if declined:
                logger.info("pass %s declined: %s", p.name, declined)
                work = to_ir(snapshots[-1].model)
                changes = []
                proto = None
        dt = time.perf_counter() - t
        if changes or error is not None or declined:
            shapes_fresh = (shapes_fresh and error is None and declined is None
                            and _shapes_still_fresh(p, work, inferred))
            ops = None
            if proto is None and keep_snapshots:
                proto = snapshots[-1].model if declined else to_proto(work)
        else:
            proto = snapshots[-1].model  # unchanged: share the previous snapshot (read-only)
        n1 = count_nodes(work)
        if error is not None or declined:
            near, near_total = (), 0
        reports.append(PassReport(p.name, p.title, tuple(changes), n0, n1, dt, error,
                                  declined=declined, after=tuple(r.name for r in reports),
                                  near_misses=near, near_miss_total=near_total))
        snapshots.append(Snapshot(p.name, proto, n1))
    if not keep_snapshots:
        last = snapshots[-1]
        final = last.model if len(snapshots) == 1 or last.model is not None else to_proto(work)
        snapshots = [snapshots[0]] + ([Snapshot(last.label, final, last.node_count)] if len(snapshots) > 1 else [])
    return PipelineResult(tuple(snapshots), tuple(reports), time.perf_counter() - t0), base

