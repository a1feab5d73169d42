"""Per-tensor comparison of two models: where inside the graph the outputs start to differ.

:mod:`fusionviz.verify` says *which output* of the optimized model differs; this module says
*where the error starts*. (``match.py`` pairs the tensors, ``run.py`` runs the chunks, ``result.py``
holds the rows; this module runs the comparison.) Model A (e.g. the original) and model B (an optimized variant, or a
later snapshot) run in onnxruntime with optimizations off on the same inputs (one input set of
the :class:`~fusionviz.inputs.InputPlan`), with their intermediate tensors exposed as graph
outputs, as Polygraphy does layer by layer.

Rules (the code points back to them):

1. **Which tensors.** Every output of a main-graph node of A, in A's node order (ONNX requires
   it to be topological), except the outputs of ``Constant`` nodes (weights: compared through
   the nodes that read them). Tensors inside If/Loop/Scan bodies cannot be exposed as graph
   outputs: a body is compared by the outputs of the node that holds it (the result says so).
2. **Matched by name** when B has a tensor of that name: produced by a node, or held as an
   initializer (constant folding computed it) or a graph input.
3. **Matched through provenance** otherwise (``fusionviz.sources`` on the nodes passes made;
   the side without it stands for itself). A fused node's output is compared with the output of
   the *last* node it absorbed: the tensor its output replaced. The evidence is where the tensor
   goes: a node that read A's tensor reads, in B, a tensor that A does not have, made by a node
   linked to A's producer (same node key, or shared provenance origins). Every tensor has
   *anchors*: the nearest tensors upstream that both models have by name, graph inputs
   included (weights and shape arithmetic left out, as constant folding removes them; an
   NCHWc reorder of such a tensor counts as the tensor). A
   candidate must have the anchors of A's tensor; a reader that was fused is found in B as a
   node linked to it one of whose outputs has the anchors of the reader's output. Exactly one
   candidate must remain (those read at the same position by a reader that kept its key first).
   Provenance alone never decides: a change that grouped many nodes stamps them all with every
   source, and the anchors tell an Add from the LayerNormalization after it only through the
   node that reads it.
   Otherwise the tensor is *unmatched*: absorbed into a node of B (the producer of the first
   matched tensor downstream that is linked to it) or removed (nothing in B stands for its
   node).
4. **Layout.** A tensor in onnxruntime's blocked NCHWc layout (made by a node of the
   ``com.microsoft.nchwc`` domain other than ``ReorderOutput``, or by any node that reads such a
   tensor: onnxruntime runs Concat, Add and activations on blocked tensors as they are) is turned
   back into NCHW with onnxruntime's block size before it is compared, with the channel count of
   the other side.
5. **Figures and verdict** per matched tensor: :func:`fusionviz.verify.compare`, the test
   ``verify`` applies to outputs (max abs; max rel, to the tensor's largest magnitude; cosine;
   NaN/Inf introduced; ``|a−b| <= atol + rtol·|b| + floor``), with its noise floor: the
   reference noise is onnxruntime's own level-all run of A (:func:`fusionviz.verify.reference_noise`),
   with the same tensors exposed for intermediates, and with A's own outputs for A's graph outputs
   (so the verdict on the model's outputs is exactly ``verify``'s on that input set). Level all can
   rewrite across a tensor only when that tensor is not exposed, so an intermediate's floor may
   move a little with the chunking (rule 7); the figures do not.
6. **Not compared, and said why:** tensors of non-numeric types (sequences, maps, optionals,
   strings) are *skipped*; intermediates whose shape differs between A and B, or that are float
   on one side and integer or bool on the other, are *incomparable* (a layout change, or another
   tensor standing in: an int32 mask for a float one). A graph output whose shape differs fails,
   as in ``verify``; float32 against float16 is compared (a precision pass's error). A tensor
   read only as a Reshape's shape (directly or through Identity) is *skipped* too (not run): constant folding may write a dim
   as -1 or 0 where A computes it (``[1, 200]`` against ``[-1, 200]``), which is the same
   reshape; the Reshape's output is compared.
7. **Bounded memory.** Tensors are compared in chunks: at most ``chunk_tensors`` tensors and
   about ``chunk_mb`` MB of them (sizes from shape inference) per run, each run a fresh
   onnxruntime session per model that exposes only its chunk; the arrays of one chunk are freed
   before the next. A run holds A's and B's tensors of its chunk (and the reference run's),
   so the peak is about three times ``chunk_mb`` beyond the models themselves.
8. **The first divergence** is the first tensor in A's order that is beyond tolerance; it is
   named with its producing node in A and in B.

``isolated=True`` (the CLI and the app) runs every chunk in the verification child process
(:mod:`fusionviz.verify_worker`) with its memory cap and time limit, per chunk.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.compare.match import NCHWC_DOMAIN, RESHAPE_TARGET, _has_body, match_tensors
from fusionviz.compare.result import ERROR_SCALE, STATUSES, CompareResult, TensorPair, TensorRow
from fusionviz.compare.run import (
    DEFAULT_CHUNK_MB,
    DEFAULT_CHUNK_TENSORS,
    chunks,
    nchwc_block_size,
    run_chunk_here,
    unblock,
)
from fusionviz.inputs import InputPlan, InputSpec, plan_inputs
from fusionviz.verify import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff

__all__ = ["DEFAULT_CHUNK_MB", "DEFAULT_CHUNK_TENSORS", "ERROR_SCALE", "NCHWC_DOMAIN", "RESHAPE_TARGET", "STATUSES",
           "CompareResult", "TensorPair", "TensorRow", "chunks", "compare_models", "match_tensors",
           "nchwc_block_size", "run_chunk_here", "unblock"]

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ the comparison


def _sizes(model: onnx.ModelProto, plan: InputPlan | None) -> dict[str, int]:
    """Rule 7: bytes of every tensor shape inference sizes (inputs fixed as the plan says)."""
    from fusionviz.analysis import infer_tensor_info

    try:
        info = infer_tensor_info(model, plan.shapes() if plan is not None else None)
    except Exception as exc:  # noqa: BLE001 - sizes only bound the chunks; unknown is 0
        logger.info("no tensor sizes for chunking: %s", exc)
        return {}
    return {k: int(v.nbytes or 0) for k, v in info.items()}


def _notes(a: onnx.ModelProto, rows: Sequence[TensorRow]) -> list[str]:
    notes = []
    bodies = Counter(n.op_type for n in a.graph.node if _has_body(n))
    if bodies:
        kinds = ", ".join(f"{op} ×{c}" for op, c in sorted(bodies.items()))
        notes.append(f"{sum(bodies.values())} control-flow node(s) ({kinds}): tensors inside their bodies cannot be "
                     "exposed as graph outputs; each body is compared by the outputs of the node that holds it.")
    targets = sum(1 for r in rows if r.status == "skipped" and r.note == RESHAPE_TARGET)
    if targets:
        notes.append(f"{targets} Reshape shape argument(s) not compared: constant folding may write a dim as "
                     "-1 or 0 where A computes it; each is compared through the Reshape's output.")
    skipped = Counter(r.note for r in rows if r.status == "skipped" and r.note != RESHAPE_TARGET)
    if skipped:
        notes.append(f"{sum(skipped.values())} tensor(s) not compared: not numeric tensors "
                     f"({'; '.join(f'{k} ×{c}' if c > 1 else k for k, c in skipped.most_common(3))}).")
    shaped = [r for r in rows if r.status == "incomparable"]
    if shaped:
        notes.append(f"{len(shaped)} tensor(s) not compared: their shape or kind of element differs between "
                     f"A and B (first: {shaped[0].pair.name}: {shaped[0].note}).")
    unmatched = [r for r in rows if r.status == "unmatched"]
    if unmatched:
        notes.append(f"{len(unmatched)} tensor(s) of A have no counterpart in B (absorbed into a fused node, "
                     "or removed).")
    return notes


def compare_models(
    a: onnx.ModelProto,
    b: onnx.ModelProto,
    *,
    plan: InputPlan | None = None,
    spec: InputSpec | None = None,
    input_set: str | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    chunk_tensors: int = DEFAULT_CHUNK_TENSORS,
    chunk_mb: float = DEFAULT_CHUNK_MB,
    isolated: bool = False,
    labels: tuple[str, str] = ("A", "B"),
    progress: Callable[[int, int], None] | None = None,
) -> CompareResult:
    """Compare every tensor of ``a`` with its counterpart in ``b`` (module rules 1-8).

    Args:
        a, b: the two models (A's order and tensors lead).
        plan: the inputs (:func:`fusionviz.inputs.plan_inputs` of ``a``); made from ``spec``
            when None.
        spec: what the user said about the inputs, when there is no plan.
        input_set: which of the plan's input sets (default: ``user`` when the plan has the
            user's data, else ``normal``).
        feeds: one given input set instead of the plan (named ``given``).
        rtol, atol: ``verify``'s tolerance.
        chunk_tensors, chunk_mb: rule 7.
        isolated: run each chunk in the verification child (memory cap, time limit).
        labels: how A and B are named in sentences.
        progress: called with (run done, runs) after each run.

    Raises:
        fusionviz.errors.InputSpecError: an unknown input set.
        fusionviz.errors.RuntimeLoadError: A or B does not load or run on the inputs.
    """
    start = time.perf_counter()
    if feeds is not None:
        set_name, data = "given", dict(feeds)
    else:
        if plan is None:
            plan = plan_inputs(a, spec or InputSpec())
        set_name = input_set or ("user" if plan.user_data else "normal")
        if set_name not in ("normal", "zeros", "edge", "user") or (set_name == "user" and not plan.user_data):
            raise errors.InputSpecError(f"Unknown input set '{set_name}': use normal, zeros, edge"
                                        + (" or user." if plan.user_data else " (user needs --inputs)."))
        data = plan.feeds(set_name)
    pairs = match_tensors(a, b, _sizes(a, plan))
    matched = [p for p in pairs if p.b_name is not None and not p.skip]
    runs = chunks(matched, chunk_tensors, chunk_mb)
    a_bytes, b_bytes = a.SerializeToString(), b.SerializeToString()
    results: dict[int, tuple[str, OutputDiff | None, str]] = {}
    for k, chunk in enumerate(runs, start=1):
        items = [(p.name, p.b_name, p.is_output, p.blocked_a, p.blocked_b) for p in chunk]
        args = (a_bytes, b_bytes, data, items, rtol, atol, set_name)
        if isolated:
            from fusionviz import verify

            got = verify._child(("compare", *args))
        else:
            got = run_chunk_here(*args)
        results.update(zip((p.index for p in chunk), got, strict=True))
        if progress is not None:
            progress(k, len(runs))
    rows = []
    for p in pairs:
        if p.b_name is None:
            rows.append(TensorRow(p, "unmatched", note=p.note))
        elif p.skip:
            rows.append(TensorRow(p, "skipped", note=p.skip))
        else:
            status, diff, note = results[p.index]
            rows.append(TensorRow(p, status, diff, note))
    return CompareResult(tuple(rows), set_name, rtol, atol, runs=len(runs),
                         seconds=time.perf_counter() - start, notes=tuple(_notes(a, rows)), labels=labels)
