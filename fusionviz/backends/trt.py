"""TensorRT (and CUDA) through onnxruntime's execution providers, on an NVIDIA GPU.

Available only when ``onnxruntime.get_available_providers()`` lists
``TensorrtExecutionProvider`` or ``CUDAExecutionProvider`` (the ``onnxruntime-gpu`` build) and a
GPU is present. The session asks for TensorRT, then CUDA, then the CPU for whatever the GPU
providers do not take. fusionviz never needs this backend; it is there for machines that have one.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import shutil
from typing import ClassVar

from fusionviz.backends.base import Backend, BackendSettings, Compiled
from fusionviz.backends.ort import OrtCompiled

logger = logging.getLogger(__name__)

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


def _gpu_present() -> bool:
    """True when the NVIDIA driver shows a GPU (no CUDA library is loaded to find out)."""
    if glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*"):
        return True
    return shutil.which("nvidia-smi") is not None and os.path.exists("/dev/nvidiactl")


@dataclasses.dataclass(frozen=True)
class TrtBackend(Backend):
    """onnxruntime with the TensorRT / CUDA execution providers."""

    name: str = "trt"
    title: str = "TensorRT"
    package: ClassVar[str] = "onnxruntime"

    def providers(self) -> list[str]:
        """The GPU providers this onnxruntime build offers, in the order they are asked for."""
        try:
            import onnxruntime as ort

            have = set(ort.get_available_providers())
        except Exception:  # noqa: BLE001
            return []
        return [p for p in GPU_PROVIDERS if p in have]

    def check(self) -> str | None:
        import onnxruntime as ort

        if not self.providers():
            return (f"this onnxruntime {ort.__version__} build has no TensorRT or CUDA execution provider "
                    f"(it has {', '.join(ort.get_available_providers())}); install onnxruntime-gpu on a machine "
                    "with an NVIDIA GPU.")
        if not _gpu_present():
            return "onnxruntime has GPU execution providers, but this machine shows no NVIDIA GPU."
        return None

    def quick_check(self) -> str | None:
        return self.available()  # cheap, and a machine without a GPU must not start workers

    def build(self, model_bytes: bytes | str, settings: BackendSettings, *, threads: int) -> Compiled:
        providers = self.providers() + ["CPUExecutionProvider"]
        return OrtCompiled(model_bytes, settings, threads=threads, providers=providers, backend=self.name)
