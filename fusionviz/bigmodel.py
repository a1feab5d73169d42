"""A synthetic model of any size with its weights in external data, written without torch.

Used by the big-model test and benchmark: a decoder-like stack (an embedding ``Gather``, then
per layer ``MatMul`` by a ``hidden × hidden`` weight, ``Add`` of a bias, ``Tanh``) whose weights
go straight from numpy into one ``<name>.data`` file next to the model, one layer at a time, so
writing a 2 GB model never holds more than one weight in memory. The weights are seeded random
values scaled by 1/√hidden (activations stay near unit size through any depth); each layer's
differs (no pass can merge two of them).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

_ALIGN = 4096  # onnxruntime memory-maps external data whose offsets are page aligned


def _external(name: str, dims: list[int], dtype: int, location: str, offset: int, length: int) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = key, value
    return t


def write_big_model(path: str | os.PathLike, *, total_bytes: int, hidden: int = 4096, vocab: int = 8192,
                    seed: int = 0) -> Path:
    """Write ``path`` (an .onnx file) and ``path.data`` holding at least ``total_bytes`` of weights.

    Args:
        path: where the model goes (its folder is created).
        total_bytes: weight bytes to write at least (layers are added until they are reached).
        hidden: the width of every layer (a weight is ``hidden² · 4`` bytes).
        vocab: rows of the embedding table.
        seed: the random weights' seed.

    Returns:
        The model's path. Input ``ids`` (int64, ``[batch, seq]``), output ``y`` (float32,
        ``[batch, seq, hidden]``).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    location = p.name + ".data"
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal((hidden, hidden), dtype=np.float32) / np.float32(np.sqrt(hidden)))
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    offset = 0
    with open(p.parent / location, "wb") as f:
        def put(name: str, arr: np.ndarray) -> None:
            nonlocal offset
            pad = -offset % _ALIGN
            if pad:
                f.write(b"\0" * pad)
                offset += pad
            data = np.ascontiguousarray(arr)
            f.write(data.tobytes())
            inits.append(_external(name, list(arr.shape), helper.np_dtype_to_tensor_dtype(arr.dtype), location,
                                   offset, data.nbytes))
            offset += data.nbytes

        emb = rng.standard_normal((vocab, hidden), dtype=np.float32)
        put("embed.weight", emb)
        del emb
        nodes.append(helper.make_node("Gather", ["embed.weight", "ids"], ["h0"], name="embed"))
        k = 0
        while offset < total_bytes:
            w = block if k == 0 else np.roll(block, k, axis=1) * np.float32(1.0 + 1e-3 * k)
            put(f"layers.{k}.weight", w)
            del w
            put(f"layers.{k}.bias", np.full((hidden,), 0.01 * (k % 7), np.float32))
            nodes.append(helper.make_node("MatMul", [f"h{k}", f"layers.{k}.weight"], [f"mm{k}"], name=f"layers.{k}.matmul"))
            nodes.append(helper.make_node("Add", [f"mm{k}", f"layers.{k}.bias"], [f"pre{k}"], name=f"layers.{k}.add"))
            nodes.append(helper.make_node("Tanh", [f"pre{k}"], [f"h{k + 1}"], name=f"layers.{k}.act"))
            k += 1
    nodes.append(helper.make_node("Identity", [f"h{k}"], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, "big_synthetic",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="fusionviz.bigmodel")
    model.ir_version = 8
    p.write_bytes(model.SerializeToString())
    return p


def external_bytes(path: str | os.PathLike) -> int:
    """Bytes of the model file plus its ``.data`` file (what the test's memory ceilings scale with)."""
    p = Path(path)
    data = p.parent / (p.name + ".data")
    return p.stat().st_size + (data.stat().st_size if data.exists() else 0)
