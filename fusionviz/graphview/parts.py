"""Big graphs laid out by parts: split the DOT, lay out each part with ``dot``, stack the SVGs.

Graphviz's ``dot`` grows much faster than linearly with the number of nodes (a 3,000-node
transformer takes tens of seconds in one piece); the same graph cut into parts of about a hundred
nodes lays out in about a second.

Rules (the code points back to them):

1. Only DOT written by :func:`fusionviz.graphview.render_graph` is split (one statement per line:
   header, node statements, edge statements, ``}``); anything else is laid out in one piece.
2. Op nodes (ids ``fv-n-``/``fv-s-``) keep their model order; cuts are placed near every
   ``PART_ITEMS`` op nodes where the fewest edges cross (a transformer is cut between layers,
   a ResNet between blocks).
3. Input terminals and "⋯" stubs are drawn once in every part that uses them; output terminals
   go with their producer. The legend and the "nothing to draw" note stay in the first part.
4. An edge between two parts leaves its producer's part through an invisible exit point on the
   part's last rank and enters the consumer's part through an invisible entry point on its first
   rank (both pulled in line with their node), so ``dot`` routes both halves around the nodes;
   the stacked SVG joins exit and entry with a curve (parts that are not neighbours: along a lane
   on the right of the drawing).
5. Each part is shifted sideways so that entry points line up under their exits, as far as the
   drawing does not drift sideways (``DRIFT``: centres stay near the first part's); parts are
   stacked top to bottom with ``PART_GAP`` points between them. Graphviz's generic element ids
   (``node12``, ``edge3``) get a per-part prefix so ids stay unique; node ids made by
   :func:`fusionviz.graphview.element_id` are unique already and are kept. Each part's group
   says where it lies (``data-box="x y w h"``), so a viewer can skip the parts out of view.
6. Parts are laid out in worker processes when there are several parts and at least
   ``MIN_CPUS_FOR_WORKERS`` CPUs (``FUSIONVIZ_LAYOUT_WORKERS=N`` forces N; 0 or 1: never), else
   in this process: on a 2-core machine shared with the server and the browser, workers were
   measured slower than one process. A worker that fails is not retried: the part is laid out
   here. Laid-out parts are kept (``PART_CACHE_SIZE``, by the part's DOT text), so the first
   screen laid out ahead of the rest (rule 7) is not laid out twice.
7. First screen first: :func:`svg_first` lays out only the first parts (enough for about two
   screens at the viewer's opening zoom) and stacks them as a drawing of their own, marked
   ``data-partial``; a viewer shows it while the whole drawing is made.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import queue
import re
import statistics
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence

logger = logging.getLogger(__name__)

#: Graphs with more op nodes than this are laid out by parts.
SPLIT_ABOVE = 300
#: Target op nodes per part (3,000 nodes: parts of 60-100 lay out in ~1.2 s, of 150 in ~1.7 s,
#: in one piece in tens of seconds).
PART_ITEMS = 100
#: Fewest CPUs for laying parts out in worker processes by default (rule 6).
MIN_CPUS_FOR_WORKERS = 4
#: Points between stacked parts.
PART_GAP = 28.0
#: Points between lanes on the right that carry edges between parts that are not neighbours.
LANE_GAP = 7.0
#: Graphviz's padding around a drawing (points), on every side.
PAD = 4.0
#: How far (share of the widest part) a part's centre may sit from the first part's centre.
DRIFT = 0.2
#: Weight of the edges to and from the invisible exit and entry points (rule 4).
PROXY_WEIGHT = "8"

_NODE_RE = re.compile(r"^  ([A-Za-z_][A-Za-z0-9_]*) (\[.*\]);$")
_EDGE_RE = re.compile(r"^  ([A-Za-z_][A-Za-z0-9_]*) -> ([A-Za-z_][A-Za-z0-9_]*)( \[.*\])?;$")
_OP_ID = re.compile(r'(?:^|[\[ ,])id="fv-[ns]-')
_GENERIC_ID = re.compile(r'id="(a_node|a_edge|node|edge|clust)(\d+)"')
_COMMENT = re.compile(r"<!--.*?-->\n?", re.DOTALL)
_SVG_OPEN = re.compile(r"<svg\b[^>]*>", re.DOTALL)
_GRAPH0 = re.compile(r'<g id="graph0" class="graph" transform="[^"]*">\n?<title>[^<]*</title>\n?'
                     r'(<polygon fill="white" stroke="none" points="[^"]*"/>\n?)?')

EDGE_COLOR = "#8a8a8a"


@dataclasses.dataclass
class ParsedDot:
    """A DOT text written by ``render_graph``, statement by statement (rule 1).

    Attributes:
        header: ``digraph ... {`` and the graph, node and edge default statements.
        nodes: DOT name -> attribute list ``[...]``, in declaration order.
        edges: (source, target, `` [...]`` or "").
        ops: op node names (nodes and collapsed blocks), model order.
    """

    header: list[str]
    nodes: dict[str, str]
    edges: list[tuple[str, str, str]]
    ops: list[str]

    @property
    def op_count(self) -> int:
        """Number of op nodes (nodes and collapsed boxes)."""
        return len(self.ops)


def parse_dot(dot: str) -> ParsedDot | None:
    """Split DOT text from ``render_graph`` into statements; None when it is not in that form."""
    lines = dot.rstrip("\n").split("\n")
    if len(lines) < 2 or not lines[0].startswith("digraph") or lines[-1] != "}":
        return None
    header: list[str] = []
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str]] = []
    ops: list[str] = []
    body = lines[1:-1]
    i = 0
    while i < len(body) and (body[i].startswith("  graph [") or body[i].startswith("  node [")
                             or body[i].startswith("  edge [")):
        header.append(body[i])
        i += 1
    for line in body[i:]:
        m = _EDGE_RE.match(line)
        if m:
            edges.append((m.group(1), m.group(2), m.group(3) or ""))
            continue
        m = _NODE_RE.match(line)
        if m and m.group(1) not in ("graph", "node", "edge"):
            name, attrs = m.group(1), m.group(2)
            nodes[name] = attrs
            if _OP_ID.search(attrs):
                ops.append(name)
            continue
        if line.strip():
            return None
    for s, d, _ in edges:
        if s not in nodes or d not in nodes:
            return None
    return ParsedDot([lines[0], *header], nodes, edges, ops)


def choose_cuts(n_ops: int, spans: Sequence[tuple[int, int]], part_items: int = PART_ITEMS) -> list[int]:
    """Rule 2: op-order positions where parts start (always starting with 0).

    Args:
        n_ops: number of op nodes.
        spans: (producer position, consumer position) of every edge between op nodes.
        part_items: target op nodes per part.
    """
    if n_ops <= part_items * 1.5:
        return [0]
    delta = [0] * (n_ops + 2)
    for a, b in spans:
        lo, hi = (a, b) if a <= b else (b, a)
        if lo == hi:
            continue
        delta[lo + 1] += 1  # the edge crosses every cut c with lo < c <= hi
        delta[hi + 1] -= 1
    crossing = [0] * (n_ops + 1)
    run = 0
    for c in range(n_ops + 1):
        run += delta[c]
        crossing[c] = run
    cuts = [0]
    start = 0
    while n_ops - start > part_items * 1.5:
        target = start + part_items
        lo = start + max(1, int(part_items * 0.6))
        hi = min(n_ops - max(1, int(part_items * 0.4)), start + int(part_items * 1.4))
        if hi < lo:
            break
        best = min(range(lo, hi + 1), key=lambda c: (crossing[c], abs(c - target)))
        cuts.append(best)
        start = best
    return cuts


@dataclasses.dataclass
class PartPlan:
    """Everything needed to lay out the parts and join them (rules 2-4).

    Attributes:
        dots: the DOT text of each part.
        exits: per part, its exit points' names.
        entries: per part, its entry points' names.
        cross: (part a, exit, part b, entry, producer, consumer) for every edge between parts.
    """

    dots: list[str]
    exits: list[list[str]]
    entries: list[list[str]]
    cross: list[tuple[int, str, int, str, str, str]]


def _weighted(attrs: str) -> str:
    """An edge's attribute list with a weight that keeps an entry point above its consumer."""
    if not attrs:
        return f' [weight="{PROXY_WEIGHT}"]'
    return attrs[:-1] + f', weight="{PROXY_WEIGHT}"]'


def plan_parts(pd: ParsedDot, part_items: int | None = None) -> PartPlan:
    """Cut ``pd`` into parts and write one DOT text per part (rules 2-4)."""
    part_items = part_items or PART_ITEMS
    pos = {name: i for i, name in enumerate(pd.ops)}
    spans = [(pos[s], pos[d]) for s, d, _ in pd.edges if s in pos and d in pos]
    cuts = choose_cuts(len(pd.ops), spans, part_items)
    n_parts = len(cuts)
    part_of: dict[str, int] = {}
    k = 0
    for i, name in enumerate(pd.ops):
        while k + 1 < n_parts and i >= cuts[k + 1]:
            k += 1
        part_of[name] = k

    members: list[list[str]] = [[] for _ in range(n_parts)]
    placed: list[set[str]] = [set() for _ in range(n_parts)]
    part_edges: list[list[str]] = [[] for _ in range(n_parts)]
    exits: list[list[str]] = [[] for _ in range(n_parts)]
    entries: list[list[str]] = [[] for _ in range(n_parts)]
    exit_of: dict[str, str] = {}
    entry_of: dict[tuple[str, int], str] = {}
    cross: list[tuple[int, str, int, str, str, str]] = []

    def put(name: str, part: int) -> None:
        if name not in placed[part]:
            placed[part].add(name)
            members[part].append(name)

    for name in pd.ops:
        put(name, part_of[name])
    for s, d, attrs in pd.edges:
        ps, pdd = part_of.get(s), part_of.get(d)
        if ps is None and pdd is None:  # rule 3: two non-op nodes (not written today)
            put(s, 0)
            put(d, 0)
            part_edges[0].append(f"  {s} -> {d}{attrs};")
        elif ps is None:
            put(s, pdd)
            part_edges[pdd].append(f"  {s} -> {d}{attrs};")
        elif pdd is None or ps == pdd:
            put(d, ps)
            part_edges[ps].append(f"  {s} -> {d}{attrs};")
        else:  # rule 4
            ex = exit_of.get(s)
            if ex is None:
                ex = exit_of[s] = f"fvx{len(exit_of)}"
                exits[ps].append(ex)
                part_edges[ps].append(f'  {s} -> {ex} [arrowhead="none", weight="{PROXY_WEIGHT}"];')
            en = entry_of.get((s, pdd))
            if en is None:
                en = entry_of[(s, pdd)] = f"fve{len(entry_of)}"
                entries[pdd].append(en)
                cross.append((ps, ex, pdd, en, s, d))
            part_edges[pdd].append(f"  {en} -> {d}{_weighted(attrs)};")
    for name in pd.nodes:  # rule 3: nodes without edges (legend, note) go to the first part
        if not any(name in p for p in placed):
            put(name, 0)

    proxy = ' [shape="point", style="invis", width="0.01", height="0.01", fixedsize="true", label=""];'
    dots = []
    for k in range(n_parts):
        out = list(pd.header)
        out.extend(f"  {name} {pd.nodes[name]};" for name in members[k])
        out.extend(f"  {p}{proxy}" for p in exits[k] + entries[k])
        if exits[k]:
            out.append("  { rank=max; " + "; ".join(exits[k]) + "; }")
        if entries[k]:
            out.append("  { rank=min; " + "; ".join(entries[k]) + "; }")
        out.extend(part_edges[k])
        out.append("}")
        dots.append("\n".join(out) + "\n")
    return PartPlan(dots, exits, entries, cross)


@dataclasses.dataclass
class PartLayout:
    """One laid-out part: its SVG, drawing size (points, padding included) and proxy positions."""

    svg: str
    width: float
    height: float
    points: dict[str, tuple[float, float]]  # proxy -> (x, y) in the part's SVG coordinates


def _positions(graph, proxies: Sequence[str]) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """(width, height, proxy points) of a laid-out pygraphviz graph, in SVG coordinates."""
    llx, lly, urx, ury = (float(v) for v in str(graph.graph_attr["bb"]).split(","))
    w, h = urx - llx, ury - lly
    points: dict[str, tuple[float, float]] = {}
    for p in proxies:
        x, y = (float(v) for v in str(graph.get_node(p).attr["pos"]).split(",")[:2])
        points[p] = (x - llx + PAD, h - (y - lly) + PAD)
    return w, h, points


#: Laid-out parts kept (rule 6).
PART_CACHE_SIZE = 256
_PART_CACHE: collections.OrderedDict[str, PartLayout] = collections.OrderedDict()
_PART_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every laid-out part (benchmarks time layouts, not cache hits)."""
    with _PART_CACHE_LOCK:
        _PART_CACHE.clear()


def _part_key(dot: str, proxies: Sequence[str], prog: str) -> str:
    return hashlib.sha1("\0".join((prog, dot, *proxies)).encode("utf-8", "surrogatepass")).hexdigest()


def _cached_part(key: str) -> PartLayout | None:
    with _PART_CACHE_LOCK:
        got = _PART_CACHE.get(key)
        if got is not None:
            _PART_CACHE.move_to_end(key)
        return got


def _keep_part(key: str, part: PartLayout) -> PartLayout:
    with _PART_CACHE_LOCK:
        _PART_CACHE[key] = part
        while len(_PART_CACHE) > PART_CACHE_SIZE:
            _PART_CACHE.popitem(last=False)
    return part


def _layout_here(dot: str, proxies: Sequence[str], prog: str = "dot") -> PartLayout:
    import pygraphviz

    graph = pygraphviz.AGraph(string=dot)
    graph.layout(prog=prog)
    w, h, points = _positions(graph, proxies)
    data = graph.draw(format="svg")
    svg = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
    return PartLayout(svg, w + 2 * PAD, h + 2 * PAD, points)


def layout_part(dot: str, proxies: Sequence[str], prog: str = "dot") -> PartLayout:
    """Lay out one part in this process (pygraphviz) and read where its proxies ended up."""
    key = _part_key(dot, proxies, prog)
    return _cached_part(key) or _keep_part(key, _layout_here(dot, proxies, prog))


class _Worker:
    """One layout worker process (``python -m fusionviz.graphview.parts``): length-prefixed JSON
    jobs on stdin, results on stdout (rule 6). No multiprocessing: nothing of the parent (a
    threaded server, its ``__main__``) is copied or re-imported."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "fusionviz.graphview.parts"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc.poll() is None

    def run(self, dot: str, proxies: Sequence[str], prog: str) -> PartLayout:
        """Lay out one part in the worker."""
        data = json.dumps({"dot": dot, "proxies": list(proxies), "prog": prog}).encode()
        if self.proc.stdin is None or self.proc.stdout is None:
            raise OSError("layout worker has no pipes")
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        reply = _read_frame(self.proc.stdout)
        if reply is None:
            raise OSError("layout worker exited")
        out = json.loads(reply)
        if "error" in out:
            raise RuntimeError(out["error"])
        return PartLayout(out["svg"], out["width"], out["height"],
                          {k: (v[0], v[1]) for k, v in out["points"].items()})

    def close(self) -> None:
        """Stop the worker (it exits when its stdin closes)."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        if self.proc.poll() is None:
            self.proc.kill()


def _read_frame(stream) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    data = stream.read(n)
    return data if len(data) == n else None


def _worker_main() -> None:
    """The worker loop: one job at a time until stdin closes."""
    _quiet_stderr()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        frame = _read_frame(stdin)
        if frame is None:
            return
        job = json.loads(frame)
        try:
            part = _layout_here(job["dot"], job["proxies"], job.get("prog", "dot"))
            out = {"svg": part.svg, "width": part.width, "height": part.height,
                   "points": {k: list(v) for k, v in part.points.items()}}
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which lays out itself
            out = {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(out).encode()
        stdout.write(struct.pack("<I", len(data)) + data)
        stdout.flush()


def _quiet_stderr() -> None:
    """In a worker: Graphviz's C-level warnings ("layout may take a long time") go nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


_IDLE: queue.LifoQueue[_Worker] = queue.LifoQueue()
_STARTED = [0]
_WORKERS_LOCK = threading.Lock()


def layout_workers() -> int:
    """Rule 6: worker processes for part layout (0: lay out in this process)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    raw = os.environ.get("FUSIONVIZ_LAYOUT_WORKERS", "")
    try:
        n = int(raw) if raw.strip() else (min(4, cpus) if cpus >= MIN_CPUS_FOR_WORKERS else 0)
    except ValueError:
        n = 0
    return n if n >= 2 else 0


def _take_worker(limit: int) -> _Worker | None:
    """An idle worker, a new one while fewer than ``limit`` exist, else wait for one."""
    while True:
        try:
            w = _IDLE.get_nowait()
        except queue.Empty:
            with _WORKERS_LOCK:
                if _STARTED[0] < limit:
                    _STARTED[0] += 1
                    try:
                        return _Worker()
                    except OSError:
                        _STARTED[0] -= 1
                        return None
            w = _IDLE.get()
        if w.alive():
            return w
        with _WORKERS_LOCK:
            _STARTED[0] -= 1


def _give_back(w: _Worker) -> None:
    if w.alive():
        _IDLE.put(w)
    else:
        with _WORKERS_LOCK:
            _STARTED[0] -= 1


def warm_up() -> None:
    """Start the layout workers ahead of the first big graph (a new Python takes a moment)."""
    n = layout_workers()
    got = [w for w in (_take_worker(n) for _ in range(n)) if w is not None]
    for w in got:
        _give_back(w)


def _run_job(job: tuple[str, tuple[str, ...], str], limit: int) -> PartLayout:
    key = _part_key(*job)
    got = _cached_part(key)
    if got is not None:
        return got
    w = _take_worker(limit)
    if w is None:
        return _keep_part(key, _layout_here(*job))
    try:
        return _keep_part(key, w.run(*job))
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        logger.info("layout worker failed (%s); laying the part out here", exc)
        w.close()
        return _keep_part(key, _layout_here(*job))
    finally:
        _give_back(w)


def layout_jobs(jobs: Sequence[tuple[str, tuple[str, ...], str]]) -> list[PartLayout]:
    """Lay out (dot, proxies, prog) jobs, in the workers when there are several (rule 6)."""
    workers = layout_workers() if len(jobs) > 1 else 0
    if not workers:
        return [layout_part(*job) for job in jobs]
    order = sorted(range(len(jobs)), key=lambda k: -len(jobs[k][0]))  # biggest first
    results: list[PartLayout | None] = [None] * len(jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        futures = {ex.submit(_run_job, jobs[k], workers): k for k in order}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
    return [r for r in results if r is not None]


def layout_parts(plan: PartPlan, prog: str = "dot") -> list[PartLayout]:
    """Lay out every part of ``plan`` (rule 6)."""
    return layout_jobs([(dot, tuple(plan.exits[k] + plan.entries[k]), prog)
                        for k, dot in enumerate(plan.dots)])


def _part_body(svg: str, k: int) -> str:
    """The drawing of one part without its <svg> wrapper, background or comments (rule 5)."""
    m = _SVG_OPEN.search(svg)
    body = svg[m.end():] if m else svg
    end = body.rfind("</svg>")
    body = body[:end] if end >= 0 else body
    body = _COMMENT.sub("", body)
    body = _GRAPH0.sub(lambda mm: f'<g id="part{k}" class="fv-part" transform="{_part_transform(mm.group(0))}">\n',
                       body, count=1)
    return _GENERIC_ID.sub(lambda mm: f'id="p{k}_{mm.group(1)}{mm.group(2)}"', body)


def _part_transform(graph0: str) -> str:
    m = re.search(r'transform="([^"]*)"', graph0)
    return m.group(1) if m else ""


def _fmt(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


@dataclasses.dataclass
class Arrangement:
    """Where each part goes in the stacked drawing (points, top-left origin), and the joins.

    Attributes:
        xs: left edge of each part.
        ys: top edge of each part.
        width: drawing width.
        height: drawing height.
        joins: (producer DOT name, consumer DOT name, points, cubic curve?): a curve's four
            control points, or a polyline's corners.
    """

    xs: list[float]
    ys: list[float]
    width: float
    height: float
    joins: list[tuple[str, str, list[tuple[float, float]], bool]]


def arrange(plan: PartPlan, parts: Sequence[PartLayout]) -> Arrangement:
    """Rule 5: place the parts; rule 4: the lines that join exits to entries."""
    n = len(parts)
    xs = [0.0] * n
    ys = [0.0] * n
    y = 0.0
    axis = parts[0].width / 2 if parts else 0.0
    slack = max((p.width for p in parts), default=0.0) * DRIFT
    for k, part in enumerate(parts):
        ys[k] = y
        y += part.height + PART_GAP
        if k == 0:
            continue
        offsets = [xs[a] + parts[a].points[ex][0] - parts[k].points[en][0]
                   for a, ex, b, en, _, _ in plan.cross if b == k and a < k]
        x = statistics.median(offsets) if offsets else axis - part.width / 2
        # entries line up under exits, but the drawing may not drift sideways part after part
        centre = min(max(x + part.width / 2, axis - slack), axis + slack)
        xs[k] = centre - part.width / 2
    shift = -min(xs) if xs else 0.0
    xs = [x + shift for x in xs]
    width = max((x + p.width for x, p in zip(xs, parts, strict=True)), default=0.0)
    height = max(0.0, y - PART_GAP)
    lanes: dict[tuple[int, str], float] = {}
    joins: list[tuple[str, str, list[tuple[float, float]], bool]] = []
    for a, ex, b, en, src, dst in plan.cross:
        x1, y1 = xs[a] + parts[a].points[ex][0], ys[a] + parts[a].points[ex][1]
        x2, y2 = xs[b] + parts[b].points[en][0], ys[b] + parts[b].points[en][1]
        if b == a + 1:
            mid = (y1 + y2) / 2
            joins.append((src, dst, [(x1, y1), (x1, mid), (x2, mid), (x2, y2)], True))
        else:  # rule 4: along a lane on the right
            lane = lanes.get((a, ex))
            if lane is None:
                lane = lanes[(a, ex)] = width + LANE_GAP * (len(lanes) + 1)
            ya, yb = y1 + PART_GAP / 2, y2 - PART_GAP / 2
            joins.append((src, dst, [(x1, y1), (x1, ya), (lane, ya), (lane, yb), (x2, yb), (x2, y2)], False))
    if lanes:
        width = max(lanes.values()) + LANE_GAP
    return Arrangement(xs, ys, width, height, joins)


def stack(plan: PartPlan, parts: Sequence[PartLayout], *, partial: str | None = None) -> str:
    """Join laid-out parts into one SVG (rules 4-5); ``partial`` ("k/n") marks a first screen."""
    ar = arrange(plan, parts)
    paths: list[str] = []
    for src, dst, pts, curve in ar.joins:
        f = [f"{_fmt(x)},{_fmt(y)}" for x, y in pts]
        d = f"M{f[0]}C{f[1]} {f[2]} {f[3]}" if curve else "M" + "L".join(f)
        paths.append(f'<g class="edge fv-cross"><title>{src}&#45;&gt;{dst}</title>'
                     f'<path fill="none" stroke="{EDGE_COLOR}" d="{d}"/></g>')
    w, h = _fmt(ar.width), _fmt(ar.height)
    out = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
           f'<svg width="{w}pt" height="{h}pt" viewBox="0.00 0.00 {w} {h}" '
           + (f'data-partial="{partial}" ' if partial else "")
           + 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">',
           '<g id="graph0" class="graph">', "<title>G</title>",
           f'<polygon fill="white" stroke="none" points="0,0 0,{h} {w},{h} {w},0 0,0"/>',
           f'<g class="fv-cross-edges" data-parts="{len(parts)}">', *paths, "</g>"]
    for k, part in enumerate(parts):
        box = f"{_fmt(ar.xs[k])} {_fmt(ar.ys[k])} {_fmt(part.width)} {_fmt(part.height)}"
        out.append(f'<g class="fv-part-slot" data-box="{box}" '
                   f'transform="translate({_fmt(ar.xs[k])} {_fmt(ar.ys[k])})">')
        out.append(_part_body(part.svg, k))
        out.append("</g>")
    out.extend(["</g>", "</svg>", ""])
    return "\n".join(out)


def png_scale(width_pt: float, height_pt: float, *, max_side: int = 16000, max_pixels: float = 64e6,
              dpi: float = 96.0) -> float:
    """Pixels per point for a PNG of a ``width_pt`` x ``height_pt`` drawing: ``dpi``/72, smaller
    when the image would be longer than ``max_side`` or bigger than ``max_pixels``."""
    w, h = max(width_pt, 1.0), max(height_pt, 1.0)
    return max(0.02, min(dpi / 72.0, max_side / max(w, h), (max_pixels / (w * h)) ** 0.5))


def _bezier(pts: Sequence[tuple[float, float]], steps: int = 16) -> list[tuple[float, float]]:
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = pts
    out = []
    for i in range(steps + 1):
        t = i / steps
        u = 1 - t
        out.append((u**3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t**3 * x3,
                    u**3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t**3 * y3))
    return out


def png_by_parts(pd: ParsedDot, prog: str = "dot", part_items: int | None = None, *, max_side: int = 16000,
                 max_pixels: float = 64e6, whole: bool = False) -> bytes:
    """A PNG of ``pd``: parts laid out here, drawn by Graphviz at one scale, pasted together
    (Pillow), joins drawn as lines. ``whole`` lays the graph out in one piece."""
    import io

    import pygraphviz
    from PIL import Image, ImageDraw

    plan = plan_parts(pd, 10**9 if whole else part_items)
    graphs = []
    layouts = []
    for k, dot in enumerate(plan.dots):
        g = pygraphviz.AGraph(string=dot)
        g.layout(prog=prog)
        w, h, pts = _positions(g, plan.exits[k] + plan.entries[k])
        graphs.append(g)
        layouts.append(PartLayout("", w + 2 * PAD, h + 2 * PAD, pts))
    ar = arrange(plan, layouts)
    s = png_scale(ar.width, ar.height, max_side=max_side, max_pixels=max_pixels)
    canvas = Image.new("RGB", (max(1, round(ar.width * s)), max(1, round(ar.height * s))), "white")
    draw = ImageDraw.Draw(canvas)
    line_w = max(1, round(s))
    for _, _, pts, curve in ar.joins:
        seq = _bezier(pts) if curve else pts
        draw.line([(x * s, y * s) for x, y in seq], fill=EDGE_COLOR, width=line_w)
    for k, g in enumerate(graphs):
        g.graph_attr["dpi"] = f"{72 * s:.3f}"
        g.graph_attr["pad"] = f"{PAD / 72:.4f}"
        data = g.draw(format="png")
        with Image.open(io.BytesIO(data)) as img:
            part = img.convert("RGBA")
        canvas.paste(part, (round(ar.xs[k] * s), round(ar.ys[k] * s)), part)
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    return buf.getvalue()


def svg_first(pd: ParsedDot, prog: str = "dot", part_items: int | None = None, *, min_height: float = 1600.0,
              max_parts: int = 4) -> str | None:
    """Rule 7: the first parts of ``pd`` (at least ``min_height`` points tall, at most
    ``max_parts``) as one SVG marked ``data-partial="k/n"``; None when that would be the whole."""
    plan = plan_parts(pd, part_items)
    n = len(plan.dots)
    if n <= max_parts:
        return None
    laid: list[PartLayout] = []
    height = 0.0
    for k in range(max_parts):
        laid.append(layout_part(plan.dots[k], tuple(plan.exits[k] + plan.entries[k]), prog))
        height += laid[-1].height + PART_GAP
        if height >= min_height:
            break
    k = len(laid)
    sub = PartPlan(plan.dots[:k], plan.exits[:k], plan.entries[:k],
                   [c for c in plan.cross if c[0] < k and c[2] < k])
    return stack(sub, laid, partial=f"{k}/{n}")


def svg_by_parts(pd: ParsedDot, prog: str = "dot", part_items: int | None = None) -> str:
    """Lay out ``pd`` part by part and return one stacked SVG (rules 2-6)."""
    plan = plan_parts(pd, part_items)
    parts = layout_parts(plan, prog)
    logger.info("laid out %d op nodes in %d parts", pd.op_count, len(parts))
    return stack(plan, parts)


if __name__ == "__main__":
    _worker_main()
