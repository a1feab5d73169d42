"""Static analysis: FLOPs/MACs/parameters per node, and the static memory plan.

Shapes come from onnx shape inference (with data propagation) after the graph inputs are fixed
the same way :func:`fusionviz.inputs.make_inputs` fixes them (``shapes`` overrides, then the
defaults for symbolic dims), so the plan describes the very inputs the benchmark feeds.

**Memory plan rules** (numbered; the code points back to them):

1. Execution order is the graph's node order when it is topological (ONNX requires it), else a
   stable topological sort.
2. An *activation* is a named output of a node other than ``Constant`` (Constant outputs are
   weights, as onnxruntime makes them initializers). Graph inputs are not activations.
3. A tensor is live from the step that produces it to the last step that reads it (a read inside
   a node's subgraph counts as a read by that node); a graph output stays live to the last step;
   an output nobody reads lives only at its own step.
4. ``sum_intermediate_bytes``: bytes of the activations that are not graph outputs (what fusion
   removes). ``peak_bytes_no_reuse``: every activation in its own buffer (the sum of all
   activation bytes, graph outputs included). ``peak_bytes_reuse``: the most bytes live at any one
   step, which is what an allocator that reuses dead buffers (or works in place) needs.
5. A tensor whose shape or type inference cannot give is counted in ``unknown_tensors`` and
   contributes 0 bytes; the figures are then lower bounds.
6. Control-flow bodies (If/Loop/Scan subgraphs) are planned the same way, and their tensors are
   live during the step of the node that holds them: an If counts its larger branch (by its
   peak; the branch not taken allocates nothing), a Loop or Scan its body once (one iteration's
   buffers, reused by the next), at any nesting depth. The body's peak adds to that step's live
   bytes; its tensors join ``tensors`` with ``body`` set to the body's path (``If_0/then_branch``,
   as ``graphview.bodies`` names it). Weights of every body count in ``weight_bytes`` (a runtime
   loads both branches). FLOPs follow the same choice: an If costs its larger branch, a Loop one
   iteration of its body.

**Cost conventions:** a MAC is one multiply-add; FLOPs count 2 per MAC plus one per element for
bias, activation, element-wise, normalization (BatchNorm 2, LayerNorm-family 5, Softmax 3 per
element) and reduction/pooling work. Ops that only move data cost 0.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)

_ELEMENTWISE = frozenset(
    """Add Sub Mul Div Relu LeakyRelu Sigmoid Tanh Erf Exp Log Sqrt Pow Neg Abs Clip HardSigmoid
    HardSwish Gelu FastGelu BiasGelu QuickGelu Softplus Softsign Max Min Where Reciprocal PRelu Elu
    Selu Mish Sin Cos Floor Ceil Round Sign Equal Greater Less GreaterOrEqual LessOrEqual Not And
    Or Xor Mod Sum Mean ThresholdedRelu Celu BiasAdd""".split()
)
_NORM5 = frozenset(
    "LayerNormalization SkipLayerNormalization SimplifiedLayerNormalization "
    "SkipSimplifiedLayerNormalization RMSNormalization InstanceNormalization GroupNormalization".split()
)
_REDUCE = frozenset(
    "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare "
    "ReduceLogSumExp GlobalAveragePool GlobalMaxPool ArgMax ArgMin".split()
)
_CONV = frozenset("Conv FusedConv ConvInteger QLinearConv NhwcConv".split())
_MATMUL = frozenset("MatMul FusedMatMul MatMulInteger QLinearMatMul".split())
_GEMM = frozenset(["Gemm", "FusedGemm"])


# --------------------------------------------------------------------------- shapes


@dataclasses.dataclass(frozen=True)
class _TensorInfo:
    dims: tuple[int, ...] | None
    elem_type: int

    @property
    def numel(self) -> int | None:
        if self.dims is None:
            return None
        return int(np.prod(self.dims, dtype=np.int64)) if self.dims else 1

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        size = _itemsize(self.elem_type)
        if n is None or size is None:
            return None
        return n * size


def _itemsize(elem_type: int) -> int | None:
    if elem_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    if elem_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
        return 1
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except Exception:  # noqa: BLE001 - exotic types (float8 on old numpy...)
        return 1


def _vi_info(vi: onnx.ValueInfoProto) -> _TensorInfo | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return _TensorInfo(None, tt.elem_type)
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            return _TensorInfo(None, tt.elem_type)
    return _TensorInfo(tuple(dims), tt.elem_type)


def _fixed_inputs(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None) -> onnx.ModelProto:
    from fusionviz.inputs import graph_inputs, resolve_dims

    m = onnx.ModelProto()
    m.CopyFrom(model)
    real = {vi.name for vi in graph_inputs(m)}
    for vi in m.graph.input:
        if vi.name not in real or not vi.type.HasField("tensor_type"):
            continue
        try:
            dims = resolve_dims(vi, shapes)
        except Exception:  # noqa: BLE001 - no shape declared: leave it to inference
            continue
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return m


# onnxruntime contrib ops that onnx shape inference does not know, and the standard op whose
# shape/type result is the same (outputs beyond the first are left unknown unless listed).
_SAME_AS_INPUT0 = frozenset(
    "Gelu FastGelu BiasGelu QuickGelu BiasSoftmax BiasAdd SkipLayerNormalization "
    "SkipSimplifiedLayerNormalization SimplifiedLayerNormalization "
    # Self-attention: output 0 is (batch, seq, v_hidden), the query's shape whenever the value
    # hidden size equals the input's (every BERT/GPT block fusionviz makes), so the attention
    # output is sized without onnxruntime's (slow) symbolic inference when shapes are static.
    "Attention MultiHeadAttention".split()
)
_STANDARD_TWIN = {"FusedConv": "Conv", "FusedGemm": "Gemm", "NhwcConv": None}
_TWIN_DROP_ATTRS = frozenset({"activation", "activation_params"})


def _shape_proxy(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite known contrib ops into standard ones with the same output shapes (in place, on a copy).

    ``FusedConv``/``FusedGemm`` become ``Conv``/``Gemm`` (activation attributes dropped); ``FusedMatMul``
    without transposes becomes ``MatMul``; element-wise and normalization contrib ops become
    ``Identity`` of their first input for the outputs that have its shape.
    """
    g = model.graph
    changed = False
    new_nodes = []
    for n in g.node:
        if n.domain != "com.microsoft":
            new_nodes.append(n)
            continue
        twin = _STANDARD_TWIN.get(n.op_type)
        if twin:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.domain = ""
            c.op_type = twin
            keep = [a for a in c.attribute if a.name not in _TWIN_DROP_ATTRS]
            del c.attribute[:]
            c.attribute.extend(keep)
            if twin == "Conv":
                del c.input[3:]  # FusedConv's optional Z (sum) input
            new_nodes.append(c)
            changed = True
        elif n.op_type == "FusedMatMul" and not any(
            a.name in ("transA", "transB", "transBatchA", "transBatchB") and a.i for a in n.attribute
        ):
            new_nodes.append(onnx.helper.make_node("MatMul", list(n.input[:2]), [n.output[0]], name=n.name))
            changed = True
        elif n.op_type in _SAME_AS_INPUT0 and n.input:
            idx = [0, 3] if n.op_type.startswith("Skip") else [0]
            for i in idx:
                if i < len(n.output) and n.output[i]:
                    new_nodes.append(onnx.helper.make_node("Identity", [n.input[0]], [n.output[i]],
                                                           name=f"{n.name}__shape{i}"))
            changed = True
        else:
            new_nodes.append(n)
    if changed:
        del g.node[:]
        g.node.extend(new_nodes)
    return model


def infer_tensor_info(model: onnx.ModelProto,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, _TensorInfo]:
    """Shapes and element types of every value onnx shape inference can give (inputs fixed).

    Known onnxruntime contrib ops are inferred through a standard twin (see :func:`_shape_proxy`).
    """
    m = _shape_proxy(_fixed_inputs(model, shapes))
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - inference is best effort; unknowns are reported
        logger.info("shape inference failed: %s", exc)
    info = _collect(m)
    if any(o and (o not in info or info[o].dims is None) for n in m.graph.node for o in n.output):
        # onnx's data propagation gives up on some shape arithmetic (Slice of computed ends...);
        # onnxruntime's symbolic inference (needs sympy) often gets them. Fill gaps only.
        try:
            from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

            # Not SymbolicShapeInference.infer_shapes(): on partial success it saves
            # 'sym_shape_infer_temp.onnx' (+ external data) into the current directory. Run its
            # steps ourselves and keep whatever it inferred; nothing is written.
            engine = SymbolicShapeInference(2**31 - 1, True, False, 0)
            engine._preprocess(_shape_proxy(_fixed_inputs(model, shapes)))
            while engine.run_:
                engine._infer_impl()
            engine._update_output_from_vi()
            sym = engine.out_mp_
            for name, ti in _collect(sym).items():
                if ti.dims is not None and (name not in info or info[name].dims is None):
                    info[name] = ti
        except Exception as exc:  # noqa: BLE001 - best effort
            logger.info("symbolic shape inference failed: %s", exc)
    return info


def _collect(m: onnx.ModelProto) -> dict[str, _TensorInfo]:
    """Shapes and types of the main graph and of every body (names are unique model-wide)."""
    info: dict[str, _TensorInfo] = {}
    for g in proto_graphs(m.graph):
        for t in g.initializer:
            info[t.name] = _TensorInfo(tuple(int(d) for d in t.dims), t.data_type)
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            ti = _vi_info(vi)
            if ti is not None and (ti.dims is not None or vi.name not in info):
                info[vi.name] = ti
        for n in g.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        info[n.output[0]] = _TensorInfo(tuple(int(d) for d in a.t.dims), a.t.data_type)
    return info


#: Bodies listed first, in this order; others follow in the node's attribute order.
_BODY_ORDER = {"then_branch": 0, "else_branch": 1, "body": 2}


def _bodies(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """(attribute segment, graph) for every body ``node`` holds (``graphview.bodies`` rule 1)."""
    out: list[tuple[str, onnx.GraphProto]] = []
    for a in sorted(node.attribute, key=lambda a: _BODY_ORDER.get(a.name, len(_BODY_ORDER))):
        if a.type == onnx.AttributeProto.GRAPH:
            out.append((a.name, a.g))
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend((f"{a.name}[{i}]", g) for i, g in enumerate(a.graphs))
    return out


def _body_keys(graph: onnx.GraphProto) -> list[str]:
    """Display keys of ``graph``'s nodes (the node part of a body path)."""
    from fusionviz.graphview.model_graph import node_keys

    return node_keys(graph.node)


def _execution_order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Rule 1."""
    nodes = list(graph.node)
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    produced_at: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            produced_at.setdefault(o, i)
    ok = True
    seen = set(available)
    for n in nodes:
        if any(x not in seen and x in produced_at for x in n.input):
            ok = False
            break
        seen.update(n.output)
    if ok:
        return nodes
    # Kahn's algorithm, stable by original index.
    import heapq

    deps: list[set[int]] = []
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        d = {produced_at[x] for x in n.input if x in produced_at and produced_at[x] != i}
        deps.append(d)
        for j in d:
            users.setdefault(j, []).append(i)
    ready = [i for i, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    order: list[int] = []
    remaining = [len(d) for d in deps]
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):  # a cycle: keep what we have, append the rest
        order.extend(i for i in range(len(nodes)) if i not in set(order))
    return [nodes[i] for i in order]


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Every tensor name read inside ``node``'s subgraphs, at any depth (iterative, linear)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        for a in cur.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                graphs = [a.g]
            elif a.type == onnx.AttributeProto.GRAPHS:
                graphs = list(a.graphs)
            else:
                continue
            for g in graphs:
                for n in g.node:
                    names.update(n.input)
                    stack.append(n)
    return names


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


# --------------------------------------------------------------------------- FLOPs / MACs / params


@dataclasses.dataclass(frozen=True)
class Cost:
    """FLOPs, MACs and parameters of a model (main graph) and per node."""

    flops: int
    macs: int
    params: int
    per_node: tuple[dict, ...]
    unknown_nodes: int = 0

    def as_dict(self, *, per_node: bool = False) -> dict:
        d = {"flops": self.flops, "macs": self.macs, "params": self.params,
             "unknown_nodes": self.unknown_nodes}
        if per_node:
            d["per_node"] = [dict(x) for x in self.per_node]
        return d


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_cost(node: onnx.NodeProto, info: Mapping[str, _TensorInfo]) -> tuple[int, int, bool]:
    """(flops, macs, known) for one node; ``known`` is False when a needed shape is missing."""
    op = node.op_type

    def dims(name: str) -> tuple[int, ...] | None:
        ti = info.get(name) if name else None
        return ti.dims if ti is not None else None

    def numel(name: str) -> int | None:
        d = dims(name)
        return int(np.prod(d, dtype=np.int64)) if d is not None else None

    out = node.output[0] if node.output else ""
    if op in _CONV:
        w_idx = 3 if op == "QLinearConv" else 1
        w, y = dims(node.input[w_idx]) if len(node.input) > w_idx else None, numel(out)
        if w is None or y is None or len(w) < 2:
            return 0, 0, False
        macs = y * int(np.prod(w[1:], dtype=np.int64))
        extra = 0
        if op in ("Conv", "FusedConv") and len(node.input) > 2 and node.input[2]:
            extra += y  # bias
        if op == "FusedConv":
            extra += y  # activation
            if len(node.input) > 3 and node.input[3]:
                extra += y  # Z sum
        return 2 * macs + extra, macs, True
    if op == "ConvTranspose":
        x, w = dims(node.input[0]), dims(node.input[1])
        if x is None or w is None or len(w) < 2:
            return 0, 0, False
        macs = int(np.prod(x, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
        extra = (numel(out) or 0) if len(node.input) > 2 and node.input[2] else 0
        return 2 * macs + extra, macs, True
    if op in _MATMUL:
        a_idx = 0
        a, y = dims(node.input[a_idx]), numel(out)
        if a is None or y is None or not a:
            return 0, 0, False
        k = a[-1]
        if op == "FusedMatMul" and _attr(node, "transA", 0) and len(a) >= 2:
            k = a[-2]
        macs = y * int(k)
        return 2 * macs, macs, True
    if op in _GEMM:
        a, y = dims(node.input[0]), numel(out)
        if a is None or y is None or len(a) != 2:
            return 0, 0, False
        k = a[0] if _attr(node, "transA", 0) else a[1]
        macs = y * int(k)
        extra = y if len(node.input) > 2 and node.input[2] else 0
        if op == "FusedGemm":
            extra += y
        return 2 * macs + extra, macs, True
    if op in ("MaxPool", "AveragePool", "LpPool"):
        y = numel(out)
        k = _attr(node, "kernel_shape")
        if y is None or not k:
            return 0, 0, False
        return y * int(np.prod(k)), 0, True
    if op in _REDUCE:
        x = numel(node.input[0]) if node.input else None
        return (x or 0), 0, x is not None
    if op in _ELEMENTWISE or op in ("BatchNormalization", "Softmax", "LogSoftmax") or op in _NORM5:
        y = numel(out)
        if y is None:
            return 0, 0, False
        per = 2 if op == "BatchNormalization" else 3 if op in ("Softmax", "LogSoftmax") else 5 if op in _NORM5 else 1
        return per * y, 0, True
    return 0, 0, True


def model_cost(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None) -> Cost:
    """FLOPs, MACs and parameters, in total and per node (conventions in the module docstring).

    Args:
        model: the model.
        shapes: input shape overrides.

    Returns:
        A :class:`Cost`; ``params`` counts each initializer and Constant tensor once.
    """
    info = infer_tensor_info(model, shapes)
    weights: dict[str, int] = {}
    for g in proto_graphs(model.graph):  # rule 6: every body's weights
        for t in g.initializer:
            weights[t.name] = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        for n in g.node:
            if n.op_type == "Constant":
                ti = info.get(n.output[0]) if n.output else None
                if ti is not None and ti.numel is not None:
                    weights[n.output[0]] = ti.numel
    flops, macs, unknown, per_node = _graph_cost(model.graph, info, weights, 0)
    return Cost(int(flops), int(macs), int(sum(weights.values())), tuple(per_node), unknown)


def _graph_cost(g: onnx.GraphProto, info: Mapping[str, _TensorInfo], weights: Mapping[str, int],
                depth: int) -> tuple[int, int, int, list[dict]]:
    """(flops, macs, unknown nodes, per-node rows) of one graph; a node holding bodies costs
    its larger If branch, or its Loop/Scan body once (rule 6)."""
    per_node = []
    flops = macs = 0
    unknown = 0
    for n in _execution_order(g):
        f, m, known = node_cost(n, info)
        bodies = _bodies(n) if depth < MAX_BODY_DEPTH else []
        if bodies:
            costs = [_graph_cost(b, info, weights, depth + 1)[:3] for _, b in bodies]
            if n.op_type == "If" and n.domain in ("", "ai.onnx"):
                costs = [max(costs, key=lambda c: c[0])]
            f += sum(c[0] for c in costs)
            m += sum(c[1] for c in costs)
            unknown += sum(c[2] for c in costs)
        p = sum(weights.get(x, 0) for x in set(n.input) if x)
        if not known:
            unknown += 1
        flops += f
        macs += m
        per_node.append({"name": n.name, "op_type": n.op_type, "flops": int(f), "macs": int(m),
                         "params": int(p), "known": known})
    return flops, macs, unknown, per_node
