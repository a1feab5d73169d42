"""The static plan of activation memory over the execution order (rules of
:mod:`fusionviz.analysis`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz.analysis.tensors import (
    _bodies,
    _body_keys,
    _execution_order,
    _subgraph_reads,
    _TensorInfo,
    infer_tensor_info,
)
from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- memory plan


@dataclasses.dataclass(frozen=True)
class TensorLife:
    """One activation in the static plan.

    Attributes:
        name: tensor name.
        bytes: size in bytes (0 when unknown).
        start: execution step that produces it.
        end: last step that reads it (inclusive).
        op_type: op of the producing node.
        shape: inferred shape, or None when unknown.
        is_output: True for graph outputs.
        body: the path of the control-flow body it lives in ("" in the main graph; rule 6).
    """

    name: str
    bytes: int
    start: int
    end: int
    op_type: str = ""
    shape: tuple[int, ...] | None = None
    is_output: bool = False
    body: str = ""

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape) if self.shape is not None else None
        return d


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Static plan of activation memory over the execution order (rules 1-5)."""

    tensors: tuple[TensorLife, ...]
    sum_intermediate_bytes: int
    peak_bytes_no_reuse: int
    peak_bytes_reuse: int
    weight_bytes: int
    input_bytes: int
    steps: int
    live_bytes: tuple[int, ...]
    unknown_tensors: int

    @property
    def peak_step(self) -> int:
        return int(np.argmax(self.live_bytes)) if self.live_bytes else 0

    def as_dict(self, *, tensors: bool = False) -> dict:
        d = {
            "sum_intermediate_bytes": self.sum_intermediate_bytes,
            "peak_bytes_no_reuse": self.peak_bytes_no_reuse,
            "peak_bytes_reuse": self.peak_bytes_reuse,
            "weight_bytes": self.weight_bytes,
            "input_bytes": self.input_bytes,
            "steps": self.steps,
            "peak_step": self.peak_step,
            "unknown_tensors": self.unknown_tensors,
            "tensor_count": len(self.tensors),
        }
        if tensors:
            d["tensors"] = [t.as_dict() for t in self.tensors]
            d["live_bytes"] = list(self.live_bytes)
        return d


def _weight_bytes(model: onnx.ModelProto) -> int:
    """Initializers and Constant tensors of the main graph and of every body (rule 6)."""
    total = 0
    for g in proto_graphs(model.graph):
        for t in g.initializer:
            ti = _TensorInfo(tuple(int(d) for d in t.dims), t.data_type)
            total += ti.nbytes or 0
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        total += _TensorInfo(tuple(int(d) for d in a.t.dims), a.t.data_type).nbytes or 0
    return total


@dataclasses.dataclass
class _GraphPlan:
    """The plan of one graph (steps local to it): its tensors, live bytes per step, unknowns."""

    tensors: list[TensorLife]
    live: np.ndarray
    unknown: int

    @property
    def peak(self) -> int:
        return int(self.live.max()) if self.live.size else 0


#: Bodies nested deeper than this are not planned (a hostile model can nest without end).
MAX_BODY_DEPTH = 32


def _plan_graph(g: onnx.GraphProto, info: Mapping[str, _TensorInfo], prefix: str = "",
                depth: int = 0) -> _GraphPlan:
    """Rules 1-6 for one graph; ``prefix`` is its body path ("" for the main graph)."""
    order = _execution_order(g)
    steps = len(order)
    outputs = {o.name for o in g.output}
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    op_of: dict[str, str] = {}
    body_at: dict[int, list[_GraphPlan]] = {}
    keys = None
    for t, n in enumerate(order):
        reads = set(n.input) | _subgraph_reads(n)
        for x in reads:  # rule 3: last reader
            if x in start:
                end[x] = max(end.get(x, t), t)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue  # rule 2: weights
        for o in n.output:
            if o and o not in start:
                start[o] = t
                end[o] = t
                op_of[o] = n.op_type
        bodies = _bodies(n) if depth < MAX_BODY_DEPTH else []
        if bodies:  # rule 6
            if keys is None:
                keys = dict(zip(map(id, g.node), _body_keys(g), strict=True))
            key = keys.get(id(n), n.name)
            plans = [_plan_graph(b, info, f"{prefix}/{key}/{seg}" if prefix else f"{key}/{seg}", depth + 1)
                     for seg, b in bodies]
            if n.op_type == "If" and n.domain in ("", "ai.onnx"):
                plans = [max(plans, key=lambda p: p.peak)]  # first of equals: then_branch
            body_at[t] = plans
    last = max(steps - 1, 0)
    tensors: list[TensorLife] = []
    unknown = 0
    for name, s in start.items():
        e = last if name in outputs else end[name]
        ti = info.get(name)
        nbytes = ti.nbytes if ti is not None else None
        if nbytes is None:
            unknown += 1  # rule 5
        tensors.append(TensorLife(name, int(nbytes or 0), s, e, op_of.get(name, ""),
                                  ti.dims if ti is not None else None, name in outputs, prefix))
    diff = np.zeros(steps + 1, dtype=np.int64)
    for tl in tensors:
        diff[tl.start] += tl.bytes
        diff[tl.end + 1] -= tl.bytes
    for t, plans in body_at.items():  # rule 6: a body lives within its node's step
        for p in plans:
            diff[t] += p.peak
            diff[t + 1] -= p.peak
            unknown += p.unknown
            tensors.extend(dataclasses.replace(tl, start=t, end=t, is_output=False) for tl in p.tensors)
    live = np.cumsum(diff)[:steps] if steps else np.zeros(0, dtype=np.int64)
    return _GraphPlan(tensors, live, unknown)


def memory_plan(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None) -> MemoryPlan:
    """Static activation-memory plan of the model, bodies included (see the module rules 1-6).

    Args:
        model: the model.
        shapes: input shape overrides (as ``--shape``).

    Returns:
        A :class:`MemoryPlan`.
    """
    info = infer_tensor_info(model, shapes)
    plan = _plan_graph(model.graph, info)
    tensors, live = plan.tensors, plan.live
    inits = {t.name for t in model.graph.initializer}
    from fusionviz.inputs import graph_inputs

    input_bytes = 0
    for vi in graph_inputs(model):
        ti = info.get(vi.name)
        input_bytes += (ti.nbytes or 0) if ti is not None and vi.name not in inits else 0
    return MemoryPlan(
        tensors=tuple(tensors),
        sum_intermediate_bytes=int(sum(t.bytes for t in tensors if not t.is_output)),
        peak_bytes_no_reuse=int(sum(t.bytes for t in tensors)),
        peak_bytes_reuse=int(live.max()) if live.size else 0,
        weight_bytes=_weight_bytes(model),
        input_bytes=int(input_bytes),
        steps=len(live),
        live_bytes=tuple(int(x) for x in live),
        unknown_tensors=plan.unknown,
    )
