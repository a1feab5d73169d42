"""Tensor shapes, dtypes and sizes of a model (shape inference with fixed inputs, fused ops read
through their standard twins) and the execution order of a graph and its bodies: what the memory
plan and the cost model read (:mod:`fusionviz.analysis`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)

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
