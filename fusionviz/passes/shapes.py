"""ONNX shape inference merged into an onnx-ir model, cheaply.

onnx-ir's ``ShapeInferencePass`` serializes the model (without big initializers), runs
``onnx.shape_inference.infer_shapes`` and then deserializes the *whole* inferred model to merge
types and shapes back by value name. The merge is most of its cost on the models here (two
thirds on a 30-node model). This does the same inference (same C API call, same options, same
handling of big initializers via onnx-ir's ``call_onnx_api``, reached through
:mod:`fusionviz.passes._compat`) but merges straight from the
inferred ``ValueInfoProto`` entries, without rebuilding nodes and tensors.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from fusionviz.passes._compat import call_onnx_api
from fusionviz.passes.walk import all_nodes, proto_graphs, subgraphs

logger = logging.getLogger(__name__)


def _values_by_name(model: ir.Model) -> dict[str, ir.Value]:
    out: dict[str, ir.Value] = {}
    graphs = [model.graph]
    for node in all_nodes(model):
        for v in node.outputs:
            if v.name:
                out.setdefault(v.name, v)
        graphs.extend(subgraphs(node))
    for g in graphs:
        for v in g.inputs:
            if v.name:
                out.setdefault(v.name, v)
    return out


def _value_infos(graph: onnx.GraphProto):
    for g in proto_graphs(graph):
        yield from g.value_info
        yield from g.output


def infer_shapes(model: ir.Model) -> bool:
    """Infer types and shapes (strict, with data propagation) into ``model`` in place.

    Returns whether anything changed. Failures leave the model as it was and are logged.
    """
    def run(proto: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)

    try:
        inferred = call_onnx_api(run, model)
    except Exception as exc:  # noqa: BLE001 - best effort: passes cope without shapes
        logger.info("shape inference failed: %s", " ".join(str(exc).split())[:300])
        return False
    values = _values_by_name(model)
    modified = False
    for vi in _value_infos(inferred.graph):
        v = values.get(vi.name)
        if v is None or not vi.type.HasField("tensor_type"):
            continue
        shape = ir.serde.deserialize_type_proto_for_shape(vi.type)
        if shape is not None and v.shape != shape:
            v.shape = shape
            modified = True
        elem = vi.type.tensor_type.elem_type
        try:
            dtype = ir.DataType(elem) if elem else None
        except ValueError:  # a type this onnx-ir does not know
            dtype = None
        if dtype is not None and v.dtype != dtype:
            v.dtype = dtype
            modified = True
    return modified


def strict_inference_error(model: ir.Model | onnx.ModelProto) -> str | None:
    """Why strict shape inference (what ``onnx.checker``'s full check runs) rejects ``model``,
    as one line, or None when it passes. The model is not changed."""
    def run(proto: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)

    try:
        if isinstance(model, onnx.ModelProto):
            run(model)
        else:
            call_onnx_api(run, model)
    except Exception as exc:  # noqa: BLE001 - InferenceError, ValidationError, ...
        return " ".join(str(exc).split())[:300]
    return None


def infer_shapes_if_needed(model: ir.Model, values: Sequence[ir.Value | None] = ()) -> None:
    """Shape inference into ``model`` in place, unless ``values`` all have types and shapes.

    Passes that need shapes only when there is something to match call this lazily, instead of
    setting ``needs_shapes`` (which would make the pipeline infer shapes on every model).
    Failures leave the model as it was (rules then fail their checks with a reason).
    """
    if values and all(v is None or (v.shape is not None and v.dtype is not None) for v in values):
        return
    infer_shapes(model)  # best effort, like the pipeline's: failures are logged
