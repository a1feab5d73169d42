"""The machine and software a result was made on: package versions, CPU model, threads.

A report carries this so a reader can tell whether two reports are comparable (the same
onnxruntime, the same CPU) without asking who made them. Nothing here names a path or a user.
"""

from __future__ import annotations

import functools
import os
import platform
from importlib import metadata

#: The distributions whose versions decide what fusionviz does (requirements.txt), in that order.
PACKAGES = ("onnx", "onnx-ir", "onnxscript", "onnxruntime", "numpy", "onnxslim", "onnxsim", "graphviz",
            "pygraphviz", "plotly", "streamlit", "psutil", "openvino")

#: Environment variables that change how many threads a runtime uses, reported when set.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ORT_NUM_THREADS")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``), or ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or ""


def usable_cpus() -> int | None:
    """CPUs this process may run on (its affinity), or None where that cannot be asked."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def versions() -> dict[str, str]:
    """``{"fusionviz": ..., "onnx": ..., ...}``: "not installed" for a package that is missing."""
    import fusionviz

    out = {"fusionviz": fusionviz.__version__}
    for dist in PACKAGES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


@functools.cache
def collect() -> dict:
    """The environment as plain data (computed once per process).

    Returns:
        ``{"python", "platform", "machine", "cpu", "cpu_count", "usable_cpus", "thread_vars",
        "packages"}``. Verification runs onnxruntime with one intra-op thread; a benchmark's
        threads are in its own settings.
    """
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "thread_vars": {k: os.environ[k] for k in THREAD_VARS if os.environ.get(k)},
        "packages": versions(),
    }
