"""Apache TVM (Relax), untuned, on the CPU through LLVM.

Compilation: ``tvm.relax.frontend.onnx.from_onnx`` (input shapes from the settings for symbolic
dims), then ``DecomposeOpsForInference`` (batch norm into elementwise ops, so it can fuse into the
convolution before it) and TVM's CPU pipeline: ``LegalizeOps``, ``AnnotateTIROpPattern``,
``FoldConstant``, ``FuseOps`` | ``FuseTIR`` and the lowering passes, then ``tvm.compile`` for
``{"kind": "llvm"}`` and the Relax virtual machine. Nothing is tuned (no MetaSchedule), so the
kernels are TVM's default schedules: a ResNet runs tens of times slower than onnxruntime. Time
it only on request.

Provenance (which ONNX nodes went into each fused primitive function). The Relax frontend keeps
no ONNX names, so fusionviz follows the bindings itself:

1. Import: the frontend converts nodes in order. Before each node, fusionviz emits a marker
   binding (a string constant naming the node's index), and after it binds whatever the
   converter left unbound, so every binding made for node k lies between marker k and marker
   k+1.
2. ``DecomposeOpsForInference`` and ``LegalizeOps`` rewrite bindings in place, so the markers
   still delimit each node's bindings whatever they are renamed to. ``FoldConstant`` drops the
   markers and the bindings computed from constants alone; the remaining bindings are matched
   to their pre-folding selves in order, by callee and variable arguments.
3. ``FuseOps`` moves bindings into primitive functions and renames their outputs. Each fused
   function's body is replayed with its parameters bound to the call's arguments, and every
   call in it is matched to the pre-fusion binding with the same callee and arguments.
4. An ONNX node no executed function claims goes to the one function that consumes all of its
   outputs (as for OpenVINO), marked inferred.

Threads: the TVM runtime's thread pool is set to ``threads`` workers
(``runtime.config_threadpool``) before each compile.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from fusionviz.backends import base
from fusionviz.backends.base import Backend, BackendError, BackendSettings, Compiled

logger = logging.getLogger(__name__)

TARGET = {"kind": "llvm"}
_NODE_PREFIX = "fvnode"
_MARK_PREFIX = "fusionviz-node:"
_LOCK = threading.RLock()  # the frontend and the pass pipeline are not meant to run concurrently
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def _set_threads(threads: int) -> None:
    import tvm

    fn = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
    if fn is not None:
        fn(1, int(threads))  # 1: the "big cores" affinity mode, the default


def _tracing_importer():
    """The frontend's importer, with a marker binding before each node's bindings (rule 1)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as F

    class Importer(F.ONNXGraphImporter):
        def _convert_operator(self, op_name, inputs, attrs, opset):
            name = str((attrs.get("tvm_custom") or {}).get("name", ""))
            if name.startswith(_NODE_PREFIX) and name[len(_NODE_PREFIX):].isdigit():
                idx = int(name[len(_NODE_PREFIX):])
                self.bb.emit(tvm.ir.expr.StringImm(f"{_MARK_PREFIX}{idx}"), name_hint="fv_mark")
            out = super()._convert_operator(op_name, inputs, attrs, opset)
            # Bind what the converter left unbound now, or it would be bound inside the next
            # node's region when that node first uses it.
            unbound = (relax.Call, relax.TupleGetItem)
            if isinstance(out, unbound):
                out = self.bb.emit(out)
            elif isinstance(out, relax.Tuple) and any(isinstance(f, unbound) for f in out.fields):
                out = relax.Tuple([self.bb.emit(f) if isinstance(f, unbound) else f for f in out.fields])
            return out

    return Importer


def _marker(value) -> int | None:
    """The node index a marker binding's value carries, or None for any other binding."""
    import tvm

    if not isinstance(value, tvm.ir.expr.StringImm):
        return None
    text = str(value.value)
    if text.startswith(_MARK_PREFIX) and text[len(_MARK_PREFIX):].isdigit():
        return int(text[len(_MARK_PREFIX):])
    return None


def _shape_text(ty) -> str | None:
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    try:
        return "[" + ", ".join(str(getattr(d, "value", d)) for d in shape.values) + "]"
    except Exception:  # noqa: BLE001 - a shape given by a variable, not a list of dims
        return None


def _bindings(func) -> list:
    from tvm import relax

    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [b for block in body.blocks for b in block.bindings]


def _positional(func) -> dict[Any, int]:
    """Rules 1-2: every binding variable of ``func`` → the ONNX node index of the marker before it.

    Passes rewrite a binding in place, so whatever they make stays between the same markers,
    whatever it is called.
    """
    out: dict[Any, int] = {}
    current = None
    for b in _bindings(func):
        idx = _marker(b.value)
        if idx is not None:
            current = idx
            continue
        if current is not None:
            out[b.var] = current
    return out


def _follow(before, after) -> dict[Any, Any]:
    """Variables of ``after`` → the variables of ``before`` they continue (rule 2, FoldConstant).

    Constant folding drops the bindings computed from constants alone and keeps the others in
    order, with folded arguments turned into constants. So constants and constant-only variables
    are wildcards and the rest is matched in order by callee and variable arguments.
    """
    import tvm
    from tvm import relax

    const_only: set[Any] = set()

    def wild(arg, env) -> tuple:
        if isinstance(arg, tvm.ir.expr.Constant) or (isinstance(arg, relax.Var) and arg in const_only):
            return ("c",)
        if isinstance(arg, relax.Var):
            return ("v", env.get(arg, arg))
        if isinstance(arg, relax.Tuple):
            return ("t", tuple(wild(f, env) for f in arg.fields))
        return ("x", type(arg).__name__)

    def key(value, env) -> tuple | None:
        if _marker(value) is not None:
            return None
        if isinstance(value, relax.TupleGetItem):
            return ("get", wild(value.tuple_value, env), int(value.index))
        if isinstance(value, relax.Call):
            args = list(value.args)
            callee = _callee(value) or str(getattr(value.op, "name", value.op))
            if _callee(value) and not isinstance(value.op, relax.GlobalVar):
                args = list(args[1].fields) if len(args) > 1 and isinstance(args[1], relax.Tuple) else args[1:2]
            return ("call", callee, tuple(wild(a, env) for a in args))
        if isinstance(value, relax.Tuple):
            return ("tuple", tuple(wild(f, env) for f in value.fields))
        return None

    queue: dict[tuple, list[Any]] = {}
    for b in _bindings(before):
        k = key(b.value, {})
        if k is None:
            continue
        if all(part == ("c",) for part in (k[2] if k[0] == "call" else k[1] if k[0] == "tuple" else ())) and k[0] != "get":
            const_only.add(b.var)
        elif k[0] == "get" and k[1] == ("c",):
            const_only.add(b.var)
        queue.setdefault(key(b.value, {}), []).append(b.var)
    out: dict[Any, Any] = {}
    for b in _bindings(after):
        k = key(b.value, out)
        if k is None:
            continue
        candidates = queue.get(k)
        if candidates:
            out[b.var] = candidates.pop(0)
    return out


def _arg_key(arg, env: Mapping[Any, tuple]) -> tuple:
    """What an argument stands for before fusion: ``("v", var)``, ``("c", constant)``, ..."""
    import tvm
    from tvm import relax

    if isinstance(arg, relax.Var):
        return env.get(arg, ("v", arg))
    if isinstance(arg, tvm.ir.expr.Constant):
        return ("c", arg)
    if isinstance(arg, relax.Tuple):
        return ("t", tuple(_arg_key(f, env) for f in arg.fields))
    return ("x", type(arg).__name__)


def _callee(value) -> str | None:
    """The function a binding runs (a fused function or a TIR kernel), or None."""
    from tvm import relax

    if not isinstance(value, relax.Call):
        return None
    op = value.op
    if isinstance(op, relax.GlobalVar):
        return str(op.name_hint)
    if str(getattr(op, "name", "")) == "relax.call_tir" and value.args and isinstance(value.args[0], relax.GlobalVar):
        return str(value.args[0].name_hint)
    return None


def _call_key(value, env: Mapping[Any, tuple]) -> tuple | None:
    """Callee and arguments: what identifies a computation across ``FuseOps`` (rule 3)."""
    from tvm import relax

    if isinstance(value, relax.TupleGetItem):
        return ("get", _arg_key(value.tuple_value, env), int(value.index))
    if isinstance(value, relax.Call):
        args = list(value.args)
        op = value.op
        callee = str(op.name_hint) if isinstance(op, relax.GlobalVar) else str(getattr(op, "name", op))
        if callee == "relax.call_tir" and args and isinstance(args[0], relax.GlobalVar):
            callee = "tir:" + str(args[0].name_hint)
            args = list(args[1].fields) if len(args) > 1 and isinstance(args[1], relax.Tuple) else args[1:2]
        return ("call", callee, tuple(_arg_key(a, env) for a in args))
    if isinstance(value, relax.Var):
        return ("var", _arg_key(value, env))
    if isinstance(value, relax.Tuple):
        return ("tuple", tuple(_arg_key(f, env) for f in value.fields))
    return None


class _PreFusion:
    """Rule 3: computations of the pre-fusion main, to find each fused call's originals."""

    def __init__(self, pre_func) -> None:
        self.index: dict[tuple, list[Any]] = {}
        for b in _bindings(pre_func):
            key = _call_key(b.value, {})
            if key is not None:
                self.index.setdefault(key, []).append(b.var)
        self.used: set[Any] = set()

    def match(self, value, env: Mapping[Any, tuple]) -> Any | None:
        """The pre-fusion variable bound to the same computation (each is matched once)."""
        try:
            key = _call_key(value, env)
            candidates = self.index.get(key, ()) if key is not None else ()
        except TypeError:  # an unhashable argument
            return None
        for var in candidates:
            if var not in self.used:
                self.used.add(var)
                return var
        return None


class TvmCompiled:
    """A model compiled by TVM Relax for the CPU."""

    backend = "tvm"

    def __init__(self, model_bytes: bytes, settings: BackendSettings, *, threads: int) -> None:
        import onnx

        if isinstance(model_bytes, str):
            with open(model_bytes, "rb") as f:
                model_bytes = f.read()
        self._settings = settings
        self._threads = int(threads)
        proto = onnx.ModelProto()
        proto.ParseFromString(model_bytes)
        self._proto = proto
        graph = proto.graph
        init_names = {t.name for t in graph.initializer}
        self._inputs = [i for i in graph.input if i.name not in init_names]
        self._outputs = list(settings.output_names) if settings.output_names else [o.name for o in graph.output]
        with _LOCK:
            _set_threads(self._threads)
            try:
                self._build(proto, settings)
            except BackendError:
                raise
            except Exception as exc:  # noqa: BLE001 - the frontend and passes raise many types
                why = base.first_sentence(exc)
                raise BackendError(f"TVM cannot compile the model: {why}", reason=why) from None

    def _build(self, proto, settings: BackendSettings) -> None:
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.backend.cpu_generic import pipeline as cpu

        tagged = onnx.ModelProto()
        tagged.CopyFrom(proto)
        for i, node in enumerate(tagged.graph.node):
            node.name = f"{_NODE_PREFIX}{i}"
        shapes = dict(settings.input_shapes or {})
        shape_dict = {}
        for inp in self._inputs:
            dims = inp.type.tensor_type.shape.dim
            if inp.name in shapes and any(not d.HasField("dim_value") for d in dims):
                shape_dict[inp.name] = [int(x) for x in shapes[inp.name]]
        dtype_dict = {i.name: _ONNX_DTYPES.get(i.type.tensor_type.elem_type, "float32") for i in self._inputs}
        opset = next((o.version for o in tagged.opset_import if o.domain in ("", "ai.onnx")), None)
        importer = _tracing_importer()(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True)
        mod = importer.from_onnx(tagged.graph, opset or 17)
        target = tvm.target.Target(TARGET)
        with target:
            mod = tvm.transform.Sequential(
                [relax.transform.DecomposeOpsForInference()]
                + cpu.library_dispatch_passes(target)
                + [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()])(mod)
            marked = mod["main"]
            positions = _positional(marked)
            mod = relax.transform.FoldConstant()(mod)
            pre = mod["main"]
            self._pre_index = {v: positions[old] for v, old in _follow(marked, pre).items() if old in positions}
            mod = relax.transform.FuseOps()(mod)
            self._params = list(mod["main"].params)
            self._layers_raw = self._describe(pre, mod)
            mod = tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.FuseTIR()]
                                           + cpu.dataflow_lower_passes(target)
                                           + cpu.finalize_passes(target))(mod)
        self._executable = tvm.compile(mod, target=target, relax_pipeline=None)
        self._vm = relax.VirtualMachine(self._executable, tvm.cpu())
        self._main = self._vm["main"]

    def _describe(self, pre, fused) -> list[dict]:
        """Rule 3: one record per call the fused main makes, with the pre-fusion bindings it holds."""
        from tvm import relax

        originals = _PreFusion(pre)
        env: dict[Any, tuple] = {}  # post-fusion variable → what it stands for before fusion
        producer: dict[Any, str] = {p: "input:" + i.name for p, i in zip(self._params, self._inputs, strict=False)}
        layers: list[dict] = []
        seen: dict[str, int] = {}
        for b in _bindings(fused["main"]):
            var, value = b.var, b.value
            callee = _callee(value)
            if callee is None:  # a tuple, a tuple access or an alias: runs nothing
                found = originals.match(value, env)
                env[var] = ("v", found if found is not None else var)
                if isinstance(value, relax.TupleGetItem):
                    sources = [value.tuple_value]
                elif isinstance(value, relax.Tuple):
                    sources = list(value.fields)
                else:
                    sources = [value]
                src = next((x for x in sources if isinstance(x, relax.Var) and x in producer), None)
                if src is not None:
                    producer[var] = producer[src]
                continue
            members: list[Any] = []
            gfunc = fused[callee] if isinstance(value.op, relax.GlobalVar) else None
            if isinstance(gfunc, relax.Function):
                local: dict[Any, tuple] = {}
                for param, arg in zip(gfunc.params, value.args, strict=False):
                    local[param] = _arg_key(arg, env)
                for ib in _bindings(gfunc):
                    found = originals.match(ib.value, local)
                    local[ib.var] = ("v", found if found is not None else ib.var)
                    if found is not None:
                        members.append(found)
                result = gfunc.body.body
                env[var] = local.get(result, ("v", var)) if isinstance(result, relax.Var) else ("v", var)
                args = list(value.args)
            else:
                found = originals.match(value, env)
                env[var] = ("v", found if found is not None else var)
                if found is not None:
                    members.append(found)
                args = (list(value.args[1].fields)
                        if len(value.args) > 1 and isinstance(value.args[1], relax.Tuple) else [])
            n = seen.get(callee, 0)
            seen[callee] = n + 1
            name = callee if n == 0 else f"{callee}#{n + 1}"
            inputs: list[str] = []
            for a in args:
                src = producer.get(a) if isinstance(a, relax.Var) else None
                if src and src not in inputs:
                    inputs.append(src)
            producer[var] = name
            ty = getattr(var, "ty", None)
            tensor = isinstance(ty, relax.TensorType)
            layers.append({"name": name, "layer_type": callee, "members": members, "inputs": inputs,
                           "precision": str(ty.dtype) if tensor else None,
                           "shape": _shape_text(ty) if tensor else None})
        return layers

    # ------------------------------------------------------------------ running

    def input_dtypes(self) -> dict[str, np.dtype | None]:
        return {i.name: np.dtype(_ONNX_DTYPES[i.type.tensor_type.elem_type])
                if i.type.tensor_type.elem_type in _ONNX_DTYPES else None for i in self._inputs}

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def _args(self, feeds: Mapping[str, np.ndarray]) -> list:
        import tvm

        ready = base.cast_feeds(feeds, self.input_dtypes(), backend="TVM")
        return [tvm.runtime.tensor(ready[i.name]) for i in self._inputs]

    def _outputs_of(self, result) -> list[np.ndarray]:
        if hasattr(result, "numpy"):
            return [result.numpy()]
        out: list[np.ndarray] = []
        for item in result:
            out.extend(self._outputs_of(item))
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = self._args(feeds)
        try:
            result = self._main(*args)
        except Exception as exc:  # noqa: BLE001
            why = base.first_sentence(exc)
            raise BackendError(f"TVM failed to run the model: {why}", reason=why) from None
        arrays = self._outputs_of(result)
        return {(self._outputs[i] if i < len(self._outputs) else f"output{i}"): a for i, a in enumerate(arrays)}

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        args = self._args(feeds)
        main = self._main

        def once() -> object:
            return main(*args)

        return once

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int, *, prefix: str | None = None) -> dict:
        """Per-function times from the virtual machine's call instrument (Python timing per call)."""
        import tvm
        from tvm import relax

        runs = max(1, int(runs))
        vm = relax.VirtualMachine(self._executable, tvm.cpu())
        layer_names = [r["layer_type"] for r in self._layers_raw]
        known = set(layer_names)
        spans: list[tuple[str, float]] = []
        starts: list[float] = []

        def instrument(func, symbol, before, ret, *args):
            symbol = str(symbol)
            if symbol not in known:
                return 0
            if before:
                starts.append(time.perf_counter())
            elif starts:
                spans.append((symbol, time.perf_counter() - starts.pop()))
            return 0

        vm.set_instrument(tvm.runtime.convert(instrument))
        args = self._args(feeds)
        main = vm["main"]
        main(*args)
        spans.clear()
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            main(*args)
            walls.append(time.perf_counter() - t0)
        # The k-th call of a function in a run is the k-th layer that calls it.
        per_run = max(1, len(spans) // runs) if spans else 1
        by_node: dict[str, dict] = {}
        for i, (symbol, dt) in enumerate(spans):
            k = sum(1 for s, _ in spans[(i // per_run) * per_run: i] if s == symbol)
            name = symbol if k == 0 else f"{symbol}#{k + 1}"
            rec = by_node.setdefault(name, {"op_type": symbol, "ms": 0.0})
            rec["ms"] += dt * 1000.0 / runs
        by_op: dict[str, float] = {}
        for rec in by_node.values():
            by_op[rec["op_type"]] = by_op.get(rec["op_type"], 0.0) + rec["ms"]
        return {"runs": runs, "run_ms": sum(walls) / len(walls) * 1000.0,
                "by_op_type": dict(sorted(by_op.items(), key=lambda kv: -kv[1])), "by_node": by_node,
                "arena": None}

    def applied(self) -> dict[str, Any]:
        return {"target": "llvm", "threads": self._threads, "tuned": False,
                "denormals_as_zero": "not supported" if self._settings.denormal_as_zero else "off",
                "pipeline": "DecomposeOpsForInference + CPU default (FuseOps, FuseTIR)"}

    # ------------------------------------------------------------------ provenance

    def executed_graph(self) -> base.ExecutedGraph:
        """Fused primitive functions with the ONNX nodes in each (module docstring)."""
        from fusionviz.graphview.model_graph import node_keys

        nodes = list(self._proto.graph.node)
        keys = node_keys(nodes)
        order = {k: i for i, k in enumerate(keys)}
        raw = []
        for r in self._layers_raw:
            idxs = sorted({self._pre_index[m] for m in r["members"] if m in self._pre_index})
            raw.append({**r, "absorbed": [keys[i] for i in idxs if i < len(keys)]})
        inferred = base.infer_unclaimed(nodes, keys, raw)
        layers = [base.ExecutedLayer(name="input:" + i.name, layer_type="Input", exec_order=None)
                  for i in self._inputs]
        for k, r in enumerate(raw):
            extra = inferred.get(r["name"], [])
            absorbed = sorted(set(r["absorbed"]) | set(extra), key=order.__getitem__)
            layers.append(base.ExecutedLayer(
                name=r["name"], layer_type=r["layer_type"], absorbed=tuple(absorbed),
                inferred=tuple(x for x in absorbed if x in extra),
                inputs=tuple(r["inputs"]), output_layout=None,
                precision=r["precision"], exec_order=k, kernel=None, shape=r["shape"]))
        note = "TVM keeps no ONNX names; fusionviz traced them through its own bindings."
        return base.ExecutedGraph(backend=self.backend, layers=tuple(layers), note=note)


@dataclasses.dataclass(frozen=True)
class TvmBackend(Backend):
    """Apache TVM's Relax compiler, untuned, LLVM on the CPU."""

    name: str = "tvm"
    title: str = "TVM"
    package: ClassVar[str] = "tvm"
    pip: ClassVar[str] = "apache-tvm"

    def check(self) -> str | None:
        import tvm
        from tvm.relax.frontend.onnx import from_onnx  # noqa: F401

        if not tvm.runtime.enabled("llvm"):
            return "this TVM build has no LLVM code generator for the CPU."
        return None

    def preload(self, *, threads: int = 1) -> None:
        os.environ.setdefault("TVM_NUM_THREADS", str(int(threads)))
        import tvm  # noqa: F401
        from tvm.relax.frontend.onnx import from_onnx  # noqa: F401

    def build(self, model_bytes: bytes, settings: BackendSettings, *, threads: int) -> Compiled:
        return TvmCompiled(model_bytes, settings, threads=threads)
