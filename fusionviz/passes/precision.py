"""Precision passes: FP16, INT8 dynamic, INT8 static (QDQ). Numerics change; errors are reported.

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
   (:func:`fusionviz.passes.ranges.overflowing_nodes`: the fp32 model is run to find them).
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
from fusionviz.passes.guards import (
    constant_array,
    constant_values,
    fp16_overflow,
    fp16_underflow,
    singular_path,
)
from fusionviz.passes.hygiene import from_tool
from fusionviz.passes.ranges import overflowing_nodes

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
CALIBRATION_SAMPLES = 8
#: constants this small on their way to a Log / divisor / root are epsilons (rule 8)
EPSILON_MAX = 1e-3


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
    """Report-only comparison of ``converted`` against ``original``.

    On ``feeds``, or else on one deterministic ``normal`` input set that calibration did not
    see (seed :data:`CALIBRATION_SAMPLES`): the error of reduced precision on representative
    data. Verification's extreme-value set would measure int8 saturation instead.
    """
    from fusionviz.inputs import make_inputs
    from fusionviz.verify import verify

    if feeds is None:
        try:
            feeds = make_inputs(original, shapes, seed=CALIBRATION_SAMPLES)
        except Exception:  # noqa: BLE001 - no plan for these inputs: let verify choose and say why
            feeds = None
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


def guard_nodes(model: ir.Model) -> dict[str, str]:
    """Rule 8: node name -> why it is not quantized, for the path from an epsilon (a constant of
    magnitude <= :data:`EPSILON_MAX`) to the Log / divisor / root it guards. int8 rounds the
    guarded sum to the activation's quantization step, far coarser than the epsilon."""
    keep: dict[str, str] = {}
    for graph in model.graphs():
        for v in constant_values(list(graph), list(graph.initializers.values())):
            arr = constant_array(v)
            if arr is None or arr.dtype.kind != "f" or arr.size == 0:
                continue
            a = np.abs(arr[np.isfinite(arr)])
            if not a.size or not np.any((a > 0) & (a <= EPSILON_MAX)):
                continue
            for node in singular_path(v):
                if node.name:
                    keep.setdefault(node.name, f"'{v.name}' is an epsilon guarding it")
    return keep


def convert_fp16(model: onnx.ModelProto, op_block_list: Iterable[str] = FP16_BLOCK_LIST,
                 node_block_list: Iterable[str] = ()) -> onnx.ModelProto:
    """Rule 1: fp16 weights and compute, fp32 inputs/outputs, sensitive ops kept fp32."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    blocked = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(op_block_list))
    node_block = [n.name for n in model.graph.node if n.domain not in ("", "ai.onnx", "com.microsoft")]
    node_block += [n for n in node_block_list if n not in node_block]
    with _quiet_tools():
        converted = convert_float_to_float16(
            onnx.ModelProto.FromString(model.SerializeToString()),
            keep_io_types=True,
            op_block_list=blocked,
            node_block_list=node_block,
        )
    moved = rehome_nodes(converted.graph)
    if moved:
        logger.info("fp16: %d Cast node(s) moved into the subgraph whose value they convert", moved)
    return converted


def _subgraphs(graph: onnx.GraphProto):
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield attr.g
            elif attr.type == onnx.AttributeProto.GRAPHS:
                yield from attr.graphs


def _definitions(graph: onnx.GraphProto, where: dict[str, onnx.GraphProto]) -> None:
    """Name -> the subgraph (below ``graph``) that defines it, for every subgraph."""
    for sub in _subgraphs(graph):
        names = [v.name for v in sub.input] + [t.name for t in sub.initializer]
        names += [o for n in sub.node for o in n.output if o]
        for name in names:
            where.setdefault(name, sub)
        _definitions(sub, where)


def rehome_nodes(graph: onnx.GraphProto) -> int:
    """Move main-graph nodes that read a value only a subgraph defines into that subgraph.

    onnxruntime's fp16 converter appends every Cast it adds to the main graph, also the Casts
    around a node it keeps fp32 inside an If/Loop branch, where they read and write branch
    values. Returns how many nodes moved (the caller sorts each graph afterwards).
    """
    main = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    main |= {o for n in graph.node for o in n.output if o}
    where: dict[str, onnx.GraphProto] = {}
    _definitions(graph, where)
    moved = 0
    for node in list(graph.node):
        missing = [i for i in node.input if i and i not in main and i in where]
        if not missing:
            continue
        home = where[missing[0]]
        graph.node.remove(node)
        home.node.append(node)
        for o in node.output:
            main.discard(o)
            where[o] = home
        moved += 1
    return moved


_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                     onnx.TensorProto.BFLOAT16})


def lift_constant_weights(model: onnx.ModelProto) -> int:
    """Rule 5 in place: float ``Constant`` nodes of the main graph become initializers.

    Returns how many. Their output names stay, so every consumer reads the same tensor.
    """
    graph = model.graph
    keep: list[onnx.NodeProto] = []
    lifted = 0
    for node in graph.node:
        attr = node.attribute[0] if len(node.attribute) == 1 else None
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx") and attr is not None
                and attr.name == "value" and attr.t.data_type in _FLOATS and not attr.t.HasField("data_location")):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attr.t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
            lifted += 1
        else:
            keep.append(node)
    if lifted:
        del graph.node[:]
        graph.node.extend(keep)
        model.ir_version = max(model.ir_version, 4)
    return lifted


def quantize_int8_dynamic(model: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
    """Rule 2: onnxruntime dynamic quantization (int8 weights), ``nodes_to_exclude`` left float."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="fusionviz-int8d-") as tmp:
        src, dst = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        with _quiet_tools():
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, nodes_to_exclude=list(nodes_to_exclude))
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
        with _quiet_tools():
            quantize_static(src, dst, Reader(feeds), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            nodes_to_exclude=list(nodes_to_exclude))
        return onnx.load(dst)


def runtime_failure(original: onnx.ModelProto, converted: onnx.ModelProto) -> str | None:
    """Rule 4: why onnxruntime cannot load or run ``converted`` on inputs ``original`` runs on,
    or None (also when ``original`` itself does not run on them: then nothing is known)."""
    from fusionviz import errors
    from fusionviz.inputs import make_inputs
    from fusionviz.verify import make_session, run_model

    try:
        feeds = make_inputs(original, seed=CALIBRATION_SAMPLES)
        run_model(make_session(original), feeds)
    except Exception:  # noqa: BLE001 - no inputs for it, or it fails itself: nothing to judge
        return None
    try:
        run_model(make_session(converted), feeds)
    except errors.FusionvizError as exc:
        return f"the converted model does not run: {exc}"
    return None


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


def repaired(converted: onnx.ModelProto, original: onnx.ModelProto) -> ir.Model:
    """Rule 6: a tool's output as an IR model that passes the checker, or ValueError.

    Raises:
        ValueError: the tool changed the graph's inputs or outputs (names or element types).
    """
    model = from_tool(converted, original)
    why = _io_changed(original, ir.serde.serialize_model(model))
    if why:
        raise ValueError(why)
    return model


def _io_changed(before: onnx.ModelProto, after: onnx.ModelProto) -> str | None:
    """How the graph's input/output names or element types differ, or None."""
    def sig(m: onnx.ModelProto, values) -> list[tuple[str, int]]:
        inits = {t.name for t in m.graph.initializer}
        return [(v.name, v.type.tensor_type.elem_type) for v in values if v.name not in inits]

    for kind in ("input", "output"):
        a, b = sig(before, getattr(before.graph, kind)), sig(after, getattr(after.graph, kind))
        if a != b:
            return f"the tool changed the graph {kind}s from {a} to {b}"
    return None


# --------------------------------------------------------------------------- passes


class _PrecisionPass(Pass):
    category = Category.PRECISION
    exact = False
    needs_shapes = False

    def convert(self, proto: onnx.ModelProto, **options) -> onnx.ModelProto:  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self, model: ir.Model) -> dict:
        """Keyword arguments for :meth:`convert` that need the IR model (none by default)."""
        return {}

    def finish(self, model: ir.Model, original: onnx.ModelProto) -> None:
        """Fix-ups of the converted model, in place (none by default)."""

    def _run(self, model: ir.Model) -> tuple[ir.Model | None, str]:
        options = self.prepare(model)
        proto = ir.serde.serialize_model(model)
        tool_input = onnx.ModelProto()
        tool_input.CopyFrom(proto)
        lift_constant_weights(tool_input)
        try:
            converted = self.convert(tool_input, **options)
            new = repaired(converted, proto)
            self.finish(new, proto)
        except Exception as exc:  # noqa: BLE001 - rule 4: a pass that does not apply never raises
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            logger.info("%s: not applied: %s", self.name, reason)
            return None, reason
        result = ir.serde.serialize_model(new)
        err = precision_error(proto, result)
        if err.error:
            why = runtime_failure(proto, result)
            if why:  # rule 4: the tool wrote a model onnxruntime cannot run
                logger.info("%s: not applied: %s", self.name, why)
                return None, why
        return new, err.describe()

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

**Kept fp32:** besides the sensitive ops, the nodes from a constant fp16 cannot hold to the op
it protects: an epsilon on its way to a `Log`, a division or a root (`1e-10` is 0 in fp16,
and `log(x + 0)` is -inf when `x` is 0), any node reading a constant beyond ±65504, and any
node that makes or reads an activation that reaches half of that on the verification inputs
(the fp32 model is run once per input set to find them: a dense layer on 0-255 byte
embeddings reaches 1.7e6, infinite in fp16).
Two fp32 nodes in a row pass their value in fp32 (no fp16 round trip between them).
"""

    def prepare(self, model: ir.Model) -> dict:
        keep = fp32_nodes(model)
        for name, why in overflowing_nodes(ir.serde.serialize_model(model)).items():
            keep.setdefault(name, why)
        for name, why in list(keep.items())[:10]:
            logger.info("fp16: node %s stays fp32: %s", name, why)
        return {"node_block_list": sorted(keep)}

    def convert(self, proto: onnx.ModelProto, node_block_list: Iterable[str] = ()) -> onnx.ModelProto:
        return convert_fp16(proto, node_block_list=node_block_list)

    def finish(self, model: ir.Model, original: onnx.ModelProto) -> None:
        dropped = drop_round_trips(model, {n.name for n in original.graph.node})
        if dropped:
            logger.info("fp16: %d fp32 -> fp16 -> fp32 round trip(s) between fp32 nodes removed", dropped)


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

    def prepare(self, model: ir.Model) -> dict:
        return {"nodes_to_exclude": sorted(guard_nodes(model))}

    def convert(self, proto: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
        return quantize_int8_dynamic(proto, nodes_to_exclude)


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

    def prepare(self, model: ir.Model) -> dict:
        return {"nodes_to_exclude": sorted(guard_nodes(model))}

    def convert(self, proto: onnx.ModelProto, nodes_to_exclude: Iterable[str] = ()) -> onnx.ModelProto:
        return quantize_int8_static(proto, nodes_to_exclude=nodes_to_exclude)


PASSES: list[type[Pass]] = [Fp16, Int8Dynamic, Int8Static]
