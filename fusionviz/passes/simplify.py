"""Simplification passes: remove or precompute what does nothing at inference time.

Each pass is one toggle. They wrap library code where a well-kept library has the rule
(onnxscript's constant folder and rewrite rules, onnx-ir's common passes) and add small rules of
their own, in onnxscript's pattern language, where no library has them. Shared conventions:

1. A pass only cleans up after itself: nodes that *it* made dead are removed, nodes that were
   already dead are left for ``dead_code_elimination``, and Identity nodes that *its* rules
   produced are bypassed while Identities that were already there are left for
   ``identity_elimination``. So turning one pass off really turns that simplification off.
2. Every rule checks static facts (constant values, static shapes, dtypes) and fails with a
   reason when they are unknown; a pass that finds nothing changes nothing and never raises.
3. Broadcasting is respected: ``x + 0`` is removed only when the zero tensor cannot enlarge
   ``x``'s shape, ``Expand`` only when the target shape cannot enlarge it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import (
    CommonSubexpressionEliminationPass,
    DeduplicateHashedInitializersPass,
    LiftConstantsToInitializersPass,
    RemoveUnusedFunctionsPass,
    RemoveUnusedNodesPass,
    RemoveUnusedOpsetsPass,
)
from onnxscript.optimizer._constant_folding import FoldConstantsPass, Replacement
from onnxscript.rewriter import pattern as orp
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._rewrite_rule import RewriteRuleClassBase
from onnxscript.rewriter.rules import common as lib_rules

from fusionviz.passes.base import Category, Change, ChangeKind, Pass, all_nodes
from fusionviz.passes.hygiene import (
    absent_outputs,
    forget_contradicted_output_shapes,
    forget_negative_dims,
    restore_absent_outputs,
    unique_value_names,
)
from fusionviz.passes.rulefilter import applicable_rules, apply_rule_set, model_ops
from fusionviz.passes.shapes import strict_inference_error

logger = logging.getLogger(__name__)

FOLD_MAX_MB_ENV = "FUSIONVIZ_FOLD_MAX_MB"
DEFAULT_FOLD_MAX_MB = 256
_MAX_ROUNDS = 8
_INT_END = 2**31 - 1  # Slice ends at or above this mean "to the end" (exporters use INT32/INT64 max)
_ONNX_DOMAINS = ("", "ai.onnx")


# =========================================================================== shared machinery


def fold_budget_bytes() -> int:
    """Bytes constant folding may create in one run (env ``FUSIONVIZ_FOLD_MAX_MB``, default 256)."""
    raw = os.environ.get(FOLD_MAX_MB_ENV, "")
    try:
        mb = float(raw) if raw.strip() else DEFAULT_FOLD_MAX_MB
    except ValueError:
        logger.warning("%s=%r is not a number; using %s", FOLD_MAX_MB_ENV, raw, DEFAULT_FOLD_MAX_MB)
        mb = DEFAULT_FOLD_MAX_MB
    return max(0, int(mb * 1024 * 1024))


def _is_onnx(node: ir.Node, *op_types: str) -> bool:
    return node.domain in _ONNX_DOMAINS and node.op_type in op_types


def _graph_likes(model: ir.Model) -> list[ir.Graph | ir.Function]:
    graphs: list[ir.Graph | ir.Function] = list(model.graphs())
    graphs.extend(model.functions.values())
    return graphs


def _live_users(v: ir.Value) -> list[ir.Node]:
    """Nodes that use ``v`` and are still in a graph (removed nodes may keep stale uses)."""
    return [u.node for u in v.uses() if u.node.graph is not None]


def _dead_nodes(graph: ir.Graph | ir.Function) -> list[ir.Node]:
    """Nodes of ``graph`` (not its subgraphs) whose outputs reach no live use, in reverse order."""
    dead: set[int] = set()
    out: list[ir.Node] = []
    for node in reversed(list(graph)):
        live = False
        for v in node.outputs:
            if v.is_graph_output():
                live = True
                break
            if any(id(user) not in dead for user in _live_users(v)):
                live = True
                break
        if not live:
            dead.add(id(node))
            out.append(node)
    return out


def _unused_initializers(graph: ir.Graph) -> list[ir.Value]:
    return [
        v
        for v in graph.initializers.values()
        if not _live_users(v) and not v.is_graph_output() and not v.is_graph_input()
    ]


def _detach_and_remove(graph: ir.Graph | ir.Function, node: ir.Node) -> None:
    """Remove a node whose outputs have no live users (stale uses from discarded rewrites are ignored)."""
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node, safe=False)


class _Cleanup:
    """Rule 1: remember what was dead before a pass; afterwards remove only what it made dead."""

    def __init__(self, model: ir.Model) -> None:
        self.node_ids = {id(n) for n in all_nodes(model)}
        for f in model.functions.values():
            self.node_ids.update(id(n) for n in f)
        self.dead_before = {id(n) for g in _graph_likes(model) for n in _dead_nodes(g)}
        self.unused_inits_before = {id(v) for g in model.graphs() for v in _unused_initializers(g)}

    def is_new(self, node: ir.Node) -> bool:
        return id(node) not in self.node_ids

    def bypass_new_identities(self, model: ir.Model) -> None:
        for g in _graph_likes(model):
            for node in list(g):
                if self.is_new(node) and _is_onnx(node, "Identity"):
                    eliminate_identity(node)

    def prune(self, model: ir.Model) -> int:
        removed = 0
        for g in _graph_likes(model):
            for node in _dead_nodes(g):  # reverse topological: users go first
                if id(node) in self.dead_before:
                    continue
                _detach_and_remove(g, node)
                removed += 1
        for g in model.graphs():
            for v in _unused_initializers(g):
                if id(v) not in self.unused_inits_before and v.name is not None:
                    g.initializers.pop(v.name)
        return removed


def _produced_in(v: ir.Value, graph: ir.Graph | ir.Function) -> bool:
    """Whether a node of ``graph`` itself (not of an enclosing graph) produces ``v``."""
    p = v.producer()
    return p is not None and p.graph is graph


def eliminate_identity(node: ir.Node) -> bool:
    """Remove ``y = Identity(x)``, following onnx-ir's numbered cases, plus one guard.

    1. ``y`` is not a graph output: every use of ``y`` becomes a use of ``x``.
    2. ``y`` is a graph output and ``x`` is produced by a node: ``x`` is renamed ``y``.
    3. ``y`` is a graph output and ``x`` is a graph input or initializer: kept.
    4. (fusionviz) ``y`` and ``x`` are both graph outputs: kept. onnx-ir 1.1 removes the node
       and renames ``x``, which silently drops the graph output ``x``.
    5. (fusionviz) ``y`` is an output of a subgraph (an If/Loop/Scan body) and ``x`` is not
       produced inside that subgraph (it is captured from an enclosing graph): kept. A graph's
       outputs must be produced in that graph, and renaming ``x`` would rename the outer value.

    Uses of ``y`` inside subgraphs (a branch that captures ``y`` by name) are uses like any
    other: case 1 rewires them too.
    """
    if not _is_onnx(node, "Identity") or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if x is None or node.graph is None:
        return False
    if y.is_graph_output() and (x.is_graph_input() or x.is_initializer() or x.is_graph_output()):
        return False  # Cases 3 and 4
    if y.is_graph_output() and not _produced_in(x, node.graph):
        return False  # Case 5
    if x.shape is None:
        x.shape = y.shape
    if x.type is None:
        x.type = y.type
    was_output = y.is_graph_output()
    ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
    if was_output:  # Case 2
        x.name = y.name
    _detach_and_remove(node.graph, node)
    return True


def _apply_rules(model: ir.Model, rules: Sequence[orp.RewriteRule]) -> int:
    """Run onnxscript rewrite rules to a fixed point, then clean up after them (rule 1)."""
    cleanup = _Cleanup(model)
    rules = list(rules)
    total = 0
    for _ in range(_MAX_ROUNDS):
        live = applicable_rules(rules, model_ops(model))  # re-checked each round: rules make ops
        if not live:
            break
        # remove_unused_nodes=False: we prune only what the rules made dead
        count = apply_rule_set(model, live, remove_unused_nodes=False)
        total += count
        cleanup.bypass_new_identities(model)
        cleanup.prune(model)
        if not count:
            break
    if total:
        unique_value_names(model)  # the rewriter names new values per graph, not per model
    return total


# ----------------------------------------------------------------------- static facts


def _const(v: ir.Value | None) -> np.ndarray | None:
    """The value of an initializer or a Constant node's output; None when not statically known."""
    if v is None:
        return None
    tensor = v.const_value
    if tensor is None:
        p = v.producer()
        if p is None or not _is_onnx(p, "Constant") or len(p.attributes) != 1:
            return None
        attr = next(iter(p.attributes.values()))
        if attr.is_ref():
            return None
        if attr.name == "value":
            tensor = attr.as_tensor()
        elif attr.name in ("value_float", "value_floats"):
            return np.asarray(attr.value, dtype=np.float32)
        elif attr.name in ("value_int", "value_ints"):
            return np.asarray(attr.value, dtype=np.int64)
        else:
            return None
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # noqa: BLE001 - external data missing etc.: not a usable constant
        return None


def _static_dims(shape: ir.Shape | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape.dims):
        return None
    return tuple(int(d) for d in shape.dims)


def _broadcast_keeps_shape(small: Sequence[int], x_shape: ir.Shape | None) -> str | None:
    """None when broadcasting ``x`` against a tensor of shape ``small`` leaves ``x``'s shape; else why not."""
    if x_shape is None:
        return None if all(d == 1 for d in small) and len(small) == 0 else "the input shape is unknown"
    xr = len(x_shape)
    if len(small) > xr:
        return f"the constant has rank {len(small)} > input rank {xr}, so it would add dimensions"
    for i in range(1, len(small) + 1):
        s = int(small[-i])
        if s == 1:
            continue
        xd = x_shape[-i]
        if not isinstance(xd, int) or xd != s:
            return f"dimension -{i}: constant has {s}, input has {xd}, so it would broadcast"
    return None


def _ints_attr(node: ir.Node, name: str) -> list[int] | None:
    a = node.attributes.get(name)
    if a is None:
        return None
    try:
        return [int(i) for i in a.as_ints()]
    except Exception:  # noqa: BLE001 - wrong attribute type or a reference
        return None


# ========================================================================= custom rules


class CastLikeToCast(RewriteRuleClassBase):
    """``CastLike(x, like)`` → ``Cast(x, to=dtype(like))``, or ``x`` when the dtypes already agree."""

    def __init__(self) -> None:
        super().__init__("CastLikeToCast", remove_nodes=False)

    def pattern(self, op, x, like):
        return op.CastLike(x, like)

    def check(self, context, x: ir.Value, like: ir.Value) -> MatchResult:
        r = MatchResult()
        if like.dtype is None:
            return r.fail("The target type (second input's dtype) is not known.")
        if "saturate" in context.root.attributes:
            return r.fail("CastLike has a saturate attribute; left alone.")
        return r

    def rewrite(self, op, x: ir.Value, like: ir.Value):
        if x.dtype == like.dtype:
            return op.Identity(x)
        return op.Cast(x, to=int(like.dtype))


#: Casts ``src -> mid`` that represent every value of ``src`` exactly.
_LOSSLESS: dict[ir.DataType, frozenset[ir.DataType]] = {}


def _init_lossless() -> None:
    d = ir.DataType
    num = [d.UINT8, d.INT8, d.UINT16, d.INT16, d.UINT32, d.INT32, d.UINT64, d.INT64,
           d.FLOAT16, d.BFLOAT16, d.FLOAT, d.DOUBLE]
    table = {
        d.BOOL: set(num),
        d.UINT8: {d.INT16, d.UINT16, d.INT32, d.UINT32, d.INT64, d.UINT64, d.FLOAT16, d.BFLOAT16,
                  d.FLOAT, d.DOUBLE},
        d.INT8: {d.INT16, d.INT32, d.INT64, d.FLOAT16, d.BFLOAT16, d.FLOAT, d.DOUBLE},
        d.UINT16: {d.INT32, d.UINT32, d.INT64, d.UINT64, d.FLOAT, d.DOUBLE},
        d.INT16: {d.INT32, d.INT64, d.FLOAT, d.DOUBLE},
        d.UINT32: {d.INT64, d.UINT64, d.DOUBLE},
        d.INT32: {d.INT64, d.DOUBLE},
        d.FLOAT16: {d.FLOAT, d.DOUBLE},
        d.BFLOAT16: {d.FLOAT, d.DOUBLE},
        d.FLOAT: {d.DOUBLE},
    }
    _LOSSLESS.update({k: frozenset(v) for k, v in table.items()})


_init_lossless()


class LosslessCastCast(RewriteRuleClassBase):
    """``Cast(Cast(x, to=mid), to=t)`` → ``Cast(x, to=t)`` (or ``x``) when ``x → mid`` is exact.

    Exactness is what makes it safe: the intermediate holds the same number as ``x``, so the
    second cast sees the same value either way. (onnxscript's ``cast_cast_rule`` drops a
    float32 intermediate before float16, which can round twice; it is not used here.)
    """

    def __init__(self) -> None:
        super().__init__("LosslessCastCast", remove_nodes=False)

    def pattern(self, op, x, mid, to):
        return op.Cast(op.Cast(x, to=mid), to=to)

    def check(self, context, x: ir.Value, mid: ir.Attr, to: ir.Attr) -> MatchResult:
        r = MatchResult()
        if x.dtype is None:
            return r.fail("The input dtype is not known.")
        if ir.DataType(mid.as_int()) not in _LOSSLESS.get(x.dtype, frozenset()):
            return r.fail(f"Cast {x.dtype.name} -> {ir.DataType(mid.as_int()).name} is not exact.")
        return r

    def rewrite(self, op, x: ir.Value, mid: ir.Attr, to: ir.Attr):
        if x.dtype == ir.DataType(to.as_int()):
            return op.Identity(x)
        return op.Cast(x, to=to.as_int())


class ExpandNoOp(RewriteRuleClassBase):
    """``Expand(x, shape)`` → ``x`` when broadcasting ``x`` to ``shape`` leaves its shape unchanged.

    More general than onnxscript's ``no_op_expand_rule`` (which needs ``shape == x.shape``
    exactly): ``shape`` may be shorter than ``x``'s rank and may hold 1s.
    """

    def __init__(self) -> None:
        super().__init__("ExpandNoOp", remove_nodes=False)

    def pattern(self, op, x, shape):
        return op.Expand(x, shape)

    def check(self, context, x: ir.Value, shape: ir.Value) -> MatchResult:
        r = MatchResult()
        target = _const(shape)
        if target is not None:
            if target.ndim != 1:
                return r.fail("The shape input is not 1-D.")
            why = _broadcast_keeps_shape([int(t) for t in target], x.shape)
            return r.fail(f"Expand is not a no-op: {why}.") if why else r
        x_dims, y_dims = _static_dims(x.shape), _static_dims(context.output_values[0].shape)
        if x_dims is not None and x_dims == y_dims:
            return r
        return r.fail("The target shape is not constant and the output shape is not statically equal.")

    def rewrite(self, op, x: ir.Value, shape: ir.Value):
        return op.Identity(x)


class NeutralElement(RewriteRuleClassBase):
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` → ``x``.

    The constant may be any tensor filled with the neutral element, as long as broadcasting
    against it cannot enlarge ``x`` (rank not larger; every dim 1 or equal to ``x``'s).
    """

    def __init__(self, op_type: str, neutral: float, const_first: bool) -> None:
        side = "L" if const_first else "R"
        super().__init__(f"Neutral{op_type}{side}", remove_nodes=False)
        self.op_type, self.neutral, self.const_first = op_type, neutral, const_first

    def pattern(self, op, x, c):
        f = getattr(op, self.op_type)
        return f(c, x) if self.const_first else f(x, c)

    def check(self, context, x: ir.Value, c: ir.Value) -> MatchResult:
        r = MatchResult()
        value = _const(c)
        if value is None:
            return r.fail("The other operand is not a constant.")
        if value.size == 0 or not np.all(value == self.neutral):
            return r.fail(f"The constant is not all {self.neutral:g}.")
        if x.dtype is not None and c.dtype is not None and x.dtype != c.dtype:
            return r.fail("Operand dtypes differ.")
        why = _broadcast_keeps_shape(list(value.shape), x.shape)
        return r.fail(f"Not a no-op: {why}.") if why else r

    def rewrite(self, op, x: ir.Value, c: ir.Value):
        return op.Identity(x)


class ReshapeNoOp(RewriteRuleClassBase):
    """``Reshape(x, shape)`` → ``x`` when ``x``'s static shape is what the Reshape produces."""

    def __init__(self) -> None:
        super().__init__("ReshapeNoOp", remove_nodes=False)

    def pattern(self, op, x, shape):
        return op.Reshape(x, shape)

    def check(self, context, x: ir.Value, shape: ir.Value) -> MatchResult:
        r = MatchResult()
        dims = _static_dims(x.shape)
        if dims is None:
            return r.fail("The input shape is not fully static.")
        target = _const(shape)
        if target is None:
            if _static_dims(context.output_values[0].shape) == dims:
                return r
            return r.fail("The shape input is not constant.")
        target = [int(t) for t in target.reshape(-1)]
        if len(target) != len(dims):
            return r.fail("Reshape changes the rank.")
        allowzero = context.root.attributes.get_int("allowzero", 0)
        resolved = [dims[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
        if resolved.count(-1) == 1:
            known = int(np.prod([t for t in resolved if t != -1], dtype=np.int64))
            total = int(np.prod(dims, dtype=np.int64))
            if known == 0 or total % known:
                return r.fail("Cannot resolve -1.")
            resolved[resolved.index(-1)] = total // known
        if tuple(resolved) != dims:
            return r.fail(f"Reshape {dims} -> {tuple(resolved)} changes the shape.")
        return r

    def rewrite(self, op, x: ir.Value, shape: ir.Value):
        return op.Identity(x)


class PadNoOp(RewriteRuleClassBase):
    """``Pad(x, pads)`` → ``x`` when every pad amount is a constant 0 (the pad value is then unused)."""

    def __init__(self) -> None:
        super().__init__("PadNoOp", remove_nodes=False)

    def pattern(self, op, x):
        return op.Pad(x, _allow_other_inputs=True)

    def check(self, context, x: ir.Value) -> MatchResult:
        r = MatchResult()
        node = context.root
        if len(node.inputs) >= 2 and node.inputs[1] is not None:
            pads = _const(node.inputs[1])
            if pads is None:
                return r.fail("The pads input is not constant.")
            pads = [int(p) for p in pads.reshape(-1)]
        else:
            pads = _ints_attr(node, "pads")
            if pads is None:
                return r.fail("Pad has no pads.")
        if any(pads):
            return r.fail(f"Pads {pads} are not all zero.")
        return r

    def rewrite(self, op, x: ir.Value):
        return op.Identity(x)


class ConcatSingle(RewriteRuleClassBase):
    """``Concat(x)`` with a single input → ``x``."""

    def __init__(self) -> None:
        super().__init__("ConcatSingle", remove_nodes=False)

    def pattern(self, op, x):
        return op.Concat(x)

    def rewrite(self, op, x: ir.Value):
        return op.Identity(x)


def _slice_params(node: ir.Node) -> tuple[list[int], list[int], list[int] | None, list[int] | None] | None:
    """(starts, ends, axes, steps) of a Slice, from inputs (opset >= 10) or attributes; None if unknown."""
    if len(node.inputs) >= 3:
        vals = []
        for i in range(1, 5):
            v = node.inputs[i] if i < len(node.inputs) else None
            if v is None:
                vals.append(None)
                continue
            c = _const(v)
            if c is None:
                return None
            vals.append([int(t) for t in c.reshape(-1)])
        starts, ends, axes, steps = vals
        if starts is None or ends is None:
            return None
        return starts, ends, axes, steps
    starts, ends = _ints_attr(node, "starts"), _ints_attr(node, "ends")
    if starts is None or ends is None:
        return None
    return starts, ends, _ints_attr(node, "axes"), None


class SliceNoOp(RewriteRuleClassBase):
    """``Slice`` that keeps every element (start 0, end past the dim, step 1 on every axis) → ``x``."""

    def __init__(self) -> None:
        super().__init__("SliceNoOp", remove_nodes=False)

    def pattern(self, op, x):
        return op.Slice(x, _allow_other_inputs=True)

    def check(self, context, x: ir.Value) -> MatchResult:
        r = MatchResult()
        params = _slice_params(context.root)
        if params is None:
            return r.fail("Slice parameters are not constant.")
        starts, ends, axes, steps = params
        if x.shape is None:
            return r.fail("The input shape is not known.")
        rank = len(x.shape)
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            return r.fail("Malformed Slice.")
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            if st != 1:
                return r.fail("A step is not 1.")
            dim = x.shape[a + rank if a < 0 else a]
            dim_i = dim if isinstance(dim, int) else None
            if not (s == 0 or (dim_i is not None and s <= -dim_i)):
                return r.fail(f"Start {s} is not the beginning of axis {a}.")
            if not (e >= _INT_END or (dim_i is not None and e >= dim_i)):
                return r.fail(f"End {e} is not past the end of axis {a}.")
        return r

    def rewrite(self, op, x: ir.Value):
        return op.Identity(x)


class SliceSlice(RewriteRuleClassBase):
    """``Slice(Slice(x, ...), ...)`` on disjoint, constant axes → one ``Slice`` (opset >= 10)."""

    def __init__(self) -> None:
        super().__init__("SliceSlice", remove_nodes=False)

    def pattern(self, op, x):
        return op.Slice(op.Slice(x, _allow_other_inputs=True, _outputs=["mid"]), _allow_other_inputs=True)

    def check(self, context, x: ir.Value, mid: ir.Value) -> MatchResult:
        r = MatchResult()
        outer = context.root
        inner = mid.producer()
        if inner is None or len(inner.inputs) < 3 or len(outer.inputs) < 3:
            return r.fail("Attribute-form Slice (opset < 10).")
        p1, p2 = _slice_params(inner), _slice_params(outer)
        if p1 is None or p2 is None:
            return r.fail("Slice parameters are not constant.")
        if x.shape is None:
            return r.fail("The input rank is not known.")
        rank = len(x.shape)
        merged: list[list[int]] = [[], [], [], []]
        seen: set[int] = set()
        for starts, ends, axes, steps in (p1, p2):
            axes = axes if axes is not None else list(range(len(starts)))
            steps = steps if steps is not None else [1] * len(starts)
            for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
                a = a + rank if a < 0 else a
                if a in seen:
                    return r.fail(f"Both Slices touch axis {a}.")
                seen.add(a)
                for lst, val in zip(merged, (s, e, a, st), strict=True):
                    lst.append(val)
        self._merged = merged
        return r

    def rewrite(self, op, x: ir.Value, mid: ir.Value):
        t = [op.Constant(value=ir.tensor(np.array(m, dtype=np.int64))) for m in self._merged]
        return op.Slice(x, *t)


def _rules(*items: object) -> list[orp.RewriteRule]:
    out: list[orp.RewriteRule] = []
    for it in items:
        if isinstance(it, orp.RewriteRuleSet):
            out.extend(it.rules)
        elif isinstance(it, (list, tuple)):
            out.extend(it)  # type: ignore[arg-type]
        else:
            out.append(it)  # type: ignore[arg-type]
    return out


def _neutral_rules() -> list[orp.RewriteRule]:
    return [
        NeutralElement.rule("Add", 0.0, False),
        NeutralElement.rule("Add", 0.0, True),
        NeutralElement.rule("Sub", 0.0, False),
        NeutralElement.rule("Mul", 1.0, False),
        NeutralElement.rule("Mul", 1.0, True),
        NeutralElement.rule("Div", 1.0, False),
    ]


# Rule lists are built once per process: building a rule traces its pattern (~0.1 ms each),
# and they hold no per-model state (matching is serialized by rulefilter.REWRITE_LOCK).


@functools.cache
def _cast_expand_rules() -> tuple[orp.RewriteRule, ...]:
    return tuple(_rules(
        CastLikeToCast.rule(),
        lib_rules.no_op_cast_rule,
        LosslessCastCast.rule(),
        lib_rules.cast_constant_of_shape_rule,
        lib_rules.cast_constant_of_shape_without_value_rule,
        lib_rules.no_op_expand_rule,
        ExpandNoOp.rule(),
        lib_rules.expand_before_binary_op_rules,
    ))


@functools.cache
def _noop_rules() -> tuple[orp.RewriteRule, ...]:
    # Not onnxscript's add_0 / sub_0 / mul_by_1 / div_by_1 rules: their pattern constants match
    # within 1e-8 absolute, so ``x + 1e-10`` (the epsilon before a Log) counts as ``x + 0``.
    # NeutralElement compares exactly.
    return tuple(_rules(
        _neutral_rules(),
        lib_rules.no_op_transpose_rule,
        lib_rules.no_op_cast_rule,
        lib_rules.no_op_expand_rule,
        ExpandNoOp.rule(),
        ReshapeNoOp.rule(),
        PadNoOp.rule(),
        ConcatSingle.rule(),
        lib_rules.collapse_slice_rule,
        lib_rules.collapse_slice2_rule,
        SliceNoOp.rule(),
    ))


@functools.cache
def _chain_rules() -> tuple[orp.RewriteRule, ...]:
    return tuple(_rules(
        lib_rules.transpose_transpose_rule,
        lib_rules.reshape_reshape_rule,
        lib_rules.unsqueeze_unsqueeze_rule,
        lib_rules.squeeze_reshape_1d_rule,
        LosslessCastCast.rule(),
        SliceSlice.rule(),
    ))


# ============================================================================== passes


class _FoldOnlyConstants(FoldConstantsPass):
    """onnxscript's folder, restricted to what makes a value *constant*.

    Its partial evaluators also bypass Identity/Dropout/Cast/Expand nodes on runtime tensors;
    those belong to their own passes here, so such replacements are declined. One exception:
    ``CastLike(constant, x)`` becomes ``Cast(constant)`` (a constant) and is folded next round.
    """

    def __init__(self, budget: int, *, specialize: bool = True) -> None:
        limit = max(budget, 1)
        super().__init__(shape_inference=True, input_size_limit=limit, output_size_limit=limit,
                         should_fold=self._should_fold)
        self.budget = budget
        #: fold Ifs with a constant condition, re-infer symbolic dims and fold inside subgraphs
        #: (see ConstantFolding); False: the main graph only, as its shapes were inferred
        self.specialize = specialize
        self.used = 0
        self.skipped: list[str] = []
        #: a replacement added a node that is not a Constant (CastLike -> Cast): folding it
        #: needs another round. Otherwise one topological visit has reached the fixed point.
        self.made_nodes = False
        self._model: ir.Model | None = None

    def visit_attribute(self, attr: ir.Attr) -> None:
        if self.specialize:
            super().visit_attribute(attr)

    def call(self, model: ir.Model):  # type: ignore[override]
        self._model = model  # If folding checks names against every graph of the model
        return super().call(model)

    def _should_fold(self, node: ir.Node) -> bool | None:
        if _is_onnx(node, "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"):
            return False  # keep quantization information
        est = _estimate_output_bytes(node)
        if est is None:
            return None  # onnxscript's default size rules
        if self.used + est > self.budget:
            self.skipped.append(node.name or node.op_type)
            return False
        self.used += est
        return True

    def _do_inference(self, node: ir.Node) -> None:
        # Per-node inference can only refine what is unknown: outputs whose type and fully
        # static shape are already known (from the pipeline's whole-model inference) are left
        # alone. This halves the pass on models that were shape-inferred before it. A symbolic
        # dim is not known: folding may have made it computable (inside subgraphs, which the
        # whole-model inference saw before their inputs were constants).
        known = _static_dims if self.specialize else (lambda shape: shape)
        if node.outputs and all(v.dtype is not None and known(v.shape) is not None for v in node.outputs):
            return
        super()._do_inference(node)

    def process_node(self, node: ir.Node, is_function: bool):  # type: ignore[override]
        replacement = self._process_node(node, is_function)
        if replacement is not None and any(not _is_onnx(n, "Constant") for n in replacement.new_nodes):
            self.made_nodes = True
        return replacement

    def _process_node(self, node: ir.Node, is_function: bool):
        if _is_onnx(node, "Identity"):
            return None  # identity_elimination's job
        if _is_onnx(node, "If"):
            # Never onnxscript's If rule: it empties the branch before the replacement is
            # accepted, and renames captured outer values to the If's output names.
            return None if is_function or not self.specialize else self._fold_if(node)
        replacement = super().process_node(node, is_function)
        if replacement is None:
            return None
        if all(_is_constant_value(v) for v in replacement.new_outputs):
            return replacement
        if (len(replacement.new_nodes) == 1 and _is_onnx(replacement.new_nodes[0], "Identity")
                and _is_constant_value(replacement.new_nodes[0].inputs[0])
                and not any(v.is_graph_output() for v in node.outputs)):
            # e.g. Expand/Cast/Reshape that leave a *constant* unchanged: use the constant itself
            return Replacement([replacement.new_nodes[0].inputs[0]], [])
        if (_is_onnx(node, "CastLike") and _const(node.inputs[0]) is not None
                and len(replacement.new_nodes) == 1 and replacement.new_nodes[0].op_type == "Cast"):
            return replacement
        return None

    def _fold_if(self, node: ir.Node) -> Replacement | None:
        """The Replacement of an If with a constant condition by its branch, or None (kept)."""
        branch, why = taken_branch(node)
        if branch is None:
            logger.debug("If %s kept: %s", node.name, why)
            return None
        self._reinfer(branch)
        why = _inline_blocker(node, branch, self._opset_imports)
        if why:
            logger.info("constant_folding: If %s kept: %s", node.name, why)
            return None
        return _inline_branch(node, branch, _defined_name_counts(self._model))

    def _reinfer(self, branch: ir.Graph) -> None:
        """Infer the branch's value shapes afresh, in order (the folder visits an If before its
        branches, so they still hold what inference said before anything was folded; merging
        into those would keep a stale rank)."""
        for n in branch:
            if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in n.attributes.values()):
                continue  # per-node inference does not see into subgraphs: keep what is known
            for v in n.outputs:
                v.shape = None
            super()._do_inference(n)


def taken_branch(node: ir.Node) -> tuple[ir.Graph | None, str]:
    """The branch an If with a constant condition always takes, or (None, why there is none)."""
    cond = _const(node.inputs[0]) if node.inputs else None
    if cond is None or cond.size != 1:
        return None, "the condition is not a constant scalar"
    key = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    attr = node.attributes.get(key)
    if attr is None or attr.type is not ir.AttributeType.GRAPH:
        return None, f"the If has no {key} graph"
    return attr.as_graph(), ""


def _inline_blocker(node: ir.Node, branch: ir.Graph, opsets: dict[str, int]) -> str | None:
    """Why the taken branch of ``node`` cannot replace it, or None when it can."""
    if node.graph is None:
        return "the If is not in a graph"
    if branch.inputs:
        return "the branch declares inputs"
    if len(branch.outputs) != len(node.outputs) or any(v is None for v in branch.outputs):
        return "the branch's outputs do not match the If's"
    for formal, actual in zip(branch.outputs, node.outputs, strict=True):
        why = _type_conflict(formal, actual)
        if why:
            return f"branch output '{formal.name}' {why} (the branch is not what the If declares)"
    opset = opsets.get("", opsets.get("ai.onnx", 0)) or 0
    for formal in branch.outputs:
        if not _owned_by(formal, branch) and not isinstance(formal.type, (ir.TensorType, type(None))) and opset < 16:
            return f"branch output '{formal.name}' is a captured non-tensor value and Identity of it needs opset 16"
    return None


def _type_conflict(formal: ir.Value, actual: ir.Value) -> str | None:
    """How the branch output ``formal`` contradicts the If output ``actual`` it would replace.

    The If's declared type and shape are what its consumers were checked against; a branch that
    makes something else (another rank, dtype or static size) would break them once inlined.
    """
    if formal.dtype is not None and actual.dtype is not None and formal.dtype != actual.dtype:
        return f"has dtype {formal.dtype.name}, the If output {actual.dtype.name}"
    a, b = formal.shape, actual.shape
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return f"has rank {len(a)}, the If output rank {len(b)}"
    for i, (x, y) in enumerate(zip(a.dims, b.dims, strict=True)):
        if isinstance(x, int) and isinstance(y, int) and x != y:
            return f"has size {x} in dim {i}, the If output {y}"
    return None


def _owned_by(v: ir.Value, branch: ir.Graph) -> bool:
    """Whether ``v`` belongs to ``branch`` (made by one of its nodes, or one of its initializers)."""
    p = v.producer()
    if p is not None:
        return p.graph is branch
    return v.is_initializer() and branch.initializers.get(v.name or "") is v


def _defined_name_counts(model: ir.Model) -> dict[str, int]:
    """How many values of the whole model (every graph) are defined under each name."""
    counts: dict[str, int] = {}
    for g in model.graphs():
        values = [*g.inputs, *g.initializers.values(), *(v for n in g for v in n.outputs)]
        for v in values:
            if v.name:
                counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _fresh(name: str, counts: dict[str, int]) -> str:
    i = 1
    while f"{name}_{i}" in counts:
        i += 1
    new = f"{name}_{i}"
    counts[new] = 1
    return new


def _inline_branch(node: ir.Node, branch: ir.Graph, counts: dict[str, int]) -> Replacement:
    """Move the taken branch of ``node`` into its graph; the Replacement for the If's outputs.

    1. The branch's nodes and initializers move to the If's graph; values they read from
       enclosing graphs stay connected (same value objects).
    2. A moved value whose name is defined elsewhere in the model (a sibling subgraph may reuse
       names; the enclosing graph may not see them twice) gets a fresh name.
    3. The If's outputs keep their names: a branch output made in the branch takes the output's
       name; a captured outer value (or one the branch returns twice) is not renamed, an
       ``Identity`` of it carries the name instead.
    """
    target = node.graph
    assert target is not None
    formals = list(branch.outputs)
    moved = list(branch)
    branch.outputs.clear()
    branch.remove(moved, safe=False)
    for name in list(branch.initializers):
        init = branch.initializers.pop(name)
        if counts.get(name, 0) > 1 or name in target.initializers:
            init.name = _fresh(name, counts)
        target.register_initializer(init)
    for n in moved:
        n.name = f"{node.name}_{n.name}" if n.name else n.name
        for v in n.outputs:
            if v.name and counts.get(v.name, 0) > 1:
                v.name = _fresh(v.name, counts)
    moved_ids = {id(n) for n in moved}
    new_outputs: list[ir.Value] = []
    extra: list[ir.Node] = []
    claimed: set[int] = set()
    for i, formal in enumerate(formals):
        p = formal.producer()
        owned = (p is not None and id(p) in moved_ids) or (p is None and target.initializers.get(formal.name or "") is formal)
        if owned and id(formal) not in claimed:
            claimed.add(id(formal))
            new_outputs.append(formal)
            # the Replacement copies the If output's type and shape onto the value: the branch's
            # own are at least as precise (the If's merge both branches)
            actual = node.outputs[i]
            actual.type = formal.type if formal.type is not None else actual.type
            actual.shape = formal.shape
            continue
        ident = ir.node("Identity", [formal], name=f"{node.name}_output_{i}")
        extra.append(ident)
        new_outputs.append(ident.outputs[0])
    return Replacement(new_outputs, moved + extra)


def _is_constant_value(v: ir.Value | None) -> bool:
    if v is None:
        return False
    if v.const_value is not None:
        return True
    p = v.producer()
    return p is not None and _is_onnx(p, "Constant")


def _estimate_output_bytes(node: ir.Node) -> int | None:
    total = 0
    for i, out in enumerate(node.outputs):
        dims: tuple[int, ...] | None = None
        dtype = out.dtype
        if i == 0 and _is_onnx(node, "ConstantOfShape"):
            shape = _const(node.inputs[0]) if node.inputs else None
            if shape is None:
                return None
            dims = tuple(int(s) for s in shape.reshape(-1))
            value = node.attributes.get("value")
            dtype = value.as_tensor().dtype if value is not None else ir.DataType.FLOAT
        else:
            dims = _static_dims(out.shape)
        if dims is None or dtype is None:
            return None
        total += int(np.prod(dims, dtype=np.int64)) * max(dtype.itemsize, 1)
    return total


def pin_initializer_inputs(model: ir.Model) -> int:
    """Drop initializers from the main graph's inputs (IR < 4 style); return how many.

    Such an initializer is a default a caller could override, so no folder touches it; models
    exported for inference (like onnx's light models) list every weight that way. The IR
    version is raised to 4, the first that allows initializers that are not inputs.
    """
    graph = model.graph
    keep = [v for v in graph.inputs if not v.is_initializer()]
    dropped = len(graph.inputs) - len(keep)
    if dropped:
        graph.inputs.clear()
        graph.inputs.extend(keep)
        if model.ir_version < 4:
            model.ir_version = 4
    return dropped


class ConstantFolding(Pass):
    """Wraps onnxscript's FoldConstantsPass and onnx-ir's LiftConstantsToInitializersPass."""

    name = "constant_folding"
    title = "Constant folding"
    category = Category.SIMPLIFY
    order = 110
    needs_shapes = True
    refines_shapes = True
    explain = f"""\
**What:** computes every node whose inputs are all known before run time and stores the result
as an initializer (a weight): `Shape` of a statically shaped tensor, the `Gather`/`Concat`/`Cast`
chains built on it, `ConstantOfShape` (how onnx's light models create their weights), arithmetic
on weights, and `CastLike(constant, x)` where `x`'s type is known. `Constant` nodes are lifted to
initializers, and the nodes left without consumers are removed. Initializers that are also
listed as graph inputs (old IR < 4 exports list every weight that way, which makes them
overridable and so not constant) are taken out of the input list first, as onnxruntime's
`remove_initializer_from_input` tool does; the model's real inputs stay the same.

**Why faster:** the work is done once, here, instead of on every inference; the graph gets
smaller; and later passes need constants — BatchNorm can only be folded into a Conv whose
weights are known numbers, not the output of `ConstantOfShape` or `CastLike`/`Expand` chains.

**Control flow:** an `If` whose condition is a constant (often a shape test, once `--shape`
fixed the input shapes) is replaced by the branch it always takes: the branch's nodes move
into the enclosing graph, values it reads from outside stay connected, and the If's output
names are kept (a branch that returns an outside value gets an `Identity` carrying the name).
An If whose branch makes a value of another rank, size or dtype than the If declares is kept.
When specializing leaves a branch that can never run with the given shapes failing shape
inference (an 8 kHz path fed 16 kHz frames), the folding is redone on the main graph only.

**Declared shapes:** a graph output size the folded graph provably does not make (an
example input's length baked into a dynamic dim) becomes unknown; a `-1` stored as a dimension
(Paddle's "unknown") too. A declared *rank* the graph contradicts cannot be repaired without
changing the model's interface: then the pass declines and changes nothing.

**Limits:** nodes with random outputs, quantize/dequantize (they carry the quantization) and
loops are never folded. Folding can *grow* a model (a `ConstantOfShape` becomes a full
tensor), so one run creates at most `{FOLD_MAX_MB_ENV}` MB of new constant data (default
{DEFAULT_FOLD_MAX_MB}); nodes past that budget stay as they are.
Wraps `onnxscript.optimizer.FoldConstantsPass` (its Identity/Dropout/Cast/Expand shortcuts on
run-time tensors are left to the passes of those names).
"""

    def transform(self, model: ir.Model) -> ir.Model | None:
        pinned = pin_initializer_inputs(model)
        if pinned:
            logger.info("constant_folding: %d initializers removed from the graph inputs", pinned)
        forget_negative_dims(model)
        # Folding specializes control flow: an If with a constant condition becomes its branch,
        # and the other branches' shapes become known. A branch that cannot run with the given
        # input shapes (an 8 kHz path fed 16 kHz frames) then fails shape inference, which it
        # passed while its shapes were unknown. Then fold again, the main graph only.
        # A fold that still fails inference (a declared output rank the graph contradicts) is
        # declined: the model is handed back as it came.
        backup = ir.serde.serialize_model(model)
        _fold(model, specialize=True)
        why = _settle(model)
        if why is None or strict_inference_error(backup) is not None:
            return None  # valid, or it failed inference before: folding is not to blame
        if any(_is_onnx(n, "If") for n in backup.graph.node):
            logger.info("constant_folding: folding control flow left a branch that fails shape inference "
                        "(%s); folding the main graph only", why)
            plain = ir.serde.deserialize_model(backup)
            _fold(plain, specialize=False)
            why = _settle(plain)
            if why is None:
                return plain
        logger.info("constant_folding: declined, the folded model fails shape inference: %s", why)
        return ir.serde.deserialize_model(backup)


def _settle(model: ir.Model) -> str | None:
    """Why the folded model fails strict shape inference, after forgetting declared output sizes
    the folding proved wrong (:func:`fusionviz.passes.hygiene.forget_contradicted_output_shapes`);
    None when it passes."""
    why = strict_inference_error(model)
    if why is None:
        return None
    dropped = forget_contradicted_output_shapes(model)
    if not dropped:
        return why
    logger.info("constant_folding: the model declares sizes for output(s) %s that the graph does not make; "
                "they are made unknown", ", ".join(dropped))
    return strict_inference_error(model)


def _fold(model: ir.Model, *, specialize: bool) -> None:
    """The folding rounds, the lifting of Constant nodes, and the cleanup (rule 1), in place."""
    cleanup = _Cleanup(model)
    absent = absent_outputs(model)  # the folder's name fixing would name (request) them
    budget = fold_budget_bytes()
    folder = _FoldOnlyConstants(budget, specialize=specialize)
    for _ in range(_MAX_ROUNDS):
        folder.made_nodes = False
        result = folder(model)
        if not result.modified or not folder.made_nodes:
            break
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    cleanup.prune(model)
    restore_absent_outputs(absent)
    unique_value_names(model)
    if folder.skipped:
        logger.info("constant_folding: %d nodes over the %d MB budget kept: %s", len(folder.skipped),
                    budget // (1024 * 1024), ", ".join(folder.skipped[:10]))


class CastExpandSimplify(Pass):
    """CastLike/Cast/Expand rules: own CastLikeToCast, LosslessCastCast, ExpandNoOp + onnxscript's."""

    name = "cast_expand_simplify"
    title = "CastLike / Cast / Expand simplification"
    category = Category.SIMPLIFY
    order = 115
    trigger_ops = frozenset({"Cast", "CastLike", "Expand"})
    needs_shapes = True
    explain = """\
**What:** where types and shapes are statically known:
`CastLike(x, like)` becomes `Cast(x, to=T)`, or disappears when `x` already has type `T`;
a `Cast` to the type the tensor already has is removed; `Cast(Cast(x))` becomes one `Cast` when
the first cast is exact (e.g. float16→float32, int32→int64);
`Cast(ConstantOfShape)` becomes one `ConstantOfShape` of the right type;
an `Expand` whose target shape cannot enlarge its input is removed; and an `Expand` in front of
a broadcasting binary op (`Add`, `Mul`, ...) is removed when the op's own broadcasting gives
the same result.

**Why faster:** exporters such as PyTorch's dynamo exporter build a Conv bias or a BatchNorm
parameter as `CastLike(0, x)` → `Expand(…, Shape(W))`. Each is a tiny kernel, and, worse,
such chains hide that the value is a plain constant, so onnxruntime, onnxsim and onnxslim do
not fold BatchNorm into the Conv. With these nodes gone, constant folding and the fusion
passes see ordinary weights. An Expand before an Add also writes a full-size copy that the
Add's broadcasting makes unnecessary.

Wraps onnxscript rules `no_op_cast_rule`, `cast_constant_of_shape_rule(s)`, `no_op_expand_rule`,
`expand_before_binary_op_rules`, plus fusionviz's `CastLikeToCast`, `LosslessCastCast`,
`ExpandNoOp` (broadcast-aware).
"""

    def transform(self, model: ir.Model) -> None:
        _apply_rules(model, _cast_expand_rules())


class IdentityElimination(Pass):
    """onnx-ir's IdentityEliminationPass cases, with a guard for outputs fed by outputs."""

    name = "identity_elimination"
    title = "Identity elimination"
    category = Category.SIMPLIFY
    order = 120
    trigger_ops = frozenset({"Identity"})
    explain = """\
**What:** removes `Identity` nodes, wiring their consumers straight to the input.
An Identity that produces a graph output is kept when its input is a graph input, an
initializer, or another graph output (removing it would lose an output name).

**Why faster:** every node is a kernel launch and, without in-place reuse, a copy of the
tensor. Exporters leave Identities around parameters and outputs; they cost time and memory
for no computation.
"""

    def transform(self, model: ir.Model) -> None:
        for g in _graph_likes(model):
            for node in list(g):
                eliminate_identity(node)


def _dropout_is_inference(node: ir.Node, opset: int) -> tuple[bool, str]:
    """(True, "") when this Dropout is the identity at inference; else (False, why)."""
    if opset < 7:
        is_test = node.attributes.get_int("is_test", 0)
        return (bool(is_test), "" if is_test else "is_test=0 (training) in opset < 7")
    if opset < 12:
        return True, ""
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return True, ""
    mode = _const(node.inputs[2])
    if mode is None:
        return False, "training_mode is not a constant"
    if bool(mode.reshape(-1)[0]):
        return False, "training_mode is true"
    return True, ""


class DropoutElimination(Pass):
    """Own rule (onnxscript's dropout rules only match the attribute form of opset < 12)."""

    name = "dropout_elimination"
    title = "Dropout elimination (inference)"
    category = Category.SIMPLIFY
    order = 125
    trigger_ops = frozenset({"Dropout"})
    explain = """\
**What:** at inference a `Dropout` passes its input through unchanged (any ratio), so it is
removed. A Dropout in training mode (`training_mode` true, or not a constant) is kept. When its
`mask` output is used, the mask (all true at inference) is made by
`ConstantOfShape(Shape(x), true)`.

**Why faster:** one fewer kernel and one fewer copy of the activation per Dropout; training
exports of BERT-style models have one after every attention and feed-forward block.
"""

    def transform(self, model: ir.Model) -> None:
        cleanup = _Cleanup(model)
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        for g in _graph_likes(model):
            for node in list(g):
                if not _is_onnx(node, "Dropout") or not node.inputs or node.inputs[0] is None:
                    continue
                ok, why = _dropout_is_inference(node, opset)
                if not ok:
                    logger.debug("dropout %s kept: %s", node.name, why)
                    continue
                x = node.inputs[0]
                out = node.outputs[0]
                mask = node.outputs[1] if len(node.outputs) > 1 else None
                out_name = out.name
                mask_name = mask.name if mask is not None else None
                new_nodes: list[ir.Node] = []
                mask_value = None
                if mask is not None and (mask.uses() or mask.is_graph_output()):
                    if opset < 9:
                        continue  # no ConstantOfShape before opset 9
                    shape = ir.node("Shape", [x], name=f"{node.name}_mask_shape")
                    fill = ir.node("ConstantOfShape", [shape.outputs[0]],
                                   attributes={"value": ir.tensor(np.array([True]))},
                                   name=f"{node.name}_mask")
                    mask_value = fill.outputs[0]
                    mask_value.dtype, mask_value.shape = ir.DataType.BOOL, x.shape
                    new_nodes += [shape, fill]
                ident = ir.node("Identity", [x], name=f"{node.name}_bypass")
                ident.outputs[0].shape, ident.outputs[0].type = out.shape, out.type
                new_nodes.append(ident)
                g.insert_before(node, new_nodes)
                ir.convenience.replace_all_uses_with(out, ident.outputs[0], replace_graph_outputs=True)
                if mask_value is not None:
                    ir.convenience.replace_all_uses_with(mask, mask_value, replace_graph_outputs=True)
                for v in node.outputs:
                    v.name = None  # the replacements carry the names now
                _detach_and_remove(g, node)
                ident.outputs[0].name = out_name
                if mask_value is not None:
                    mask_value.name = mask_name
                eliminate_identity(ident)
        cleanup.prune(model)
        unique_value_names(model)  # the mask nodes' values are named per graph by onnx-ir


class NoOpElimination(Pass):
    """onnxscript no-op rules plus broadcast-aware own rules."""

    name = "noop_elimination"
    title = "No-op elimination"
    category = Category.SIMPLIFY
    order = 130
    needs_shapes = True
    explain = """\
**What:** removes nodes that return their input unchanged: `x+0`, `x-0`, `x*1`, `x/1` (the
constant may be a tensor of 0s/1s), a `Reshape` to the shape `x` already has, a `Transpose`
with the identity permutation, a `Cast` to the type `x` already has, a `Pad` whose pads are all
0, a `Concat` of a single input, a `Slice` that keeps everything, an `Expand` that cannot
enlarge its input.

**Careful with broadcasting:** `x + zeros(4, 8)` with `x` of shape `(8,)` returns a `(4, 8)`
tensor, so it is *not* a no-op and is kept; the same for dtypes (the result must have `x`'s).

**Why faster:** each of these is a full read and write of the tensor for nothing; they come
from generic export code (e.g. `x * 1.0` scaling, `Reshape` to a computed shape).

**Never a no-op:** a constant that is *almost* 0 or 1. `x + 1e-10` in front of a `Log`,
a `Sqrt` or a division is an epsilon that keeps the result finite when `x` is 0; the constant
must equal the neutral element exactly (onnxscript's `add_0_rule` family matches within 1e-8,
so it is not used).

Wraps onnxscript rules `no_op_transpose_rule`, `no_op_cast_rule`, `no_op_expand_rule`,
`collapse_slice_rule(2)`, plus fusionviz's `NeutralElement` (exact, tensor constants,
broadcast check), `ReshapeNoOp`, `PadNoOp`, `ConcatSingle`, `SliceNoOp`, `ExpandNoOp`.
"""

    def transform(self, model: ir.Model) -> None:
        _apply_rules(model, _noop_rules())


class ChainMerging(Pass):
    """onnxscript chain rules plus LosslessCastCast and SliceSlice."""

    name = "chain_merging"
    title = "Transpose / Reshape / Squeeze / Cast / Slice chain merging"
    category = Category.SIMPLIFY
    order = 140
    trigger_ops = frozenset({"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Cast", "Slice"})
    needs_shapes = True
    explain = """\
**What:** merges runs of the same data-movement op into one:
`Transpose(Transpose(x, p1), p2)` → `Transpose(x, p1∘p2)` (removed when the composition is the
identity; `(p1∘p2)[i] = p1[p2[i]]`), `Reshape(Reshape(x))` → one `Reshape`,
`Unsqueeze(Unsqueeze(x))` → one `Unsqueeze`, `Reshape(Squeeze(x), [-1])` → `x` for 1-D `x`,
`Cast(Cast(x))` → one `Cast` when the first cast is exact, and `Slice(Slice(x))` on different
axes → one `Slice`.

**Why faster:** each op in the chain reads and writes the whole tensor (a Transpose is a full
strided copy); merged, the data moves once. Such chains come from layout conversions and
`view`/`permute` code in PyTorch.

Wraps onnxscript rules `transpose_transpose_rule`, `reshape_reshape_rule`,
`unsqueeze_unsqueeze_rule`, `squeeze_reshape_1d_rule`, plus fusionviz's `LosslessCastCast` and
`SliceSlice`. (onnxscript's `cast_cast_rule` is not used: float64→float32→float16 rounds twice.)
"""

    def transform(self, model: ir.Model) -> None:
        _apply_rules(model, _chain_rules())


class CommonSubexpressionElimination(Pass):
    """Wraps onnx-ir's CommonSubexpressionEliminationPass."""

    name = "cse"
    title = "Common subexpression elimination"
    category = Category.SIMPLIFY
    order = 150
    explain = """\
**What:** when two nodes run the same op with the same attributes on the same inputs, the
second is removed and its consumers use the first one's output. Random ops and control flow
are never merged.

**Why faster:** the duplicate computation and its output buffer disappear. Exporters duplicate
`Shape`/`Gather`/`Unsqueeze` chains and mask computations once per layer.
"""

    def transform(self, model: ir.Model) -> None:
        cleanup = _Cleanup(model)
        CommonSubexpressionEliminationPass()(model)
        cleanup.prune(model)


def _may_have_duplicates(model: ir.Model) -> bool:
    """Cheap pre-check for DeduplicateHashedInitializersPass, which hashes every weight: two
    initializers can only be equal if dtype, shape and their first 64 bytes are; when no two
    agree on those, the (sha512 over all weight bytes) pass has nothing to find."""
    for g in model.graphs():
        seen: set[tuple] = set()
        for v in g.initializers.values():
            cv = v.const_value
            if cv is None or v.is_graph_input() or v.is_graph_output():
                continue
            try:
                arr = np.asarray(cv.numpy())
                head = arr.reshape(-1)[:64].tobytes() if arr.dtype != object else repr(arr.reshape(-1)[:8]).encode()
            except Exception:  # noqa: BLE001 - unreadable data: let the library pass decide
                return True
            key = (cv.dtype, tuple(arr.shape), head)
            if key in seen:
                return True
            seen.add(key)
    return False


class DeduplicateInitializers(Pass):
    """Wraps onnx-ir's DeduplicateHashedInitializersPass (sha512, then exact byte comparison)."""

    name = "dedup_initializers"
    title = "Duplicate initializer merging"
    category = Category.SIMPLIFY
    # After the fusions, not with the other simplifications: merged weights are shared weights,
    # and folding passes (BatchNorm into Conv) must not fold into a shared weight. Running last
    # also merges the weights the fusions create.
    order = 390
    explain = """\
**What:** initializers with the same dtype, shape and bytes are merged into one; every node
that used a copy now uses the kept one (reported as *changed* on those nodes). Graph inputs
are never merged.

**Why faster:** smaller model file and less memory; weights shared by several layers (tied
embeddings, repeated constants) are read from one buffer, which also helps caches. It also
lets CSE see that two nodes now have identical inputs.
"""

    def transform(self, model: ir.Model) -> None:
        if not _may_have_duplicates(model):
            return  # no two initializers share dtype, shape and leading bytes: nothing to hash
        dedup_logger = logging.getLogger("onnx_ir.passes.common.initializer_deduplication")
        level = dedup_logger.level
        dedup_logger.setLevel(logging.ERROR)  # it warns once per initializer that is a graph input
        for g in model.graphs():  # onnx-ir 1.1 hashes with hashlib, which needs C-contiguous data
            for v in g.initializers.values():
                if isinstance(v.const_value, ir.Tensor):
                    arr = v.const_value.numpy()
                    if isinstance(arr, np.ndarray) and not arr.flags.c_contiguous:
                        v.const_value = ir.Tensor(np.ascontiguousarray(arr), name=v.name)
        try:
            DeduplicateHashedInitializersPass()(model)
        finally:
            dedup_logger.setLevel(level)

    def apply(self, model: ir.Model) -> tuple[ir.Model, list[Change]]:
        before = {id(n): [v.name if v is not None else "" for v in n.inputs] for n in all_nodes(model)}
        kept_names = set(model.graph.initializers.keys())
        new_model, changes = super().apply(model)
        for n in all_nodes(new_model):
            old = before.get(id(n))
            now = [v.name if v is not None else "" for v in n.inputs]
            if old is None or old == now:
                continue
            swaps = [f"{a} → {b}" for a, b in zip(old, now, strict=False) if a != b]
            changes.append(Change(ChangeKind.CHANGED, self.name, (n.name or "",), (n.name or "",),
                                  (n.op_type,), (n.op_type,), "duplicate initializer: " + ", ".join(swaps)))
        gone = sorted(kept_names - set(new_model.graph.initializers.keys()))
        if gone:
            logger.info("dedup_initializers merged %d initializers", len(gone))
        return new_model, changes


class DeadCodeElimination(Pass):
    """Wraps onnx-ir's RemoveUnusedNodesPass, RemoveUnusedFunctionsPass, RemoveUnusedOpsetsPass."""

    name = "dead_code_elimination"
    title = "Dead code elimination"
    category = Category.SIMPLIFY
    order = 190
    explain = """\
**What:** removes nodes whose outputs reach no graph output, initializers nothing uses, model
functions nothing calls and opset imports no node needs.

**Why faster:** onnxruntime would still allocate and run dead nodes; unused initializers
cost load time and memory. Other passes leave such leftovers (each pass here removes only the
nodes *it* made dead, so that this pass can be switched on and off on its own).
"""

    def transform(self, model: ir.Model) -> None:
        default_opset = model.opset_imports.get("")
        RemoveUnusedNodesPass()(model)
        RemoveUnusedFunctionsPass()(model)
        RemoveUnusedOpsetsPass()(model)
        if default_opset is not None and "" not in model.opset_imports:
            model.opset_imports[""] = default_opset  # the default domain is always declared


PASSES: list[type[Pass]] = [
    ConstantFolding,
    CastExpandSimplify,
    IdentityElimination,
    DropoutElimination,
    NoOpElimination,
    ChainMerging,
    CommonSubexpressionElimination,
    DeduplicateInitializers,
    DeadCodeElimination,
]
