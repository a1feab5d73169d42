"""Diff of two snapshots of a model: which nodes were fused, removed, added or changed.

Rules (numbered; the code points back to them). Only main-graph nodes are compared.

1. Nodes are matched by name first (the pipeline keeps names stable and names unnamed nodes).
2. A node of *after* whose name is not in *before* is matched through provenance: its
   ``fusionviz.sources`` (original node names) are looked up among the *before* nodes' own
   sources; the *before* nodes found and gone from *after* are its *contributors*.
   Two or more contributors → ``fused``; one → ``changed`` (it replaced that node);
   none → ``added``.
3. A node in both is ``fused`` when its provenance names *before* nodes that are gone from
   *after* (it absorbed them and kept its name), ``changed`` when its op, domain, attributes or
   weight inputs (initializers: name, shape and bytes) differ, else ``unchanged``. Rewired
   activation inputs alone are not a change (they follow from another node's change).
4. A *before* node whose name is not in *after* is ``removed``; when it is a contributor of an
   *after* node it is also listed in ``fused_into``.
5. Counts: ``fused``/``added``/``changed``/``unchanged`` count *after* nodes; ``removed`` counts
   *before* nodes that are gone (``absorbed`` of them went into a fused or replacing node).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging

import onnx

from fusionviz.graphview.model_graph import PASSES_KEY, SOURCES_KEY, node_keys

logger = logging.getLogger(__name__)

BEFORE_STATUSES = ("removed", "changed", "unchanged")
AFTER_STATUSES = ("fused", "added", "changed", "unchanged")


@dataclasses.dataclass(frozen=True)
class GraphDiff:
    """What changed between two snapshots (keys are node names; ``#i`` for unnamed nodes).

    Attributes:
        counts: fused, removed, added, changed, unchanged (and absorbed: removed nodes that
            went into a fused or replacing node).
        status_before: before-node → "removed" | "changed" | "unchanged".
        status_after: after-node → "fused" | "added" | "changed" | "unchanged".
        provenance: after-node → original node names it came from (metadata ``fusionviz.sources``),
            for every non-unchanged after-node.
        passes: after-node → passes that made or changed it (metadata ``fusionviz.passes``).
        fused_into: removed before-node → the after-node it went into.
        contributors: after-node → the before-nodes it replaced (rule 2).
    """

    counts: dict[str, int]
    status_before: dict[str, str]
    status_after: dict[str, str]
    provenance: dict[str, list[str]]
    passes: dict[str, list[str]]
    fused_into: dict[str, str] = dataclasses.field(default_factory=dict)
    contributors: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line, e.g. "2 fused, 5 removed, 0 added, 1 changed, 120 unchanged"."""
        c = self.counts
        return ", ".join(f"{c.get(k, 0):,} {k}" for k in ("fused", "removed", "added", "changed", "unchanged"))


def _meta(node: onnx.NodeProto, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == key:
            return [s for s in p.value.split(",") if s]
    return []


def _attr_sig(node: onnx.NodeProto) -> bytes:
    h = hashlib.sha1()
    for a in sorted(node.attribute, key=lambda a: a.name):
        h.update(a.SerializeToString(deterministic=True))
    return h.digest()


def _weight_sigs(model: onnx.ModelProto) -> dict[str, bytes]:
    sigs: dict[str, bytes] = {}
    for t in model.graph.initializer:
        h = hashlib.sha1()
        h.update(bytes(t.data_type.to_bytes(4, "little")))
        h.update(repr(list(t.dims)).encode())
        h.update(t.SerializeToString(deterministic=True) if not t.raw_data else t.raw_data)
        sigs[t.name] = h.digest()
    return sigs


def _sig(node: onnx.NodeProto, wsig: dict[str, bytes]) -> tuple:
    weights = tuple((i, wsig[x]) for i, x in enumerate(node.input) if x in wsig)
    return (node.op_type, node.domain, _attr_sig(node), weights)


def diff_models(before: onnx.ModelProto, after: onnx.ModelProto) -> GraphDiff:
    """Compare two snapshots (rules 1-5).

    Args:
        before: the earlier snapshot (e.g. ``run_pipeline(...).snapshots[k-1].model``).
        after: the later snapshot.

    Returns:
        A :class:`GraphDiff`.
    """
    bnodes = list(before.graph.node)
    anodes = list(after.graph.node)
    bkeys = node_keys(bnodes)
    akeys = node_keys(anodes)
    bmap = dict(zip(bkeys, bnodes, strict=True))
    amap = dict(zip(akeys, anodes, strict=True))
    bws = _weight_sigs(before)
    aws = _weight_sigs(after)

    # Rule 2: original name -> before nodes that stand for it.
    orig_to_before: dict[str, list[str]] = {}
    for k, n in bmap.items():
        for s in _meta(n, SOURCES_KEY) or [k]:
            orig_to_before.setdefault(s, []).append(k)

    status_after: dict[str, str] = {}
    provenance: dict[str, list[str]] = {}
    passes: dict[str, list[str]] = {}
    contributors: dict[str, list[str]] = {}
    for k, n in amap.items():
        sources = _meta(n, SOURCES_KEY)
        contrib: list[str] = []
        for s in sources:
            for b in orig_to_before.get(s, ()):
                if b != k and b not in amap and b not in contrib:
                    contrib.append(b)
        if k not in bmap:  # rule 2
            status = "fused" if len(contrib) >= 2 else "changed" if contrib else "added"
        elif contrib:  # rule 3
            status = "fused"
        elif _sig(n, aws) != _sig(bmap[k], bws):
            status = "changed"
        else:
            status = "unchanged"
        status_after[k] = status
        if status != "unchanged":
            provenance[k] = sources or ([k] if k in bmap else [])
            passes[k] = _meta(n, PASSES_KEY)
            if contrib:
                contributors[k] = contrib

    fused_into: dict[str, str] = {}
    for a, bs in contributors.items():
        for b in bs:
            fused_into.setdefault(b, a)
    status_before: dict[str, str] = {}
    for k in bmap:
        if k not in amap:  # rule 4
            status_before[k] = "removed"
        else:
            status_before[k] = "unchanged" if status_after[k] == "unchanged" else "changed"

    counts = {s: 0 for s in ("fused", "removed", "added", "changed", "unchanged")}
    for s in status_after.values():
        counts[s] += 1
    counts["removed"] = sum(1 for s in status_before.values() if s == "removed")
    counts["absorbed"] = len(fused_into)
    logger.debug("diff: %s", counts)
    return GraphDiff(counts, status_before, status_after, provenance, passes, fused_into, contributors)
