"""int8_dynamic: onnxruntime's dynamic quantization (rule 2)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

import onnx
import onnx_ir as ir

from fusionviz.passes.precision.keep import requested
from fusionviz.passes.precision.tool_pass import ToolPass
from fusionviz.passes.precision.tools import guard_nodes, quiet_tools


def quantize_int8_dynamic(model: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
    """Rule 2: onnxruntime dynamic quantization (int8 weights), ``nodes_to_exclude`` left float."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="fusionviz-int8d-") as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        with quiet_tools():
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, nodes_to_exclude=list(nodes_to_exclude))
        return onnx.load(dst)


class Int8Dynamic(ToolPass, name="int8_dynamic", order=402):
    title = "INT8 dynamic quantization"
    explain = """\
**What:** onnxruntime's dynamic quantization: MatMul/Gemm/Conv/Attention weights are stored as
int8 with a per-tensor scale; activations are quantized on the fly each run
(`DynamicQuantizeLinear` → `MatMulInteger`/`ConvInteger` → rescale).

**Why faster:** int8 weights are 4× smaller, and integer dot products (AVX-VNNI / AVX512-VNNI
`vpdpbusd`) do 4× the multiply-adds per instruction of fp32 FMAs. The per-run activation
quantization costs a pass over each input, so it pays off most on large MatMuls (transformers).

**Math:** `q = round(x / s) + z`, `s = (max − min)/255`; `y ≈ s_a·s_w·Σ(q_a − z_a)(q_w − z_w)`.
The error vs fp32 is reported, not verified.
"""

    def prepare(self, model: ir.Model) -> dict:
        return {"nodes_to_exclude": sorted(set(guard_nodes(model)) | set(requested()))}

    def convert(self, proto: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
        return quantize_int8_dynamic(proto, nodes_to_exclude)
