"""Numerical equivalence of two models in onnxruntime.

Both models run with graph optimizations disabled (so onnxruntime cannot hide or cause a
difference) on the same deterministic inputs (:mod:`fusionviz.inputs`). Per output we report max
absolute error, max relative error and cosine similarity.

Tolerance: ``max_rel = max|a-b| / max(max|a|, 1e-6)`` must be <= ``rtol`` (default 1e-4;
use 1e-3 for models with long reductions). Precision passes (fp16, int8) report only.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.inputs import make_inputs

DEFAULT_RTOL = 1e-4
#: Memory cap (MB) and time limit (s) of an isolated verification child process.
VERIFY_MEM_MB = int(os.environ.get("FUSIONVIZ_VERIFY_MEM_MB", "4096") or 4096)
VERIFY_TIMEOUT_S = float(os.environ.get("FUSIONVIZ_VERIFY_TIMEOUT_S", "300") or 300)


@dataclasses.dataclass(frozen=True)
class OutputDiff:
    name: str
    shape: tuple[int, ...]
    max_abs_diff: float
    max_rel_diff: float
    cosine: float
    top1_agreement: float | None = None


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    ok: bool
    outputs: tuple[OutputDiff, ...]
    rtol: float
    error: str | None = None
    report_only: bool = False

    @property
    def max_abs_diff(self) -> float:
        return max((o.max_abs_diff for o in self.outputs), default=0.0)

    @property
    def max_rel_diff(self) -> float:
        return max((o.max_rel_diff for o in self.outputs), default=0.0)

    @property
    def min_cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=1.0)

    def summary(self) -> str:
        if self.error:
            return f"not verified: {self.error}"
        word = "equal" if self.ok else ("differs (report only)" if self.report_only else "DIFFERENT")
        return f"{word}: max abs {self.max_abs_diff:.2e}, max rel {self.max_rel_diff:.2e}, cosine {self.min_cosine:.6f}"

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "min_cosine": self.min_cosine,
            "rtol": self.rtol,
            "error": self.error,
            "report_only": self.report_only,
            "outputs": [dataclasses.asdict(o) for o in self.outputs],
        }


def make_session(model: onnx.ModelProto | bytes, *, level: str = "off", threads: int = 1,
                 providers: Sequence[str] | None = None):
    """An onnxruntime session; errors become RuntimeLoadError with one sentence."""
    import onnxruntime as ort

    from fusionviz.ortlevels import graph_optimization_level

    so = ort.SessionOptions()
    so.graph_optimization_level = graph_optimization_level(level)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        return ort.InferenceSession(data, so, providers=list(providers or ["CPUExecutionProvider"]))
    except Exception as exc:  # noqa: BLE001 - ORT raises many types
        raise errors.RuntimeLoadError(f"onnxruntime cannot load the model: {_ort_sentence(exc)}") from None


def _ort_sentence(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    text = text.replace("[ONNXRuntimeError] : ", "")
    return text[:300]


def run_model(session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    try:
        outs = session.run(names, dict(feeds))
    except Exception as exc:  # noqa: BLE001
        raise errors.RuntimeLoadError(f"onnxruntime failed to run the model: {_ort_sentence(exc)}") from None
    return dict(zip(names, outs, strict=True))


def compare(ref: np.ndarray, got: np.ndarray, name: str) -> OutputDiff:
    a = np.asarray(ref)
    b = np.asarray(got)
    if a.shape != b.shape:
        return OutputDiff(name, tuple(a.shape), float("inf"), float("inf"), 0.0)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.number):
        eq = float(np.mean(a == b)) if a.size else 1.0
        return OutputDiff(name, tuple(a.shape), 0.0 if eq == 1.0 else 1.0, 0.0 if eq == 1.0 else 1.0, eq)
    a64 = a.astype(np.float64).ravel()
    b64 = b.astype(np.float64).ravel()
    if a64.size == 0:
        return OutputDiff(name, tuple(a.shape), 0.0, 0.0, 1.0)
    finite = np.isfinite(a64) & np.isfinite(b64)
    same_nonfinite = np.all((~np.isfinite(a64)) == (~np.isfinite(b64)))
    diff = np.abs(a64[finite] - b64[finite])
    max_abs = float(diff.max()) if diff.size else 0.0
    if not same_nonfinite:
        max_abs = float("inf")
    scale = float(np.abs(a64[finite]).max()) if finite.any() else 0.0
    max_rel = max_abs / max(scale, 1e-6)
    na, nb = np.linalg.norm(a64[finite]), np.linalg.norm(b64[finite])
    cos = float(np.dot(a64[finite], b64[finite]) / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    top1 = None
    if a.ndim == 2 and a.shape[-1] >= 2 and np.issubdtype(a.dtype, np.floating):
        top1 = float(np.mean(np.argmax(a, -1) == np.argmax(b, -1)))
    return OutputDiff(name, tuple(a.shape), max_abs, max_rel, cos, top1)


def verify(
    original: onnx.ModelProto,
    optimized: onnx.ModelProto,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    feeds: Mapping[str, np.ndarray] | None = None,
    rtol: float = DEFAULT_RTOL,
    report_only: bool = False,
    isolated: bool = False,
) -> VerifyResult:
    """Run both models (ORT optimizations off) on the same inputs and compare every output.

    ``isolated=True`` (the CLI and the app use it) runs onnxruntime in a child process with a
    memory cap and time limit (``FUSIONVIZ_VERIFY_MEM_MB``, ``FUSIONVIZ_VERIFY_TIMEOUT_S``), so
    a model that allocates gigabytes or never finishes costs an error line, not the process.
    """
    try:
        feeds = dict(feeds) if feeds is not None else make_inputs(original, shapes)
        if isolated:
            ref, got = _run_isolated(original, optimized, feeds)
        else:
            ref = run_model(make_session(original), feeds)
            got = run_model(make_session(optimized), feeds)
    except errors.FusionvizError as exc:
        return VerifyResult(False, (), rtol, error=str(exc), report_only=report_only)
    diffs = []
    for name, a in ref.items():
        if name not in got:
            return VerifyResult(False, tuple(diffs), rtol, error=f"output '{name}' is missing after optimization",
                                report_only=report_only)
        diffs.append(compare(a, got[name], name))
    ok = all(d.max_rel_diff <= rtol for d in diffs)
    return VerifyResult(ok, tuple(diffs), rtol, report_only=report_only)


def _run_isolated(a: onnx.ModelProto, b: onnx.ModelProto, feeds: Mapping[str, np.ndarray]):
    payload = pickle.dumps((a.SerializeToString(), b.SerializeToString(), dict(feeds), VERIFY_MEM_MB))
    try:
        proc = subprocess.run([sys.executable, "-m", "fusionviz.verify_worker"], input=payload,
                              capture_output=True, timeout=VERIFY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise errors.RuntimeLoadError(
            f"verification timed out after {VERIFY_TIMEOUT_S:g} s (FUSIONVIZ_VERIFY_TIMEOUT_S)"
        ) from None
    if proc.returncode != 0 or not proc.stdout:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = tail[-1] if tail else f"exit status {proc.returncode}"
        if proc.returncode < 0 or "MemoryError" in reason or "bad_alloc" in reason:
            reason = f"it ran out of memory (cap {VERIFY_MEM_MB} MB, FUSIONVIZ_VERIFY_MEM_MB)"
        raise errors.RuntimeLoadError(f"onnxruntime could not run the model for verification: {reason}")
    result = pickle.loads(proc.stdout)  # our own child's output
    if result[0] == "error":
        raise errors.RuntimeLoadError(result[1])
    return result[1], result[2]
