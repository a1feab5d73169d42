"""Per-tensor comparison of two models: where inside the graph the outputs start to differ.

:mod:`fusionviz.verify` says *which output* of the optimized model differs; this module says
*where the error starts*. Model A (e.g. the original) and model B (an optimized variant, or a
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

import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.graphview.model_graph import SOURCES_KEY, node_keys
from fusionviz.inputs import InputPlan, InputSpec, plan_inputs
from fusionviz.verify import DEFAULT_ATOL, DEFAULT_RTOL, OutputDiff

logger = logging.getLogger(__name__)

#: Chunk bounds (rule 7): tensors per run, and MB of (inferred) tensor bytes per run.
DEFAULT_CHUNK_TENSORS = 400
DEFAULT_CHUNK_MB = 256.0
#: The domain of onnxruntime's blocked-layout kernels (rule 4).
NCHWC_DOMAIN = "com.microsoft.nchwc"
#: Why a Reshape's shape argument is not compared (rule 6).
RESHAPE_TARGET = "a Reshape's shape argument (-1 or 0 may stand for a dim): compared through the Reshape's output"
#: A row's status: compared (rules 2-5), unmatched (rule 3), skipped or incomparable (rule 6).
STATUSES = ("compared", "unmatched", "skipped", "incomparable")
#: Steps of the error heat scale drawn on the Graph page (upper bound of max rel, legend label).
ERROR_SCALE: tuple[tuple[float, str], ...] = (
    (1e-6, "≤ 1e-6"), (1e-5, "≤ 1e-5"), (1e-4, "≤ 1e-4"), (1e-3, "≤ 1e-3"), (1e-2, "≤ 1e-2"),
    (math.inf, "> 1e-2"),
)


# ------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class TensorPair:
    """What tensor of B one tensor of A is compared with (rules 1-4).

    Attributes:
        index: position in A's order (rule 1).
        name: the tensor in A.
        node_a: key of its producing node in A (the node name, ``#i`` when unnamed).
        op_a: that node's op type.
        b_name: the tensor of B it is compared with (None: unmatched).
        node_b: key of B's producing node ("" when B holds it as an initializer or input).
        op_b: that node's op type, or "initializer" / "input".
        how: "name" (rule 2), "provenance" (rule 3), or "" (unmatched).
        note: why it is unmatched (absorbed into which node of B, or removed).
        is_output: a graph output of A.
        nbytes: its size in bytes from shape inference (0: unknown).
        blocked_a: A holds it in the blocked NCHWc layout (rule 4).
        blocked_b: B holds it so.
        skip: why it is not run at all (rule 6: a Reshape's shape argument), else "".
    """

    index: int
    name: str
    node_a: str
    op_a: str
    b_name: str | None = None
    node_b: str = ""
    op_b: str = ""
    how: str = ""
    note: str = ""
    is_output: bool = False
    nbytes: int = 0
    blocked_a: bool = False
    blocked_b: bool = False
    skip: str = ""


@dataclasses.dataclass(frozen=True)
class TensorRow:
    """One tensor of A and how it compares (rules 5-6).

    Attributes:
        pair: the match.
        status: "compared", "unmatched", "skipped" (non-numeric) or "incomparable" (shapes or
            kinds of element differ).
        diff: the figures and verdict (``compared`` only), as ``verify`` gives them for outputs.
        note: why it was not compared.
    """

    pair: TensorPair
    status: str
    diff: OutputDiff | None = None
    note: str = ""

    @property
    def compared(self) -> bool:
        return self.status == "compared" and self.diff is not None

    @property
    def ok(self) -> bool:
        """Within tolerance (rows not compared count as ok: nothing was found)."""
        return not self.compared or self.diff.ok

    @property
    def max_rel(self) -> float:
        return self.diff.max_rel_diff if self.compared else 0.0

    @property
    def max_abs(self) -> float:
        return self.diff.max_abs_diff if self.compared else 0.0

    @property
    def new_nonfinite(self) -> int:
        return self.diff.new_nonfinite if self.compared else 0

    def where(self, a_label: str = "A", b_label: str = "B") -> str:
        """ "Conv conv1 in A, FusedConv conv1 in B" (the producing nodes, rule 8)."""
        p = self.pair
        b = f"{p.op_b} {p.node_b}".strip() if p.node_b else (p.op_b or "nothing")
        return f"{p.op_a} {p.node_a} in {a_label}, {b} in {b_label}"

    def figures(self) -> str:
        if not self.compared:
            return self.note or self.status
        d = self.diff
        text = f"max rel {d.max_rel_diff:.2g}, max abs {d.max_abs_diff:.2g}, cosine {d.cosine:.6f}"
        if d.new_nonfinite:
            text += f", {d.new_nonfinite} new NaN/Inf"
        return text

    def as_dict(self) -> dict:
        p = self.pair
        d = self.diff
        return {
            "index": p.index, "tensor": p.name, "node_a": p.node_a, "op_a": p.op_a,
            "tensor_b": p.b_name, "node_b": p.node_b, "op_b": p.op_b, "match": p.how,
            "status": self.status, "note": self.note, "is_output": p.is_output,
            "shape": list(d.shape) if d is not None else None,
            "max_abs": _num(d.max_abs_diff) if d is not None else None,
            "max_rel": _num(d.max_rel_diff) if d is not None else None,
            "cosine": _num(d.cosine) if d is not None else None,
            "new_nonfinite": d.new_nonfinite if d is not None else 0,
            "mismatches": d.mismatches if d is not None else 0,
            "size": d.size if d is not None else 0,
            "floor": _num(d.floor) if d is not None else None,
            "ok": self.ok,
        }


def _num(x: float) -> float | str:
    """JSON has no inf/NaN: they are written as strings."""
    return x if math.isfinite(x) else str(x)


@dataclasses.dataclass(frozen=True)
class CompareResult:
    """Every tensor of A compared with B (rules 1-8), in A's order.

    Attributes:
        rows: one per tensor of A (rule 1), in A's order.
        input_set: the input set both models ran on.
        rtol, atol: the tolerance (``verify``'s).
        runs: how many chunks (runs per model) it took (rule 7).
        seconds: wall time.
        notes: what was not compared and why, in sentences (rules 1, 6).
        labels: how A and B are named in sentences.
    """

    rows: tuple[TensorRow, ...]
    input_set: str
    rtol: float
    atol: float
    runs: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    labels: tuple[str, str] = ("A", "B")

    @property
    def first_divergence(self) -> TensorRow | None:
        """Rule 8: the first tensor in A's order beyond tolerance."""
        return next((r for r in self.rows if not r.ok), None)

    @property
    def compared(self) -> list[TensorRow]:
        return [r for r in self.rows if r.compared]

    def counts(self) -> dict[str, int]:
        c = Counter(r.status for r in self.rows)
        out = {s: c.get(s, 0) for s in STATUSES}
        out["by_name"] = sum(1 for r in self.rows if r.compared and r.pair.how == "name")
        out["through_provenance"] = sum(1 for r in self.rows if r.compared and r.pair.how == "provenance")
        out["beyond_tolerance"] = sum(1 for r in self.rows if not r.ok)
        return out

    def top(self, n: int) -> list[TensorRow]:
        """The ``n`` compared tensors with the largest max rel error (those beyond tolerance first,
        then new NaN/Inf)."""
        rows = self.compared
        rows.sort(key=lambda r: (not r.ok, r.new_nonfinite > 0, _sort_value(r.max_rel), _sort_value(r.max_abs)),
                  reverse=True)
        return rows[:max(0, n)]

    def largest(self) -> TensorRow | None:
        got = self.top(1)
        return got[0] if got else None

    def divergence_line(self) -> str:
        """One line: the first tensor beyond tolerance and where, or that none is."""
        a, b = self.labels
        first = self.first_divergence
        if first is not None:
            d = first.diff
            what = f"max rel {d.max_rel_diff:.2g}"
            if d.new_nonfinite:
                what += f", {d.new_nonfinite} new NaN/Inf"
            return f"first tensor beyond tolerance: {first.pair.name} ({first.where(a, b)}), {what}"
        n = len(self.compared)
        return (f"no tensor beyond tolerance: {n:,} compared (rtol {self.rtol:g}, atol {self.atol:g} "
                "+ noise floor)")

    def node_values(self, side: str = "b") -> tuple[tuple[str, float], ...]:
        """(node key, largest max rel of its compared outputs) for one side, NaN where a new
        NaN/Inf appears: ``graphview.RenderOptions.node_values`` of the Graph page's overlay."""
        out: dict[str, float] = {}
        for r in self.compared:
            key = r.pair.node_b if side == "b" else r.pair.node_a
            if not key:
                continue
            v = math.nan if r.new_nonfinite else r.max_rel
            old = out.get(key)
            if old is None or math.isnan(v) or (not math.isnan(old) and v > old):
                out[key] = v
        return tuple(out.items())

    def as_dict(self) -> dict:
        first = self.first_divergence
        return {
            "labels": list(self.labels),
            "input_set": self.input_set,
            "rtol": self.rtol,
            "atol": self.atol,
            "runs": self.runs,
            "seconds": round(self.seconds, 3),
            "counts": self.counts(),
            "notes": list(self.notes),
            "first_divergence": first.as_dict() if first is not None else None,
            "summary": self.divergence_line(),
            "rows": [r.as_dict() for r in self.rows],
        }


def _sort_value(x: float) -> float:
    return math.inf if math.isnan(x) else x


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


def chunks(pairs: Sequence[TensorPair], max_tensors: int = DEFAULT_CHUNK_TENSORS,
           max_mb: float = DEFAULT_CHUNK_MB) -> list[list[TensorPair]]:
    """Rule 7: matched pairs in A's order, cut into runs of at most ``max_tensors`` tensors and
    ``max_mb`` MB (a tensor bigger than that alone is a run of its own; unknown sizes count 0)."""
    budget = max(0.0, float(max_mb)) * 1024 * 1024
    cap = max(1, int(max_tensors))
    out: list[list[TensorPair]] = []
    cur: list[TensorPair] = []
    used = 0
    for p in pairs:
        if cur and (len(cur) >= cap or used + p.nbytes > budget):
            out.append(cur)
            cur, used = [], 0
        cur.append(p)
        used += p.nbytes
    if cur:
        out.append(cur)
    return out


# ------------------------------------------------------------------ one run (rules 4-6)


def _with_outputs(data: bytes, names: Sequence[str]) -> onnx.ModelProto:
    """The model with exactly ``names`` as its graph outputs (types where the model says them).
    Weights on disk (``fusionviz.model_io`` rule 9) stay there: the model names their folder."""
    m = onnx.load_from_string(data)
    g = m.graph
    known = {v.name: v for v in [*g.value_info, *g.output, *g.input]}
    del g.output[:]
    for name in dict.fromkeys(names):
        vi = onnx.ValueInfoProto()
        if name in known and known[name].type.HasField("tensor_type"):
            vi.CopyFrom(known[name])
        else:
            vi.name = name  # onnxruntime infers the type
        g.output.append(vi)
    return m


_BLOCK: list[int] = []


def nchwc_block_size() -> int:
    """onnxruntime's NCHWc block size on this CPU (a ReorderInput of 4 channels pads to it)."""
    if not _BLOCK:
        from onnx import helper as oh

        from fusionviz.verify import make_session, run_model

        f = onnx.TensorProto.FLOAT
        g = oh.make_graph([oh.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)], "block",
                          [oh.make_tensor_value_info("x", f, [1, 4, 1, 1])], [oh.make_tensor_value_info("y", f, None)])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(NCHWC_DOMAIN, 1)])
        y = run_model(make_session(m), {"x": np.zeros((1, 4, 1, 1), np.float32)})["y"]
        _BLOCK.append(int(y.shape[1]))
    return _BLOCK[0]


def unblock(raw: np.ndarray, channels: int, block: int) -> np.ndarray | None:
    """Rule 4: an NCHWc tensor (reported as ``[N, C padded, H, W]``, stored ``[N, C/b, H, W, b]``)
    as NCHW with ``channels`` channels; None when the shapes do not allow it."""
    if raw.ndim != 4 or block < 1 or raw.shape[1] % block or channels > raw.shape[1]:
        return None
    n, cp, h, w = raw.shape
    plain = raw.reshape(n, cp // block, h, w, block).transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)
    return np.ascontiguousarray(plain[:, :channels])


def _is_numeric(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype != object and (np.issubdtype(v.dtype, np.number)
                                                                or v.dtype == np.bool_)


def _is_float(v: np.ndarray) -> bool:
    return bool(np.issubdtype(v.dtype, np.inexact))


def _kind(v) -> str:
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    if v is None:
        return "optional (empty)"
    if isinstance(v, np.ndarray):
        return f"tensor({v.dtype})" if v.dtype != object else "tensor(string)"
    return type(v).__name__


def run_chunk_here(a: bytes, b: bytes, feeds: Mapping[str, np.ndarray], items: Sequence[tuple],
                   rtol: float, atol: float, input_set: str) -> list[tuple[str, OutputDiff | None, str]]:
    """One run (rules 4-6) in this process (the verification child calls it too).

    Args:
        a, b: the two models, serialized.
        feeds: one input set.
        items: ``(a_name, b_name, is_output, blocked_a, blocked_b)`` per tensor.
        rtol, atol, input_set: as :func:`fusionviz.verify.compare` takes them.

    Returns:
        Per item ``(status, diff, note)``.

    Raises:
        fusionviz.errors.RuntimeLoadError: A or B cannot load or run with the tensors exposed.
    """
    from fusionviz.model_io import weights_dir
    from fusionviz.verify import compare, make_session, reference_noise, run_model

    a_names = [it[0] for it in items]
    b_names = [it[1] for it in items]
    ma = _with_outputs(a, a_names)
    folder_a = weights_dir(ma)
    try:
        ra = run_model(make_session(ma), feeds)
    except errors.FusionvizError as exc:
        raise errors.RuntimeLoadError(f"model A does not run on input set '{input_set}' with its "
                                      f"tensors exposed: {_strip(exc)}") from None
    noise: dict[str, float] = {}
    try:  # rule 5: onnxruntime's own level all, these tensors exposed
        noise = reference_noise(_numeric(ra), _numeric(run_model(make_session(ma, level="all"), feeds)))
    except errors.FusionvizError:
        noise = {}
    outputs = [it[0] for it in items if it[2]]
    if outputs:  # rule 5: A's graph outputs get verify's own floor
        try:
            natural = run_model(make_session(a, level="all", weights_dir=folder_a), feeds)
            noise.update(reference_noise(_numeric({o: ra[o] for o in outputs}), _numeric(natural)))
        except errors.FusionvizError:
            for o in outputs:
                noise.pop(o, None)
    del ma
    try:
        rb = run_model(make_session(_with_outputs(b, b_names)), feeds)
    except errors.FusionvizError as exc:
        raise errors.RuntimeLoadError(f"model B fails on input set '{input_set}' where A runs, with its "
                                      f"tensors exposed: {_strip(exc)}") from None
    block = nchwc_block_size() if any(it[3] or it[4] for it in items) else 0
    out: list[tuple[str, OutputDiff | None, str]] = []
    for a_name, b_name, is_output, blocked_a, blocked_b in items:
        x, y = ra.get(a_name), rb.get(b_name)
        if not (_is_numeric(x) and _is_numeric(y)):
            out.append(("skipped", None, f"not a numeric tensor ({_kind(x)} in A, {_kind(y)} in B)"))
            continue
        if blocked_a != blocked_b:  # rule 4
            raw, other = (x, y) if blocked_a else (y, x)
            plain = unblock(raw, int(other.shape[1]) if other.ndim == 4 else -1, block)
            if plain is None:
                out.append(("incomparable", None, f"blocked NCHWc layout {list(raw.shape)} cannot be matched "
                                           f"with {list(other.shape)}"))
                continue
            x, y = (plain, y) if blocked_a else (x, plain)
        if not is_output and x.shape != y.shape:  # rule 6
            out.append(("incomparable", None, f"shape {list(x.shape)} in A, {list(y.shape)} in B"))
            continue
        if not is_output and _is_float(x) != _is_float(y):
            out.append(("incomparable", None, f"{x.dtype} in A, {y.dtype} in B"))
            continue
        out.append(("compared", compare(x, y, a_name, rtol=rtol, atol=atol, input_set=input_set,
                                        noise=noise.get(a_name, 0.0)), ""))
    return out


def _numeric(outs: Mapping[str, object]) -> dict[str, np.ndarray]:
    return {k: v for k, v in outs.items() if _is_numeric(v)}


def _strip(exc: Exception) -> str:
    return str(exc).replace("onnxruntime failed to run the model: ", "").replace(
        "onnxruntime cannot load the model: ", "cannot load: ")


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
