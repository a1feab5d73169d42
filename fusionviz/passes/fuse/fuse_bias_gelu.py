"""fuse_bias_gelu: ``Gelu(x + b)`` into ``com.microsoft.BiasGelu`` / ``FastGelu``."""

from __future__ import annotations

import math

import onnx_ir as ir

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import const_value
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import (
    float32_or_unknown,
    peel_scale,
    produced_by,
    scalar,
    single_use,
    substitute,
)
from fusionviz.passes.hygiene import Namer


def _bias_add(v: ir.Value) -> tuple[ir.Value, ir.Value, ir.Node] | None:
    """v = x + b with b a 1-D constant matching x's last dim -> (x, b, add)."""
    add = produced_by(v, "Add")
    if add is None:
        return None
    for i in (0, 1):
        c = const_value(add.inputs[1 - i])
        x = add.inputs[i]
        if c is None or c.ndim != 1 or const_value(x) is not None:
            continue
        if x.shape is not None and len(x.shape) >= 1 and isinstance(x.shape[-1], int) and x.shape[-1] != c.shape[0]:
            continue
        if x.shape is None or len(x.shape) < 1 or not isinstance(x.shape[-1], int):
            continue  # the bias length must be checked against x
        return x, add.inputs[1 - i], add
    return None


def _erf_gelu(erf: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Value] | None:
    """0.5·x·(1 + erf(x/√2)) around ``erf`` -> (x, nodes, y); the three factors in any order."""
    x, f, scale_nodes = peel_scale(erf.inputs[0])
    if len(scale_nodes) != 1 or abs(f - 1 / math.sqrt(2)) > 1e-4:
        return None
    if not single_use(erf.outputs[0]):
        return None
    add1 = erf.outputs[0].uses()[0].node
    if add1.op_type != "Add" or 1.0 not in (scalar(add1.inputs[0]), scalar(add1.inputs[1])):
        return None
    nodes = [*scale_nodes, erf, add1]
    v = add1.outputs[0]
    half = has_x = False
    for _ in range(2):  # (1+erf) is multiplied by x and by 0.5, or by (0.5·x)
        if not single_use(v):
            return None
        mul = v.uses()[0].node
        if mul.op_type != "Mul" or mul.domain != "":
            return None
        other = mul.inputs[0] if mul.inputs[1] is v else mul.inputs[1]
        nodes.append(mul)
        v = mul.outputs[0]
        if other is x and not has_x:
            has_x = True
        elif scalar(other) is not None and abs(scalar(other) - 0.5) < 1e-7 and not half:
            half = True
        else:
            base, f2, n2 = peel_scale(other)
            if base is not x or has_x or half or len(n2) != 1 or abs(f2 - 0.5) > 1e-7:
                return None
            if not single_use(other):
                return None
            nodes += n2
            has_x = half = True
        if has_x and half:
            return x, nodes, v
    return None


class BiasGeluFusion(Pass, name="fuse_bias_gelu", aliases=("bias_gelu_fusion",), category=Category.FUSE, order=320,
                     trigger_ops={"Gelu", "FastGelu", "Erf"}):
    title = "Bias + GELU → BiasGelu / FastGelu"
    needs_shapes = True
    explain = """\
**What:** `Gelu(x + b)` with a 1-D constant bias `b` (the feed-forward layer's first bias)
becomes `com.microsoft.BiasGelu(x, b)`; the tanh approximation becomes `FastGelu(x, b)`. The
Erf form `0.5·x·(1 + erf(x/√2))` is recognised directly, so this works whether or not the GELU
was fused first.

**Why faster:** the bias add and the activation are both element-wise; doing them in one loop
reads and writes the `(B, S, 4H)` activation once instead of twice (or six times for the
unfused Erf form).

**Math:** `BiasGelu(x, b) = g(x + b)`, `g(z) = 0.5·z·(1 + erf(z/√2))`;
`FastGelu(x, b) = 0.5·z·(1 + tanh(√(2/π)·(z + 0.044715·z³)))`.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for node in list(model.graph):
            if node.graph is None:
                continue
            kind = None
            inp = y = None
            nodes: list[ir.Node] = []
            if node.op_type == "Gelu" and node.domain in ("", MS_DOMAIN):
                approx = node.attributes.get("approximate")
                kind = "FastGelu" if approx is not None and approx.value == "tanh" else "BiasGelu"
                inp, y, nodes = node.inputs[0], node.outputs[0], [node]
            elif node.op_type == "FastGelu" and node.domain == MS_DOMAIN and len(node.inputs) == 1:
                kind, inp, y, nodes = "FastGelu", node.inputs[0], node.outputs[0], [node]
            elif node.op_type == "Erf" and node.domain == "":
                found = _erf_gelu(node)
                if found is None:
                    continue
                inp, nodes, y = found
                kind = "BiasGelu"
            else:
                continue
            if not float32_or_unknown(inp):
                continue
            ba = _bias_add(inp)
            if ba is None or inp.is_graph_output() or len(inp.uses()) != sum(1 for n in nodes for i in n.inputs if i is inp):
                continue
            x, b, add = ba
            new = ir.node(kind, [x, b], domain=MS_DOMAIN, name="")
            substitute(model, new, [add, *nodes], y, namer, kind.lower())
            fused += 1
        if fused:
            ensure_ms_import(model)
