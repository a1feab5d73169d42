"""widen_fp16_cpu: the float16 regions onnxruntime's CPU provider computes in float32, in the graph.

onnxruntime's CPU provider has no float16 kernel for many ops (Conv, BatchNormalization, Add,
Mul, Relu, ... in the version checked). Its session, whatever its optimization level, runs each
such node in float32 between Casts it inserts (InsertCastTransformer), removes the Cast pairs
between neighbours (RemoveDuplicateCastTransformer), and runs in float32 a node with a float16
kernel whose float16 neighbours all run in float32 (IsIsolatedFp16NodeOnCpu). What stays is a
Cast per region boundary and one per float16 weight, made again on every run: with the
optimizer off, 269 of the 291 Casts of a float16 PaddleOCR classifier convert weights. This pass
writes the regions into the graph. Rules:

1. Only the main graph; a model without a float16 value is skipped (precondition).
2. Which nodes: those onnxruntime runs in float32, asked of onnxruntime one node at a time
   (:func:`fusionviz.passes.precision.kernels.runs_in_float32`, rules 6 and 7), never a list,
   whose inputs and outputs all have a known element type (after the pipeline's shape inference).
3. Those nodes compute in float32: each float16 value a node of the set reads from outside the
   set gets one ``Cast(to=float)`` (shared by the readers); a float16 initializer or
   ``Constant`` read only by nodes of the set becomes float32 instead (float16 to float32 is
   exact). Their float16 outputs become float32, and a value read outside the set (another
   node, a subgraph, a graph output) gets one ``Cast(to=float16)``; a graph output keeps its
   name and its float16 type. A ``Shape`` reads the float32 value itself (its shape is the
   same; no Cast is made for it).
4. Nothing is narrowed and no rounding moves: the nodes computed in float32 are the ones
   onnxruntime computes in float32, with the same roundings to float16 at the same places.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from fusionviz.passes.base import Category, Pass, PreconditionError
from fusionviz.passes.precision.kernels import runs_in_float32

_F16, _F32 = ir.DataType.FLOAT16, ir.DataType.FLOAT


def _has_float16(model: ir.Model) -> bool:
    g = model.graph
    return (any(v.dtype == _F16 for v in (*g.inputs, *g.outputs, *g.initializers.values()))
            or any(v.dtype == _F16 for n in g for v in n.outputs))


def _widen_constant(value: ir.Value) -> bool:
    """Rule 3: make a float16 initializer or Constant output float32 in place; False if neither."""
    producer = value.producer()
    if value.is_initializer() and producer is None and not value.is_graph_input() and not value.is_graph_output():
        if value.const_value is None:
            return False
        arr = value.const_value.numpy().astype(np.float32)
        value.const_value = ir.Tensor(arr, name=value.name)
        value.dtype = _F32
        return True
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is None or value.is_graph_output():
            return False
        arr = attr.as_tensor().numpy().astype(np.float32)
        producer.attributes["value"] = ir.AttrTensor("value", ir.Tensor(arr, name=value.name))
        value.dtype = _F32
        return True
    return False


class WidenFp16Cpu(Pass, name="widen_fp16_cpu", category=Category.LAYOUT, order=195):
    title = "Compute onnxruntime's float32-only float16 regions in float32"
    needs_shapes = True
    explain = """\
**What:** onnxruntime's CPU provider has no float16 kernel for many ops (Conv,
BatchNormalization, Add, Mul, Relu, Clip, pooling, … — onnxruntime is asked, node by node). Its
session runs them in float32 between Casts it inserts, drops the Cast pairs between such
neighbours, and also runs in float32 a node whose float16 neighbours all run in float32. This
pass writes those float32 regions into the graph: one Cast to float32 where a float16 value
enters a region, one Cast to float16 where a value leaves it, and float16 weights read only
inside a region stored as float32. Graph outputs keep their float16 type.

**Why faster:** what onnxruntime cannot remove by itself is a Cast of every float16 weight,
made on every run (269 of the 291 Casts it runs in a float16 PaddleOCR classifier with its
optimizer off; its constant folding removes them at level basic and above). Stored as float32,
the weights are read as they are. Measured (bench_coverage, 1 thread): a float16 Khmer word
segmenter at onnxruntime's level off went from 1.16× to 0.84× of the original at level all.

**Exact:** nothing is narrowed. The nodes computed in float32 are the ones onnxruntime computes
in float32, with the same roundings to float16 at the same places; a float16 weight widened to
float32 keeps its value exactly.
"""

    def requires(self, model: ir.Model) -> None:
        if not _has_float16(model):
            raise PreconditionError("nothing to do: the model has no float16 value")

    def transform(self, model: ir.Model) -> None:
        graph = model.graph
        names = runs_in_float32(ir.serde.serialize_model(model))
        region = [n for n in graph if n.name in names
                  and all(v.dtype is not None for v in (*n.inputs, *n.outputs) if v is not None)]
        if not region:
            return None
        inside = {id(n) for n in region}
        entered: dict[int, ir.Value] = {}  # id of a float16 value -> what region nodes read instead
        for node in region:
            for i, v in enumerate(node.inputs):
                if v is None or v.dtype != _F16:
                    continue
                p = v.producer()
                if p is not None and id(p) in inside:
                    continue  # widened below, as its producer's output
                if id(v) not in entered:
                    if all(id(u.node) in inside for u in v.uses()) and _widen_constant(v):
                        entered[id(v)] = v
                    else:
                        cast = ir.node("Cast", [v], {"to": _F32}, name=f"{v.name}_to_fp32")
                        out = cast.outputs[0]
                        out.name, out.dtype, out.shape = f"{v.name}_fp32", _F32, v.shape
                        graph.insert_before(node, cast)
                        entered[id(v)] = out
                if entered[id(v)] is not v:
                    node.replace_input_with(i, entered[id(v)])
        for node in region:
            for v in node.outputs:
                if v.dtype != _F16:
                    continue
                v.dtype = _F32
                outside = [(u.node, u.idx) for u in v.uses() if id(u.node) not in inside
                           and not (u.node.op_type == "Shape" and u.node.domain in ("", "ai.onnx"))]
                if not outside and not v.is_graph_output():
                    continue
                cast = ir.node("Cast", [v], {"to": _F16}, name=f"{v.name}_to_fp16")
                back = cast.outputs[0]
                back.dtype, back.shape = _F16, v.shape
                graph.insert_after(node, cast)
                for user, idx in outside:
                    user.replace_input_with(idx, back)
                if v.is_graph_output():
                    name = v.name
                    for k, o in enumerate(graph.outputs):
                        if o is v:
                            graph.outputs[k] = back
                    v.name = f"{name}_fp32"
                    back.name = name
                else:
                    back.name = f"{v.name}_fp16"
        return None
