"""Running the two models with their tensors exposed, chunk by chunk (rules 4-5 and 7 of
:mod:`fusionviz.compare`); :func:`run_chunk_here` is what the verification child runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from fusionviz import errors
from fusionviz.compare.match import NCHWC_DOMAIN
from fusionviz.compare.result import TensorPair
from fusionviz.verify import OutputDiff

#: Chunk bounds (rule 7): tensors per run, and MB of (inferred) tensor bytes per run.
DEFAULT_CHUNK_TENSORS = 400
DEFAULT_CHUNK_MB = 256.0


def chunks(pairs: Sequence[TensorPair], max_tensors: int = DEFAULT_CHUNK_TENSORS,
           max_mb: float = DEFAULT_CHUNK_MB) -> list[list[TensorPair]]:
    """Rule 7: matched pairs in A's order, cut into runs of at most ``max_tensors`` tensors and
    ``max_mb`` MB (a tensor bigger than that alone is a run of its own; unknown sizes count 0)."""
    budget = max(0.0, float(max_mb)) * 1024 * 1024
    cap = max(1, int(max_tensors))
    out: list[list[TensorPair]] = []
    cur: list[TensorPair] = []
    used = 0
    for p in pairs:
        if cur and (len(cur) >= cap or used + p.nbytes > budget):
            out.append(cur)
            cur, used = [], 0
        cur.append(p)
        used += p.nbytes
    if cur:
        out.append(cur)
    return out


# ------------------------------------------------------------------ one run (rules 4-6)


def _with_outputs(data: bytes, names: Sequence[str]) -> onnx.ModelProto:
    """The model with exactly ``names`` as its graph outputs (types where the model says them).
    Weights on disk (``fusionviz.model_io`` rule 9) stay there: the model names their folder."""
    m = onnx.load_from_string(data)
    g = m.graph
    known = {v.name: v for v in [*g.value_info, *g.output, *g.input]}
    del g.output[:]
    for name in dict.fromkeys(names):
        vi = onnx.ValueInfoProto()
        if name in known and known[name].type.HasField("tensor_type"):
            vi.CopyFrom(known[name])
        else:
            vi.name = name  # onnxruntime infers the type
        g.output.append(vi)
    return m


_BLOCK: list[int] = []


def nchwc_block_size() -> int:
    """onnxruntime's NCHWc block size on this CPU (a ReorderInput of 4 channels pads to it)."""
    if not _BLOCK:
        from onnx import helper as oh

        from fusionviz.verify import make_session, run_model

        f = onnx.TensorProto.FLOAT
        g = oh.make_graph([oh.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)], "block",
                          [oh.make_tensor_value_info("x", f, [1, 4, 1, 1])], [oh.make_tensor_value_info("y", f, None)])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(NCHWC_DOMAIN, 1)])
        y = run_model(make_session(m), {"x": np.zeros((1, 4, 1, 1), np.float32)})["y"]
        _BLOCK.append(int(y.shape[1]))
    return _BLOCK[0]


def unblock(raw: np.ndarray, channels: int, block: int) -> np.ndarray | None:
    """Rule 4: an NCHWc tensor (reported as ``[N, C padded, H, W]``, stored ``[N, C/b, H, W, b]``)
    as NCHW with ``channels`` channels; None when the shapes do not allow it."""
    if raw.ndim != 4 or block < 1 or raw.shape[1] % block or channels > raw.shape[1]:
        return None
    n, cp, h, w = raw.shape
    plain = raw.reshape(n, cp // block, h, w, block).transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)
    return np.ascontiguousarray(plain[:, :channels])


def _is_numeric(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype != object and (np.issubdtype(v.dtype, np.number)
                                                                or v.dtype == np.bool_)


def _is_float(v: np.ndarray) -> bool:
    return bool(np.issubdtype(v.dtype, np.inexact))


def _kind(v) -> str:
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    if v is None:
        return "optional (empty)"
    if isinstance(v, np.ndarray):
        return f"tensor({v.dtype})" if v.dtype != object else "tensor(string)"
    return type(v).__name__


def run_chunk_here(a: bytes, b: bytes, feeds: Mapping[str, np.ndarray], items: Sequence[tuple],
                   rtol: float, atol: float, input_set: str) -> list[tuple[str, OutputDiff | None, str]]:
    """One run (rules 4-6) in this process (the verification child calls it too).

    Args:
        a, b: the two models, serialized.
        feeds: one input set.
        items: ``(a_name, b_name, is_output, blocked_a, blocked_b)`` per tensor.
        rtol, atol, input_set: as :func:`fusionviz.verify.compare` takes them.

    Returns:
        Per item ``(status, diff, note)``.

    Raises:
        fusionviz.errors.RuntimeLoadError: A or B cannot load or run with the tensors exposed.
    """
    from fusionviz.model_io import weights_dir
    from fusionviz.verify import compare, make_session, reference_noise, run_model

    a_names = [it[0] for it in items]
    b_names = [it[1] for it in items]
    ma = _with_outputs(a, a_names)
    folder_a = weights_dir(ma)
    try:
        ra = run_model(make_session(ma), feeds)
    except errors.FusionvizError as exc:
        raise errors.RuntimeLoadError(f"model A does not run on input set '{input_set}' with its "
                                      f"tensors exposed: {_strip(exc)}") from None
    noise: dict[str, float] = {}
    try:  # rule 5: onnxruntime's own level all, these tensors exposed
        noise = reference_noise(_numeric(ra), _numeric(run_model(make_session(ma, level="all"), feeds)))
    except errors.FusionvizError:
        noise = {}
    outputs = [it[0] for it in items if it[2]]
    if outputs:  # rule 5: A's graph outputs get verify's own floor
        try:
            natural = run_model(make_session(a, level="all", weights_dir=folder_a), feeds)
            noise.update(reference_noise(_numeric({o: ra[o] for o in outputs}), _numeric(natural)))
        except errors.FusionvizError:
            for o in outputs:
                noise.pop(o, None)
    del ma
    try:
        rb = run_model(make_session(_with_outputs(b, b_names)), feeds)
    except errors.FusionvizError as exc:
        raise errors.RuntimeLoadError(f"model B fails on input set '{input_set}' where A runs, with its "
                                      f"tensors exposed: {_strip(exc)}") from None
    block = nchwc_block_size() if any(it[3] or it[4] for it in items) else 0
    out: list[tuple[str, OutputDiff | None, str]] = []
    for a_name, b_name, is_output, blocked_a, blocked_b in items:
        x, y = ra.get(a_name), rb.get(b_name)
        if not (_is_numeric(x) and _is_numeric(y)):
            out.append(("skipped", None, f"not a numeric tensor ({_kind(x)} in A, {_kind(y)} in B)"))
            continue
        if blocked_a != blocked_b:  # rule 4
            raw, other = (x, y) if blocked_a else (y, x)
            plain = unblock(raw, int(other.shape[1]) if other.ndim == 4 else -1, block)
            if plain is None:
                out.append(("incomparable", None, f"blocked NCHWc layout {list(raw.shape)} cannot be matched "
                                           f"with {list(other.shape)}"))
                continue
            x, y = (plain, y) if blocked_a else (x, plain)
        if not is_output and x.shape != y.shape:  # rule 6
            out.append(("incomparable", None, f"shape {list(x.shape)} in A, {list(y.shape)} in B"))
            continue
        if not is_output and _is_float(x) != _is_float(y):
            out.append(("incomparable", None, f"{x.dtype} in A, {y.dtype} in B"))
            continue
        out.append(("compared", compare(x, y, a_name, rtol=rtol, atol=atol, input_set=input_set,
                                        noise=noise.get(a_name, 0.0)), ""))
    return out


def _numeric(outs: Mapping[str, object]) -> dict[str, np.ndarray]:
    return {k: v for k, v in outs.items() if _is_numeric(v)}


def _strip(exc: Exception) -> str:
    return str(exc).replace("onnxruntime failed to run the model: ", "").replace(
        "onnxruntime cannot load the model: ", "cannot load: ")
