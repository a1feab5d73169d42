"""Backend names → backend objects, and parsing of ``--backend ort,openvino,tvm,trt``.

Backend modules are imported only when their backend is asked for, so looking a name up never
loads a runtime.
"""

from __future__ import annotations

import functools
import importlib
import logging

from fusionviz import errors
from fusionviz.backends.base import Backend

logger = logging.getLogger(__name__)

#: Registry name → (module, class). The order is the order of ``backend_names()``.
_BACKENDS: dict[str, tuple[str, str]] = {
    "ort": ("fusionviz.backends.ort", "OrtBackend"),
    "openvino": ("fusionviz.backends.openvino", "OpenVinoBackend"),
    "tvm": ("fusionviz.backends.tvm", "TvmBackend"),
    "trt": ("fusionviz.backends.trt", "TrtBackend"),
}
_ALIASES = {"onnxruntime": "ort", "ov": "openvino", "tensorrt": "trt"}
#: Display names, without importing the modules.
TITLES = {"ort": "onnxruntime", "openvino": "OpenVINO", "tvm": "TVM", "trt": "TensorRT"}


def backend_names() -> tuple[str, ...]:
    """Every backend fusionviz knows, available here or not."""
    return tuple(_BACKENDS)


def canonical(name: str) -> str:
    """The registry name for ``name`` (case-insensitive; a few aliases).

    Raises:
        fusionviz.errors.InputSpecError: unknown name.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BACKENDS:
        raise errors.InputSpecError(
            f"Unknown backend '{errors.printable(name, 40)}'; use one of {', '.join(_BACKENDS)}."
        )
    return key


@functools.cache
def get_backend(name: str) -> Backend:
    """The backend called ``name`` (it may still be unavailable: see ``available()``).

    Raises:
        fusionviz.errors.InputSpecError: unknown name.
    """
    key = canonical(name)
    module, cls = _BACKENDS[key]
    return getattr(importlib.import_module(module), cls)()


def parse_backends(text: str | None) -> tuple[str, ...]:
    """``"ort,openvino"`` → ``("ort", "openvino")``: canonical, in order, without repeats.

    Args:
        text: comma-separated names; None or empty means ``("ort",)``.

    Raises:
        fusionviz.errors.InputSpecError: an unknown name.
    """
    names: list[str] = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key = canonical(part)
        if key not in names:
            names.append(key)
    return tuple(names) or ("ort",)


def availability() -> dict[str, str | None]:
    """Backend name → None when usable here, else the reason (imports each backend's module)."""
    return {name: get_backend(name).available() for name in _BACKENDS}
