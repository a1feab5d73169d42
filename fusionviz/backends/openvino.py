"""OpenVINO on the CPU plugin, in f32.

Compilation: ``Core().read_model(bytes)`` (the ONNX frontend), optional ``reshape`` to concrete
input shapes, then ``compile_model(model, "CPU", config)`` with:

* ``INFERENCE_PRECISION_HINT = f32`` (no silent bf16/f16 on CPUs that have them, so outputs can
  be compared with onnxruntime's),
* ``INFERENCE_NUM_THREADS = threads``, ``NUM_STREAMS = 1``, ``PERFORMANCE_HINT = LATENCY``,
* ``CPU_DENORMALS_OPTIMIZATION`` = the flush-to-zero setting,
* ``PERF_COUNT`` only for a profiled copy (per-layer counters cost time on every inference).

Provenance (what each executed layer absorbed). The CPU plugin reports, per layer of
``get_runtime_model()``, the rt_info fields ``layerType``, ``originalLayersNames``,
``outputLayouts``, ``runtimePrecision``, ``execOrder`` and ``primitiveType``. Its
``originalLayersNames`` names the operations of the model *after* OpenVINO's own transformations,
which rename what they rewrite: folding a BatchNormalization's multiply into a Conv yields a
Convolution called ``Multiply_5050`` whose names no longer mention the Conv. So before compiling,
every operation of the read model gets an ``originalLayersNames`` tag that points at the ONNX
tensors it produces (operations the frontend created inside one ONNX node take their consumer's
tag); transformations copy that rt_info onto what they create, and the tags come back in the
runtime model. Rules for reading them back:

1. A tag resolves to the ONNX node that produces its tensors. An untagged name resolves when it
   is an ONNX node name or tensor name, possibly with "/Suffix" parts OpenVINO appended
   ("/fc1/Conv/WithoutBiases"); other names are kept as the layer's ``internal`` names.
2. An ONNX node no executed layer names is given to the layer that consumes all of its outputs,
   when there is exactly one such layer, and listed as ``inferred`` (fixed point, last node first).
3. ONNX nodes folded into constants appear only in ``Const`` layers.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from fusionviz.backends.base import (
    IO_TYPES,
    Backend,
    BackendError,
    BackendSettings,
    Compiled,
    ExecutedGraph,
    ExecutedLayer,
    cast_feeds,
    first_sentence,
    infer_unclaimed,
)

logger = logging.getLogger(__name__)

TAG_PREFIX = "fusionviz:"
_SKIP_TAG = frozenset({"Parameter", "Result", "Constant"})
_CORE: list[Any] = []
_CORE_LOCK = threading.Lock()


def _core():
    """One ``openvino.Core`` per process (creating one loads the plugins)."""
    with _CORE_LOCK:
        if not _CORE:
            import openvino as ov

            _CORE.append(ov.Core())
        return _CORE[0]


def _rt(rt, key: str) -> str | None:
    try:
        if key not in rt:
            return None
        return str(rt[key].astype(str))
    except Exception:  # noqa: BLE001 - an rt_info value of an unexpected type
        return None


def _tag_model(model) -> list[frozenset[str]]:
    """Seed every operation's ``originalLayersNames`` with a provenance tag (module docstring).

    Returns:
        Tag index → the ONNX tensor names the tagged operation produces.
    """
    ops = list(model.get_ordered_ops())
    tag_of: dict[int, int] = {}
    tensors: list[frozenset[str]] = []
    for op in ops:
        if op.get_type_name() in _SKIP_TAG:
            continue
        names: set[str] = set()
        for out in op.outputs():
            names.update(out.get_names())
        if names:
            tag_of[id(op)] = len(tensors)
            tensors.append(frozenset(names))
    for op in reversed(ops):  # internal operations of one ONNX node take their consumer's tag
        if op.get_type_name() in _SKIP_TAG or id(op) in tag_of:
            continue
        for out in op.outputs():
            hit = next((tag_of[id(t.get_node())] for t in out.get_target_inputs()
                        if id(t.get_node()) in tag_of), None)
            if hit is not None:
                tag_of[id(op)] = hit
                break
    keep = []  # the Python wrappers must outlive the loop for id() to stay unique
    for op in ops:
        keep.append(op)
        if id(op) in tag_of:
            op.get_rt_info()["originalLayersNames"] = f"{TAG_PREFIX}{tag_of[id(op)]}"
    return tensors


class OpenVinoCompiled:
    """A model compiled by OpenVINO's CPU plugin."""

    backend = "openvino"

    def __init__(self, model_bytes: bytes, settings: BackendSettings, *, threads: int) -> None:
        core = _core()
        source = model_bytes
        if isinstance(model_bytes, str):  # a path: OpenVINO reads external data beside it
            with open(model_bytes, "rb") as f:
                model_bytes = f.read()
        self._bytes = model_bytes
        self._settings = settings
        self._threads = int(threads)
        try:
            model = core.read_model(source)
        except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError and others
            why = first_sentence(exc)
            raise BackendError(f"OpenVINO cannot read the model: {why}", reason=why) from None
        self._tensors = _tag_model(model)
        self._reshape(model, settings)
        self._model = model
        self._compiled = self._compile(settings.profile_layers)
        self._profiled = self._compiled if settings.profile_layers else None
        self._request = self._compiled.create_infer_request()
        self._outputs = list(settings.output_names) if settings.output_names else None
        self._io: tuple[frozenset[str], list[str]] | None = None

    def _reshape(self, model, settings: BackendSettings) -> None:
        shapes = dict(settings.input_shapes or {})
        if not shapes:
            return
        new = {}
        for inp in model.inputs:
            name = _onnx_name(inp, shapes)
            if name in shapes and inp.get_partial_shape().is_dynamic:
                new[name] = list(shapes[name])
        if new:
            try:
                model.reshape(new)
            except Exception as exc:  # noqa: BLE001
                why = first_sentence(exc)
                raise BackendError(f"OpenVINO cannot set the input shapes: {why}", reason=why) from None

    def config(self, *, perf_count: bool) -> dict[str, Any]:
        """The ``compile_model`` configuration (module docstring)."""
        return {
            "INFERENCE_PRECISION_HINT": "f32",
            "INFERENCE_NUM_THREADS": self._threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "CPU_DENORMALS_OPTIMIZATION": bool(self._settings.denormal_as_zero),
            "PERF_COUNT": bool(perf_count),
        }

    def _compile(self, perf_count: bool):
        try:
            return _core().compile_model(self._model, "CPU", self.config(perf_count=perf_count))
        except Exception as exc:  # noqa: BLE001
            why = first_sentence(exc)
            raise BackendError(f"OpenVINO cannot compile the model: {why}", reason=why) from None

    # ------------------------------------------------------------------ running

    def input_dtypes(self) -> dict[str, np.dtype | None]:
        out: dict[str, np.dtype | None] = {}
        onnx_inputs = self._onnx_io()[0]
        for inp in self._compiled.inputs:
            name = _onnx_name(inp, onnx_inputs)
            try:
                out[name] = np.dtype(inp.get_element_type().to_dtype())
            except Exception:  # noqa: BLE001 - an element type numpy has no name for
                out[name] = None
        return out

    def _onnx_io(self) -> tuple[frozenset[str], list[str]]:
        """The ONNX graph's input names (initializers excluded) and output names, read once
        from the model's bytes."""
        if self._io is None:
            import onnx

            m = onnx.ModelProto()
            m.ParseFromString(self._bytes)
            init = {i.name for i in m.graph.initializer}
            self._io = (frozenset(i.name for i in m.graph.input if i.name not in init),
                        [o.name for o in m.graph.output])
        return self._io

    def output_names(self) -> list[str]:
        if self._outputs is None:
            self._outputs = list(self._onnx_io()[1])
        return list(self._outputs)

    def _infer(self, request, feeds: Mapping[str, np.ndarray]) -> None:
        try:
            request.infer(dict(feeds), share_inputs=True, share_outputs=True)
        except Exception as exc:  # noqa: BLE001
            why = first_sentence(exc)
            raise BackendError(f"OpenVINO failed to run the model: {why}", reason=why) from None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ready = cast_feeds(feeds, self.input_dtypes(), backend="OpenVINO")
        self._infer(self._request, ready)
        names = self.output_names()
        n = len(self._compiled.outputs)
        return {names[i] if i < len(names) else f"output{i}":
                np.array(self._request.get_output_tensor(i).data, copy=True) for i in range(n)}

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        ready = cast_feeds(feeds, self.input_dtypes(), backend="OpenVINO")
        request = self._request

        def once() -> object:
            try:
                return request.infer(ready, share_inputs=True, share_outputs=True)
            except Exception as exc:  # noqa: BLE001 - one readable line, as run() gives
                why = first_sentence(exc)
                raise BackendError(f"OpenVINO failed to run the model: {why}", reason=why) from None

        return once

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int, *, prefix: str | None = None) -> dict:
        """Per-layer times from ``PERF_COUNT`` over ``runs`` inferences of a profiled copy."""
        runs = max(1, int(runs))
        if self._profiled is None:
            self._profiled = self._compile(True)
        request = self._profiled.create_infer_request()
        ready = cast_feeds(feeds, self.input_dtypes(), backend="OpenVINO")
        self._infer(request, ready)  # the first run pays one-time costs
        by_node: dict[str, dict] = {}
        walls: list[float] = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self._infer(request, ready)
            walls.append(time.perf_counter() - t0)
            for info in request.profiling_info:
                if str(info.status).rsplit(".", 1)[-1] != "EXECUTED":
                    continue
                rec = by_node.setdefault(info.node_name, {"op_type": info.node_type, "ms": 0.0,
                                                          "kernel": info.exec_type})
                rec["ms"] += info.real_time.total_seconds() * 1000.0
        by_op: dict[str, float] = {}
        for rec in by_node.values():
            rec["ms"] /= runs
            by_op[rec["op_type"]] = by_op.get(rec["op_type"], 0.0) + rec["ms"]
        return {
            "runs": runs,
            "run_ms": sum(walls) / len(walls) * 1000.0,
            "by_op_type": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
            "by_node": by_node,
            "arena": None,
        }

    def applied(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": "CPU"}
        for key in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
                    "CPU_DENORMALS_OPTIMIZATION"):
            try:
                value = self._compiled.get_property(key)
            except Exception:  # noqa: BLE001 - a property this version lacks
                out[key] = None
                continue
            out[key] = value.to_string() if hasattr(value, "to_string") else str(value)
        return out

    # ------------------------------------------------------------------ provenance

    def executed_graph(self) -> ExecutedGraph:
        """The runtime model's layers with the ONNX nodes each absorbed (module docstring)."""
        import onnx

        from fusionviz.graphview.model_graph import node_keys

        m = onnx.ModelProto()
        m.ParseFromString(self._bytes)
        nodes = list(m.graph.node)
        keys = node_keys(nodes)
        order = {k: i for i, k in enumerate(keys)}
        producer = {t: keys[i] for i, n in enumerate(nodes) for t in n.output if t}
        tag_keys: list[tuple[str, ...]] = []
        for names in self._tensors:
            ks = sorted({producer[t] for t in names if t in producer}, key=order.__getitem__)
            tag_keys.append(tuple(ks))

        raw: list[dict] = []
        seen: dict[str, int] = {}
        ops = list(self._compiled.get_runtime_model().get_ordered_ops())
        name_of: dict[int, str] = {}
        for op in ops:
            base = op.get_friendly_name() or op.get_type_name()
            n = seen.get(base, 0)
            seen[base] = n + 1
            name_of[id(op)] = base if n == 0 else f"{base}#{n + 1}"
        for op in ops:
            rt = op.get_rt_info()
            absorbed: list[str] = []
            internal: list[str] = []
            layer_type = _rt(rt, "layerType") or op.get_type_name()
            names = _rt(rt, "originalLayersNames") or ""
            if layer_type in IO_TYPES:  # inputs and outputs compute nothing
                names = ""
            for part in names.split(","):
                part = part.strip()
                if not part:
                    continue
                if part.startswith(TAG_PREFIX) and part[len(TAG_PREFIX):].isdigit():
                    idx = int(part[len(TAG_PREFIX):])
                    if idx < len(tag_keys):
                        absorbed.extend(k for k in tag_keys[idx] if k not in absorbed)
                        continue
                key = _key_for_name(part, producer, order)
                if key is not None:
                    if key not in absorbed:
                        absorbed.append(key)
                elif part not in internal:
                    internal.append(part)
            order_text = _rt(rt, "execOrder")
            try:
                exec_order = int(order_text) if order_text is not None else None
            except ValueError:
                exec_order = None
            shape = None
            if op.get_output_size():
                try:
                    shape = str(op.get_output_partial_shape(0))
                except Exception:  # noqa: BLE001
                    shape = None
            raw.append({
                "name": name_of[id(op)],
                "layer_type": layer_type,
                "absorbed": absorbed,
                "internal": internal,
                "inputs": [name_of.get(id(i.get_source_output().get_node()), "?") for i in op.inputs()],
                "output_layout": _rt(rt, "outputLayouts"),
                "precision": _rt(rt, "runtimePrecision"),
                "exec_order": exec_order,
                "kernel": _rt(rt, "primitiveType"),
                "shape": shape,
            })
        kinds = {r["name"]: r["layer_type"] for r in raw}
        folded: set[str] = set()
        for r in raw:  # layers fed by constants alone run once, at compile time
            if (r["inputs"] and r["layer_type"] not in ("Output", "Result", "Const")
                    and all(i in folded or kinds.get(i) == "Const" for i in r["inputs"])):
                folded.add(r["name"])
        inferred = infer_unclaimed(nodes, keys, [r for r in raw if r["name"] not in folded])
        layers = []
        for r in raw:
            extra = inferred.get(r["name"], [])
            absorbed = sorted(set(r["absorbed"]) | set(extra), key=order.__getitem__)
            layers.append(ExecutedLayer(
                name=r["name"], layer_type=r["layer_type"], absorbed=tuple(absorbed),
                inferred=tuple(k for k in absorbed if k in extra), internal=tuple(r["internal"]),
                inputs=tuple(r["inputs"]), output_layout=r["output_layout"], precision=r["precision"],
                exec_order=r["exec_order"], kernel=r["kernel"], shape=r["shape"],
                folded=r["name"] in folded))
        n_inferred = sum(len(v) for v in inferred.values())
        note = (f"{n_inferred} ONNX nodes lost their names in OpenVINO's rewrites and were placed by the "
                "graph's structure (marked inferred).") if n_inferred else None
        return ExecutedGraph(backend=self.backend, layers=tuple(layers), note=note)


def _onnx_name(port, known) -> str:
    """The name of an OpenVINO input port as the ONNX model spells it. A port holds every name
    of its tensor, and ``get_any_name`` may pick another one (tf2onnx and torch exports feed an
    input straight into a Cast or Transpose whose output name OpenVINO merges in)."""
    names = port.get_names()
    for n in sorted(names):
        if n in known:
            return n
    return port.get_any_name()


def _key_for_name(name: str, producer: Mapping[str, str], order: Mapping[str, int]) -> str | None:
    """Rule 1 for untagged names: an ONNX node key, a tensor an ONNX node produces (the frontend
    names some operations after their output), or either with "/Suffix" parts OpenVINO appended
    ("/fc1/Conv/WithoutBiases")."""
    candidate = name
    for _ in range(3):
        if candidate in order:
            return candidate
        if candidate in producer:
            return producer[candidate]
        if "/" not in candidate.strip("/"):
            return None
        candidate = candidate.rsplit("/", 1)[0]
    return None


@dataclasses.dataclass(frozen=True)
class OpenVinoBackend(Backend):
    """OpenVINO's CPU plugin (the ``openvino`` package)."""

    name: str = "openvino"
    title: str = "OpenVINO"
    package: ClassVar[str] = "openvino"

    def check(self) -> str | None:
        if "CPU" not in _core().available_devices:
            return "OpenVINO's CPU plugin is missing from this installation."
        return None

    def preload(self, *, threads: int = 1) -> None:
        _core()

    def build(self, model_bytes: bytes, settings: BackendSettings, *, threads: int) -> Compiled:
        return OpenVinoCompiled(model_bytes, settings, threads=threads)
