"""Choosing what to draw on big graphs: focus, changed-only, collapse by scope or structure, hard cap.

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
   picture stays within the cap (a model whose every node sits in one scope is drawn node by
   node, not as one box; Paddle2ONNX's ``p2o.*`` models get rule 5's blocks instead).
4. *Cap*: items (nodes and boxes) are taken in model order up to ``max_nodes``; the rest is left
   out and the caller says so.
5. *Blocks by structure*: a model whose names say little (fewer than ``SCOPED_SHARE`` of its
   nodes have a scope below the one every node shares: Paddle2ONNX's ``p2o.Conv.12`` or unnamed
   nodes, tf2onnx's flat ``Conv__440``, torch's ``Conv_0``) is collapsed by structure instead:
   the nodes, in model order, are cut wherever a single tensor carries everything on (tensors
   that jump more than ``SKIP_SPAN`` nodes ahead, FPN features and hubs, do not hold a cut open);
   each piece is a token named by its op sequence; a piece of two or more nodes holds a join (a
   residual Add, an SE Mul, a Concat). Then the most frequent adjacent pair of tokens is made
   one token, again and again while some pair occurs twice (byte-pair merging), never pairing
   two tokens that both hold a join (one residual block, not two) nor growing past
   ``BLOCK_MAX_NODES`` nodes (at most ``MAX_MERGES`` merges). Every token of two or more nodes that occurs at least twice is a
   block, named by its pattern and occurrence (``block A.3``: the third of pattern A); a piece
   with a join that occurs once and has at least ``REGION_MIN_NODES`` nodes is a block too
   (``region 2``: a detector's neck). Blocks are one-level scopes for rule 3 (auto-open, the
   ``expanded`` list). The other snapshot of a pair takes the blocks of the *structure* snapshot
   (the before side, :func:`carry_blocks`): a node by its name, a fused or replacing node by
   the nodes it came from, a new node by its producer; so one name opens the same block in both
   panes.
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
#: Rule 5: name scopes are used when at least this share of nodes has one.
SCOPED_SHARE = 0.5
#: Rule 5: a tensor read more than this many nodes after it is written does not hold a cut open.
SKIP_SPAN = 40
#: Rule 5: merged blocks grow to at most this many nodes.
BLOCK_MAX_NODES = 40
#: Rule 5: a piece with a join that occurs once is a block from this many nodes.
REGION_MIN_NODES = 6
#: Rule 5: at most this many merges (each one pass over the pieces; real models need 8-14).
MAX_MERGES = 400


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
             max_items: int | None = None, scopes: Mapping[str, tuple[str, ...]] | None = None,
             ) -> tuple[list[str], dict[str, str], dict[str, Box]]:
    """Rule 3: map every selected node to an item id; returns (items in model order, item_of, boxes).

    ``max_items`` is the cap a picture of fewer than ``FEW_ITEMS`` items may be opened up to
    (default ``auto_items``). ``scopes`` (node key → scope) replaces the name scopes (rule 5).
    """
    cap = auto_items if max_items is None else max(auto_items, max_items)
    nodes = [n for n in dg.nodes if n.key in selected]
    if scopes is not None:
        nodes = [dataclasses.replace(n, scope=scopes.get(n.key, ())) for n in nodes]
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
           scopes: Mapping[str, tuple[str, ...]] | None = None) -> Selection:
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
        scopes: node key → scope, replacing the name scopes (rule 5's blocks).
    """
    auto = AUTO_OPEN_ITEMS if auto_items is None else auto_items
    items, item_of, boxes = collapse(dg, selected, enabled=collapse_enabled, expanded=expanded,
                                     status=status, auto_items=min(auto, max_nodes), max_items=max_nodes,
                                     scopes=scopes)
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


# ------------------------------------------------------------------ blocks by structure (rule 5)


def name_scopes_useful(dg: DisplayGraph) -> bool:
    """Rule 5: whether at least ``SCOPED_SHARE`` of the nodes have a scope below the common one."""
    scopes = [n.scope for n in dg.nodes]
    if not scopes:
        return True
    common = scopes[0]
    for sc in scopes[1:]:
        k = 0
        while k < min(len(common), len(sc)) and common[k] == sc[k]:
            k += 1
        common = common[:k]
    scoped = sum(1 for sc in scopes if len(sc) > len(common))
    return scoped >= SCOPED_SHARE * len(scopes)


def _pieces(dg: DisplayGraph) -> list[list[int]]:
    """Rule 5: node positions cut where one tensor carries everything on."""
    pos = {n.key: i for i, n in enumerate(dg.nodes)}
    delta = [0] * (len(dg.nodes) + 1)
    inputs = set(dg.inputs)
    for t, readers in dg.consumers.items():
        p = dg.producer.get(t)
        if t in dg.hubs or (p not in pos and t not in inputs):
            continue
        first = pos[p] if p in pos else 0  # a graph input is live from the start
        last = max((pos[c] for c in readers if c in pos), default=-1)
        if first < last <= first + SKIP_SPAN:
            delta[first] += 1
            delta[last] -= 1
    pieces: list[list[int]] = []
    live, start = 0, 0
    for i in range(len(dg.nodes)):
        live += delta[i]
        if live <= 1:
            pieces.append(list(range(start, i + 1)))
            start = i + 1
    if start < len(dg.nodes):
        pieces.append(list(range(start, len(dg.nodes))))
    return pieces


def _letters(i: int) -> str:
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(65 + r) + out
    return out


def structural_blocks(dg: DisplayGraph) -> dict[str, tuple[str, ...]]:
    """Rule 5: node key → its block's one-level scope (``("block A.3",)``) for nodes in a block."""
    pieces = _pieces(dg)
    sig_ids: dict[tuple[str, ...], int] = {}
    tokens: list[int] = []
    size: dict[int, int] = {}
    join: dict[int, bool] = {}
    parts: dict[int, tuple[int, int]] = {}
    for piece in pieces:
        sig = tuple(dg.nodes[i].op for i in piece)
        tid = sig_ids.setdefault(sig, len(sig_ids))
        size[tid], join[tid] = len(piece), len(piece) > 1
        tokens.append(tid)
    fresh = len(sig_ids)
    for _ in range(MAX_MERGES):  # byte-pair merging
        pairs: Counter = Counter()
        for a, b in zip(tokens, tokens[1:], strict=False):
            if size[a] + size[b] <= BLOCK_MAX_NODES and not (join[a] and join[b]):
                pairs[a, b] += 1
        if not pairs:
            break
        (a, b), count = pairs.most_common(1)[0]
        if count < 2:
            break
        new, fresh = fresh, fresh + 1
        size[new], join[new], parts[new] = size[a] + size[b], join[a] or join[b], (a, b)
        merged: list[int] = []
        i = 0
        while i < len(tokens):
            if i + 1 < len(tokens) and tokens[i] == a and tokens[i + 1] == b:
                merged.append(new)
                i += 2
            else:
                merged.append(tokens[i])
                i += 1
        tokens = merged
    count = Counter(tokens)
    out: dict[str, tuple[str, ...]] = {}
    pattern: dict[int, str] = {}
    seen: Counter = Counter()
    regions = 0
    at = 0
    for t in tokens:
        n = size[t]
        name = None
        if n >= 2 and count[t] >= 2:
            if t not in pattern:
                pattern[t] = _letters(len(pattern))
            seen[t] += 1
            name = f"block {pattern[t]}.{seen[t]}"
        elif join[t] and n >= REGION_MIN_NODES:
            regions += 1
            name = f"region {regions}"
        span = _piece_count(t, parts)
        if name is not None:
            for k in range(at, at + span):
                for i in pieces[k]:
                    out[dg.nodes[i].key] = (name,)
        at += span
    return out


def _piece_count(t: int, parts: Mapping[int, tuple[int, int]]) -> int:
    if t not in parts:
        return 1
    a, b = parts[t]
    return _piece_count(a, parts) + _piece_count(b, parts)


def carry_blocks(blocks: Mapping[str, tuple[str, ...]], dg: DisplayGraph,
                 came_from: Mapping[str, Iterable[str]] = ()) -> dict[str, tuple[str, ...]]:
    """Rule 5: the blocks of the structure snapshot (by node *name*) on another snapshot ``dg``.

    A node takes the block of the node of the same name, else of the first of ``came_from[name]``
    (the nodes it replaced or came from) that has one, else its first input's producer's.
    """
    came_from = dict(came_from)
    out: dict[str, tuple[str, ...]] = {}
    for n in dg.nodes:
        name = n.name or n.key
        sc = blocks.get(name)
        if sc is None:
            sc = next((blocks[o] for o in (*came_from.get(name, ()), *n.sources) if o in blocks), None)
        if sc is None:
            sc = next((out[p] for p in (dg.producer.get(t) for t in n.inputs) if p in out), None)
        if sc is not None:
            out[n.key] = sc
    return out
