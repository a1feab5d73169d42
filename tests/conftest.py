"""Shared test helpers: the CLI in a subprocess, tiny models, the repo root.

Everything here is opt-in (fixtures a test asks for); nothing is autouse, nothing changes global
state, so test folders of other areas (passes, graphview, bench, ui, e2e) are unaffected.

- ``run_cli(*args, timeout=60, env=None, cwd=None, mem_limit=None)`` runs
  ``python -m fusionviz ARGS`` and returns ``CliResult(code, stdout, stderr)`` (a named tuple, so
  ``code, out, err = run_cli(...)`` works). On timeout the process group is killed and the test
  fails with the command line. ``mem_limit`` (bytes) caps the child's address space so a hostile
  model cannot take the shared machine down.
- ``tiny_model`` / ``tiny_model_bytes`` / ``tiny_model_path``: ``y = Relu(x) + W`` with a
  4-float initializer; valid, checked, runs in onnxruntime.
- ``repo_root``: the checkout's root folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

REPO_ROOT = Path(__file__).resolve().parent.parent

TINY_MODEL_TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
tiny (float[1,4] x) => (float[1,4] y) {
    r = Relu(x)
    y = Add(r, W)
}
"""


class CliResult(NamedTuple):
    """What ``python -m fusionviz ...`` did."""

    code: int
    stdout: str
    stderr: str
    seconds: float = 0.0

    @property
    def stderr_lines(self) -> list[str]:
        """Non-empty stderr lines."""
        return [ln for ln in self.stderr.splitlines() if ln.strip()]


def make_tiny_model() -> onnx.ModelProto:
    """``y = Relu(x) + W`` (x: float[1,4], W: 4 floats 1..4), checked."""
    model = onnx.parser.parse_model(TINY_MODEL_TEXT)
    model.graph.initializer.append(
        numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 4.0], np.float32), "W")
    )
    onnx.checker.check_model(model)
    return model


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a CLI child: this checkout first on the path, no debug tracebacks."""
    env = dict(os.environ)
    env.pop("FUSIONVIZ_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["PYTHONIOENCODING"] = "utf-8"
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


TIMEOUT_CODE = 124


def run_fusionviz(*args: str | os.PathLike, timeout: float = 60, env: Mapping[str, str] | None = None,
                  cwd: str | os.PathLike | None = None, mem_limit: int | None = None,
                  fail_on_timeout: bool = True) -> CliResult:
    """Run ``python -m fusionviz ARGS`` in a subprocess (see the module docstring).

    Args:
        args: CLI arguments.
        timeout: seconds before the child's whole process group is killed.
        env: extra environment variables.
        cwd: working directory (default: the repo root).
        mem_limit: address-space cap in bytes for the child (RLIMIT_AS).
        fail_on_timeout: fail the test on timeout; when False return exit code 124
            (``TIMEOUT_CODE``) instead, so a caller running many commands can report each.

    Raises:
        pytest.fail.Exception: when it runs past ``timeout`` and ``fail_on_timeout``.
    """
    argv = [str(a) for a in args]
    if mem_limit:
        # Same as `python -m fusionviz ARGS`, with the address-space cap set first (no
        # preexec_fn: this helper is also called from threads).
        boot = ("import resource, runpy, sys; "
                f"resource.setrlimit(resource.RLIMIT_AS, ({int(mem_limit)}, {int(mem_limit)})); "
                "sys.argv = ['fusionviz'] + sys.argv[1:]; "
                "runpy.run_module('fusionviz', run_name='__main__', alter_sys=True)")
        cmd = [sys.executable, "-c", boot, *argv]
    else:
        cmd = [sys.executable, "-m", "fusionviz", *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(env),
                            cwd=str(cwd or REPO_ROOT), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except OSError:
                pass
        out, err = proc.communicate()
        if fail_on_timeout:
            pytest.fail(f"timed out after {timeout:.0f} s: {' '.join(cmd)}", pytrace=False)
        return CliResult(TIMEOUT_CODE, out.decode("utf-8", "replace"),
                         err.decode("utf-8", "replace") + f"\n[timed out after {timeout:.0f} s]",
                         time.perf_counter() - t0)
    return CliResult(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     time.perf_counter() - t0)


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., CliResult]:
    """``run_cli(*args, timeout=60, env=None, cwd=None, mem_limit=None) -> CliResult``."""
    return run_fusionviz


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder."""
    return REPO_ROOT


@pytest.fixture
def tiny_model() -> onnx.ModelProto:
    """A fresh copy of the tiny valid model (safe to mutate)."""
    return make_tiny_model()


@pytest.fixture
def tiny_model_bytes() -> bytes:
    """The tiny model, serialized."""
    return make_tiny_model().SerializeToString()


@pytest.fixture
def tiny_model_path(tmp_path: Path) -> Path:
    """The tiny model written to ``tmp_path / 'tiny.onnx'``."""
    path = tmp_path / "tiny.onnx"
    path.write_bytes(make_tiny_model().SerializeToString())
    return path


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture
def dir_listing() -> Callable[[Path], set[str]]:
    """``dir_listing(path)`` -> relative paths of everything under ``path`` (for write checks)."""
    return _listing
