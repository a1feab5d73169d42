"""int8_static: onnxruntime's static quantization in QDQ format, calibrated (rule 3)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from fusionviz.passes.precision.error import CALIBRATION_SAMPLES
from fusionviz.passes.precision.keep import requested
from fusionviz.passes.precision.tool_pass import ToolPass
from fusionviz.passes.precision.tools import guard_nodes, quiet_tools


class _Reader:
    """CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
        self._it = iter(list(feeds))

    def get_next(self):
        return next(self._it, None)


def calibration_feeds(model: onnx.ModelProto, n: int = CALIBRATION_SAMPLES,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> list[dict[str, np.ndarray]]:
    """``n`` deterministic random feeds (seeds 0..n-1) from :func:`fusionviz.inputs.make_inputs`."""
    from fusionviz.inputs import make_inputs

    return [make_inputs(model, shapes, seed=i) for i in range(n)]


def quantize_int8_static(model: onnx.ModelProto,
                         feeds: Sequence[Mapping[str, np.ndarray]] | None = None,
                         nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
    """Rule 3: QDQ static quantization calibrated on ``feeds`` (default: random inputs),
    ``nodes_to_exclude`` left float."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    feeds = list(feeds) if feeds is not None else calibration_feeds(model)

    class Reader(_Reader, CalibrationDataReader):
        pass

    with tempfile.TemporaryDirectory(prefix="fusionviz-int8s-") as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        # Rule 7: onnxruntime's calibrator writes its augmented model into its own temporary
        # folder; every path here is absolute, so the working directory is never changed.
        with quiet_tools():
            quantize_static(src, dst, Reader(feeds), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            nodes_to_exclude=list(nodes_to_exclude))
        return onnx.load(dst)


class Int8Static(ToolPass, name="int8_static", order=404):
    title = "INT8 static quantization (QDQ, calibrated)"
    explain = f"""\
**What:** onnxruntime's static quantization in QDQ format: activation ranges are *calibrated* in
advance (min/max over {CALIBRATION_SAMPLES} deterministic random inputs here, or your own inputs
from a .npz), and `QuantizeLinear`/`DequantizeLinear` pairs are placed around quantizable ops;
onnxruntime fuses each `DQ → op → Q` group into an integer kernel.

**Why faster:** like dynamic quantization, but no per-run range computation: activations stay
int8 between quantized ops. Usually the fastest CPU option for CNNs.

**Math:** as int8 dynamic, with fixed activation scales `s_a`, `z_a` from calibration. Random
calibration inputs give ranges that may not match real data: the reported error (max abs,
cosine, top-1) tells you; calibrate on real inputs for deployment.
"""

    def prepare(self, model: ir.Model) -> dict:
        return {"nodes_to_exclude": sorted(set(guard_nodes(model)) | set(requested()))}

    def convert(self, proto: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
        return quantize_int8_static(proto, nodes_to_exclude=nodes_to_exclude)
