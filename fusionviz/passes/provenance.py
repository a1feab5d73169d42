"""Provenance: which original nodes a node stands for, and which passes touched it.

1. Every node a pass makes or changes gets two entries in ``metadata_props``:
   ``fusionviz.sources`` (the *original* node names it stands for, resolved through earlier
   passes' provenance) and ``fusionviz.passes`` (every pass that touched it, in order). So a node
   made by two passes from five originals says so.
2. Unnamed or duplicate-named nodes get unique names (:func:`ensure_unique_names`), so that every
   view can refer to them.
3. :func:`snapshot_nodes` records what a node was before a pass (name, op, input and output
   names, attributes, provenance); :mod:`fusionviz.passes.changes` compares it with the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import onnx_ir as ir

from fusionviz.passes.walk import all_nodes

SOURCES_KEY = "fusionviz.sources"
PASSES_KEY = "fusionviz.passes"
SEP = ","


def node_sources(node: ir.Node) -> list[str]:
    raw = node.metadata_props.get(SOURCES_KEY)
    if raw:
        return [s for s in raw.split(SEP) if s]
    return [node.name or ""]


def node_passes(node: ir.Node) -> list[str]:
    raw = node.metadata_props.get(PASSES_KEY)
    return [s for s in raw.split(SEP) if s] if raw else []


def ensure_unique_names(model: ir.Model, nodes: Sequence[ir.Node] | None = None) -> int:
    """Rule 2: give every node a unique, non-empty name (``nodes``: ``all_nodes(model)`` if known).

    Returns how many nodes were renamed.
    """
    seen: set[str] = set()
    counter = 0
    renamed = 0
    for node in all_nodes(model) if nodes is None else nodes:
        name = node.name
        if not name or name in seen:
            base = f"{node.op_type}_fv"
            while True:
                counter += 1
                candidate = f"{base}{counter}"
                if candidate not in seen:
                    break
            node.name = candidate
            renamed += 1
        seen.add(node.name)
    return renamed


@dataclasses.dataclass
class NodeRecord:
    node: ir.Node
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple  # (name, Attr) pairs; Attr objects are compared by identity (see same_attrs)
    raw_sources: str | None  # metadata_props values as they were (split only when needed)
    raw_passes: str | None

    @property
    def key(self) -> tuple:
        return (self.name, self.op, self.inputs, self.outputs)

    @property
    def sources(self) -> list[str]:
        if self.raw_sources:
            return [s for s in self.raw_sources.split(SEP) if s]
        return [self.name]

    @property
    def passes(self) -> list[str]:
        return [s for s in self.raw_passes.split(SEP) if s] if self.raw_passes else []


def same_attrs(a: tuple, b: tuple) -> bool:
    """Whether two attribute snapshots hold the same Attr objects.

    onnx-ir attributes are immutable values: a pass that changes one puts a new Attr in the node
    (``node.attributes[k] = ...``), so identity is exact and costs nothing; the snapshot holds
    the objects, so an id is never reused while it is compared.
    """
    if len(a) != len(b):
        return False
    other = dict(b)
    return all(other.get(k) is v for k, v in a)


def record(node: ir.Node) -> NodeRecord:
    meta = node.metadata_props
    return NodeRecord(
        node=node,
        name=node.name or "",
        op=node.op_type,
        inputs=tuple(v.name if v is not None and v.name else "" for v in node.inputs),
        outputs=tuple(v.name or "" for v in node.outputs),
        attrs=tuple(node.attributes.data.items()),
        raw_sources=meta.get(SOURCES_KEY),
        raw_passes=meta.get(PASSES_KEY),
    )


def snapshot_nodes(model: ir.Model, nodes: Sequence[ir.Node] | None = None) -> list[NodeRecord]:
    return [record(n) for n in (all_nodes(model) if nodes is None else nodes)]



def stamp(node: ir.Node, sources: Sequence[str], passes: Iterable[str], pass_name: str) -> None:
    """Rule 1: record on ``node`` the originals it stands for and the passes that touched it."""
    srcs = [s for s in sources if s]
    if not srcs:
        srcs = node_sources(node) if node.metadata_props.get(SOURCES_KEY) else []
    plist = list(dict.fromkeys([*node_passes(node), *passes, pass_name]))
    if srcs:
        node.metadata_props[SOURCES_KEY] = SEP.join(dict.fromkeys(srcs))
    node.metadata_props[PASSES_KEY] = SEP.join(plist)
