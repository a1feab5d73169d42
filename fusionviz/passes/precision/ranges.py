"""Activation ranges: which values of a model grow beyond what fp16 can hold.

A constant beyond ±65504 is seen in the file; an activation is not. A TensorFlow-exported
byte classifier multiplies a 0-255 embedding by a dense layer and reaches 1.7e6 before a
LayerNorm brings it back: in fp16 that value is infinite, and the LayerNorm after it gives NaN.
The only way to know is to run the fp32 model, so :func:`overflowing_nodes` does, once per
verification input set (normal, zeros, edge: the same sets the verdict will use), with every
float value of the main graph exposed as an output, and names the nodes that must stay fp32:
the producer of a value beyond the limit and every node that reads it (a Cast to fp16 between
them would turn the value into infinity).

The run is in this process, with onnxruntime's optimizer off (an optimized graph would not
expose the values by their names). A model whose inputs cannot be planned, or that does not run
on any candidate plan, gets no answer (an empty dict), never an error: the fp16 pass then
converts as before, and verification reports what happened.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx

from fusionviz.passes.walk import proto_graphs, proto_subgraphs

logger = logging.getLogger(__name__)

#: fp16's largest finite value
FP16_MAX = 65504.0
#: a value within this fraction of the limit on the planned inputs is too close: other inputs
#: of the same kind reach further
HEADROOM = 0.5
#: how many candidate input plans to try before giving up on a model that does not run
MAX_PLANS = 4
#: skip the profile when all float values of one run would take more than this
MAX_PROFILE_BYTES = 2 << 30

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                onnx.TensorProto.BFLOAT16)


def _exposed(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with every typed float value of the main graph as an output."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no inference: the declared value_info is all there is
        inferred = model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    names = [o.name for o in out.graph.output]
    for vi in inferred.graph.value_info:
        if vi.name not in have and vi.type.tensor_type.elem_type in _FLOAT_TYPES:
            out.graph.output.append(vi)
            have.add(vi.name)
            names.append(vi.name)
    return out, names


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    for key, value in ort_session_config(model).items():  # weights on disk: read from their folder
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def peak_magnitudes(model: onnx.ModelProto) -> dict[str, tuple[float, str]]:
    """Value name -> (largest finite magnitude, input set that reached it), over the main
    graph's inputs and float values on the verification input sets; {} when unknown."""
    from fusionviz.inputs import plan_inputs

    try:
        plan = plan_inputs(model)
        exposed, names = _exposed(model)
        session = _session(exposed)
    except Exception as exc:  # noqa: BLE001 - nothing known: the caller converts as before
        logger.info("activation ranges unknown: %s", " ".join(str(exc).split())[:200])
        return {}
    peaks: dict[str, tuple[float, str]] = {}
    # the default plan first (verification's, when the model runs on it), then the smallest:
    # a failed try of a big image costs seconds, and per-element magnitudes hardly depend on it
    others = sorted((plan.with_candidate(k) for k in range(1, plan.candidates())), key=lambda p: p.nbytes())
    for k, candidate in enumerate([plan, *others][:MAX_PLANS]):
        if candidate.nbytes() > MAX_PROFILE_BYTES:
            continue
        try:
            for kind, feeds in candidate.input_sets():
                values = dict(zip(names, session.run(names, feeds), strict=True))
                values.update(feeds)
                for name, arr in values.items():
                    a = np.asarray(arr)
                    if a.dtype.kind != "f" or a.size == 0:
                        continue
                    finite = np.abs(a[np.isfinite(a)])
                    peak = float(finite.max()) if finite.size else 0.0
                    if peak > peaks.get(name, (-1.0, ""))[0]:
                        peaks[name] = (peak, kind)
            return peaks
        except Exception as exc:  # noqa: BLE001 - this plan does not run: try the next
            logger.info("activation ranges: plan %d does not run: %s", k, " ".join(str(exc).split())[:200])
            peaks.clear()
    return {}


def overflowing_nodes(model: onnx.ModelProto, limit: float = FP16_MAX * HEADROOM) -> dict[str, str]:
    """Node name -> why it stays fp32: it makes or reads a value whose magnitude reaches
    ``limit`` on the verification inputs (main graph; unnamed nodes cannot be listed)."""
    peaks = {n: p for n, p in peak_magnitudes(model).items() if p[0] >= limit}
    keep: dict[str, str] = {}
    for node in model.graph.node:
        for name in list(node.output) + list(node.input):
            if name in peaks and node.name:
                peak, kind = peaks[name]
                keep.setdefault(node.name, f"'{name}' reaches {peak:.3g} on the {kind} inputs, "
                                           f"beyond fp16's ±{FP16_MAX:g}")
    # a control-flow node kept fp32 keeps its branches fp32: their outputs are its outputs,
    # and a branch converted alone would declare fp16 values where the node declares fp32
    for node in model.graph.node:
        if node.name in keep:
            for g in proto_subgraphs(node):
                for sub in proto_graphs(g):
                    for inner in sub.node:
                        if inner.name:
                            keep.setdefault(inner.name, f"inside '{node.name}', which stays fp32")
    return keep
