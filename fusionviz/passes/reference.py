"""Other optimizers as whole pipelines, for comparison in the same benchmark run.

References (labels in brackets):

1. onnxslim's ``slim`` [``onnxslim``], onnxsim's ``simplify`` [``onnxsim``], onnxscript's
   ``optimizer.optimize`` [``onnxscript``].
2. onnxruntime's own optimizer at each level [``ort:basic`` ... ``ort:all``], captured with
   ``SessionOptions.optimized_model_filepath``; a ``layout``/``all`` result holds
   ``com.microsoft.nchwc`` ops and is specific to this machine's CPU.

Each tool runs in a separate process (``python -m fusionviz.passes.reference TOOL IN OUT``) with a
time limit and a memory cap: third-party optimizers can hang, crash or exhaust memory on some
models, and that must cost one reference, not the app. A failure is returned as a
:class:`~fusionviz.errors.PassError` in place of the model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from fusionviz import errors, model_io
from fusionviz.ortlevels import OPTIMIZING

logger = logging.getLogger(__name__)

TOOLS = ("onnxslim", "onnxsim", "onnxscript")
ORT_LEVELS = OPTIMIZING  # onnxruntime's saved graph at each level that optimizes
_PKG_ROOT = str(Path(__file__).resolve().parents[2])


def reference_labels(tools: Sequence[str] | None = None, levels: Sequence[str] | None = None) -> list[str]:
    """Labels :func:`reference_models` produces for these tools and ORT levels."""
    tools = TOOLS if tools is None else tools
    levels = ORT_LEVELS if levels is None else levels
    return [*tools, *(f"ort:{lv}" for lv in levels)]


def reference_models(
    model: onnx.ModelProto,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    tools: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
    timeout_s: float = 300,
    mem_limit_mb: int = 8192,
) -> dict[str, onnx.ModelProto | errors.FusionvizError]:
    """Run every reference optimizer on ``model``, each in its own process.

    Args:
        model: the original model.
        shapes: input shape overrides (onnxsim and onnxslim fix input shapes with them).
        tools: subset of :data:`TOOLS` (default all).
        levels: subset of :data:`ORT_LEVELS` (default all).
        timeout_s: time limit per tool.
        mem_limit_mb: memory cap per tool.

    Returns:
        ``{label: ModelProto or PassError}`` in :func:`reference_labels` order.
    """
    tools = list(TOOLS if tools is None else tools)
    levels = list(ORT_LEVELS if levels is None else levels)
    for t in tools:
        if t not in TOOLS:
            raise errors.InputSpecError(f"Unknown reference optimizer '{t}'; choose from {', '.join(TOOLS)}.")
    for lv in levels:
        if lv not in ORT_LEVELS:
            raise errors.InputSpecError(f"Unknown onnxruntime level '{lv}'; choose from {', '.join(ORT_LEVELS)}.")
    out: dict[str, onnx.ModelProto | errors.FusionvizError] = {}
    tmp = Path(tempfile.mkdtemp(prefix="fusionviz-ref-"))
    try:
        src = tmp / "in.onnx"
        model_io.write_for_child(model, src)  # weights on disk: with its data file beside
        jobs = [(t, t, None) for t in tools] + [(f"ort:{lv}", "ort", lv) for lv in levels]
        for label, tool, level in jobs:
            dst = tmp / f"{label.replace(':', '_')}.onnx"
            out[label] = _run_tool(tool, src, dst, shapes=shapes, level=level, timeout_s=timeout_s,
                                   mem_limit_mb=mem_limit_mb, label=label)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _run_tool(tool: str, src: Path, dst: Path, *, shapes, level, timeout_s: float, mem_limit_mb: int,
              label: str) -> onnx.ModelProto | errors.FusionvizError:
    cmd = [sys.executable, "-m", "fusionviz.passes.reference", tool, str(src), str(dst)]
    if shapes:
        cmd += ["--shapes", json.dumps({k: list(v) for k, v in shapes.items()})]
    if level:
        cmd += ["--level", level]
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")

    def limits() -> None:
        os.setsid()
        with contextlib.suppress(ValueError, OSError):
            import resource

            cap = int(mem_limit_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            preexec_fn=limits, cwd=str(src.parent))
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return errors.PassError(f"{label} timed out after {timeout_s:g} s.")
    text = err.decode("utf-8", "replace")
    if proc.returncode != 0 or not dst.exists():
        lines = [ln for ln in text.splitlines() if ln.startswith("fusionviz-reference:")]
        if lines:
            reason = lines[-1].split(":", 1)[1].strip()
        elif proc.returncode < 0:
            reason = f"the process was killed ({signal.Signals(-proc.returncode).name})"
        elif "MemoryError" in text or "bad_alloc" in text:
            reason = f"it exceeded the {mem_limit_mb} MB memory cap"
        else:
            tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or [f"exit status {proc.returncode}"]
            reason = tail[0]
        return errors.PassError(f"{label} failed: {reason}")
    try:
        m = onnx.load_model(str(dst))
    except Exception as exc:  # noqa: BLE001
        return errors.PassError(f"{label} wrote a model that cannot be read: {exc}")
    m.producer_name = m.producer_name or label
    return m


# --------------------------------------------------------------------------- in the child process


def _apply(tool: str, src: str, dst: str, shapes: dict | None, level: str | None) -> None:
    if tool == "ort":
        import onnxruntime as ort

        from fusionviz.ortlevels import graph_optimization_level

        so = ort.SessionOptions()
        so.graph_optimization_level = graph_optimization_level(level or "all")
        so.optimized_model_filepath = dst
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        return
    model = onnx.load_model(src)
    if tool == "onnxslim":
        import onnxslim

        kwargs = {}
        if shapes:
            kwargs["input_shapes"] = [f"{k}:{','.join(str(d) for d in v)}" for k, v in shapes.items()]
        out = onnxslim.slim(model, **kwargs)
    elif tool == "onnxsim":
        import onnxsim

        out, ok = onnxsim.simplify(model, overwrite_input_shapes=shapes or None)
        if not ok:
            raise RuntimeError("onnxsim's own output check failed")
    elif tool == "onnxscript":
        import onnxscript.optimizer

        out = onnxscript.optimizer.optimize(model)
    else:
        raise ValueError(f"unknown tool {tool}")
    onnx.save_model(out, dst)


def main(argv: list[str] | None = None) -> int:
    """Child entry point: ``TOOL IN OUT [--shapes JSON] [--level L]``; one error line on failure."""
    ap = argparse.ArgumentParser(prog="fusionviz.passes.reference")
    ap.add_argument("tool", choices=[*TOOLS, "ort"])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--level", default=None)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    try:
        _apply(args.tool, args.src, args.dst, json.loads(args.shapes) if args.shapes else None, args.level)
    except BaseException as exc:  # noqa: BLE001 - reported as one line to the parent
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        sys.stderr.write(f"fusionviz-reference: {msg}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
