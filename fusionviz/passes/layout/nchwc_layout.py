"""nchwc_layout: onnxruntime's NCHWc blocked layout, captured as a visible graph rewrite.

onnxruntime's CPU provider rewrites convolutional networks at its "layout" level: 4-D Conv,
pooling and element-wise chains move into the ``com.microsoft.nchwc`` domain, which stores
activations as ``N × C/b × H × W × b`` blocks (``b`` = 8 floats with AVX2, 16 with AVX-512), with
``ReorderInput``/``ReorderOutput`` nodes where the graph enters or leaves the blocked layout and
weights pre-reordered once. This pass asks onnxruntime to do exactly that and saves the result
(``SessionOptions.optimized_model_filepath``), then hands the captured graph back to the
pipeline, which draws every new node with its provenance (matched by tensor names).

Rules:

1. Only models with a 4-D ``Conv`` are touched; anything else returns no changes.
2. The capture runs at onnxruntime's highest level (the layout transformer runs after, and
   depends on, its basic/extended fusions), so the captured graph also holds onnxruntime's own
   fusions of whatever fusionviz's passes left; they are reported by this pass too.
3. The capture must load: the saved model is opened again in onnxruntime with optimizations
   off; if onnxruntime cannot read back what it wrote, the pass leaves the model alone and logs
   why. Numerical equality is checked where it is for every pass: by the verification of the
   pipeline's result (``optimize``, the app, ``tune`` and ``bench`` all run it), which reports a
   difference instead of hiding it behind a pass that quietly declined.
4. The capture must be a valid ONNX model: onnxruntime's fusions that write its internal ops
   into the ONNX domain, where no ONNX opset has them (``SimplifiedLayerNormalization``) or
   the model's opset does not (``LayerNormalization`` before opset 17), are switched off for
   the capture (:func:`disabled_fusions`); a capture that still holds an ONNX-domain op the
   model's opset lacks is not used.
5. onnxruntime's saved graph is read like any tool's output
   (:func:`fusionviz.passes.hygiene.from_tool`): its value_info dropped and inferred afresh,
   value names unique, the IR version raised to 4 when its initializers are no longer graph
   inputs (IR 3 models list every weight as an input; onnxruntime does not).
6. Precision is never changed. onnxruntime registers NCHWc kernels for float32 only
   (:func:`nchwc_types`, read from its kernel registry), and its session runs a float16 Conv
   in float32 behind Casts it inserts, which its saved graph keeps: capturing an fp16 model
   would widen its weights and add Casts. So a Conv whose type has no NCHWc kernel is left
   alone and reported as a near miss (kind ``no_kernel``); a model with no Conv of a type that
   has one is not captured at all, and the reason is the pass's. A capture that still changes
   a tensor's element type or adds a Cast (float16 parts beside float32 Convs: onnxruntime
   widens those too) breaks the pass's postcondition
   (:func:`fusionviz.passes.layout.dtypes.precision_change`) and the pass is declined with it.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile

import onnx
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass, PostconditionError
from fusionviz.passes.facts import onnx_opset
from fusionviz.passes.hygiene import forget_made_up_dims, from_tool
from fusionviz.passes.layout.dtypes import precision_change, type_name

logger = logging.getLogger(__name__)

NCHWC = "com.microsoft.nchwc"


def _convs(model: ir.Model) -> list[ir.Node]:
    """Rule 1: the main graph's Convs (and onnxruntime's FusedConvs) that may be 4-D."""
    out = []
    for node in model.graph:
        if node.op_type == "Conv" or (node.op_type == "FusedConv" and node.domain == "com.microsoft"):
            x = node.inputs[0]
            if x is not None and (x.shape is None or len(x.shape) == 4):
                out.append(node)
    return out


#: Rule 6: what onnxruntime's CPU provider registers when its kernel registry cannot be read
_NCHWC_TYPES_KNOWN = frozenset({"float32"})


@functools.cache
def nchwc_types() -> frozenset[str]:
    """Rule 6: element types (``float32``, ``float16``) of onnxruntime's NCHWc Conv kernels on CPU.

    Read from onnxruntime's kernel registry; where this build does not expose it, the types
    its CPU provider has always registered (float32 only).
    """
    try:
        from onnxruntime.capi import _pybind_state

        defs = _pybind_state.get_all_opkernel_def()
    except Exception:  # noqa: BLE001 - an onnxruntime without the registry listing
        logger.info("nchwc_layout: onnxruntime's kernel registry is not readable; assuming float32 NCHWc kernels")
        return _NCHWC_TYPES_KNOWN
    types = {type_name(t) for k in defs
             if k.domain == NCHWC and k.op_name == "Conv" and k.provider == "CPUExecutionProvider"
             for ts in k.type_constraints.values() for t in ts}
    return frozenset(types) or _NCHWC_TYPES_KNOWN


def _conv_type(node: ir.Node) -> ir.DataType | None:
    """The element type a Conv computes in: its input's, else its weight's, else None."""
    for v in node.inputs[:2]:
        if v is None:
            continue
        if v.dtype is not None:
            return v.dtype
        t = v.const_value
        p = v.producer()
        if t is None and p is not None and p.op_type == "Constant" and p.domain in ("", "ai.onnx"):
            attr = p.attributes.get("value")
            t = attr.as_tensor() if attr is not None and attr.type is ir.AttributeType.TENSOR else None
        if t is not None:
            return t.dtype
    return None


def without_kernel(convs: list[ir.Node]) -> dict[str, list[ir.Node]]:
    """Rule 6: element type name -> the Convs of that type onnxruntime has no NCHWc kernel for."""
    kinds = nchwc_types()
    out: dict[str, list[ir.Node]] = {}
    for node in convs:
        t = _conv_type(node)
        if t is not None and type_name(int(t)) not in kinds:
            out.setdefault(type_name(int(t)), []).append(node)
    return out


#: onnxruntime optimizer names (one fusion is registered per level; unknown names are ignored)
#: -> (the op they write into the ONNX domain, first ONNX opset that has it; None: no opset)
_ORT_INTERNAL_ONNX_OPS: dict[tuple[str, ...], tuple[str, int | None]] = {
    ("SimplifiedLayerNormFusion",): ("SimplifiedLayerNormalization", None),
    ("LayerNormFusionL1", "LayerNormFusionL2", "LayerNormFusion"): ("LayerNormalization", 17),
}


def disabled_fusions(opset: int) -> list[str]:
    """Rule 4: onnxruntime fusions that would write an op the model's ONNX opset lacks."""
    return [f for names, (_, since) in _ORT_INTERNAL_ONNX_OPS.items() if since is None or opset < since
            for f in names]


def foreign_onnx_ops(model: onnx.ModelProto) -> list[str]:
    """Rule 4: ops in the ONNX domain that the model's ONNX opset does not define."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    ops = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    return sorted(op for op in ops if not onnx.defs.has(op, opset, ""))


def drop_stray_inputs(captured: onnx.ModelProto, original: onnx.ModelProto) -> str | None:
    """Rule 5: remove graph inputs onnxruntime left behind for weights it folded away.

    An IR 3 model lists every weight as a graph input with an initializer of the same name;
    onnxruntime treats them as constants, folds some, and saves the input without its
    initializer, which would turn a folded weight into a new required input. Such inputs
    are dropped when nothing reads them. Returns why the capture cannot be used, or None.
    """
    real = {v.name for v in original.graph.input} - {t.name for t in original.graph.initializer}
    inits = {t.name for t in captured.graph.initializer}
    stray = [v for v in captured.graph.input if v.name not in real and v.name not in inits]
    if not stray:
        return None
    read = {i for n in captured.graph.node for i in n.input}
    used = [v.name for v in stray if v.name in read]
    if used:
        return f"onnxruntime turned weight(s) {', '.join(used[:3])} into graph inputs"
    keep = [v for v in captured.graph.input if v.name in real or v.name in inits]
    del captured.graph.input[:]
    captured.graph.input.extend(keep)
    return None


def capture_ort_bytes(proto: onnx.ModelProto | bytes, level: str = "all",
                      disabled_optimizers: list[str] | None = None, weights_dir: str | None = None) -> bytes:
    """The graph onnxruntime builds at ``level`` on this CPU, as the bytes it saved.

    Args:
        proto: the model.
        level: onnxruntime's optimization level.
        disabled_optimizers: onnxruntime optimizers (by name) not to run.
        weights_dir: the folder weights on disk are read from, for bytes (a model names its
            own: ``fusionviz.model_io`` rule 9); onnxruntime saves them inline.

    Raises:
        fusionviz.errors.RuntimeLoadError: onnxruntime cannot load the model.
    """
    import onnxruntime as ort

    from fusionviz import errors
    from fusionviz.model_io import ort_session_config
    from fusionviz.ortlevels import graph_optimization_level

    config = ort_session_config(None if isinstance(proto, bytes) else proto, folder=weights_dir)
    data = proto if isinstance(proto, bytes) else proto.SerializeToString()
    with tempfile.TemporaryDirectory(prefix="fusionviz-layout-") as tmp:
        path = os.path.join(tmp, "ort_optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = graph_optimization_level(level)
        so.optimized_model_filepath = path
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        # The session is only built to save its graph: packing weights for the kernels
        # (prepacking) changes nothing in the saved graph and costs a third of the time.
        so.add_session_config_entry("session.disable_prepacking", "1")
        for key, value in config.items():
            if key != "session.disable_prepacking":  # set above already (onnxruntime warns of a repeat)
                so.add_session_config_entry(key, value)
        extra = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
        try:
            ort.InferenceSession(data, so, providers=["CPUExecutionProvider"], **extra)
        except Exception as exc:  # noqa: BLE001 - ORT raises many types
            raise errors.RuntimeLoadError(f"onnxruntime cannot load the model: {' '.join(str(exc).split())[:200]}") from None
        with open(path, "rb") as f:
            return f.read()



def _unused(why: str) -> None:
    """The captured graph is not used: logged, and the pass's reason in its near misses."""
    logger.info("nchwc_layout: captured graph not used: %s", why)
    nearmiss.note((), None, f"the NCHWc graph onnxruntime captured is not used: {why}", kind="pass", rule="nchwc")

class NchwcLayout(Pass, name="nchwc_layout", category=Category.LAYOUT, order=410,
                  trigger_ops={"Conv", "FusedConv"}):
    title = "NCHWc blocked layout (onnxruntime's layout level, captured)"
    in_place = False  # returns the graph onnxruntime saved, read back as a new model
    needs_shapes = False
    explain = """\
**What:** rewrites convolutional parts of the graph into onnxruntime's **NCHWc** blocked layout —
`com.microsoft.nchwc.Conv`, `MaxPool`, `GlobalAveragePool`, … with `ReorderInput` /
`ReorderOutput` nodes drawn where the graph enters and leaves the blocked layout. It is
onnxruntime's own "layout" transformation, captured from onnxruntime
(`optimized_model_filepath`) so you can *see* it; the captured model then runs at the same speed
with onnxruntime's optimizer switched off. The capture also contains onnxruntime's own fusions
(the layout transformer runs after them); the pass reports them as its changes too.

**Why faster:** in NCHW a convolution's inner loop strides across planes; in NCHWc the `b`
channels of a block sit next to each other, so one SIMD register holds `b` output channels for
one pixel and the kernel does `b`-wide FMAs with unit-stride loads. Activations stay blocked
between consecutive convolutions, so the reorders are paid once per region, not per layer. On
CNNs this is onnxruntime's largest CPU win (about 1.5× on ResNet-18), larger than all fusions.

**Hardware-specific:** the block size `b` is the CPU's SIMD width (8 floats with AVX2, 16 with
AVX-512), chosen when the graph is captured. The saved model needs onnxruntime's CPU provider
(the `com.microsoft.nchwc` kernels exist nowhere else) and a CPU with the same SIMD width: keep
the original for other machines.

**Math:** none changes: `y[n, c//b, h, w, c%b] = y_nchw[n, c, h, w]` is a pure relayout; the
convolution sums are the same products, possibly in a different order (fp32 rounding).

**Precision is kept:** onnxruntime has NCHWc kernels for float32 only. A float16 Conv is left
as it is (listed as a near miss): capturing it would run it in float32, with its weights
widened and Casts added. A capture that would change any tensor's type is declined.
"""

    uses_origin_hints = True

    def origin_tensor(self, node: ir.Node) -> str | None:
        """onnxruntime names a node it rewrites after the original node's output tensor
        (``<tensor>_nchwc``); nodes it keeps keep their name and outputs."""
        if node.op_type.startswith("Reorder"):
            return None  # a layout conversion, not a stand-in for an original node
        if node.name.endswith("_nchwc"):
            return node.name[: -len("_nchwc")]
        return next((v.name for v in node.outputs if v.name), None)

    def transform(self, model: ir.Model) -> ir.Model | None:
        # Rule 1
        convs = _convs(model)
        if not convs:
            return None
        # Rule 6: Convs of a type onnxruntime has no NCHWc kernel for stay as they are.
        narrow = without_kernel(convs)
        kinds = " and ".join(sorted(nchwc_types()))
        for t, nodes in narrow.items():
            for node in nodes:
                nearmiss.note([node], node, f"onnxruntime has NCHWc Conv kernels for {kinds} only, and this Conv "
                              f"is {t}: capturing it would change its precision (onnxruntime runs a float16 Conv "
                              "in float32: weights widened, Casts added)",
                              kind="no_kernel", rule="nchwc")
        if sum(len(v) for v in narrow.values()) == len(convs):
            types = " and ".join(sorted(narrow))
            why = (f"not captured: every Conv of this model is {types}, and onnxruntime has NCHWc kernels "
                   f"for {kinds} only; a layout pass keeps the model's precision, so the Convs are left alone")
            logger.info("nchwc_layout: %s", why)
            # listed first: past the near-miss limit the per-Conv ones are cut, not this
            nearmiss.note((), None, why, kind="pass", rule="nchwc", depth=1000)
            return None
        from fusionviz import errors
        from fusionviz.model_io import weights_dir
        from fusionviz.verify import make_session

        # written as the pipeline writes it (hygiene rule 8: made-up dim names would let the
        # capture's own fusions differ from what onnxruntime does with the written model)
        proto = forget_made_up_dims(ir.serde.serialize_model(model))
        data = proto.SerializeToString()  # once: capture and verification both load these bytes
        opset = onnx_opset(model)
        try:
            captured_bytes = capture_ort_bytes(data, disabled_optimizers=disabled_fusions(opset),
                                               weights_dir=weights_dir(proto))
        except Exception as exc:  # noqa: BLE001 - a pass that does not apply never raises
            _unused(f"onnxruntime's layout capture failed: {exc}")
            return None
        captured = onnx.ModelProto.FromString(captured_bytes)
        n_nchwc = sum(1 for n in captured.graph.node if n.domain == NCHWC)
        if n_nchwc == 0:
            _unused("onnxruntime chose no NCHWc kernels for this model on this CPU")
            return None
        foreign = foreign_onnx_ops(captured)  # rule 4
        if foreign:
            _unused(f"onnxruntime wrote {', '.join(foreign)}, which ONNX opset {opset} does not have")
            return None
        # Rule 3: the captured graph must load with ORT off.
        try:
            make_session(captured_bytes, level="off")
        except errors.FusionvizError as exc:
            _unused(str(exc))
            return None
        why = drop_stray_inputs(captured, proto)
        if why:
            _unused(why)
            return None
        changed = precision_change(proto, captured)  # rule 6
        if changed:
            raise PostconditionError(f"a layout pass keeps every tensor's precision, and onnxruntime's NCHWc "
                                     f"capture changed it: {changed}")
        captured.doc_string = proto.graph.doc_string or captured.doc_string
        new = from_tool(captured, proto)  # rule 5
        # onnxruntime keeps tensor and node names; carry over the model-level metadata.
        new.producer_name = model.producer_name
        new.producer_version = model.producer_version
        new.metadata_props.update(model.metadata_props)
        return new


