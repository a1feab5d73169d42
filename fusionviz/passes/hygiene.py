"""Repairs a rewriting pass applies to its own result, so that what it hands back is a valid model.

Real exports break assumptions that hold on hand-written samples; each helper here fixes one
thing a rewrite can leave behind (or inherit) that the ONNX checker or onnxruntime rejects:

1. :func:`unique_value_names`: every value name is unique across the model (so a subgraph
   never reuses, shadows, a name of an enclosing graph), and the main graph's inputs and
   outputs keep their names. Rewrite libraries name new values ``val_0``, ``val_1``, ... per
   graph, without looking at the names other graphs (or the model's own earlier rewrites)
   already use.
2. :class:`Namer`: a fresh name for a value or initializer that no graph of the model uses.
3. :func:`initializers_need_ir4`: an initializer that is not also a graph input needs IR >= 4
   (IR 3 models list every weight as an input; tools that rebuild the model drop them there).
4. :func:`forget_negative_dims`: a dimension stored as a negative number (exporters write ``-1``
   for "unknown") is made unknown; shape inference would otherwise find that ``-1``
   contradicts the size it infers once a pass makes the shape computable.
5. :func:`sort_topologically`: nodes in dependency order in every graph, counting the values a
   subgraph reads from its enclosing graphs (tools that insert nodes by appending them, or sort
   without seeing subgraphs, leave a node before what it reads).
6. :func:`from_tool`: a model an external tool rebuilt (onnxruntime's fp16 converter, its
   quantizers, its optimizer) is read without the tool's ``value_info``, which can contradict
   its own graph (an fp16 type kept for a weight the converter left fp32); types and shapes
   are inferred afresh instead, the graph's inputs and outputs keep the types and shapes the
   model declared, and rules 1, 3, 4 and 5 are applied.
7. :func:`forget_contradicted_output_shapes`: a graph output's declared size that the graph
   provably does not make becomes unknown (its element type and rank stay).
8. :func:`forget_made_up_dims`: a written model declares no dimension name that ONNX shape
   inference made up (``unk__3``) in its ``value_info``; such a dimension is written as unknown.
   The passes infer shapes for their own matching, and onnx names every dim it cannot compute,
   the same name wherever it proves two dims equal. onnxruntime reads those names as facts:
   its ``SkipLayerNormFusion`` (level extended and above) needs both inputs of the residual Add
   before a LayerNormalization to have equal dims, and equal made-up names pass that test where
   the original model, without them, does not. onnxruntime 1.32's float32 CPU
   ``SkipLayerNormalization`` kernel is slower than the Add + LayerNormalization it replaces at
   every size measured (1.1x to 11x its time from 8x64 to 128x768, with and without bias and
   beta: a scalar loop against a vectorized LayerNormalization), so the names made a written
   model slower than its original under onnxruntime (a 3-layer BERT: 1.08x the original's time
   at level all; 0.91x without them).
   Only the names are forgotten: static sizes, ranks and the model's own dim names stay.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from fusionviz.passes.walk import graphs, proto_graphs

logger = logging.getLogger(__name__)


def all_value_names(model: ir.Model) -> set[str]:
    """Every value name used anywhere in the model: inputs, outputs, initializers, node outputs."""
    names: set[str] = set()
    for g in graphs(model):
        names.update(v.name for v in g.inputs if v.name)
        names.update(v.name for v in g.outputs if v.name)
        names.update(g.initializers.keys())
        for node in g:
            names.update(v.name for v in node.outputs if v.name)
            names.update(v.name for v in node.inputs if v is not None and v.name)
    for f in model.functions.values():
        for node in f:
            names.update(v.name for v in node.outputs if v.name)
    return names


class Namer:
    """Hands out value/initializer names that no graph of the model uses (rules never clobber)."""

    def __init__(self, model: ir.Model) -> None:
        self._taken = all_value_names(model)

    def __call__(self, base: str) -> str:
        """A name starting with ``base`` (``base`` itself when free), reserved from now on."""
        base = base or "fv"
        name, i = base, 0
        while name in self._taken:
            i += 1
            name = f"{base}_{i}"
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> None:
        self._taken.add(name)


def _defined_values(graph: ir.Graph) -> list[ir.Value]:
    """The values ``graph`` itself defines: inputs, initializers, its nodes' outputs."""
    return [*graph.inputs, *graph.initializers.values(), *(v for n in graph for v in n.outputs)]


def unique_value_names(model: ir.Model) -> int:
    """Rule 1 in place; returns how many values were renamed.

    The main graph's inputs and outputs are named first and keep their names; any other value
    whose name an earlier value already has gets a fresh one (``<name>_1``, ...), and an
    unnamed value gets ``val``. Unlike onnx-ir's NameFixPass, an *empty* name is kept: it is
    how ONNX writes an optional output that is not requested (naming it would make the node
    compute it, or make a BatchNormalization in inference mode invalid).
    """
    all_graphs = graphs(model)
    taken: set[str] = set()
    seen: set[int] = set()
    renamed = 0
    first = [*model.graph.inputs, *model.graph.outputs]
    for v in first + [v for g in all_graphs for v in _defined_values(g)]:
        if id(v) in seen or v.name == "":
            continue
        seen.add(id(v))
        name = v.name
        if name is None or name in taken:
            base, i = name or "val", 1
            while f"{base}_{i}" in taken:
                i += 1
            v.name = f"{base}_{i}"
            renamed += 1
        taken.add(v.name)  # type: ignore[arg-type]
    return renamed


def absent_outputs(model: ir.Model) -> list[ir.Value]:
    """Node outputs with an empty name (optional outputs not requested), to restore with
    :func:`restore_absent_outputs` after a library pass that names every value."""
    return [v for g in graphs(model) for n in g for v in n.outputs if v.name == ""]


def restore_absent_outputs(values: list[ir.Value]) -> None:
    for v in values:
        if not v.uses() and not v.is_graph_output():
            v.name = ""


def initializers_need_ir4(model: ir.Model) -> bool:
    """Rule 3 in place: raise the IR version to 4 when an initializer is not a graph input."""
    if model.ir_version >= 4:
        return False
    inputs = {v.name for v in model.graph.inputs}
    for g in graphs(model):
        if any(name not in inputs for name in g.initializers):
            model.ir_version = 4
            return True
    return False


def forget_negative_dims(model: ir.Model) -> int:
    """Rule 4 in place: negative dims become unknown ones; returns how many values changed."""
    changed = 0
    seen: set[int] = set()
    for g in graphs(model):
        values = [*g.inputs, *g.outputs, *g.initializers.values()]
        values += [v for node in g for v in node.outputs]
        for v in values:
            if id(v) in seen or v.shape is None:
                continue
            seen.add(id(v))
            dims = list(v.shape.dims)
            if any(isinstance(d, int) and d < 0 for d in dims):
                v.shape = ir.Shape([None if isinstance(d, int) and d < 0 else d for d in dims])
                changed += 1
    return changed


def sort_topologically(model: ir.Model) -> None:
    """Rule 5 in place (onnx-ir's stable sort, which counts subgraph reads of outer values)."""
    model.graph.sort()
    for f in model.functions.values():
        f.sort()


def _dims(type_proto: onnx.TypeProto) -> list | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in type_proto.tensor_type.shape.dim]


def _contradicted(declared: list, inferred: list) -> list[int]:
    """Indices of the static dims ``inferred`` proves wrong (same rank only)."""
    if len(declared) != len(inferred):
        return []
    return [i for i, (a, b) in enumerate(zip(declared, inferred, strict=True))
            if a is not None and b is not None and a != b]


def forget_contradicted_output_shapes(model: ir.Model) -> list[str]:
    """Rule 7 in place: a graph output's declared size that inference proves wrong becomes unknown.

    Exporters sometimes declare a size the graph never makes (the example input's length baked
    into a dynamic dim). The checker accepts it while the size cannot be computed; once a pass
    makes it computable (constant folding turns the Reshape target into a constant), the
    declaration contradicts the graph. Only sizes are forgotten: the rank is the interface
    (the checker needs a shape on every graph output, and a rank the graph contradicts cannot
    be repaired without changing it). Returns the names of the outputs changed.
    """
    proto = ir.serde.serialize_model(model)
    for out in proto.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - nothing inferred, nothing proven
        return []
    found = {o.name: _dims(o.type) for o in inferred.graph.output}
    dropped = []
    for v in model.graph.outputs:
        got = found.get(v.name or "")
        if v.shape is None or got is None:
            continue
        declared = [d if isinstance(d, int) else None for d in v.shape.dims]
        wrong = _contradicted(declared, got)
        if wrong:
            v.shape = ir.Shape([None if i in wrong else d for i, d in enumerate(v.shape.dims)])
            dropped.append(v.name or "")
    return dropped


#: the prefix of the dimension names ONNX shape inference makes up for dims it cannot compute
MADE_UP_DIM_PREFIX = "unk__"


def forget_made_up_dims(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Rule 8: every ``value_info`` dimension named by ONNX shape inference (``unk__N``) becomes
    unknown, in every graph of ``proto``, in place; returns ``proto``."""
    for g in proto_graphs(proto.graph):
        for vi in g.value_info:
            if not vi.type.HasField("tensor_type"):
                continue
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param.startswith(MADE_UP_DIM_PREFIX):
                    d.ClearField("dim_param")
    return proto


def _drop_value_info(graph: onnx.GraphProto) -> None:
    for g in proto_graphs(graph):
        del g.value_info[:]


def keep_declared_io(model: ir.Model, original: onnx.ModelProto) -> None:
    """Rule 6: the main graph's inputs and outputs keep the types and shapes ``original``
    declares (a tool writes what it inferred, which may contradict an exporter's declaration:
    a pass must not change the model's interface)."""
    declared = {v.name: v for v in [*original.graph.input, *original.graph.output]}
    for v in [*model.graph.inputs, *model.graph.outputs]:
        vi = declared.get(v.name or "")
        if vi is None or not vi.type.HasField("tensor_type"):
            continue
        v.type = ir.serde.deserialize_type_proto_for_type(vi.type)
        v.shape = ir.serde.deserialize_type_proto_for_shape(vi.type)


def from_tool(proto: onnx.ModelProto, original: onnx.ModelProto | None = None) -> ir.Model:
    """Rule 6: the IR model of a tool's output, with fresh types and shapes, sorted and named;
    with ``original``, the graph's inputs and outputs as ``original`` declares them.

    ``proto`` is not changed.
    """
    from fusionviz.passes.shapes import infer_shapes

    clean = onnx.ModelProto()
    clean.CopyFrom(proto)
    _drop_value_info(clean.graph)
    model = ir.serde.deserialize_model(clean)
    sort_topologically(model)
    unique_value_names(model)
    initializers_need_ir4(model)
    if original is not None:
        keep_declared_io(model, original)
    forget_negative_dims(model)
    infer_shapes(model)
    return model
