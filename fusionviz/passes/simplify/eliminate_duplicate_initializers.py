"""eliminate_duplicate_initializers: initializers with equal dtype, shape and bytes merged into one."""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import DeduplicateHashedInitializersPass

from fusionviz.passes.base import Category, Change, ChangeKind, Outcome, Pass
from fusionviz.passes.walk import all_nodes, graphs

logger = logging.getLogger(__name__)

def _may_have_duplicates(model: ir.Model) -> bool:
    """Cheap pre-check for DeduplicateHashedInitializersPass, which hashes every weight: two
    initializers can only be equal if dtype, shape and their first 64 bytes are; when no two
    agree on those, the (sha512 over all weight bytes) pass has nothing to find."""
    for g in graphs(model):
        seen: set[tuple] = set()
        for v in g.initializers.values():
            cv = v.const_value
            if cv is None or v.is_graph_input() or v.is_graph_output():
                continue
            try:
                arr = np.asarray(cv.numpy())
                head = arr.reshape(-1)[:64].tobytes() if arr.dtype != object else repr(arr.reshape(-1)[:8]).encode()
            except Exception:  # noqa: BLE001 - unreadable data: let the library pass decide
                return True
            key = (cv.dtype, tuple(arr.shape), head)
            if key in seen:
                return True
            seen.add(key)
    return False


class DeduplicateInitializers(Pass, name="eliminate_duplicate_initializers", aliases=("dedup_initializers",), category=Category.SIMPLIFY, order=390):
    """Wraps onnx-ir's DeduplicateHashedInitializersPass (sha512, then exact byte comparison)."""

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
        if not _may_have_duplicates(model):
            return None  # no two initializers share dtype, shape and leading bytes: nothing to hash
        before = {id(n): [v.name if v is not None else "" for v in n.inputs] for n in all_nodes(model)}
        kept_names = set(model.graph.initializers.keys())
        _deduplicate(model)
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


def _deduplicate(model: ir.Model) -> None:
    """onnx-ir's DeduplicateHashedInitializersPass, quiet and on C-contiguous data."""
    dedup_logger = logging.getLogger("onnx_ir.passes.common.initializer_deduplication")
    level = dedup_logger.level
    dedup_logger.setLevel(logging.ERROR)  # it warns once per initializer that is a graph input
    for g in graphs(model):  # onnx-ir 1.1 hashes with hashlib, which needs C-contiguous data
        for v in g.initializers.values():
            if isinstance(v.const_value, ir.Tensor):
                arr = v.const_value.numpy()
                if isinstance(arr, np.ndarray) and not arr.flags.c_contiguous:
                    v.const_value = ir.Tensor(np.ascontiguousarray(arr), name=v.name)
    try:
        DeduplicateHashedInitializersPass()(model)
    finally:
        dedup_logger.setLevel(level)
