"""Model summary: inputs/outputs, op histogram, node count, parameters, opsets."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import onnx

from fusionviz.inputs import graph_inputs
from fusionviz.passes.walk import proto_graphs


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return []
    if not tt.HasField("shape"):
        return ["?"]
    out: list[int | str] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or "?")
    return out


def _type_name(vi: onnx.ValueInfoProto) -> str:
    if vi.type.HasField("tensor_type"):
        return onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
    return vi.type.WhichOneof("value") or "unknown"


def _tensor_numel(t: onnx.TensorProto) -> int:
    return int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1


def _elem_size(dtype: int) -> int:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(dtype).itemsize
    except Exception:  # noqa: BLE001
        return 4


@dataclasses.dataclass(frozen=True)
class ModelSummary:
    inputs: list[dict]
    outputs: list[dict]
    op_histogram: dict[str, int]
    node_count: int
    node_count_main: int
    subgraph_count: int
    param_count: int
    param_bytes: int
    opsets: dict[str, int]
    ir_version: int
    producer: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarize(model: onnx.ModelProto) -> ModelSummary:
    hist: collections.Counter[str] = collections.Counter()
    params = 0
    pbytes = 0
    graphs = list(proto_graphs(model.graph))
    for g in graphs:
        for n in g.node:
            op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
            hist[op] += 1
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        params += _tensor_numel(a.t)
                        pbytes += _tensor_numel(a.t) * _elem_size(a.t.data_type)
        for t in g.initializer:
            params += _tensor_numel(t)
            pbytes += _tensor_numel(t) * _elem_size(t.data_type)
    return ModelSummary(
        inputs=[{"name": i.name, "dtype": _type_name(i), "shape": _dims(i)} for i in graph_inputs(model)],
        outputs=[{"name": o.name, "dtype": _type_name(o), "shape": _dims(o)} for o in model.graph.output],
        op_histogram=dict(hist.most_common()),
        node_count=sum(hist.values()),
        node_count_main=len(model.graph.node),
        subgraph_count=len(graphs) - 1,
        param_count=params,
        param_bytes=pbytes,
        opsets={(i.domain or "ai.onnx"): i.version for i in model.opset_import},
        ir_version=model.ir_version,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
    )
