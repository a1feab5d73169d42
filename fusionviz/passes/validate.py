"""Attribute checks the ONNX checker does not make, run before any pass.

``onnx.checker`` checks attribute *types*, not values, so a model can pass it (and our loader)
with a ``Transpose`` whose ``perm`` is not a permutation, a ``Cast`` to a type that does not
exist, or a string attribute that is not UTF-8. onnxruntime refuses such a model when it builds
the kernel; the rewrite libraries the passes wrap do not check and fail deep inside a rule
(IndexError, ValueError). Found by fuzzing (tests/hostile/test_fuzz.py).

The pipeline calls :func:`malformed` once before the first pass and refuses the model with one
sentence naming the node, instead of letting each pass trip over it.
"""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes.base import all_nodes

#: attributes that hold an onnx TensorProto.DataType number
_DTYPE_ATTRS = {("Cast", "to"), ("CastLike", "to"), ("EyeLike", "dtype"), ("RandomNormal", "dtype"),
                ("RandomUniform", "dtype"), ("RandomNormalLike", "dtype"), ("RandomUniformLike", "dtype"),
                ("Multinomial", "dtype"), ("Bernoulli", "dtype")}
_VALID_DTYPES = frozenset(int(d) for d in ir.DataType if int(d) != 0)


def _node_label(node: ir.Node) -> str:
    return f"node '{(node.name or '')[:60]}' ({node.op_type})"


def malformed(model: ir.Model) -> str | None:
    """The first attribute that breaks the ONNX spec in a way passes cannot handle, or None."""
    for node in all_nodes(model):
        attrs = node.attributes.data
        if not attrs:
            continue
        for name, attr in attrs.items():
            if attr.is_ref():
                continue
            value = attr.value
            if attr.type is ir.AttributeType.STRING and isinstance(value, bytes):
                return f"{_node_label(node)} has a string attribute '{name}' that is not UTF-8 text"
            if attr.type is ir.AttributeType.STRINGS and any(isinstance(v, bytes) for v in value):
                return f"{_node_label(node)} has a string list attribute '{name}' that is not UTF-8 text"
        if node.domain not in ("", "ai.onnx"):
            continue
        for op, name in _DTYPE_ATTRS:
            if node.op_type == op and name in attrs:
                a = attrs[name]
                if a.type is ir.AttributeType.INT and int(a.value) not in _VALID_DTYPES:
                    return f"{_node_label(node)} has {name}={a.value}, which is not an ONNX data type"
        if node.op_type == "Transpose" and "perm" in attrs:
            perm = list(attrs["perm"].value) if attrs["perm"].type is ir.AttributeType.INTS else None
            if perm is None or sorted(perm) != list(range(len(perm))):
                return f"{_node_label(node)} has perm={perm}, which is not a permutation of 0..{len(perm or []) - 1}"
            x = node.inputs[0] if node.inputs else None
            if x is not None and x.shape is not None and len(x.shape) != len(perm):
                return (f"{_node_label(node)} has perm={perm} for an input of rank {len(x.shape)}")
    return None
