"""Precision passes: FP16, INT8 dynamic, INT8 static (QDQ). Numerics change; errors are reported.

Each pass wraps onnxruntime's own tooling (no extra dependency) and reports, as the detail of
its Change, the error against the fp32 model it started from: max absolute error, cosine
similarity and, when an output looks like class scores (2-D, last dim >= 2), top-1 agreement.
The comparison uses :func:`fusionviz.verify.verify` with ``report_only=True`` on the same
deterministic inputs as everything else.

Rules:

1. fp16: ``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``;
   numerically sensitive ops (:data:`FP16_BLOCK_LIST`: exponentials, reductions, normalisations)
   and onnxruntime's NCHWc-domain nodes stay fp32, with Casts at the borders.
2. int8_dynamic: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights, activations
   quantized per run), through files in a temporary folder this module owns and deletes.
3. int8_static: ``quantize_static`` in QDQ format with a calibration reader over
   :data:`CALIBRATION_SAMPLES` deterministic random inputs, or user inputs
   (:func:`quantize_int8_static` takes any list of feeds, e.g. from a .npz).
4. A model the tool cannot convert is left unchanged (no Change), and the reason is logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from fusionviz.passes.base import Category, Change, ChangeKind, Pass, ensure_unique_names

logger = logging.getLogger(__name__)

FP16_BLOCK_LIST = (
    "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf", "Softmax", "LogSoftmax", "ReduceMean",
    "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "LayerNormalization",
    "SkipLayerNormalization", "InstanceNormalization", "GroupNormalization", "BatchNormalization",
    "Attention", "MultiHeadAttention", "TopK", "NonMaxSuppression", "Range", "CumSum",
)
CALIBRATION_SAMPLES = 8


@dataclasses.dataclass(frozen=True)
class PrecisionError:
    """Error of a reduced-precision model against fp32 (see :func:`fusionviz.verify.verify`)."""

    max_abs_diff: float
    min_cosine: float
    top1_agreement: float | None
    error: str | None = None

    def describe(self) -> str:
        if self.error:
            return f"error not measured: {self.error}"
        text = f"max abs error {self.max_abs_diff:.3g}, cosine {self.min_cosine:.6f}"
        if self.top1_agreement is not None:
            text += f", top-1 agreement {self.top1_agreement:.1%}"
        return text

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def precision_error(original: onnx.ModelProto, converted: onnx.ModelProto, *,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    feeds: Mapping[str, np.ndarray] | None = None) -> PrecisionError:
    """Report-only comparison of ``converted`` against ``original``."""
    from fusionviz.verify import verify

    v = verify(original, converted, shapes=shapes, feeds=feeds, report_only=True)
    top1 = [o.top1_agreement for o in v.outputs if o.top1_agreement is not None]
    return PrecisionError(v.max_abs_diff, v.min_cosine, min(top1) if top1 else None, v.error)


# --------------------------------------------------------------------------- converters


@contextlib.contextmanager
def _quiet_tools():
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


def convert_fp16(model: onnx.ModelProto, op_block_list: Iterable[str] = FP16_BLOCK_LIST) -> onnx.ModelProto:
    """Rule 1: fp16 weights and compute, fp32 inputs/outputs, sensitive ops kept fp32."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    blocked = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(op_block_list))
    node_block = [n.name for n in model.graph.node if n.domain not in ("", "ai.onnx", "com.microsoft")]
    with _quiet_tools():
        return convert_float_to_float16(
            onnx.ModelProto.FromString(model.SerializeToString()),
            keep_io_types=True,
            op_block_list=blocked,
            node_block_list=node_block,
        )


def quantize_int8_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rule 2: onnxruntime dynamic quantization (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="fusionviz-int8d-") as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        with _quiet_tools():
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return onnx.load(dst)


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
                         feeds: Sequence[Mapping[str, np.ndarray]] | None = None) -> onnx.ModelProto:
    """Rule 3: QDQ static quantization calibrated on ``feeds`` (default: random inputs)."""
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
        cwd = os.getcwd()
        try:
            os.chdir(tmp)  # the calibrator writes augmented models to the working directory
            with _quiet_tools():
                quantize_static(src, dst, Reader(feeds), quant_format=QuantFormat.QDQ,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        finally:
            os.chdir(cwd)
        return onnx.load(dst)


# --------------------------------------------------------------------------- passes


class _PrecisionPass(Pass):
    category = Category.PRECISION
    exact = False
    needs_shapes = False

    def convert(self, proto: onnx.ModelProto) -> onnx.ModelProto:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run(self, model: ir.Model) -> tuple[ir.Model | None, str]:
        proto = ir.serde.serialize_model(model)
        try:
            converted = self.convert(proto)
        except Exception as exc:  # noqa: BLE001 - rule 4: a pass that does not apply never raises
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            logger.info("%s: not applied: %s", self.name, reason)
            return None, reason
        err = precision_error(proto, converted)
        return ir.serde.deserialize_model(converted), err.describe()

    def transform(self, model: ir.Model) -> ir.Model | None:
        return self._run(model)[0]

    def apply(self, model: ir.Model) -> tuple[ir.Model, list[Change]]:
        """Base bookkeeping, plus a summary Change whose detail is the error vs fp32."""
        from fusionviz.passes.base import _snapshot_nodes, diff_changes

        ensure_unique_names(model)
        before = _snapshot_nodes(model)
        new, detail = self._run(model)
        if new is None:
            return model, []
        ensure_unique_names(new)
        changes = diff_changes(before, new, self.name)
        changes.append(Change(ChangeKind.CHANGED, self.name, (), (), (), (), f"{self.title}: {detail}"))
        return new, changes


class Fp16(_PrecisionPass):
    name = "fp16"
    title = "FP16 (inputs/outputs kept fp32)"
    order = 400
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
"""

    def convert(self, proto: onnx.ModelProto) -> onnx.ModelProto:
        return convert_fp16(proto)


class Int8Dynamic(_PrecisionPass):
    name = "int8_dynamic"
    title = "INT8 dynamic quantization"
    order = 402
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

    def convert(self, proto: onnx.ModelProto) -> onnx.ModelProto:
        return quantize_int8_dynamic(proto)


class Int8Static(_PrecisionPass):
    name = "int8_static"
    title = "INT8 static quantization (QDQ, calibrated)"
    order = 404
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

    def convert(self, proto: onnx.ModelProto) -> onnx.ModelProto:
        return quantize_int8_static(proto)


PASSES: list[type[Pass]] = [Fp16, Int8Dynamic, Int8Static]
