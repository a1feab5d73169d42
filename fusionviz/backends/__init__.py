"""Backends: onnxruntime, OpenVINO, TVM and TensorRT behind one interface (``base``).

Importing this package loads no runtime; ``get_backend(name)`` imports only that backend's
module, and the runtime itself is imported when the backend is used.
"""

from fusionviz.backends.base import (
    Backend,
    BackendError,
    BackendSettings,
    BackendUnavailableError,
    Compiled,
    ExecutedGraph,
    ExecutedLayer,
)
from fusionviz.backends.registry import TITLES, backend_names, get_backend, parse_backends

__all__ = [
    "TITLES",
    "Backend",
    "BackendError",
    "BackendSettings",
    "BackendUnavailableError",
    "Compiled",
    "ExecutedGraph",
    "ExecutedLayer",
    "backend_names",
    "get_backend",
    "parse_backends",
]
