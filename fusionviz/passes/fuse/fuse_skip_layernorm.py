"""fuse_skip_layernorm: Add + LayerNormalization into ``com.microsoft.SkipLayerNormalization``."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np
import onnx_ir as ir

from fusionviz.passes import nearmiss
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.facts import const_value
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import (
    float32_or_unknown,
    new_initializer,
    produced_by,
    replace_value,
    single_use,
)
from fusionviz.passes.hygiene import Namer

logger = logging.getLogger(__name__)


def _is_3d_same(a: ir.Value, b: ir.Value) -> str | None:
    """None when SkipLayerNormalization accepts (a, b) as (input, skip); else the reason."""
    sa, sb = a.shape, b.shape
    if sa is None or sb is None:
        return "operand shapes unknown"
    if len(sa) != 3:
        return f"input rank {len(sa)} is not 3"
    if len(sb) == 3 and list(sa.dims) == list(sb.dims):
        return None
    if len(sb) == 3 and sa.dims[2] == sb.dims[2] and all(
        x == y or (not isinstance(x, int) and not isinstance(y, int))
        for x, y in zip(sa.dims[:2], sb.dims[:2], strict=True)
    ):
        # Symbolic (B, S) on both sides that shape inference could not unify; the kernel checks
        # the shapes at run time and fails loudly (never silently) if they differ.
        return None
    if len(sb) == 3 and sb.dims[0] == 1 and list(sb.dims[1:]) == list(sa.dims[1:]):
        return None
    if len(sb) == 2 and list(sb.dims) == list(sa.dims[1:]):
        return None
    return f"shapes {list(sa.dims)} and {list(sb.dims)} are not (B,S,H) + (B|1,S,H)"


class SkipLayerNormFusion(Pass, name="fuse_skip_layernorm", aliases=("skip_layernorm_fusion",), category=Category.FUSE, order=310,
                          trigger_ops={"LayerNormalization"}):
    title = "Add + LayerNormalization → SkipLayerNormalization"
    needs_shapes = True
    not_in_all = ("onnxruntime 1.32's CPU SkipLayerNormalization is slower than the Add + LayerNormalization it "
                  "replaces (35 vs ~9 µs a row block on the GPT-2 export; --all was 1.13× slower with it, 0.95× "
                  "without): select it by name")
    explain = """\
**What:** `LayerNormalization(a + b [+ bias])` — the residual connection of every transformer
block — becomes `com.microsoft.SkipLayerNormalization(a, b, γ, β, bias)`. When the sum itself is
still needed (the next residual branch), the kernel's fourth output `input_skip_bias_sum`
provides it, so nothing is computed twice.

**Why faster:** the sum is computed, reduced (mean, variance) and normalised in one pass over
each row while it sits in cache, instead of writing `a + b` to memory and reading it back;
one kernel instead of two or three.

**Math:** `s = a + b + bias`; `y = (s − mean(s)) / √(var(s) + ε) · γ + β` over the last axis.
Requires 3-D `(B, S, H)` operands (skip may be `(1, S, H)` or `(S, H)`) and normalisation over
the last axis only.

**RMSNorm:** the same with an RMSNorm is its own pass, `fuse_skip_rmsnorm` (its kernel is
faster than what it replaces, so `--all` runs it).

**Measured caveat:** with onnxruntime 1.32 on an AVX-512 CPU, 1 thread, the BERT sample
(hidden 128, seq 128) ran ~15% *slower* with this kernel than with `LayerNormalization` + `Add`
(its CPU kernel is slower per row at small hidden sizes), and a dynamo GPT-2 export 13% slower
(each SkipLayerNormalization 35 µs where LayerNormalization took 6 µs). So `--all` leaves this
pass out (select it by name, or let `tune` try it); `tune` also switches off onnxruntime's own
`SkipLayerNormFusion` where that is slower. Fewer nodes is not always faster: measure.
"""

    #: Which norm this pass fuses: "layernorm" (LayerNormalization) or "rmsnorm" (an RMSNorm
    #: written out, into SkipSimplifiedLayerNormalization: ``fuse_skip_rmsnorm``).
    norm: ClassVar[str] = "layernorm"

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for node in list(model.graph):
            if node.graph is None or node.domain != "":
                continue
            norm = _norm_site(node)
            if norm is None or (norm[0].op_type == "LayerNormalization") != (self.norm == "layernorm"):
                continue
            ln, x, gamma, beta, eps, norm_nodes = norm
            add = produced_by(x, "Add")
            if add is None:
                continue
            why = _skln_params(x, gamma, beta) if gamma is not None else _ones_scale(x)
            if why is not None:
                logger.info("%s: %s not fused: %s", self.name, ln.name, why)
                nearmiss.note([ln, add], ln, why, rule="skip_layernorm")
                continue
            if not float32_or_unknown(x):
                nearmiss.note([ln, add], ln, "the input is not float32 (the CPU SkipLayerNormalization kernel is float32)",
                              rule="skip_layernorm")
                continue
            a, b = add.inputs[0], add.inputs[1]
            if const_value(a) is not None or const_value(b) is not None:
                continue  # x + constant is a bias add, not a skip connection
            why = _is_3d_same(a, b)
            if why is not None:
                a, b = b, a
                if _is_3d_same(a, b) is not None:
                    logger.info("%s: %s not fused: %s", self.name, ln.name, why)
                    nearmiss.note([ln, add], add, why, rule="skip_layernorm")
                    continue
            # Fold a 1-D bias add feeding the input: a = a0 + bias.
            bias = None
            removed = [*norm_nodes, add]
            for first, second in ((a, b), (b, a)):
                badd = produced_by(first, "Add")
                if badd is None or not single_use(first):
                    continue
                for i in (0, 1):
                    c = const_value(badd.inputs[1 - i])
                    if (c is not None and c.ndim == 1 and c.shape[0] == _hidden(gamma)
                            and _is_3d_same(badd.inputs[i], second) is None):
                        bias = badd.inputs[1 - i]
                        a, b = badd.inputs[i], second
                        removed.append(badd)
                        break
                if bias is not None:
                    break
            sum_used = [u for u in add.outputs[0].uses() if all(u.node is not n for n in norm_nodes)] or \
                add.outputs[0].is_graph_output()
            simplified = ln.op_type != "LayerNormalization"
            if gamma is None:  # the kernel needs a scale: γ = 1 (what the norm without one computes)
                gamma = new_initializer(model, namer, f"{ln.name or 'rmsnorm'}_scale_ones",
                                        np.ones(int(x.shape[-1]), dtype=np.float32))
            inputs = [a, b, gamma, bias] if simplified else [a, b, gamma, beta if beta is not None else None, bias]
            while inputs and inputs[-1] is None:
                inputs.pop()
            skln = ir.node(
                "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization",
                inputs,
                {"epsilon": eps},
                domain=MS_DOMAIN,
                num_outputs=4 if sum_used else 1,
                name="",
            )
            model.graph.insert_before(ln, skln)
            y = ln.outputs[0]
            skln.outputs[0].name = namer(f"{y.name}_skln")
            skln.outputs[0].shape, skln.outputs[0].type = y.shape, y.type
            replace_value(y, skln.outputs[0], namer)
            if sum_used:
                s = add.outputs[0]
                skln.outputs[3].name = namer(f"{s.name}_sum")
                skln.outputs[3].shape, skln.outputs[3].type = s.shape, s.type
                for o in skln.outputs[1:3]:
                    o.name = ""  # mean and inv_std_var are not requested: ONNX's empty name
                replace_value(s, skln.outputs[3], namer)
            for n in removed:
                if all(not o.uses() and not o.is_graph_output() for o in n.outputs):
                    model.graph.remove(n, safe=True)
            fused += 1
        if fused:
            ensure_ms_import(model)


def _norm_site(node: ir.Node) -> tuple[ir.Node, ir.Value, ir.Value, ir.Value | None, float, list[ir.Node]] | None:
    """(the node whose output is the norm, its input x, γ, β, ε, the norm's nodes) for a
    LayerNormalization over the last axis or an RMSNorm ending at ``node``; None otherwise."""
    if node.op_type == "LayerNormalization":
        axis = node.attributes.get("axis")
        if axis is not None and axis.value not in (-1, 2):
            return None
        if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            return None
        eps = node.attributes.get("epsilon")
        beta = node.inputs[2] if len(node.inputs) > 2 else None
        return node, node.inputs[0], node.inputs[1], beta, float(eps.value) if eps is not None else 1e-5, [node]
    if node.op_type in ("Mul", "Div"):
        rms = rms_norm(node)
        if rms is not None:
            x, gamma, eps, nodes = rms
            return node, x, gamma, None, eps, nodes
    return None


def rms_norm(mul: ir.Node) -> tuple[ir.Value, ir.Value | None, float, list[ir.Node]] | None:
    """``γ · (x · 1/√(mean(x², -1) + ε))`` ending at ``mul`` (either operand order; ``x·x`` or
    ``Pow(x, 2)``; ``x / √(…)`` as well), as (x, γ, ε, nodes); None otherwise. Every
    intermediate has this one use; γ is a constant vector. Without γ (a scale of ones that
    eliminate_noop removed, or a norm written without one) γ is None; such a norm is only
    reported at its last node, never at the inner node of a norm that goes on to a γ."""
    if mul.op_type == "Mul" and mul.domain == "":
        for gi in (0, 1):
            found = _gamma_form(mul, gi)
            if found is not None:
                return found
    if mul.domain != "" or mul.op_type not in ("Mul", "Div") or _scaled_next(mul):
        return None
    for xi in ((0, 1) if mul.op_type == "Mul" else (0,)):
        found = _inv_rms(mul.inputs[xi], mul.inputs[1 - xi], mul.op_type == "Div")
        if found is not None:
            eps, nodes = found
            return mul.inputs[xi], None, eps, [mul, *nodes]
    return None


def _scaled_next(inner: ir.Node) -> bool:
    """Whether ``inner``'s output goes on to a Mul by a constant vector (that Mul ends the norm)."""
    uses = list(inner.outputs[0].uses())
    if len(uses) != 1 or uses[0].node.op_type != "Mul" or uses[0].node.domain != "":
        return False
    other = uses[0].node.inputs[1 - uses[0].idx]
    c = const_value(other)
    return c is not None and c.ndim == 1


def _gamma_form(mul: ir.Node, gi: int) -> tuple[ir.Value, ir.Value | None, float, list[ir.Node]] | None:
    """The norm ``mul`` ends when its input ``gi`` is γ."""
    gamma, n = mul.inputs[gi], mul.inputs[1 - gi]
    g = const_value(gamma)
    if g is None or g.ndim != 1 or not single_use(n):
        return None
    inner = n.producer()
    if inner is None or inner.domain != "" or inner.op_type not in ("Mul", "Div"):
        return None
    for xi in ((0, 1) if inner.op_type == "Mul" else (0,)):
        x, r = inner.inputs[xi], inner.inputs[1 - xi]
        found = _inv_rms(x, r, inner.op_type == "Div")
        if found is not None:
            eps, nodes = found
            return x, gamma, eps, [mul, inner, *nodes]
    return None


def _inv_rms(x: ir.Value, r: ir.Value, divided: bool) -> tuple[float, list[ir.Node]] | None:
    """``r = 1/√(mean(x², -1) + ε)`` (or ``√(…)`` when ``divided``) as (ε, nodes)."""
    nodes: list[ir.Node] = []
    if not single_use(r):
        return None
    if not divided:
        rec = produced_by(r, "Reciprocal")
        if rec is None:
            return None
        nodes.append(rec)
        r = rec.inputs[0]
        if not single_use(r):
            return None
    sqrt = produced_by(r, "Sqrt")
    if sqrt is None or not single_use(sqrt.inputs[0]):
        return None
    add = produced_by(sqrt.inputs[0], "Add")
    if add is None:
        return None
    eps = next((const_value(v) for v in add.inputs if const_value(v) is not None), None)
    mean_v = next((v for v in add.inputs if const_value(v) is None), None)
    if eps is None or eps.size != 1 or mean_v is None or not single_use(mean_v):
        return None
    mean = produced_by(mean_v, "ReduceMean")
    if mean is None or not single_use(mean.inputs[0]) or mean.attributes.get_int("keepdims", 1) != 1:
        return None
    axes = const_value(mean.inputs[1]) if len(mean.inputs) > 1 and mean.inputs[1] is not None else None
    if axes is None and "axes" in mean.attributes:
        axes = mean.attributes["axes"].value
    if axes is None or list(np.asarray(axes).reshape(-1)) != [-1]:
        return None
    sq = mean.inputs[0].producer()
    if sq is None or sq.domain != "":
        return None
    if sq.op_type == "Pow":
        p = const_value(sq.inputs[1])
        if sq.inputs[0] is not x or p is None or p.size != 1 or float(p.reshape(())) != 2.0:
            return None
    elif sq.op_type != "Mul" or sq.inputs[0] is not x or sq.inputs[1] is not x:
        return None
    return float(eps.reshape(())), [*nodes, sqrt, add, mean, sq]


def _ones_scale(x: ir.Value) -> str | None:
    """Why a norm without a scale cannot be given a scale of ones, or None."""
    if x.shape is None or len(x.shape) == 0 or not isinstance(x.shape[-1], int):
        return "the norm has no scale and its last dim is unknown, so no scale of ones can be made"
    return None


def _hidden(gamma: ir.Value) -> int | None:
    """The normalised size: the length of LayerNormalization's 1-D scale."""
    c = const_value(gamma)
    return int(c.shape[0]) if c is not None and c.ndim == 1 else None


def _skln_params(x: ir.Value, gamma: ir.Value, beta: ir.Value | None) -> str | None:
    """Why SkipLayerNormalization cannot take this LayerNormalization's γ/β, or None.

    The kernel wants both as constant 1-D vectors of the hidden size (LayerNormalization also
    accepts other broadcastable shapes).
    """
    hidden = _hidden(gamma)
    if hidden is None:
        return "the scale is not a constant 1-D vector"
    if beta is not None:
        b = const_value(beta)
        if b is None or b.shape != (hidden,):
            return "the bias is not a constant vector of the scale's length"
    if x.shape is not None and len(x.shape) >= 1 and isinstance(x.shape[-1], int) and x.shape[-1] != hidden:
        return f"the scale has {hidden} values for a last dim of {x.shape[-1]}"
    return None
