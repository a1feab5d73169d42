"""Deterministic inputs from a model's declared shapes and types.

The verifier and the benchmark use the same generator, so every variant sees identical data.

Symbolic dims: taken from ``shapes`` overrides (``--shape NAME=1,3,224,224``) when given;
otherwise a dim whose name contains ``seq``, ``len`` or ``token`` becomes
``DEFAULT_SEQ_LEN`` (32) and any other unknown dim becomes 1.

Values: floats are standard normal (seed 0); integer inputs get valid small values in
``[0, INT_HIGH)`` (2), except names containing ``mask`` which get 1 (nothing masked);
bools are random.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors

DEFAULT_SEQ_LEN = 32
INT_HIGH = 2
MAX_INPUT_ELEMENTS = 50_000_000

_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
}


def parse_shape_arg(text: str) -> tuple[str, list[int]]:
    """Parse ``NAME=1,3,224,224`` (also ``NAME:1x3x224x224``)."""
    m = re.match(r"^\s*([^=:]+?)\s*[=:]\s*([\d,x\s]+)$", text or "")
    if not m:
        raise errors.InputSpecError(f"--shape '{text}' is not NAME=d1,d2,... (e.g. input=1,3,224,224).")
    dims = [int(d) for d in re.split(r"[,x\s]+", m.group(2).strip()) if d]
    if not dims or any(d <= 0 or d > 1_000_000 for d in dims):
        raise errors.InputSpecError(f"--shape '{text}': dims must be positive integers.")
    return m.group(1), dims


def parse_shapes(args: Sequence[str] | None) -> dict[str, list[int]]:
    return dict(parse_shape_arg(a) for a in (args or []))


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def resolve_dims(vi: onnx.ValueInfoProto, shapes: Mapping[str, Sequence[int]] | None = None) -> list[int]:
    if shapes and vi.name in shapes:
        return list(shapes[vi.name])
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        raise errors.InputSpecError(
            f"Input '{vi.name}' has no declared shape; give one with --shape {vi.name}=d1,d2,..."
        )
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            name = (d.dim_param or "").lower()
            dims.append(DEFAULT_SEQ_LEN if any(k in name for k in ("seq", "len", "token")) else 1)
    return dims


def make_inputs(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Deterministic feeds for every non-initializer graph input."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in graph_inputs(model):
        if not vi.type.HasField("tensor_type"):
            raise errors.InputSpecError(f"Input '{vi.name}' is not a tensor; fusionviz feeds tensors only.")
        elem = vi.type.tensor_type.elem_type
        dtype = _NP.get(elem)
        if dtype is None:
            raise errors.InputSpecError(
                f"Input '{vi.name}' has type {onnx.TensorProto.DataType.Name(elem)}, which fusionviz cannot generate."
            )
        dims = resolve_dims(vi, shapes)
        n = int(np.prod(dims, dtype=np.float64)) if dims else 1
        if n > MAX_INPUT_ELEMENTS:
            raise errors.InputSpecError(
                f"Input '{vi.name}' would have {n:,} elements (shape {dims}); give a smaller --shape."
            )
        if np.issubdtype(dtype, np.floating):
            arr = rng.standard_normal(dims).astype(dtype)
        elif dtype is np.bool_:
            arr = rng.integers(0, 2, size=dims).astype(np.bool_)
        elif "mask" in vi.name.lower():
            arr = np.ones(dims, dtype=dtype)
        else:
            arr = rng.integers(0, INT_HIGH, size=dims).astype(dtype)
        feeds[vi.name] = arr
    return feeds


def load_npz(data: bytes, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """User-supplied inputs from a .npz (no pickles)."""
    import io

    try:
        npz = np.load(io.BytesIO(data), allow_pickle=False)
        feeds = {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001
        raise errors.InputSpecError(f"Could not read the .npz file: {exc}.") from None
    names = {vi.name for vi in graph_inputs(model)}
    missing = names - set(feeds)
    if missing:
        raise errors.InputSpecError(f"The .npz lacks inputs: {', '.join(sorted(missing))}.")
    return {k: v for k, v in feeds.items() if k in names}
