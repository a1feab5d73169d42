"""What every precision pass does around onnxruntime's converters (rules 4-9).

The tools get the weights as initializers (:func:`lift_constant_weights`), run quietly
(:func:`quiet_tools`), and their output is repaired before use (:func:`repaired`, with
:func:`rehome_nodes` for the Casts the fp16 converter appends to the main graph). Constants
that guard a singularity are kept out of int8 (:func:`guard_nodes`)."""

from __future__ import annotations

import contextlib
import io
import itertools
import logging

import numpy as np
import onnx
import onnx_ir as ir

from fusionviz.passes.guards import constant_array, constant_values, singular_path
from fusionviz.passes.hygiene import from_tool
from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)


EPSILON_MAX = 1e-3


@contextlib.contextmanager
def quiet_tools():
    """onnxruntime's tools print and log on the root logger ("consider pre-processing"); keep
    that out of the user's terminal without configuring the root logger for them."""
    root = logging.getLogger()
    handler = logging.NullHandler()
    root.addHandler(handler)  # stops logging.warning() from calling basicConfig()
    old = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(old)
        root.removeHandler(handler)


def guard_nodes(model: ir.Model) -> dict[str, str]:
    """Rule 8: node name -> why it is not quantized, for the path from an epsilon (a constant of
    magnitude <= :data:`EPSILON_MAX`) to the Log / divisor / root it guards. int8 rounds the
    guarded sum to the activation's quantization step, far coarser than the epsilon."""
    keep: dict[str, str] = {}
    for graph in model.graphs():
        for v in constant_values(list(graph), list(graph.initializers.values())):
            arr = constant_array(v)
            if arr is None or arr.dtype.kind != "f" or arr.size == 0:
                continue
            a = np.abs(arr[np.isfinite(arr)])
            if not a.size or not np.any((a > 0) & (a <= EPSILON_MAX)):
                continue
            for node in singular_path(v):
                if node.name:
                    keep.setdefault(node.name, f"'{v.name}' is an epsilon guarding it")
    return keep


def _definitions(graph: onnx.GraphProto, where: dict[str, onnx.GraphProto]) -> None:
    """Name -> the subgraph (below ``graph``) that defines it, for every subgraph."""
    for sub in itertools.islice(proto_graphs(graph), 1, None):  # depth first, ``graph`` itself skipped
        names = [v.name for v in sub.input] + [t.name for t in sub.initializer]
        names += [o for n in sub.node for o in n.output if o]
        for name in names:
            where.setdefault(name, sub)


def rehome_nodes(graph: onnx.GraphProto) -> int:
    """Move main-graph nodes that read a value only a subgraph defines into that subgraph.

    onnxruntime's fp16 converter appends every Cast it adds to the main graph, also the Casts
    around a node it keeps fp32 inside an If/Loop branch, where they read and write branch
    values. Returns how many nodes moved (the caller sorts each graph afterwards).
    """
    main = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    main |= {o for n in graph.node for o in n.output if o}
    where: dict[str, onnx.GraphProto] = {}
    _definitions(graph, where)
    moved = 0
    for node in list(graph.node):
        missing = [i for i in node.input if i and i not in main and i in where]
        if not missing:
            continue
        home = where[missing[0]]
        graph.node.remove(node)
        home.node.append(node)
        for o in node.output:
            main.discard(o)
            where[o] = home
        moved += 1
    return moved


def fp32_outer_reads(graph: onnx.GraphProto, fp32_nodes: set[str], blocked_ops: set[str]) -> int:
    """Point the fp32 nodes of subgraphs at the fp32 source of the outer values they read.

    onnxruntime's fp16 converter casts a main-graph value to fp16 for its fp16 readers and
    back for its fp32 readers, but does not see the reads from inside an If/Loop branch: a node
    kept fp32 there would read the fp16 copy and declare an fp32 result (an invalid model).
    Such a read now takes the value the Cast to fp16 reads. Returns how many inputs changed.
    """
    fp16_of: dict[str, str] = {}  # fp16 value -> its fp32 source, for the converter's Casts
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and to == onnx.TensorProto.FLOAT16 and node.input:
            fp16_of[node.output[0]] = node.input[0]
    changed = 0
    for sub in itertools.islice(proto_graphs(graph), 1, None):
        local = {v.name for v in sub.input} | {t.name for t in sub.initializer}
        local |= {o for n in sub.node for o in n.output if o}
        for node in sub.node:
            if node.name not in fp32_nodes and node.op_type not in blocked_ops:
                continue
            for k, name in enumerate(node.input):
                if name in fp16_of and name not in local:
                    node.input[k] = fp16_of[name]
                    changed += 1
    return changed


_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                     onnx.TensorProto.BFLOAT16})


def lift_constant_weights(model: onnx.ModelProto) -> int:
    """Rule 5 in place: float ``Constant`` nodes of the main graph become initializers.

    Returns how many. Their output names stay, so every consumer reads the same tensor.
    """
    graph = model.graph
    keep: list[onnx.NodeProto] = []
    lifted = 0
    for node in graph.node:
        attr = node.attribute[0] if len(node.attribute) == 1 else None
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx") and attr is not None
                and attr.name == "value" and attr.t.data_type in _FLOATS and not attr.t.HasField("data_location")):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attr.t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
            lifted += 1
        else:
            keep.append(node)
    if lifted:
        del graph.node[:]
        graph.node.extend(keep)
        model.ir_version = max(model.ir_version, 4)
    return lifted


def repaired(converted: onnx.ModelProto, original: onnx.ModelProto) -> ir.Model:
    """Rule 6: a tool's output as an IR model that passes the checker, or ValueError.

    Raises:
        ValueError: the tool changed the graph's inputs or outputs (names or element types).
    """
    model = from_tool(converted, original)
    why = _io_changed(original, ir.serde.serialize_model(model))
    if why:
        raise ValueError(why)
    return model


def _io_changed(before: onnx.ModelProto, after: onnx.ModelProto) -> str | None:
    """How the graph's input/output names or element types differ, or None."""
    def sig(m: onnx.ModelProto, values) -> list[tuple[str, int]]:
        inits = {t.name for t in m.graph.initializer}
        return [(v.name, v.type.tensor_type.elem_type) for v in values if v.name not in inits]

    for kind in ("input", "output"):
        a, b = sig(before, getattr(before.graph, kind)), sig(after, getattr(after.graph, kind))
        if a != b:
            return f"the tool changed the graph {kind}s from {a} to {b}"
    return None
