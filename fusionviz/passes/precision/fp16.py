"""fp16: weights and compute in 16-bit floats, inputs/outputs kept fp32 (rule 1)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import onnx
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.guards import (
    constant_array,
    constant_values,
    fp16_overflow,
    fp16_underflow,
    singular_path,
)
from fusionviz.passes.precision.keep import REASON, requested
from fusionviz.passes.precision.kernels import fp16_refusals
from fusionviz.passes.precision.ranges import overflowing_nodes
from fusionviz.passes.precision.tool_pass import ToolPass
from fusionviz.passes.precision.tools import fp32_outer_reads, quiet_tools, rehome_nodes

logger = logging.getLogger(__name__)


FP16_BLOCK_LIST = (
    "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf", "Softmax", "LogSoftmax", "ReduceMean",
    "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "LayerNormalization",
    "SkipLayerNormalization", "InstanceNormalization", "GroupNormalization", "BatchNormalization",
    "Attention", "MultiHeadAttention", "TopK", "NonMaxSuppression", "Range", "CumSum",
    # quantization ops read and write float32 only (QuantizeLinear/DequantizeLinear before opset
    # 19; DynamicQuantizeLinear always): an already quantized model keeps them as they are
    "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "QAttention", "QGemm", "QLinearConv", "QLinearMatMul",
)


def fp32_nodes(model: ir.Model) -> dict[str, str]:
    """Rule 1: node name -> why it stays fp32, for the nodes around constants fp16 cannot hold.

    A constant with values fp16 rounds to a subnormal or zero matters where it guards a
    singularity (:func:`fusionviz.passes.guards.singular_path`): the path from it to the Log /
    divisor / root stays fp32. A constant beyond fp16's range keeps its consumers fp32.
    """
    keep: dict[str, str] = {}
    for graph in model.graphs():
        nodes = list(graph)
        for v in constant_values(nodes, list(graph.initializers.values())):
            arr = constant_array(v)
            if arr is None:
                continue
            why, path = fp16_overflow(arr), [u.node for u in v.uses()]
            if why is None:
                why, path = fp16_underflow(arr), singular_path(v)
            if why is None:
                continue
            for node in path:
                if node.name:
                    keep.setdefault(node.name, f"constant '{v.name}' {why}")
    return keep


def blocked_ops(op_block_list: Iterable[str] = FP16_BLOCK_LIST) -> list[str]:
    """Rule 1: the op types the converter keeps fp32: onnxruntime's default list and ours."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return sorted(set(DEFAULT_OP_BLOCK_LIST) | set(op_block_list))


def convert_fp16(model: onnx.ModelProto, op_block_list: Iterable[str] = FP16_BLOCK_LIST,
                 node_block_list: Iterable[str] = ()) -> onnx.ModelProto:
    """Rule 1: fp16 weights and compute, fp32 inputs/outputs, sensitive ops kept fp32."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    blocked = blocked_ops(op_block_list)
    node_block = [n.name for n in model.graph.node if n.domain not in ("", "ai.onnx", "com.microsoft")]
    node_block += [n for n in node_block_list if n not in node_block]
    with quiet_tools():
        converted = convert_float_to_float16(
            onnx.ModelProto.FromString(model.SerializeToString()),
            keep_io_types=True,
            op_block_list=blocked,
            node_block_list=node_block,
        )
    moved = rehome_nodes(converted.graph)
    if moved:
        logger.info("fp16: %d Cast node(s) moved into the subgraph whose value they convert", moved)
    rewired = fp32_outer_reads(converted.graph, set(node_block), set(blocked))
    if rewired:
        logger.info("fp16: %d read(s) of outer values by fp32 subgraph nodes take the fp32 value", rewired)
    return converted


def _cast_to(node: ir.Node | None, dtype: ir.DataType) -> bool:
    return (node is not None and node.op_type == "Cast" and node.domain in ("", "ai.onnx")
            and node.attributes.get_int("to", -1) == int(dtype))


def drop_round_trips(model: ir.Model, original_names: set[str]) -> int:
    """Rule 1: ``Cast(Cast(v, to=fp16), to=fp32)`` that the converter added → ``v``.

    The converter casts every output of an fp32 node to fp16 and back before the next fp32
    node, so two fp32 nodes in a row still exchange an fp16 value: the epsilon-guarded sum
    (1e-10) becomes 0 between the ``Add`` and the ``Log``. Only Casts the converter made (not
    in ``original_names``) are bypassed. Returns how many round trips were removed.
    """
    dropped = 0
    for graph in model.graphs():
        for outer in list(graph):
            inner = outer.inputs[0].producer() if outer.inputs and outer.inputs[0] is not None else None
            if (not _cast_to(outer, ir.DataType.FLOAT) or not _cast_to(inner, ir.DataType.FLOAT16)
                    or outer.name in original_names or inner.name in original_names):
                continue
            src, out = inner.inputs[0], outer.outputs[0]
            if src is None or src.dtype != ir.DataType.FLOAT:
                continue
            if out.is_graph_output():  # the output keeps its name: a Cast fp32 -> fp32 reads src
                outer.replace_input_with(0, src)
            else:
                ir.convenience.replace_all_uses_with(out, src)
                graph.remove(outer, safe=True)
            if not inner.outputs[0].uses() and not inner.outputs[0].is_graph_output():
                graph.remove(inner, safe=True)
            dropped += 1
    return dropped


class Fp16(ToolPass, name="fp16", order=400):
    title = "FP16 (inputs/outputs kept fp32)"
    explain = """\
**What:** converts weights and computation to 16-bit floats, keeping the model's inputs and
outputs fp32 (Casts at the borders) and leaving numerically sensitive ops in fp32 (exponentials,
reductions, normalisations, Softmax, attention). Uses onnxruntime's own converter.

**Why faster (where it is):** half the bytes for weights and activations: memory bandwidth and
cache footprint halve, and GPUs / CPUs with native fp16 arithmetic (AVX512-FP16, ARM) do twice
the operations per instruction. On CPUs without fp16 kernels onnxruntime inserts Casts and runs
fp32, so it can be *slower* there — measure.

**Math:** fp16 has an 11-bit significand (≈3.3 decimal digits) and a max of 65504; values below
6e-8 flush to zero. Expect relative errors around 1e-3. The error vs fp32 is reported (max abs,
cosine, top-1 agreement for class scores) instead of failing verification.

**Kept fp32:** besides the sensitive ops, the nodes from a constant fp16 cannot hold to the op
it protects: an epsilon on its way to a `Log`, a division or a root (`1e-10` is 0 in fp16,
and `log(x + 0)` is -inf when `x` is 0), any node reading a constant beyond ±65504, and any
node that makes or reads an activation that reaches half of that on the verification inputs
(the fp32 model is run once per input set to find them: a dense layer on 0-255 byte
embeddings reaches 1.7e6, infinite in fp16), and any node onnxruntime cannot run in fp16
(asked of onnxruntime with a one-node model per kind of node: ScatterElements with
`reduction="add"` has no fp16 kernel on CPU); those are listed as near misses. And the nodes
you name (`optimize --keep-fp32 a,b`; `compare` of the original and the fp16 result lists the
nodes that add the most error).
Two fp32 nodes in a row pass their value in fp32 (no fp16 round trip between them).
"""

    def prepare(self, model: ir.Model) -> dict:
        keep = fp32_nodes(model)
        proto = ir.serde.serialize_model(model)
        for name, why in overflowing_nodes(proto).items():
            keep.setdefault(name, why)
        for name, why in fp16_refusals(proto, blocked_ops(), keep).items():
            keep[name] = why
            nearmiss.note([name], name, f"kept float32: {why}", kind="no_kernel", rule="fp16")
        names = {n.name for g in model.graphs() for n in g}
        for name in requested():
            if name in names:
                keep.setdefault(name, REASON)
        for name, why in list(keep.items())[:10]:
            logger.info("fp16: node %s stays fp32: %s", name, why)
        return {"node_block_list": sorted(keep)}

    def convert(self, proto: onnx.ModelProto, node_block_list: Iterable[str] = ()) -> onnx.ModelProto:
        return convert_fp16(proto, node_block_list=node_block_list)

    def finish(self, model: ir.Model, original: onnx.ModelProto) -> None:
        dropped = drop_round_trips(model, {n.name for n in original.graph.node})
        if dropped:
            logger.info("fp16: %d fp32 -> fp16 -> fp32 round trip(s) between fp32 nodes removed", dropped)
