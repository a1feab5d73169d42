"""The layout passes' own postcondition: how tensors are stored may change, their precision may not.

A layout pass moves data into another arrangement; it never widens or narrows a number. A
capture of onnxruntime's optimized graph can do both behind the pass's back: on a CPU without
float16 kernels, onnxruntime's session runs a float16 op in float32 behind Casts it inserts, and
its saved graph holds the float32 op, its widened weights and those Casts. Rules:

1. No Cast is added: for every target type (``Cast.to``; ``CastLike`` counted apart) the result
   has no more Casts than the model it was given, in all graphs. Fewer is allowed
   (onnxruntime folds a Cast of a constant, or drops a Cast to the type a value already has).
2. No float type appears among the weights (initializers and ``Constant`` tensors) that the
   model's weights did not have: a float16 model whose weights come back float32 was widened.
3. No named tensor changes its element type: a graph input or output, a weight, or a value
   whose type both models state (value_info) keeps it.

:func:`precision_change` returns one sentence naming what changed, or None.
"""

from __future__ import annotations

import collections

import onnx

from fusionviz.passes.walk import proto_graphs

_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.BFLOAT16})


#: ONNX's and onnxruntime's names for the types whose size they do not spell out
_SIZED = {"float": "float32", "double": "float64"}


def type_name(elem_type: int | str) -> str:
    """``float16``, ``float32``: an element type (ONNX's number, or a name as onnxruntime's
    kernel registry writes it inside ``tensor(...)``) for the user, with its size."""
    if isinstance(elem_type, str):
        name = elem_type.removeprefix("tensor(").removesuffix(")")
    else:
        try:
            name = onnx.TensorProto.DataType.Name(elem_type).lower()
        except ValueError:
            return f"type {elem_type}"
    return _SIZED.get(name, name)


def _casts(model: onnx.ModelProto) -> collections.Counter:
    """Rule 1: (op, target type) -> count, in all graphs."""
    out: collections.Counter = collections.Counter()
    for g in proto_graphs(model.graph):
        for n in g.node:
            if n.domain not in ("", "ai.onnx"):
                continue
            if n.op_type == "Cast":
                to = next((a.i for a in n.attribute if a.name == "to"), 0)
                out["Cast", to] += 1
            elif n.op_type == "CastLike":
                out["CastLike", 0] += 1
    return out


def _weights(model: onnx.ModelProto) -> dict[str, int]:
    """Rule 2: weight name -> element type (initializers and Constant tensors), all graphs."""
    out: dict[str, int] = {}
    for g in proto_graphs(model.graph):
        for t in g.initializer:
            out.setdefault(t.name, t.data_type)
        for n in g.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
                a = next((a for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
                if a is not None:
                    out.setdefault(n.output[0], a.t.data_type)
    return out


def _declared(model: onnx.ModelProto) -> dict[str, int]:
    """Rule 3: name -> element type of every tensor whose type the model states."""
    out: dict[str, int] = {}
    for g in proto_graphs(model.graph):
        for v in (*g.input, *g.output, *g.value_info):
            t = v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else 0
            if t:
                out.setdefault(v.name, t)
    return out


def precision_change(before: onnx.ModelProto, after: onnx.ModelProto) -> str | None:
    """What in ``after`` has another precision than in ``before`` (one sentence), or None."""
    found: list[str] = []
    c0, c1 = _casts(before), _casts(after)
    added = {k: c1[k] - c0.get(k, 0) for k in c1 if c1[k] > c0.get(k, 0)}  # rule 1
    for (op, to), k in sorted(added.items()):
        found.append(f"{k} {op}{'' if op == 'CastLike' else ' to ' + type_name(to)} added")
    w0, w1 = _weights(before), _weights(after)
    had = {t for t in w0.values() if t in _FLOATS}
    for t in sorted({t for t in w1.values() if t in _FLOATS} - had):  # rule 2
        k = sum(1 for x in w1.values() if x == t)
        was = ", ".join(type_name(x) for x in sorted(had)) or "no float"
        found.append(f"{k} weight(s) became {type_name(t)} (the model's are {was})")
    t0 = {**_declared(before), **w0}
    t1 = {**_declared(after), **w1}
    moved = [f"'{n}' {type_name(t0[n])} -> {type_name(t)}" for n, t in t1.items() if n in t0 and t0[n] != t]
    if moved:  # rule 3
        more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
        found.append(f"tensor {', '.join(moved[:3])}{more}")
    return "; ".join(found) if found else None
