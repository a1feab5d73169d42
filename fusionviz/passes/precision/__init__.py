"""Precision passes (one per module): FP16, INT8 dynamic, INT8 static (QDQ). Numerics change; errors are reported.

Each pass wraps onnxruntime's own tooling (no extra dependency) and reports, as the detail of
its Change, the error against the fp32 model it started from: max absolute error, cosine
similarity and, when an output looks like class scores (2-D, last dim >= 2), top-1 agreement.
The comparison uses :func:`fusionviz.verify.verify` with ``report_only=True`` on the same
deterministic inputs as everything else.

Rules:

1. fp16: ``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``;
   numerically sensitive ops (:data:`FP16_BLOCK_LIST`: exponentials, reductions, normalisations)
   and onnxruntime's NCHWc-domain nodes stay fp32, with Casts at the borders. So do the nodes
   around a constant fp16 cannot hold (:func:`fp32_nodes`): an epsilon on its way to a Log, a
   divisor or a root (1e-10 is 0 in fp16, and the converter's clamp to 6e-8 still overflows
   ``1 / (x + eps)``), a constant beyond fp16's range (the converter would clamp it), and
   the nodes that make or read an activation that grows beyond it on the verification inputs
   (:func:`fusionviz.passes.precision.ranges.overflowing_nodes`: the fp32 model is run to find them).
   And so do the nodes onnxruntime cannot run in fp16 (:mod:`.kernels`: asked of onnxruntime
   with a one-node model per kind of node; ScatterElements with reduction "add" has no fp16
   kernel on CPU): no hand list says which op with which attributes, the runtime does.
2. int8_dynamic: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights, activations
   quantized per run), through files in a temporary folder this module owns and deletes.
3. int8_static: ``quantize_static`` in QDQ format with a calibration reader over
   :data:`CALIBRATION_SAMPLES` deterministic random inputs, or user inputs
   (:func:`quantize_int8_static` takes any list of feeds, e.g. from a .npz).
4. A model the tool cannot convert is left unchanged (no Change), and the reason is logged.
5. Every tool gets the weights as initializers: float ``Constant`` nodes of the main graph are
   lifted first (Paddle exports keep every weight in a Constant node; the quantizers quantize
   initializers only, and would quantize nothing).
6. The tools' output is repaired before it is used (:mod:`fusionviz.passes.hygiene`): nodes
   sorted topologically, subgraph reads of outer values included (the fp16 converter appends
   the Casts it adds; the quantizers sort without seeing subgraphs), value names unique, and
   the IR version raised where initializers are no longer graph inputs. Inputs and outputs
   keep their names and types.
7. No process-wide state: the tools get absolute paths in a temporary folder (never a change
   of working directory: the app runs pipelines in several threads).
8. int8: the nodes from an epsilon to the Log / divisor / root it guards are not quantized
   (:func:`guard_nodes`): quantizing ``x + 1e-10`` rounds it to 0 where ``x`` is 0.
"""

from fusionviz.passes.precision.error import CALIBRATION_SAMPLES, PrecisionError, precision_error
from fusionviz.passes.precision.int8_static import calibration_feeds, quantize_int8_static

__all__ = ["CALIBRATION_SAMPLES", "PrecisionError", "calibration_feeds", "precision_error", "quantize_int8_static"]
