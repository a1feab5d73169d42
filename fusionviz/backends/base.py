"""The interface every backend implements, and the executed-graph record they return.

A *backend* turns ONNX model bytes into something that runs (:class:`Compiled`). The benchmark
worker, ``render --compiled`` and the tests talk to backends only through this module, so a new
runtime is one more module in :mod:`fusionviz.backends` plus a line in the registry.

Rules:

1. This module imports only the standard library and numpy: the benchmark worker imports it
   before measuring its baseline memory, and a backend's runtime (onnxruntime, OpenVINO, TVM) is
   imported by that backend's own code, in the process that uses it, and nowhere else.
2. ``Backend.available()`` never raises: it returns None when the backend can be used here, else
   one sentence saying why not.
3. A model a backend cannot compile or run raises :class:`BackendError`, whose text is one
   readable sentence naming the backend.
4. ``Compiled.executed_graph()`` describes what actually runs: one :class:`ExecutedLayer` per
   executed kernel, with the ONNX node keys it absorbed (``fusionviz.graphview.model_graph``
   keys: the node name, ``#i`` for unnamed or repeated names). Names a backend invented that map
   to no ONNX node are kept apart in ``internal``; ONNX nodes a backend renamed away and that
   fusionviz attributed from the graph's structure are listed in ``inferred``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from fusionviz import errors

logger = logging.getLogger(__name__)

#: Layer types that are data movement between memory layouts (drawn distinctly).
REORDER_TYPES = frozenset({"Reorder"})
#: Layer types that hold data and run nothing (left out of drawings by default).
CONSTANT_TYPES = frozenset({"Const", "Constant"})
#: Layer types that stand for the model's inputs and outputs.
IO_TYPES = frozenset({"Input", "Output", "Parameter", "Result"})


class BackendError(errors.RuntimeLoadError):
    """A backend could not compile or run a model (one sentence naming the backend).

    Attributes:
        reason: the runtime's own words, without the sentence around them (the benchmark
            worker sends these to the parent, which adds the backend's name).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else str(self)


class BackendUnavailableError(errors.InputSpecError):
    """A backend was asked for that cannot be used on this machine."""


@dataclasses.dataclass(frozen=True)
class BackendSettings:
    """Settings every backend understands; each maps them to its own options.

    Attributes:
        level: onnxruntime graph optimization level (``fusionviz.ortlevels.LEVELS``); other
            backends always run their full pipeline and ignore it.
        denormal_as_zero: flush denormal floats to zero (onnxruntime
            ``session.set_denormal_as_zero``; OpenVINO ``CPU_DENORMALS_OPTIMIZATION``; TVM has no
            such switch and reports it as not applied).
        disabled_optimizers: onnxruntime optimizer names to switch off.
        provider: onnxruntime execution provider (the ``ort`` backend only).
        profile_layers: compile with per-layer counters on (OpenVINO ``PERF_COUNT``; TVM's
            profiling virtual machine), as needed by :meth:`Compiled.profile`.
        output_names: ONNX graph output names in order, when the caller knows them (saves the
            backend from parsing the model).
        input_shapes: concrete shapes of inputs with symbolic dims.
    """

    level: str = "all"
    denormal_as_zero: bool = False
    disabled_optimizers: tuple[str, ...] = ()
    provider: str = "CPUExecutionProvider"
    profile_layers: bool = False
    output_names: tuple[str, ...] | None = None
    input_shapes: Mapping[str, Sequence[int]] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> BackendSettings:
        """Settings from a JSON-like mapping; unknown keys are ignored.

        Args:
            data: e.g. ``fusionviz.bench.Settings.as_dict()`` plus optional extra keys.

        Returns:
            A :class:`BackendSettings`.
        """
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        if "disabled_optimizers" in kw:
            kw["disabled_optimizers"] = tuple(kw["disabled_optimizers"] or ())
        if kw.get("output_names") is not None:
            kw["output_names"] = tuple(kw["output_names"])
        if kw.get("input_shapes") is not None:
            kw["input_shapes"] = {str(k): [int(d) for d in v] for k, v in kw["input_shapes"].items()}
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class ExecutedLayer:
    """One kernel the backend runs.

    Attributes:
        name: the backend's name for the layer (unique within the graph).
        layer_type: the backend's layer type ("Convolution", "Reorder", a TVM fused function).
        absorbed: ONNX node keys this layer computes, in model order (rule 4).
        inferred: ONNX node keys attributed to this layer from the graph's structure because
            the backend renamed them away (subset of ``absorbed``).
        internal: names the backend reports for this layer that are not ONNX nodes.
        inputs: names of the layers whose outputs this layer reads, in input order.
        output_layout: memory layout of the output ("abcd", "acdb", "NCHW16c"), if known.
        precision: runtime precision ("f32", "bf16", "i8"), if known.
        exec_order: position in the execution order, if known.
        kernel: the implementation picked ("brgconv_avx512_f32"), if known.
        shape: output shape as text, if known.
        time_ms: mean time per inference in milliseconds, when it was measured.
        folded: computed from constants only (once, when the model is compiled); treated as a
            constant layer.
    """

    name: str
    layer_type: str
    absorbed: tuple[str, ...] = ()
    inferred: tuple[str, ...] = ()
    internal: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    output_layout: str | None = None
    precision: str | None = None
    exec_order: int | None = None
    kernel: str | None = None
    shape: str | None = None
    time_ms: float | None = None
    folded: bool = False

    @property
    def is_reorder(self) -> bool:
        """True for a layout change inserted by the backend."""
        return self.layer_type in REORDER_TYPES

    @property
    def is_constant(self) -> bool:
        """True for a layer that only holds data (or computes it from constants only)."""
        return self.folded or self.layer_type in CONSTANT_TYPES

    @property
    def is_io(self) -> bool:
        """True for the model's inputs and outputs."""
        return self.layer_type in IO_TYPES

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        d = dataclasses.asdict(self)
        for k in ("absorbed", "inferred", "internal", "inputs"):
            d[k] = list(d[k])
        return d


@dataclasses.dataclass(frozen=True)
class ExecutedGraph:
    """The graph a backend executes, with provenance back to the ONNX model.

    Attributes:
        backend: the backend's registry name.
        layers: executed layers in execution order (constants and I/O included).
        note: one sentence about how provenance was obtained or what is missing, or None.
        timed: True when ``time_ms`` was measured for the layers.
    """

    backend: str
    layers: tuple[ExecutedLayer, ...]
    note: str | None = None
    timed: bool = False

    @property
    def by_name(self) -> dict[str, ExecutedLayer]:
        """Layer name → layer."""
        return {layer.name: layer for layer in self.layers}

    def onnx_to_layer(self) -> dict[str, str]:
        """ONNX node key → name of the executed layer that computes it.

        Constant layers only claim a node no executed layer claims (a node folded into data).
        """
        out: dict[str, str] = {}
        for layer in self.layers:
            if layer.is_constant or layer.is_io:
                continue
            for key in layer.absorbed:
                out.setdefault(key, layer.name)
        return out

    def with_times(self, times_ms: Mapping[str, float]) -> ExecutedGraph:
        """A copy with ``time_ms`` set from ``times_ms`` (layer name → ms)."""
        layers = tuple(dataclasses.replace(layer, time_ms=times_ms.get(layer.name, layer.time_ms))
                       for layer in self.layers)
        return dataclasses.replace(self, layers=layers, timed=bool(times_ms) or self.timed)

    def as_dict(self) -> dict:
        """JSON-ready fields."""
        return {"backend": self.backend, "note": self.note, "timed": self.timed,
                "layers": [layer.as_dict() for layer in self.layers]}


class Compiled(Protocol):
    """A model compiled by one backend, ready to run."""

    backend: str

    def input_dtypes(self) -> dict[str, np.dtype | None]:
        """Input name → the dtype the compiled model expects (None when unknown)."""

    def output_names(self) -> list[str]:
        """ONNX output names in model order."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference; output name → array (copied, safe to keep)."""

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """A zero-argument callable that runs one inference on ``feeds`` with the least overhead."""

    def executed_graph(self) -> ExecutedGraph | None:
        """What runs, with provenance; None when the backend cannot say."""

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int, *, prefix: str | None = None) -> dict:
        """Per-layer times over ``runs`` inferences (``prefix``: where a profiler may write files).

        Returns:
            ``{"runs", "run_ms", "by_op_type": {type: ms}, "by_node": {name: {"op_type", "ms"}},
            "arena"}`` (means per run; ``arena`` is None except for onnxruntime).
        """

    def applied(self) -> dict[str, Any]:
        """The backend's own names and values for the settings it applied (shown in results)."""


@dataclasses.dataclass(frozen=True)
class Backend:
    """A runtime that can compile ONNX models.

    Subclasses set ``package`` (the module to import) and ``pip`` (what to install), and
    implement :meth:`build`; :meth:`check` adds runtime-specific conditions (a plugin, a code
    generator, a GPU) to the package being importable.

    Attributes:
        name: registry name ("ort", "openvino", "tvm", "trt").
        title: display name.
    """

    name: str
    title: str
    package: ClassVar[str] = ""
    pip: ClassVar[str] = ""

    def missing(self) -> str | None:
        """None when ``package`` can be found without importing it, else the sentence to install it."""
        if self.package and importlib.util.find_spec(self.package) is None:
            return f"the '{self.pip or self.package}' package is not installed (pip install {self.pip or self.package})."
        return None

    def check(self) -> str | None:
        """Conditions beyond the installed package (may import the runtime, may raise)."""
        importlib.import_module(self.package)
        return None

    def available(self) -> str | None:
        """None when usable here, else one sentence why not (rule 2)."""
        why = self.missing()
        if why is not None:
            return why
        try:
            return self.check()
        except Exception as exc:  # noqa: BLE001 - rule 2
            return f"{self.title} cannot start ({first_sentence(exc, limit=160)})."

    def version(self) -> str | None:
        """The runtime's version, or None when it is not installed."""
        try:
            module = importlib.import_module(self.package)
        except Exception:  # noqa: BLE001 - not installed or broken
            return None
        return str(getattr(module, "__version__", "")).split("-")[0] or None

    def quick_check(self) -> str | None:
        """Like :meth:`available`, without loading the runtime (for a parent process that only
        starts workers); a runtime that is installed but broken is then found by the worker."""
        return self.missing()

    def preload(self, *, threads: int = 1) -> None:
        """Import the runtime (the worker calls this before measuring its baseline).

        Args:
            threads: intra-op threads, for runtimes that size their thread pool at import.
        """
        importlib.import_module(self.package)

    def compile(self, model_bytes: bytes, *, threads: int = 1,
                settings: BackendSettings | Mapping[str, Any] | None = None) -> Compiled:
        """Compile ``model_bytes`` for this backend.

        Args:
            model_bytes: a serialized ONNX ModelProto (or a path, for the onnxruntime backends).
            threads: intra-op threads.
            settings: :class:`BackendSettings` or a mapping of its fields.

        Returns:
            A :class:`Compiled` model.

        Raises:
            BackendUnavailableError: the backend cannot be used here.
            BackendError: the backend could not compile the model.
        """
        self.require()
        return self.build(model_bytes, as_settings(settings), threads=int(threads))

    def build(self, model_bytes: bytes, settings: BackendSettings, *, threads: int) -> Compiled:
        """The backend's own compilation (called by :meth:`compile` once it is available)."""
        raise NotImplementedError

    def require(self) -> None:
        """Raise :class:`BackendUnavailableError` with the reason when not available."""
        why = self.available()
        if why is not None:
            raise BackendUnavailableError(f"The {self.title} backend is not available here: {why}")


def as_settings(settings: BackendSettings | Mapping[str, Any] | None) -> BackendSettings:
    """``settings`` as :class:`BackendSettings`."""
    if isinstance(settings, BackendSettings):
        return settings
    return BackendSettings.from_mapping(settings)


def first_sentence(exc: BaseException, *, limit: int = 300) -> str:
    """The most telling line of a runtime's exception, on one line.

    C++ runtimes wrap the real reason in lines such as "Exception from src/...:117:" and
    "Check '...' failed at ...". Those are dropped; the last remaining line is kept.

    Args:
        exc: the exception.
        limit: longest result.

    Returns:
        One line (the exception's type name when it has no text).
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Exception from ", "Check '", "Traceback", "File \""))
            and not ln.startswith(("[ ERROR ]", "To facilitate the conversion", "Summary:"))]
    text = (keep[-1] if keep else (lines[-1] if lines else "")).replace("[ONNXRuntimeError] : ", "")
    text = " ".join(text.split())
    return (text[:limit] or type(exc).__name__).rstrip()


def cast_feeds(feeds: Mapping[str, np.ndarray], dtypes: Mapping[str, np.dtype | None],
               *, backend: str) -> dict[str, np.ndarray]:
    """``feeds`` with each array cast to the dtype the compiled model declares, contiguous.

    Args:
        feeds: input name → array (extra names are ignored).
        dtypes: from :meth:`Compiled.input_dtypes`.
        backend: for the error message.

    Raises:
        KeyError: an input the model needs is missing (its text is a sentence).
    """
    out: dict[str, np.ndarray] = {}
    for name, want in dtypes.items():
        if name not in feeds:
            raise KeyError(f"the model needs input '{name}', which the inputs for {backend} lack")
        arr = np.asarray(feeds[name])
        if want is not None and arr.dtype != want:
            arr = arr.astype(want)
        out[name] = np.asarray(arr, order="C")  # not ascontiguousarray: it makes a 0-d scalar 1-d
    return out


def infer_unclaimed(nodes: Sequence[Any], keys: Sequence[str], raw: Sequence[Mapping[str, Any]]
                    ) -> dict[str, list[str]]:
    """ONNX nodes no executed layer claims → the one layer that consumes all of their outputs.

    Runs to a fixed point, last node first, so a chain of unclaimed nodes that feeds one layer
    is given to it whole. Constant layers neither claim nor receive nodes.

    Args:
        nodes: the ONNX main-graph nodes (``NodeProto``), in order.
        keys: their keys (``fusionviz.graphview.model_graph.node_keys``).
        raw: layer records with ``name``, ``layer_type`` and ``absorbed`` (keys).

    Returns:
        Layer name → the node keys attributed to it.
    """
    layer_of: dict[str, str] = {}
    for r in raw:
        if r["layer_type"] in CONSTANT_TYPES:
            continue
        for k in r["absorbed"]:
            layer_of.setdefault(k, r["name"])
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            if t:
                consumers.setdefault(t, []).append(i)
    out: dict[str, list[str]] = {}
    changed = True
    while changed:
        changed = False
        for i in range(len(nodes) - 1, -1, -1):
            key = keys[i]
            if key in layer_of:
                continue
            users = {keys[j] for t in nodes[i].output if t for j in consumers.get(t, ())}
            if not users or any(u not in layer_of for u in users):
                continue
            targets = {layer_of[u] for u in users}
            if len(targets) == 1:
                target = targets.pop()
                layer_of[key] = target
                out.setdefault(target, []).append(key)
                changed = True
    return out
