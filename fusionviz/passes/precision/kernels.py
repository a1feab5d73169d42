"""Which nodes onnxruntime cannot run in float16: asked of onnxruntime, one node at a time.

onnxruntime's CPU provider has float16 kernels for some ops and runs others in float32 behind
Casts its session inserts; a few it refuses when they run: ScatterElements with reduction
"add" or "mul" has a float16 kernel that raises "MLFloat16 data type is not supported" at its
first run. No list says which op with which attributes: onnxruntime does, when asked. Rules:

1. Asked about: the nodes the fp16 converter would turn float16. ONNX and ``com.microsoft``
   domains, a name, at least one float32 input the converter makes float16 (Resize's scales it
   keeps float32), no subgraph attribute (the nodes of an If/Loop/Scan body are asked about
   instead), not already kept float32 (an op on the block list, a node named by the caller).
2. The question is a one-node model of that node, as the converter would write it: its float32
   inputs float16 (a ``Cast`` to float32 casts to float16), constant inputs with their values
   (a shape, axes, a weight), other inputs made up at their inferred shape (unknown dims 1):
   floats 0.5, integers and bools 0; outputs untyped. onnxruntime builds it with its optimizer
   off and runs it once.
3. It runs: onnxruntime can run the node in float16 (with a float16 kernel of its own, or in
   float32 behind the Casts its session inserts). It fails, and the same model in float32 runs:
   onnxruntime cannot run the node in float16, and :func:`fp16_refusals` names it with
   onnxruntime's reason. Both fail (inputs the probe cannot make up, such as a shape only real
   data gives): nothing is known, and the node is converted as before.
4. The answer is cached per process by what selects a kernel: domain, op type, the domain's
   opset, the inputs' element types and ranks, and the attributes (tensor and graph ones aside).
5. Bounded: a node with an input of unknown type or rank, or whose inputs would exceed
   :data:`PROBE_MAX_ELEMENTS` elements, is not asked about (nothing known). Rules 6 and 7 only
   build the probe, never run it, so there an input of unknown shape is declared without one.
6. For a model already float16 (:func:`runs_in_float32`): which nodes onnxruntime runs in
   float32 behind Casts its session inserts, asked of onnxruntime the same way.
7. And the nodes with a float16 kernel that onnxruntime runs in float32 all the same, because
   every node they exchange float16 values with runs in float32 (:func:`_isolated`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

from fusionviz.passes.walk import proto_graphs

logger = logging.getLogger(__name__)

#: Rule 5: the most elements a probe's inputs and constants may hold together
PROBE_MAX_ELEMENTS = 1 << 22

_DOMAINS = ("", "ai.onnx", "com.microsoft")
_FLOAT, _FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
_FP16_MAX = float(np.finfo(np.float16).max)
_VALUE_ATTRS = {
    onnx.AttributeProto.INT: lambda a: a.i,
    onnx.AttributeProto.FLOAT: lambda a: a.f,
    onnx.AttributeProto.STRING: lambda a: a.s,
    onnx.AttributeProto.INTS: lambda a: tuple(a.ints),
    onnx.AttributeProto.FLOATS: lambda a: tuple(a.floats),
    onnx.AttributeProto.STRINGS: lambda a: tuple(a.strings),
}
_SUBGRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)

#: Rule 4: probe key -> None (runs, or nothing known) or why onnxruntime cannot run it in float16
_CACHE: dict[tuple, str | None] = {}
_LOCK = threading.Lock()


def _fp32_inputs(op_type: str, onnx_opset: int) -> set[int]:
    """Rule 1: input positions the converter keeps float32 for ``op_type`` (its own table)."""
    from onnxruntime.transformers.float16 import ALWAYS_FLOAT_INPUTS

    if op_type == "Resize" and onnx_opset <= 10:
        return {1}
    return set(ALWAYS_FLOAT_INPUTS.get(op_type, ()))


class _Facts:
    """Types, shapes and constants of every named value of a model (all graphs)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        try:
            typed = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception as exc:  # noqa: BLE001 - partial or no inference: fewer nodes are probed
            logger.info("fp16 kernel probe: shape inference failed: %s", " ".join(str(exc).split())[:200])
            typed = model
        self.types: dict[str, onnx.TypeProto] = {}
        self.consts: dict[str, onnx.TensorProto] = {}
        for g in proto_graphs(typed.graph):
            for v in (*g.input, *g.output, *g.value_info):
                if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                    self.types.setdefault(v.name, v.type)
            for t in g.initializer:
                self.consts.setdefault(t.name, t)
            for n in g.node:
                if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
                    a = next((a for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                             None)
                    if a is not None:
                        self.consts.setdefault(n.output[0], a.t)
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.ir_version = max(model.ir_version, 8)

    def elem_type(self, name: str) -> int:
        if name in self.consts:
            return self.consts[name].data_type
        t = self.types.get(name)
        return t.tensor_type.elem_type if t is not None else 0

    def dims(self, name: str) -> list[int] | None:
        if name in self.consts:
            return list(self.consts[name].dims)
        t = self.types.get(name)
        if t is None or not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.tensor_type.shape.dim]


def _converted(node: onnx.NodeProto, facts: _Facts) -> set[int]:
    """Rule 1: positions of the float32 inputs the converter turns float16 (empty: not asked)."""
    keep = _fp32_inputs(node.op_type, facts.opsets.get("", 0))
    return {i for i, name in enumerate(node.input)
            if name and i not in keep and facts.elem_type(name) == _FLOAT}


def _key(node: onnx.NodeProto, facts: _Facts) -> tuple:
    """Rule 4."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    inputs = tuple((facts.elem_type(n), len(d) if (d := facts.dims(n)) is not None else -1) if n else None
                   for n in node.input)
    attrs = tuple(sorted((a.name, _VALUE_ATTRS[a.type](a)) for a in node.attribute if a.type in _VALUE_ATTRS))
    return domain, node.op_type, facts.opsets.get(domain, 0), inputs, attrs


def _made_up(elem_type: int, dims: list[int]) -> np.ndarray:
    """Rule 2: floats 0.5, everything else 0 (False, empty strings)."""
    dtype = oh.tensor_dtype_to_np_dtype(elem_type)
    if dtype.kind == "f":
        return np.full(dims, 0.5, dtype)
    if dtype.kind in ("O", "U", "S"):
        return np.full(dims, "", object)
    return np.zeros(dims, dtype)


def _probe_model(node: onnx.NodeProto, facts: _Facts, fp16: set[int],
                 built_only: bool = False) -> tuple[bytes, dict] | None:
    """Rule 2: the one-node model (inputs at ``fp16`` positions float16) and its feeds, or None.

    ``built_only``: the model is only built, never run (rules 6 and 7: the kernel onnxruntime
    picks depends on element types, not on dims), so an input of unknown shape is declared
    without one and gets no feed."""
    inputs, inits, feeds, size = [], [], {}, 0
    for i, name in enumerate(node.input):
        if not name or name in feeds or any(t.name == name for t in inits):
            continue
        if name in facts.consts:
            try:
                arr = onh.to_array(facts.consts[name])
            except Exception:  # noqa: BLE001 - external data not at hand
                return None
            if i in fp16:  # the converter clamps to fp16's range, as here
                arr = np.clip(arr, -_FP16_MAX, _FP16_MAX).astype(np.float16)
            inits.append(onh.from_array(arr, name))
            size += arr.size
            continue
        elem, dims = facts.elem_type(name), facts.dims(name)
        if not elem or (dims is None and not built_only):  # rule 5
            return None
        elem = _FLOAT16 if i in fp16 else elem
        if dims is None:
            inputs.append(oh.make_tensor_value_info(name, elem, None))
            continue
        feeds[name] = _made_up(elem, dims)
        inputs.append(oh.make_tensor_value_info(name, elem, dims))
        size += feeds[name].size
    if size > PROBE_MAX_ELEMENTS:  # rule 5
        return None
    probe = onnx.NodeProto()
    probe.CopyFrom(node)
    if fp16 and probe.op_type == "Cast":
        for a in probe.attribute:
            if a.name == "to" and a.i == _FLOAT:
                a.i = _FLOAT16
    outputs = [oh.make_value_info(o, onnx.TypeProto()) for o in node.output if o]
    graph = oh.make_graph([probe], "probe", inputs, outputs, inits)
    opsets = [oh.make_opsetid(d, v) for d, v in facts.opsets.items()]
    model = oh.make_model(graph, opset_imports=opsets)
    model.ir_version = facts.ir_version
    return model.SerializeToString(), feeds


def _runs(data: bytes, feeds: dict) -> str | None:
    """Rule 2: None when onnxruntime (optimizer off) builds and runs the model, else its message."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # a refusal is the answer, not an error to print
    ro = ort.RunOptions()
    ro.log_severity_level = 4
    try:
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds, ro)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
        return _message(str(exc))
    return None


def _message(text: str) -> str:
    """onnxruntime's refusal without its codes and the probe's value and node names (the
    answer is cached for every node of the kind, and those names are the first one's)."""
    text = " ".join(text.split()).split("Status Message: ", 1)[-1]
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = text.replace("This is an invalid model. ", "")
    text = re.sub(r" of input parameter \([^)]*\)", " of an input", text)
    text = re.sub(r" in node \([^)]*\)", "", text)
    return text[:200]


def _probe(node: onnx.NodeProto, facts: _Facts) -> str | None:
    """Rule 3: why onnxruntime cannot run ``node`` in float16 (its message), or None."""
    fp16 = _converted(node, facts)
    if not fp16:
        return None
    key = _key(node, facts)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    why = None
    half = _probe_model(node, facts, fp16)
    if half is not None:
        refused = _runs(*half)
        if refused:
            full = _probe_model(node, facts, set())
            if full is not None and _runs(*full) is None:
                why = f"onnxruntime cannot run {node.op_type} in float16 on this CPU: {refused}"
            else:
                logger.info("fp16 kernel probe: %s fails in float32 too; nothing known", node.op_type)
    with _LOCK:
        _CACHE[key] = why
    return why


def fp16_refusals(model: onnx.ModelProto, blocked_ops: Iterable[str] = (),
                  kept: Iterable[str] = ()) -> dict[str, str]:
    """Rule 3: node name -> why onnxruntime cannot run it in float16, over all graphs.

    Args:
        model: the float32 model the converter will get.
        blocked_ops: op types the converter keeps float32 anyway (not asked about).
        kept: node names kept float32 anyway (not asked about).
    """
    blocked, skip = set(blocked_ops), set(kept)
    facts = _Facts(model)
    out: dict[str, str] = {}
    for g in proto_graphs(model.graph):
        for n in g.node:
            if (not n.name or n.name in skip or n.op_type in blocked or n.domain not in _DOMAINS
                    or any(a.type in _SUBGRAPH_ATTRS for a in n.attribute)):
                continue
            why = _probe(n, facts)
            if why:
                out[n.name] = why
    return out


#: Rule 6: probe key -> True when onnxruntime runs the node in float32 behind Casts it inserts
_WIDENED: dict[tuple, bool | None] = {}
_NO_OUTPUT_TYPE_ATTRS = ("to", "dtype")


def _inserts_casts(data: bytes) -> bool | None:
    """Rule 6: whether onnxruntime's session (optimizer off) puts Casts around the one node of
    the probe model ``data`` (its saved graph holds a Cast), or None when it cannot build it."""
    import os
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="fv_f16probe_") as tmp:
        path = os.path.join(tmp, "saved.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        so.log_severity_level = 4
        so.optimized_model_filepath = path
        try:
            ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            saved = onnx.load(path)
        except Exception:  # noqa: BLE001 - onnxruntime raises many types
            return None
    return any(n.op_type == "Cast" for n in saved.graph.node)


def runs_in_float32(model: onnx.ModelProto) -> set[str]:
    """Rule 6: names of the main graph's nodes that onnxruntime's CPU provider has no float16
    kernel for, and so runs in float32 between Casts its session inserts.

    6. Asked about: a named node of the ONNX or ``com.microsoft`` domain with a float16 input,
       no subgraph attribute, no attribute that sets its output type (``to``, ``dtype``), not a
       Cast. The question is the one-node model of rule 2 with the model's own input types;
       onnxruntime builds it with its optimizer off and saves the graph it would run
       (``SessionOptions.optimized_model_filepath``): a Cast in it is one its session
       inserted (InsertCastTransformer), so the node has no float16 kernel. Cached as rule 4;
       bounded as rule 5 (not asked: not widened).
    """
    facts = _Facts(model)
    out: set[str] = set()
    for n in model.graph.node:
        if (not n.name or n.op_type == "Cast" or n.domain not in _DOMAINS
                or any(a.type in _SUBGRAPH_ATTRS or a.name in _NO_OUTPUT_TYPE_ATTRS for a in n.attribute)
                or not any(name and facts.elem_type(name) == _FLOAT16 for name in n.input)):
            continue
        key = _key(n, facts)
        with _LOCK:
            known = key in _WIDENED
            widened = _WIDENED.get(key)
        if not known:
            probe = _probe_model(n, facts, set(), built_only=True)
            widened = _inserts_casts(probe[0]) if probe is not None else None
            with _LOCK:
                _WIDENED[key] = widened
        if widened:
            out.add(n.name)
    return out | _isolated(model, facts, out)


def _widened_probe(node: onnx.NodeProto, facts: _Facts) -> bytes | None:
    """Rule 7: the one-node model of rule 2 with its float16 inputs float32."""
    probe = _probe_model(node, facts, set(), built_only=True)
    if probe is None:
        return None
    model = onnx.load_from_string(probe[0])
    for v in model.graph.input:
        if v.type.tensor_type.elem_type == _FLOAT16:
            v.type.tensor_type.elem_type = _FLOAT
    for k, t in enumerate(model.graph.initializer):
        if t.data_type == _FLOAT16:
            model.graph.initializer[k].CopyFrom(onh.from_array(onh.to_array(t).astype(np.float32), t.name))
    return model.SerializeToString()


def _isolated(model: onnx.ModelProto, facts: _Facts, widened: set[str]) -> set[str]:
    """Rule 7: nodes with a float16 kernel that onnxruntime still runs in float32, because every
    neighbour they exchange float16 values with runs in float32 (its IsIsolatedFp16NodeOnCpu):
    at least one input from a node, no subgraph, no graph output, every float16 input made by
    a node of ``widened`` (or no node), at least one float16 output, every reader of one a node
    of ``widened``, and a float32 kernel (the float32 probe builds without a Cast)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for sub in proto_graphs(g):  # a value a subgraph reads is read by a node not asked about
        if sub is g:
            continue
        for n in sub.node:
            for i in n.input:
                readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    out: set[str] = set()
    for n in g.node:
        if (not n.name or n.name in widened or n.op_type == "Cast" or n.domain not in _DOMAINS
                or any(a.type in _SUBGRAPH_ATTRS or a.name in _NO_OUTPUT_TYPE_ATTRS for a in n.attribute)
                or not any(i in producer for i in n.input if i) or any(o in outputs for o in n.output)):
            continue
        f16_in = [i for i in n.input if i and facts.elem_type(i) == _FLOAT16]
        f16_out = [o for o in n.output if o and facts.elem_type(o) == _FLOAT16]
        if not f16_in or not f16_out:
            continue
        if any(i in producer and producer[i].name not in widened for i in f16_in):
            continue
        if any(not readers.get(o) or any(r.name not in widened for r in readers[o]) for o in f16_out):
            continue
        key = ("float32",) + _key(n, facts)
        with _LOCK:
            known = key in _WIDENED
            runs = _WIDENED.get(key)
        if not known:
            data = _widened_probe(n, facts)
            casts = _inserts_casts(data) if data is not None else None
            runs = casts is False
            with _LOCK:
                _WIDENED[key] = runs
        if runs:
            out.add(n.name)
    return out
