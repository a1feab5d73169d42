"""Matching every tensor of A with the tensor of B it is compared with (rules 1-4 and 6 of
:mod:`fusionviz.compare`): by name, else through provenance; NCHWc reorders; Reshape targets."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import onnx

from fusionviz.compare.result import TensorPair
from fusionviz.graphview.model_graph import SOURCES_KEY, node_keys

#: The domain of onnxruntime's blocked-layout kernels (rule 4).
NCHWC_DOMAIN = "com.microsoft.nchwc"
#: Why a Reshape's shape argument is not compared (rule 6).
RESHAPE_TARGET = "a Reshape's shape argument (-1 or 0 may stand for a dim): compared through the Reshape's output"


# ------------------------------------------------------------------ matching (rules 1-4)


def _origins(node: onnx.NodeProto, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == SOURCES_KEY:
            got = [s for s in p.value.split(",") if s]
            if got:
                return got
    return [key]


def _has_body(node: onnx.NodeProto) -> bool:
    from fusionviz.passes.walk import proto_subgraphs

    return bool(proto_subgraphs(node))


class _Side:
    """One model's main graph, indexed for matching."""

    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.nodes = list(g.node)
        self.keys = node_keys(self.nodes)
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        self.origins: list[list[str]] = []
        self.by_origin: dict[str, list[int]] = {}
        self.blocked: set[str] = set()
        for i, (n, k) in enumerate(zip(self.nodes, self.keys, strict=True)):
            for o in n.output:
                if o:
                    self.producer.setdefault(o, i)
            for j, x in enumerate(n.input):
                if x:
                    self.consumers.setdefault(x, []).append((i, j))
            o = _origins(n, k)
            self.origins.append(o)
            for name in o:
                self.by_origin.setdefault(name, []).append(i)
            unblocks = n.op_type == "ReorderOutput" and n.domain == NCHWC_DOMAIN
            if not unblocks and (n.domain == NCHWC_DOMAIN or any(x in self.blocked for x in n.input)):  # rule 4
                self.blocked.update(x for x in n.output if x)
        self.initializers = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        self.inputs = {i.name for i in g.input}
        self.outputs = [o.name for o in g.output]
        self.output_set = set(self.outputs)

    def has(self, t: str) -> bool:
        return t in self.producer or t in self.initializers or t in self.inputs

    def linked(self, other: _Side, i: int) -> list[int]:
        """Nodes of this side linked to node ``i`` of ``other``: same key, or shared origins."""
        found = set()
        key = other.keys[i]
        if key in self.index:
            found.add(self.index[key])
        for name in other.origins[i]:
            found.update(self.by_origin.get(name, ()))
        return sorted(found)

    def describe(self, t: str) -> tuple[str, str]:
        """(producing node key, op) of a tensor of this side; ("", initializer/input) otherwise."""
        i = self.producer.get(t)
        if i is not None:
            return self.keys[i], self.nodes[i].op_type
        return "", ("initializer" if t in self.initializers else "input")


#: Anchor sets bigger than this are not compared (rule 3): the tensor stays unmatched.
_MAX_ANCHORS = 512
#: Ops whose output depends on shapes only: anchors do not pass through them (rule 3).
_SHAPE_OPS = frozenset({"Shape", "Size"})


def _anchors(side: _Side, common: set[str]) -> dict[str, frozenset[str] | None]:
    """Rule 3: per tensor of ``side``, the nearest tensors upstream in ``common`` (None: too
    many to compare)."""
    memo: dict[str, frozenset[str] | None] = {}
    same: dict[str, str] = {}  # a tensor and its NCHWc reorder hold the same values (rule 4)
    for n in side.nodes:
        if n.domain == NCHWC_DOMAIN and n.op_type in ("ReorderInput", "ReorderOutput") and n.input and n.output:
            if n.output[0] in common:
                same[n.input[0]] = n.output[0]
            elif n.input[0] in common:
                same[n.output[0]] = n.input[0]
    for n in side.nodes:
        acc: set[str] | None = set()
        if not (n.op_type in _SHAPE_OPS and n.domain in ("", "ai.onnx")):
            for u in n.input:
                if not u or u in side.initializers:
                    continue
                u = same.get(u, u)
                if u in common:
                    acc.add(u)
                    continue
                got = memo.get(u, frozenset())
                if got is None:
                    acc = None
                    break
                acc |= got
        value = None if acc is None or len(acc) > _MAX_ANCHORS else frozenset(acc)
        for o in n.output:
            if o:
                memo[o] = value
    return memo


def _stand_ins(cx: int, x: _Side, y: _Side, anchors: tuple[dict, dict]) -> list[int]:
    """Rule 3: the nodes of ``y`` that stand for node ``cx`` of ``x``: linked to it, and one of
    their outputs computes from the same anchors as one of its own."""
    want = {anchors[0].get(o) for o in x.nodes[cx].output if o} - {None}
    return [cy for cy in y.linked(x, cx) if any(anchors[1].get(o) in want for o in y.nodes[cy].output if o)]


def _through_provenance(t: str, x: _Side, y: _Side, anchors: tuple[dict, dict]) -> str | None:
    """Rule 3: the tensor of ``y`` that stands for ``t`` of ``x``, or None."""
    linked = set(y.linked(x, x.producer[t]))
    want = anchors[0].get(t)
    if not linked or want is None:
        return None

    def fits(v: str) -> bool:
        return bool(v) and not x.has(v) and y.producer.get(v) in linked and anchors[1].get(v) == want

    strong: set[str] = set()  # read at the same position by a reader that kept its key
    weak: set[str] = set()  # read by a node that stands for a reader
    for cx, j in x.consumers.get(t, ()):
        key = x.keys[cx]
        if key in y.index:
            ins = y.nodes[y.index[key]].input
            if j < len(ins) and fits(ins[j]):
                strong.add(ins[j])
        else:
            weak.update(v for cy in _stand_ins(cx, x, y, anchors) for v in y.nodes[cy].input if fits(v))
    for found in (strong, strong | weak):
        if len(found) == 1:
            return next(iter(found))
    return None


def _absorbed_note(t: str, x: _Side, y: _Side, matched: Mapping[str, str]) -> str:
    """Why ``t`` of ``x`` has no counterpart (rule 3): the node of ``y`` it went into (the first
    matched tensor downstream whose producer is linked to ``t``'s node), or that it was removed."""
    linked = set(y.linked(x, x.producer[t]))
    if not linked:
        return "not in B: its node was removed"
    queue, seen = [t], {t}
    while queue and len(seen) < _NOTE_SEARCH:
        v = queue.pop(0)
        got = matched.get(v)
        if got is not None and y.producer.get(got) in linked:
            i = y.producer[got]
            return f"absorbed into {y.nodes[i].op_type} {y.keys[i]}"
        for cx, _ in x.consumers.get(v, ()):
            for o in x.nodes[cx].output:
                if o and o not in seen:
                    seen.add(o)
                    queue.append(o)
    i = min(linked)
    return f"absorbed into {y.nodes[i].op_type} {y.keys[i]}"


#: Tensors searched downstream for the node an unmatched tensor went into.
_NOTE_SEARCH = 400


def _reshape_target(t: str, x: _Side, depth: int = 0) -> bool:
    """Rule 6: ``t`` is read only as a Reshape's shape, directly or through Identity nodes."""
    readers = x.consumers.get(t, ())
    if not readers or t in x.output_set or depth > 8:
        return False
    for c, j in readers:
        n = x.nodes[c]
        if n.op_type == "Reshape" and j == 1:
            continue
        if n.op_type == "Identity" and all(_reshape_target(o, x, depth + 1) for o in n.output if o):
            continue
        return False
    return True


def match_tensors(a: onnx.ModelProto, b: onnx.ModelProto,
                  sizes: Mapping[str, int] | None = None) -> list[TensorPair]:
    """Rules 1-4: every tensor of A (node outputs, ``Constant`` outputs left out) in A's node
    order, with the tensor of B it is compared with. ``sizes``: tensor name -> bytes."""
    x, y = _Side(a), _Side(b)
    sizes = sizes or {}
    common = {t for t in (set(x.producer) | x.inputs) if t in y.producer or t in y.inputs}
    common -= x.initializers | y.initializers
    anchors = (_anchors(x, common), _anchors(y, common))
    out: list[TensorPair] = []
    seen: set[str] = set()
    for i, n in enumerate(x.nodes):
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue
        for t in n.output:
            if not t or t in seen:
                continue
            seen.add(t)
            pair = TensorPair(len(out), t, x.keys[i], n.op_type, is_output=t in x.output_set,
                              nbytes=int(sizes.get(t, 0) or 0), blocked_a=t in x.blocked)
            if y.has(t):  # rule 2
                node_b, op_b = y.describe(t)
                pair = dataclasses.replace(pair, b_name=t, node_b=node_b, op_b=op_b, how="name",
                                           blocked_b=t in y.blocked)
            else:
                got = _through_provenance(t, x, y, anchors)
                if got is not None:
                    node_b, op_b = y.describe(got)
                    pair = dataclasses.replace(pair, b_name=got, node_b=node_b, op_b=op_b, how="provenance",
                                               blocked_b=got in y.blocked)
            if _reshape_target(t, x):
                pair = dataclasses.replace(pair, skip=RESHAPE_TARGET)
            out.append(pair)
    matched = {p.name: p.b_name for p in out if p.b_name is not None}
    return [p if p.b_name is not None else dataclasses.replace(p, note=_absorbed_note(p.name, x, y, matched))
            for p in out]
