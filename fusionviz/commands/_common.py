"""Shared CLI helpers: loading a MODEL argument (path or sample name), --shape, JSON out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fusionviz import errors, model_io, samples
from fusionviz.inputs import parse_shapes


def add_model_arg(p) -> None:
    p.add_argument("model", metavar="MODEL", help="path to .onnx / folder / .zip, or a sample name")


def add_shape_arg(p) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=d1,d2,..",
                   help="concrete shape for an input with symbolic dims (repeatable)")


def load_model_arg(text: str) -> model_io.LoadedModel:
    path = Path(text)
    if not path.exists() and text in samples.sample_names():
        return samples.load_sample(text)
    return model_io.load_path(path)


def shapes_of(args) -> dict[str, list[int]]:
    return parse_shapes(getattr(args, "shape", None))


def write_json(obj, path: str | None) -> None:
    text = json.dumps(obj, indent=2, default=_default)
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise errors.InputSpecError(f"Cannot write '{path}': {exc.strerror}.") from None


def _default(o):
    if hasattr(o, "as_dict"):
        return o.as_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "value"):
        return o.value
    return str(o)


def progress(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
