"""Display graph: what the picture shows, computed from a ModelProto (no drawing here).

Rules (the code points back to them):

1. One display node per op node of the main graph, keyed by its name (``#<index>`` when the
   name is empty or repeated, so every node can still be asked about in :func:`node_details`).
2. Initializers and ``Constant`` outputs are *weights*: they are folded into their consumer's
   label ("W 64×3×7×7", small integer tensors with their values) and never drawn. A ``Constant``
   node whose outputs are only consumed as weights is not drawn either.
3. Tensor shapes and dtypes come from onnx shape inference (best effort); symbolic dims keep
   their names, unknown dims are ``?``.
4. Subgraphs (If/Loop/Scan bodies) are shown collapsed in their node's label ("body: 12 nodes").
5. A *hub* tensor (one value read all over the graph: an attention mask, a shape constant) is
   marked; the DOT writer keeps it from constraining the layout. A tensor is a hub when at least
   ``HUB_MIN_CONSUMERS`` nodes read it, or at least 3 do and they lie far apart in model order
   (more than ``HUB_SPAN`` nodes, or a fifth of the model): a layer input read by q, k, v and the
   residual is not a hub; a mask read once per layer is.
6. A node's *scope* comes from its name: ``/encoder/layer.3/attention/self/MatMul`` is in scope
   ``encoder/layer.3/attention/self``; ``layers.0.c1.conv`` is in ``layers.0/c1`` (numeric parts
   stay with the part before them). The dynamo exporter's ``pkg.torch.onnx.name_scopes`` metadata
   wins when present.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import re
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fusionviz.passes.provenance import PASSES_KEY, SOURCES_KEY  # noqa: F401 - re-exported to the views

logger = logging.getLogger(__name__)

TORCH_SCOPES_KEY = "pkg.torch.onnx.name_scopes"

#: A tensor read by at least this many nodes is a hub (rule 5).
HUB_MIN_CONSUMERS = 6
HUB_SPAN = 60

_DTYPE_SHORT = {
    "FLOAT": "f32", "FLOAT16": "f16", "BFLOAT16": "bf16", "DOUBLE": "f64", "INT64": "i64",
    "INT32": "i32", "INT16": "i16", "INT8": "i8", "UINT8": "u8", "UINT16": "u16", "UINT32": "u32",
    "UINT64": "u64", "BOOL": "bool", "STRING": "str", "COMPLEX64": "c64", "COMPLEX128": "c128",
    "FLOAT8E4M3FN": "f8e4m3", "FLOAT8E5M2": "f8e5m2", "INT4": "i4", "UINT4": "u4",
}

# Attributes worth showing, per op; others are shown when they are short (see _format_attrs).
_ATTR_DEFAULTS: dict[str, object] = {
    "group": 1, "transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0, "keepdims": 1,
    "allowzero": 0, "auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
    "storage_order": 0, "noop_with_empty_axes": 0, "select_last_index": 0,
}
# Conv/pool attributes in a compact form: "k3×3 s2 p1 d2".
_COMPACT = {"kernel_shape": ("k", "×"), "strides": ("s", ","), "pads": ("p", ","), "dilations": ("d", ",")}
_HIDDEN_ATTRS = {"epsilon", "momentum", "training_mode", "spatial", "is_test"}


@dataclasses.dataclass
class DisplayNode:
    """One op node as drawn."""

    key: str
    name: str
    op: str
    domain: str
    index: int
    inputs: list[str]
    outputs: list[str]
    attrs: list[str]
    weights: list[str]
    subgraphs: list[str]
    scope: tuple[str, ...]
    sources: list[str]
    passes: list[str]

    @property
    def short_name(self) -> str:
        """The last part of the name (scopes dropped)."""
        return short_name(self.name) if self.name else self.key


@dataclasses.dataclass
class DisplayGraph:
    """The whole display graph of one model."""

    nodes: list[DisplayNode]
    by_key: dict[str, DisplayNode]
    producer: dict[str, str]  # tensor -> node key
    consumers: dict[str, list[str]]  # tensor -> node keys (drawn nodes only)
    tensor_info: dict[str, tuple[str, str]]  # tensor -> (dtype, shape text)
    inputs: list[str]  # graph inputs that are not initializers
    outputs: list[str]
    hubs: set[str]
    weights: set[str]

    def edge_list(self) -> list[tuple[str, str, str]]:
        """(producer key, consumer key, tensor) for every node-to-node edge."""
        out = []
        for n in self.nodes:
            seen: set[str] = set()
            for t in n.inputs:
                p = self.producer.get(t)
                if p is not None and t not in seen:
                    seen.add(t)
                    out.append((p, n.key, t))
        return out


def short_name(name: str) -> str:
    """``/encoder/layer.3/attention/self/MatMul`` → ``MatMul``; ``layers.0.c1`` → ``c1``."""
    s = name.rstrip("/")
    if "/" in s:
        s = s.rsplit("/", 1)[1] or s
    return s or name


def dtype_short(elem_type: int) -> str:
    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return "?"
    return _DTYPE_SHORT.get(name, name.lower())


def format_dims(dims: Iterable[object]) -> str:
    parts = [str(d) for d in dims]
    return "×".join(parts) if parts else "scalar"


def _type_info(tp: onnx.TypeProto) -> tuple[str, str] | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    dtype = dtype_short(tt.elem_type)
    if not tt.HasField("shape"):
        return dtype, "?"
    dims: list[object] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            # onnx shape inference invents "unk__12" for dims it cannot name: show them as "?"
            dims.append("?" if d.dim_param.startswith("unk__") else d.dim_param)
        else:
            dims.append("?")
    return dtype, format_dims(dims)


#: In-memory initializers of at least this many bytes are given to shape inference without their
#: data (see :func:`weightless`).
WEIGHTLESS_MIN_BYTES = 1 << 20


def tensor_bytes(t: onnx.TensorProto) -> int:
    """A tensor's bytes from its dims and type (its data is not read); 0 for strings and unknown types."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    n = 1
    for d in t.dims:
        n *= int(d)
    return n * itemsize


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as shape inference needs it: the same graph, with every in-memory main-graph
    initializer of WEIGHTLESS_MIN_BYTES or more kept by name, type and dims only (marked as
    external data, which inference does not read; no shape depends on a weight's values). The
    model itself when it holds no such tensor; the large data is never copied."""
    g = model.graph
    big = [t.data_location != onnx.TensorProto.EXTERNAL and t.data_type != onnx.TensorProto.STRING
           and tensor_bytes(t) >= WEIGHTLESS_MIN_BYTES for t in g.initializer]
    if not any(big):
        return model
    out = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            _copy_field(out, fd, value)
    for fd, value in g.ListFields():
        if fd.name != "initializer":
            _copy_field(out.graph, fd, value)
    for t, strip in zip(g.initializer, big, strict=True):
        if not strip:
            out.graph.initializer.append(t)
            continue
        kept = out.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims,
                                         data_location=onnx.TensorProto.EXTERNAL)
        kept.external_data.add(key="location", value="weightless")
    return out


def _copy_field(out, fd, value) -> None:
    target = getattr(out, fd.name)
    repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
    if fd.type == fd.TYPE_MESSAGE and repeated:
        target.extend(value)
    elif fd.type == fd.TYPE_MESSAGE:
        target.CopyFrom(value)
    elif repeated:
        target.extend(value)
    else:
        setattr(out, fd.name, value)


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape-inferred copy of ``model``; the model itself when inference fails (rule 3). Large
    in-memory weights are left out of the copy (:func:`weightless`): it is read for types,
    shapes and small constants only."""
    try:
        return onnx.shape_inference.infer_shapes(weightless(model), strict_mode=False, data_prop=False)
    except Exception as exc:  # noqa: BLE001 - best effort: a graph without shapes still draws
        logger.info("shape inference failed: %s", exc)
        return model


def tensor_infos(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """Tensor name → (dtype, shape text) from value_info, inputs, outputs and initializers."""
    g = model.graph
    info: dict[str, tuple[str, str]] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        ti = _type_info(vi.type)
        if ti is not None:
            info[vi.name] = ti
    for t in g.initializer:
        info[t.name] = (dtype_short(t.data_type), format_dims(t.dims))
    return info


def scope_of(node: onnx.NodeProto) -> tuple[str, ...]:
    """Rule 6: the scope path of a node."""
    for p in node.metadata_props:
        if p.key == TORCH_SCOPES_KEY and p.value:
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                break
            if isinstance(scopes, (list, tuple)):
                parts = [str(s).rsplit(".", 1)[-1] if "." in str(s) else str(s) for s in scopes if s]
                return _merge_numeric(parts)
            break
    return scope_from_name(node.name)


def _merge_numeric(parts: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for part in parts:
        if out and part.isdigit():
            out[-1] = f"{out[-1]}.{part}"
        elif part:
            out.append(part)
    return tuple(out)


_SCOPE_CHARS = re.compile(r"^[\w.\-:/\[\]]+$")


def scope_from_name(name: str) -> tuple[str, ...]:
    """Rule 6 for names: slash style first, then dot style; no scope for plain names."""
    if not name or len(name) > 1000 or not _SCOPE_CHARS.match(name):
        return ()
    if "/" in name:
        parts = [p for p in name.split("/") if p]
        return tuple(parts[:-1])
    if "." in name:
        parts = _merge_numeric(name.split("."))
        return tuple(parts[:-1])
    return ()


def _meta(node: onnx.NodeProto, key: str) -> list[str]:
    for p in node.metadata_props:
        if p.key == key:
            return [s for s in p.value.split(",") if s]
    return []


def node_keys(nodes: Iterable[onnx.NodeProto]) -> list[str]:
    """Rule 1: the key of every node (its name, or ``#index`` when empty or repeated)."""
    keys: list[str] = []
    seen: set[str] = set()
    names = [n.name for n in nodes]
    counts: dict[str, int] = {}
    for nm in names:
        counts[nm] = counts.get(nm, 0) + 1
    for i, nm in enumerate(names):
        key = nm if nm and counts[nm] == 1 else f"#{i}"
        while key in seen:
            key = f"#{i}_"
        seen.add(key)
        keys.append(key)
    return keys


def _format_value(v: object, limit: int = 28) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, float):
        text = f"{v:.4g}"
    elif isinstance(v, (list, tuple)):
        if v and isinstance(v[0], (onnx.GraphProto, onnx.TensorProto)):
            return None
        items = [f"{x:.4g}" if isinstance(x, float) else
                 (x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)) for x in v]
        text = "[" + ",".join(items) + "]"
    elif isinstance(v, (onnx.GraphProto, onnx.TensorProto, onnx.SparseTensorProto, onnx.TypeProto)):
        return None
    else:
        text = str(v)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _format_attrs(node: onnx.NodeProto, max_items: int = 6) -> list[str]:
    out: list[str] = []
    for a in node.attribute:
        if a.name in _HIDDEN_ATTRS:
            continue
        try:
            v = helper.get_attribute_value(a)
        except Exception:  # noqa: BLE001 - a malformed attribute is shown as '?'
            v = "?"
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if a.name in _ATTR_DEFAULTS and v == _ATTR_DEFAULTS[a.name]:
            continue
        if a.name in ("strides", "dilations") and isinstance(v, list) and all(x == 1 for x in v):
            continue
        if a.name == "pads" and isinstance(v, list) and all(x == 0 for x in v):
            continue
        if a.name == "to" and isinstance(v, int):
            v = dtype_short(v)
        if a.name in _COMPACT and isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            short, sep = _COMPACT[a.name]
            same = len(set(v)) == 1 and a.name != "kernel_shape"
            out.append(f"{short}{v[0] if same else sep.join(str(x) for x in v)}")
            continue
        text = _format_value(v)
        if text is None:
            continue
        out.append(f"{a.name}={text}")
        if len(out) >= max_items:
            break
    return out


def _subgraph_summary(node: onnx.NodeProto) -> list[str]:
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(f"{a.name}: {_count(a.g)} nodes")
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.append(f"{a.name}: {len(a.graphs)} graphs, {sum(_count(g) for g in a.graphs)} nodes")
    return out


def _count(g: onnx.GraphProto) -> int:
    n = 0
    for node in g.node:
        n += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += _count(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                n += sum(_count(s) for s in a.graphs)
    return n


def _input_role(op: str, domain: str, idx: int, opset: int) -> str:
    if domain not in ("", "ai.onnx") and op.startswith("Fused") and not onnx.defs.has(op, domain):
        op, domain = op[len("Fused"):], ""  # FusedConv/FusedGemm/FusedMatMul take their base op's inputs
    try:
        schema = onnx.defs.get_schema(op, opset, domain)
        params = schema.inputs
        if idx < len(params):
            return params[idx].name
        if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            return params[-1].name
    except Exception:  # noqa: BLE001 - custom ops have no schema
        pass
    return f"in{idx}"


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
    return None


def _weight_text(role: str, t: onnx.TensorProto) -> str:
    dims = list(t.dims)
    size = int(np.prod(dims)) if dims else 1
    if size <= 8 and t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and not t.data_location:
        try:
            vals = numpy_helper.to_array(t).reshape(-1).tolist()
            return f"{role} [{','.join(str(v) for v in vals)}]" if dims else f"{role} = {vals[0]}"
        except Exception:  # noqa: BLE001
            pass
    if size == 1 and t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE) and not t.data_location:
        try:
            return f"{role} = {float(numpy_helper.to_array(t).reshape(-1)[0]):.4g}"
        except Exception:  # noqa: BLE001
            pass
    return f"{role} {format_dims(dims)}"


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return onnx.defs.onnx_opset_version()


def build_display_graph(model: onnx.ModelProto, *, inferred: onnx.ModelProto | None = None) -> DisplayGraph:
    """The display graph of ``model`` (rules 1-6).

    Args:
        model: the model.
        inferred: a shape-inferred copy, when the caller already has one.
    """
    m = inferred if inferred is not None else infer(model)
    g = m.graph
    opset = default_opset(m)
    info = tensor_infos(m)
    inits = {t.name: t for t in g.initializer}
    keys = node_keys(g.node)

    # Rule 2: constants whose every consumer takes them as a weight are folded.
    const_tensor: dict[str, onnx.TensorProto] = {}
    const_node_of: dict[str, int] = {}
    for i, n in enumerate(g.node):
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.output) == 1:
            t = _constant_tensor(n)
            if t is not None:
                const_tensor[n.output[0]] = t
                const_node_of[n.output[0]] = i
                info.setdefault(n.output[0], (dtype_short(t.data_type), format_dims(t.dims)))
    graph_outputs = [o.name for o in g.output]
    weights = set(inits) | {t for t in const_tensor if t not in graph_outputs}
    hidden_nodes = {const_node_of[t] for t in weights if t in const_node_of}

    nodes: list[DisplayNode] = []
    producer: dict[str, str] = {}
    consumers: dict[str, list[str]] = {}
    for i, n in enumerate(g.node):
        if i in hidden_nodes:
            continue
        key = keys[i]
        ins: list[str] = []
        wts: list[str] = []
        for j, t in enumerate(n.input):
            if not t:
                continue
            if t in weights:
                tensor = inits.get(t) or const_tensor.get(t)
                wts.append(_weight_text(_input_role(n.op_type, n.domain, j, opset), tensor))
            else:
                ins.append(t)
                lst = consumers.setdefault(t, [])
                if not lst or lst[-1] != key:
                    lst.append(key)
        dn = DisplayNode(
            key=key, name=n.name, op=n.op_type, domain=n.domain, index=i,
            inputs=ins, outputs=[o for o in n.output if o], attrs=_format_attrs(n),
            weights=wts, subgraphs=_subgraph_summary(n), scope=scope_of(n),
            sources=_meta(n, SOURCES_KEY), passes=_meta(n, PASSES_KEY),
        )
        nodes.append(dn)
        for o in dn.outputs:
            producer[o] = key
    graph_inputs = [v.name for v in g.input if v.name not in inits]
    pos = {n.key: i for i, n in enumerate(nodes)}
    span_min = max(HUB_SPAN, len(nodes) // 5)
    hubs = set()
    for t, cs in consumers.items():
        if len(cs) >= HUB_MIN_CONSUMERS:
            hubs.add(t)
        elif len(cs) >= 3:
            idx = [pos[c] for c in cs]
            if max(idx) - min(idx) > span_min:
                hubs.add(t)
    return DisplayGraph(
        nodes=nodes, by_key={n.key: n for n in nodes}, producer=producer, consumers=consumers,
        tensor_info=info, inputs=graph_inputs, outputs=graph_outputs, hubs=hubs, weights=weights,
    )
