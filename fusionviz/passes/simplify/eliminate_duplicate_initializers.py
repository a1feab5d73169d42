"""eliminate_duplicate_initializers: initializers with equal dtype, shape and bytes merged into one."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import onnx_ir as ir

from fusionviz.passes.base import Category, Change, ChangeKind, Outcome, Pass
from fusionviz.passes.facts import release
from fusionviz.passes.walk import all_nodes, graphs

logger = logging.getLogger(__name__)

def _head_key(cv: ir.TensorProtocol) -> tuple:
    """dtype, shape and the first 64 bytes: two initializers can only be equal when these are
    (reading them touches only the first page of a weight kept on disk)."""
    arr = np.asarray(cv.numpy())
    head = arr.reshape(-1)[:64].tobytes() if arr.dtype != object else repr(arr.reshape(-1)[:8]).encode()
    return (cv.dtype, tuple(arr.shape), head)


def _candidates(model: ir.Model) -> list[tuple[ir.Graph, list[ir.Value]]]:
    """Per graph, the groups of two or more initializers that agree on :func:`_head_key` (graph
    inputs and outputs are never merged)."""
    out = []
    for g in graphs(model):
        groups: dict[tuple, list[ir.Value]] = {}
        for v in g.initializers.values():
            cv = v.const_value
            if cv is None or v.is_graph_input() or v.is_graph_output():
                continue
            groups.setdefault(_head_key(cv), []).append(v)
        out.extend((g, vs) for vs in groups.values() if len(vs) > 1)
    return out


def _bytes_of(cv: ir.TensorProtocol) -> bytes:
    if cv.dtype.is_string():
        return np.array(cv.string_data()).tobytes()
    return np.ascontiguousarray(cv.numpy()).tobytes()


def _digest(cv: ir.TensorProtocol) -> str:
    if cv.dtype.is_string():
        digest = hashlib.sha512(_bytes_of(cv)).hexdigest()
    else:
        digest = hashlib.sha512(np.ascontiguousarray(cv.numpy())).hexdigest()  # the array is gone after
    release(cv)
    return digest


def _same_bytes(a: ir.TensorProtocol, b: ir.TensorProtocol) -> bool:
    same = _bytes_of(a) == _bytes_of(b)
    release(a)
    release(b)
    return same


class DeduplicateInitializers(Pass, name="eliminate_duplicate_initializers", aliases=("dedup_initializers",), category=Category.SIMPLIFY, order=390):
    """onnx-ir's DeduplicateHashedInitializersPass (sha512, then exact byte comparison), run over
    the initializers that can have a twin only (:func:`_deduplicate`)."""

    mirrors_ort = "basic"

    title = "Duplicate initializer merging"
    # After the fusions, not with the other simplifications: merged weights are shared weights,
    # and folding passes (BatchNorm into Conv) must not fold into a shared weight. Running last
    # also merges the weights the fusions create.
    explain = """\
**What:** initializers with the same dtype, shape and bytes are merged into one; every node
that used a copy now uses the kept one (reported as *changed* on those nodes). Graph inputs
are never merged.

**Why faster:** smaller model file and less memory; weights shared by several layers (tied
embeddings, repeated constants) are read from one buffer, which also helps caches. It also
lets CSE see that two nodes now have identical inputs.
"""

    def transform(self, model: ir.Model) -> Outcome | None:
        try:
            groups = _candidates(model)
        except Exception:  # noqa: BLE001 - an unreadable weight: nothing is merged
            logger.info("eliminate_duplicate_initializers: a weight cannot be read; nothing merged", exc_info=True)
            return None
        if not groups:
            return None  # no two initializers share dtype, shape and leading bytes: nothing to hash
        before = {id(n): [v.name if v is not None else "" for v in n.inputs] for n in all_nodes(model)}
        kept_names = set(model.graph.initializers.keys())
        _deduplicate(groups)
        changes = []
        for n in all_nodes(model):  # the rewiring is the change: one Change per node that moved
            old = before.get(id(n))
            now = [v.name if v is not None else "" for v in n.inputs]
            if old is None or old == now:
                continue
            swaps = [f"{a} → {b}" for a, b in zip(old, now, strict=False) if a != b]
            changes.append(Change(ChangeKind.CHANGED, self.name, (n.name or "",), (n.name or "",),
                                  (n.op_type,), (n.op_type,), "duplicate initializer: " + ", ".join(swaps)))
        gone = sorted(kept_names - set(model.graph.initializers.keys()))
        if gone:
            logger.info("eliminate_duplicate_initializers merged %d initializers", len(gone))
        return Outcome(changes=tuple(changes))


def _deduplicate(groups: list[tuple[ir.Graph, list[ir.Value]]]) -> None:
    """onnx-ir's DeduplicateHashedInitializersPass (sha512, then an exact byte comparison before a
    merge), over the candidate groups only, each weight kept on disk unmapped once read: hashing
    every weight of a 1 GB model mapped all of it into the process (a GPT-2 export: +0.4 GB)."""
    for g, values in groups:
        kept: dict[str, ir.Value] = {}
        for v in values:
            digest = _digest(v.const_value)
            first = kept.get(digest)
            if first is None:
                kept[digest] = v
                continue
            if not _same_bytes(first.const_value, v.const_value):
                logger.warning("initializers '%s' and '%s' hash alike but differ", first.name, v.name)
                continue
            v.replace_all_uses_with(first)
            g.initializers.pop(v.name)
            logger.info("Replaced initializer '%s' with existing initializer '%s'", v.name, first.name)
