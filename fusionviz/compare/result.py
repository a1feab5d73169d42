"""The per-tensor comparison's records: a matched pair, its row, the whole result (rules 5-8 of
:mod:`fusionviz.compare`)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from fusionviz.verify import OutputDiff

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
