"""The validity rule: the common postcondition of every pass.

A pass's result is accepted only if the model is still a valid model of the same function
signature. Checked against a :class:`Baseline` taken from the model the pass started from:

1. ``onnx.checker.check_model(full_check=True)`` passes (strict shape inference included).
   A model that already failed the full check before the pass (real exports do: a stale
   value_info, an op the checker's inference trips on) is held to the plain checker instead,
   so a pass is never blamed for what it inherited.
2. The graph's inputs and outputs keep their names, element types and ranks (where known).
3. onnxruntime can create a session for it with optimizations off, when it could for the
   model before the pass; a model with control flow (If/Loop/Scan) also at onnxruntime's
   default level (all), in a child process. Level all matters on its own there: its constant
   folding makes shapes concrete inside every branch, and a branch that cannot run with fixed
   input shapes (silero's 8 kHz path fed 16 kHz frames) fails type inference, or crashes
   onnxruntime 1.32, while the same model loads with optimizations off. The child keeps such
   a crash from taking the app with it; models without control flow skip it (a session at
   level all costs up to 0.2 s, and a child process more).

:func:`violation` returns the first broken rule as one sentence, or None. The pipeline calls it
on the final model of a run and, only when that fails, after each pass, rolling back and
declining the passes whose result breaks it (see :mod:`fusionviz.passes.pipeline`).
"""

from __future__ import annotations

import dataclasses
import logging

import onnx

logger = logging.getLogger(__name__)

#: A model whose in-memory proto is above this cannot be given to onnx's checker (protobuf's
#: 2 GB limit); rule 1 is skipped for it and rules 2 and 3 kept. With its weights on disk
#: (``fusionviz.model_io`` rule 9) a big model's proto holds the graph only and is checked.
_CHECKER_MAX_BYTES = 1_800_000_000


@dataclasses.dataclass(frozen=True)
class IOSig:
    """Name, element type and rank (None when unknown) of one graph input or output."""

    name: str
    elem_type: int
    rank: int | None


class Baseline:
    """What a pass's result is compared against: the model the passes started from.

    The checker and onnxruntime verdicts on that model are computed only when a result fails
    them (a result that passes needs no excuse), so the common case costs one check of the
    result and nothing for the baseline.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.inputs, self.outputs = io_signature(model)
        self._full_check: bool | None = None
        self._ort_loads: dict[str, bool] = {}
        self._plain_check: bool | None = None

    @property
    def full_check(self) -> bool:
        """Whether the model passed onnx's full check."""
        if self._full_check is None:
            self._full_check = checker_error(self.model, full=True) is None
            if not self._full_check:
                logger.info("the model fails onnx's full check before any pass; "
                            "passes are held to the plain check")
        return self._full_check

    @property
    def plain_check(self) -> bool:
        """Whether the model passed onnx's plain (not full) check."""
        if self._plain_check is None:
            self._plain_check = checker_error(self.model, full=False) is None
        return self._plain_check

    def ort_loads(self, level: str) -> bool:
        """Whether onnxruntime could create a session for the model at ``level`` (off or all;
        all in a child process, as rule 3 checks it)."""
        if level not in self._ort_loads:
            err = ort_error(self.model) if level == "off" else ort_error_at_all(self.model)
            self._ort_loads[level] = err is None
        return self._ort_loads[level]


def _sig(values, skip: set[str] = frozenset()) -> tuple[IOSig, ...]:
    out = []
    for v in values:
        if v.name in skip:
            continue
        t = v.type
        if t.HasField("tensor_type"):
            tt = t.tensor_type
            rank = len(tt.shape.dim) if tt.HasField("shape") else None
            out.append(IOSig(v.name, int(tt.elem_type), rank))
        else:
            out.append(IOSig(v.name, -1, None))
    return tuple(out)


def io_signature(model: onnx.ModelProto) -> tuple[tuple[IOSig, ...], tuple[IOSig, ...]]:
    """(inputs, outputs) of the main graph; initializers listed as inputs are left out."""
    inits = {t.name for t in model.graph.initializer}
    return _sig(model.graph.input, inits), _sig(model.graph.output)


def checker_error(model: onnx.ModelProto, *, full: bool) -> str | None:
    """onnx's checker verdict as one sentence, or None when the model passes."""
    from fusionviz.model_io import checkable

    if model.ByteSize() > _CHECKER_MAX_BYTES:
        return None
    try:
        onnx.checker.check_model(checkable(model), full_check=full)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, ...
        return _one_line(str(exc))
    return None


def ort_error(model: onnx.ModelProto | bytes | str, weights_dir: str | None = None) -> str | None:
    """Why onnxruntime (optimizations off, CPU) cannot create a session, or None. Weights on
    disk are read from their folder (the model's, or ``weights_dir`` for bytes)."""
    import onnxruntime as ort

    from fusionviz.model_io import ort_session_config

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    given = isinstance(model, (bytes, str))  # bytes, or a path
    for key, value in ort_session_config(None if given else model, folder=weights_dir).items():
        so.add_session_config_entry(key, value)
    try:
        data = model if given else model.SerializeToString()
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
        return _one_line(str(exc).replace("[ONNXRuntimeError] : ", ""))
    return None


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _io_violation(kind: str, before: tuple[IOSig, ...], after: tuple[IOSig, ...]) -> str | None:
    if [s.name for s in before] != [s.name for s in after]:
        return (f"the graph {kind}s changed from {[s.name for s in before]} "
                f"to {[s.name for s in after]}")
    for b, a in zip(before, after, strict=True):
        if b.elem_type != a.elem_type:
            tb = onnx.TensorProto.DataType.Name(b.elem_type) if b.elem_type > 0 else "non-tensor"
            ta = onnx.TensorProto.DataType.Name(a.elem_type) if a.elem_type > 0 else "non-tensor"
            return f"graph {kind} '{b.name}' changed type from {tb} to {ta}"
        if b.rank is not None and a.rank is not None and b.rank != a.rank:
            return f"graph {kind} '{b.name}' changed rank from {b.rank} to {a.rank}"
    return None


def violation(model: onnx.ModelProto, base: Baseline) -> str | None:
    """The first validity rule ``model`` breaks (one sentence), or None when it is valid."""
    inputs, outputs = io_signature(model)
    why = _io_violation("input", base.inputs, inputs) or _io_violation("output", base.outputs, outputs)
    if why:
        return why
    err = checker_error(model, full=True)
    if err and not base.full_check:  # held to the plain check, as the model before was
        err = checker_error(model, full=False)
        if err and not base.plain_check:  # nor that: the checker cannot judge this model
            err = None
    if err:
        return f"the ONNX checker rejects the result: {err}"
    import tempfile
    from pathlib import Path

    from fusionviz.model_io import for_runtime

    with tempfile.TemporaryDirectory(prefix="fusionviz_validity_") as tmp:
        data, folder = for_runtime(model, Path(tmp))  # bytes, or over 2 GB a saved copy's path
        err = ort_error(data, folder)
        if err and base.ort_loads("off"):
            return f"onnxruntime cannot load the result: {err}"
        if has_subgraphs(model):
            err = ort_error_at_all(data, folder)
            if err and base.ort_loads("all"):
                return f"onnxruntime (optimization level all) cannot load the result: {err}"
    return None


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether a main-graph node carries a graph attribute (If, Loop, Scan)."""
    from fusionviz.passes.walk import proto_subgraphs

    return any(proto_subgraphs(n) for n in model.graph.node)


_AT_ALL: dict[bytes, str | None] = {}  # model digest → verdict (the pipeline asks twice of one result)

# The child imports onnxruntime only (0.1 s; fusionviz's verification worker takes 0.5 s more):
# model bytes on stdin (the graph only when its weights stay on disk: then the session config
# entries that read them from their folder come as further arguments), or for a model over
# protobuf's limit the path of a copy saved with its weights beside; the verdict on stdout; a
# crash kills the child, not the caller.
_LOAD_AT_ALL = """
import resource, sys
lim = int(sys.argv[1]) << 20
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
if hard != resource.RLIM_INFINITY:
    lim = min(lim, hard)
resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
import onnxruntime as ort
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.log_severity_level = 4
so.intra_op_num_threads = 1
for entry in sys.argv[3:]:
    key, _, value = entry.partition("=")
    so.add_session_config_entry(key, value)
src = sys.stdin.buffer.read()
try:
    ort.InferenceSession(src.decode() if sys.argv[2] == "path" else src, so, providers=["CPUExecutionProvider"])
except Exception as exc:
    sys.stdout.write("ERROR " + str(exc))
else:
    sys.stdout.write("OK")
"""


def ort_error_at_all(model: onnx.ModelProto | bytes | str, weights_dir: str | None = None) -> str | None:
    """:func:`ort_error` at level all, in a child process (rule 3); the last 64 verdicts are kept.
    ``model``: a model, its bytes (weights on disk read from ``weights_dir``) or its path."""
    import hashlib
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from fusionviz.model_io import for_runtime, ort_session_config
    from fusionviz.verify import VERIFY_MEM_MB, VERIFY_TIMEOUT_S

    if not isinstance(model, (bytes, str)):
        with tempfile.TemporaryDirectory(prefix="fusionviz_validity_") as tmp:
            return ort_error_at_all(*for_runtime(model, Path(tmp)))
    kind = "path" if isinstance(model, str) else "bytes"
    data = model.encode() if isinstance(model, str) else model
    entries = [f"{k}={v}" for k, v in ort_session_config(folder=weights_dir).items()]
    key = hashlib.blake2b(kind.encode() + data + "\0".join(entries).encode(), digest_size=20).digest()
    if key in _AT_ALL:
        return _AT_ALL[key]
    try:
        proc = subprocess.run([sys.executable, "-c", _LOAD_AT_ALL, str(VERIFY_MEM_MB), kind, *entries], input=data,
                              capture_output=True, timeout=VERIFY_TIMEOUT_S, check=False)
        out = proc.stdout.decode("utf-8", "replace")
        if out == "OK":
            why = None
        elif out.startswith("ERROR "):
            why = _one_line(out[6:].replace("[ONNXRuntimeError] : ", ""))
        elif proc.returncode < 0:
            why = f"onnxruntime crashed ({signal.Signals(-proc.returncode).name})"
        else:
            tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            why = _one_line(tail[-1] if tail else f"the loading process exited with status {proc.returncode}")
    except subprocess.TimeoutExpired:
        why = f"loading took over {VERIFY_TIMEOUT_S:g} s"
    if kind == "path":
        return why  # a temporary copy's path says nothing about a later model's content
    if len(_AT_ALL) >= 64:
        _AT_ALL.pop(next(iter(_AT_ALL)))
    _AT_ALL[key] = why
    return why
