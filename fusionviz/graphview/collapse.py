"""Choosing what to draw on big graphs: focus, changed-only, collapse by scope, hard cap.

Rules (the code points back to them):

1. *Focus*: the node and everything within ``hops`` edges of it, in either direction. Hub
   tensors (see model_graph rule 5) are not walked: an attention mask would pull in every layer.
2. *Changed only*: every node whose diff status is not ``unchanged``, plus ``context_hops``
   of neighbours (walked like rule 1).
3. *Collapse*: every scope becomes one box, except scopes that are open: those listed in
   ``expanded`` (and their ancestors), pass-through scopes (one child scope, no nodes of their
   own: ``/encoder`` above ``layer.0 .. layer.23``), tiny scopes (fewer than
   ``MIN_BOX_NODES`` nodes, a box would hide nothing), and scopes opened automatically: level by
   level from the top, a whole level is opened while the picture stays within
   ``AUTO_OPEN_ITEMS`` items (so a 3,000-node encoder shows its layers, not one box). A picture
   of fewer than ``FEW_ITEMS`` items says nothing: its next level is opened anyway while the
   picture stays within the cap (a model whose every node sits in one scope, ``p2o.*``, is
   drawn node by node, not as one box).
4. *Cap*: items (nodes and boxes) are taken in model order up to ``max_nodes``; the rest is left
   out and the caller says so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter, deque
from collections.abc import Iterable, Mapping

from fusionviz.graphview.model_graph import DisplayGraph

logger = logging.getLogger(__name__)

MIN_BOX_NODES = 3
AUTO_OPEN_ITEMS = 200
FEW_ITEMS = 4


def scope_key(scope: tuple[str, ...]) -> str:
    """The string form of a scope path (``encoder/layer.3/attention``)."""
    return "/".join(scope)


def neighbourhood(dg: DisplayGraph, seeds: Iterable[str], hops: int,
                  within: set[str] | None = None) -> set[str]:
    """Rules 1-2: node keys within ``hops`` edges of ``seeds`` (hub tensors not walked)."""
    adj: dict[str, set[str]] = {}
    for p, c, t in dg.edge_list():
        if t in dg.hubs:
            continue
        adj.setdefault(p, set()).add(c)
        adj.setdefault(c, set()).add(p)
    seen = {s for s in seeds if s in dg.by_key}
    frontier = deque((s, 0) for s in seen)
    while frontier:
        k, d = frontier.popleft()
        if d >= hops:
            continue
        for nb in adj.get(k, ()):
            if nb not in seen and (within is None or nb in within):
                seen.add(nb)
                frontier.append((nb, d + 1))
    return seen


@dataclasses.dataclass
class Box:
    """A collapsed scope."""

    scope: tuple[str, ...]
    members: list[str]
    ops: Counter
    statuses: Counter

    @property
    def key(self) -> str:
        return scope_key(self.scope)


@dataclasses.dataclass
class Selection:
    """What to draw: ordered item ids ("n:<key>" or "s:<scope>"), boxes, and node → item."""

    items: list[str]
    boxes: dict[str, Box]
    item_of: dict[str, str]  # node key -> item id (only for drawn nodes)
    left_out: int  # selected nodes not drawn because of the cap


def collapse(dg: DisplayGraph, selected: set[str], *, enabled: bool, expanded: Iterable[str] = (),
             status: Mapping[str, str] | None = None, auto_items: int = AUTO_OPEN_ITEMS,
             max_items: int | None = None) -> tuple[list[str], dict[str, str], dict[str, Box]]:
    """Rule 3: map every selected node to an item id; returns (items in model order, item_of, boxes).

    ``max_items`` is the cap a picture of fewer than ``FEW_ITEMS`` items may be opened up to
    (default ``auto_items``).
    """
    cap = auto_items if max_items is None else max(auto_items, max_items)
    nodes = [n for n in dg.nodes if n.key in selected]
    item_of: dict[str, str] = {}
    boxes: dict[str, Box] = {}
    if not enabled:
        for n in nodes:
            item_of[n.key] = "n:" + n.key
        return [item_of[n.key] for n in nodes], item_of, boxes
    # Per scope prefix: total nodes, direct nodes, child scopes.
    total: Counter = Counter()
    direct: Counter = Counter()
    children: dict[tuple[str, ...], set[str]] = {}
    for n in nodes:
        sc = n.scope
        direct[sc] += 1
        for i in range(1, len(sc) + 1):
            total[sc[:i]] += 1
            if i < len(sc):
                children.setdefault(sc[:i], set()).add(sc[i])
    open_scopes: set[tuple[str, ...]] = set()
    for e in expanded:
        parts = tuple(p for p in str(e).split("/") if p)
        for i in range(1, len(parts) + 1):
            open_scopes.add(parts[:i])

    def is_open(prefix: tuple[str, ...]) -> bool:
        if prefix in open_scopes or total[prefix] < MIN_BOX_NODES:
            return True
        # pass-through: exactly one child scope and no nodes directly inside
        return len(children.get(prefix, ())) == 1 and direct[prefix] == 0

    def count_items(prefix: tuple[str, ...]) -> int:
        if prefix and not is_open(prefix):
            return 1
        return direct[prefix] + sum(count_items((*prefix, c)) for c in children.get(prefix, ()))

    # Top-level scopes are the children of the root scope ().
    for n in nodes:
        if n.scope:
            children.setdefault((), set()).add(n.scope[0])
    level = [(c,) for c in sorted(children.get((), ()))]
    while level:  # auto-open, level by level, while the picture stays small enough
        closed = [p for p in level if not is_open(p)]
        if closed:
            few = count_items(()) < FEW_ITEMS
            open_scopes.update(closed)
            n = count_items(())
            if n > auto_items and not (few and n <= cap):
                open_scopes.difference_update(closed)
                break
        level = [(*p, c) for p in level for c in sorted(children.get(p, ()))]

    items: list[str] = []
    seen_items: set[str] = set()
    for n in nodes:
        item = "n:" + n.key
        for i in range(1, len(n.scope) + 1):
            prefix = n.scope[:i]
            if not is_open(prefix):
                sk = scope_key(prefix)
                item = "s:" + sk
                box = boxes.get(sk)
                if box is None:
                    box = boxes[sk] = Box(prefix, [], Counter(), Counter())
                box.members.append(n.key)
                box.ops[n.op] += 1
                if status:
                    box.statuses[status.get(n.name or n.key, status.get(n.key, "unchanged"))] += 1
                break
        item_of[n.key] = item
        if item not in seen_items:
            seen_items.add(item)
            items.append(item)
    return items, item_of, boxes


def select(dg: DisplayGraph, selected: set[str], *, collapse_enabled: bool, expanded: Iterable[str],
           max_nodes: int, status: Mapping[str, str] | None = None, auto_items: int | None = None,
           ) -> Selection:
    """Rules 3-4: collapse the selected nodes, then cap the number of items.

    Args:
        dg: the display graph.
        selected: node keys to draw.
        collapse_enabled: collapse scopes into boxes (rule 3).
        expanded: scopes kept open.
        max_nodes: the cap (rule 4).
        status: diff status per node, counted per box.
        auto_items: scopes are opened automatically while the picture stays within this many
            items (default ``AUTO_OPEN_ITEMS``); never more than ``max_nodes``.
    """
    auto = AUTO_OPEN_ITEMS if auto_items is None else auto_items
    items, item_of, boxes = collapse(dg, selected, enabled=collapse_enabled, expanded=expanded,
                                     status=status, auto_items=min(auto, max_nodes), max_items=max_nodes)
    left_out = 0
    if len(items) > max_nodes:
        keep = set(items[:max_nodes])
        items = items[:max_nodes]
        dropped = [k for k, it in item_of.items() if it not in keep]
        left_out = len(dropped)
        for k in dropped:
            del item_of[k]
        boxes = {k: b for k, b in boxes.items() if "s:" + k in keep}
    return Selection(items, boxes, item_of, left_out)
