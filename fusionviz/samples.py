"""The sample models that ship in ``sample_models/`` and the onnx wheel's light models."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fusionviz import errors, model_io

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_models"


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    file: str
    title: str
    description: str
    shows: tuple[str, ...] = ()


def _catalog() -> list[Sample]:
    index = SAMPLE_DIR / "samples.json"
    if not index.exists():
        return []
    data = json.loads(index.read_text())
    return [Sample(d["name"], d["file"], d["title"], d["description"], tuple(d.get("shows", ())))
            for d in data]


def list_samples() -> list[Sample]:
    return [s for s in _catalog() if (SAMPLE_DIR / s.file).exists()]


def sample_names() -> list[str]:
    return [s.name for s in list_samples()]


def sample_path(name: str) -> Path:
    for s in list_samples():
        if s.name == name:
            return SAMPLE_DIR / s.file
    raise errors.InputSpecError(f"Unknown sample '{name}'; samples are: {', '.join(sample_names())}.")


def load_sample(name: str) -> model_io.LoadedModel:
    return model_io.load_path(sample_path(name))


def light_models() -> list[Path]:
    """onnx's shipped backend-test 'light' models (ResNet50, Inception, ...)."""
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(root.glob("*.onnx"))
