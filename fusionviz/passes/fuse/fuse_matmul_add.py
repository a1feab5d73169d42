"""fuse_matmul_add: MatMul + Add into Gemm.

Wraps onnxscript's ``fuse_matmul_add`` rules (plain, and with a 2-D Transpose on either
operand folded into ``transA`` / ``transB``) with one guard the library lacks:

1. Both MatMul operands have rank 2 (the library's own check).
2. The added tensor ``C`` broadcasts *into* the ``(M, N)`` product without enlarging it:
   rank <= 2 and each dimension is 1 or equal to the product's (Gemm's unidirectional
   broadcast). An Add that would broadcast the product up (``C`` of shape ``(3, M, N)``) is
   not a Gemm, so it is left alone.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern as orp

from fusionviz.passes import _compat
from fusionviz.passes.base import Category, Pass
from fusionviz.passes.rewrite import apply_rules
from fusionviz.passes.shapes import infer_shapes_if_needed


def _dim(shape: ir.Shape | None, i: int):
    return None if shape is None else shape[i]


class _CBroadcastGuard:
    """Rule 2: C broadcasts into (M, N)."""

    def check(self, context, input_a, input_b, input_c=None, **kw) -> orp.MatchResult:
        r = super().check(context, input_a, input_b, **kw)  # type: ignore[misc]
        if not r:
            return r
        a_shape, b_shape = input_a.shape, input_b.shape
        m = _dim(a_shape, 1 if self.trans_a else 0)  # type: ignore[attr-defined]
        n = _dim(b_shape, 0 if self.trans_b else 1)  # type: ignore[attr-defined]
        c_shape = input_c.shape if input_c is not None else None
        if c_shape is None:
            return r.fail("The shape of the added tensor is unknown.")
        dims = list(c_shape)
        if len(dims) > 2:
            return r.fail(f"The added tensor has rank {len(dims)}; Gemm's C must broadcast into (M, N).")
        want = [m, n][2 - len(dims):]
        for got, exp in zip(dims, want, strict=True):
            if got != 1 and (exp is None or got != exp):
                return r.fail(f"The added tensor's shape {dims} does not broadcast into (M, N) = ({m}, {n}).")
        if input_c.dtype is not None and input_a.dtype is not None and input_c.dtype != input_a.dtype:
            return r.fail("The added tensor's dtype differs from the product's.")
        return r


class _MatMulAdd(_CBroadcastGuard, _compat.MatMulAddToGemm):
    pass


class _TransAMatMulAdd(_CBroadcastGuard, _compat.TransAMatMulAddToGemm):
    pass


class _TransBMatMulAdd(_CBroadcastGuard, _compat.TransBMatMulAddToGemm):
    pass


class _TransABMatMulAdd(_CBroadcastGuard, _compat.TransABMatMulAddToGemm):
    pass


class MatMulAddToGemm(Pass, name="fuse_matmul_add", aliases=("matmul_add_to_gemm",), category=Category.FUSE, order=240,
                      trigger_ops={"MatMul"}):
    """MatMul + Add (2-D) into one Gemm, absorbing 2-D Transposes into transA/transB."""

    mirrors_ort = "basic"

    title = "Fuse MatMul + Add into Gemm"
    explain = """\
**What:** `Add(MatMul(A, B), C)` with 2-D `A` and `B` becomes `Gemm(A, B, C)`
(`Y = α·A·B + β·C`, here α = β = 1). A 2-D `Transpose` on `A` or `B` is absorbed into
Gemm's `transA` / `transB` flags instead of being materialised. The added tensor must
broadcast into the `(M, N)` result (a bias row `(N,)` or `(1, N)`, a column `(M, 1)`, or a
full `(M, N)` matrix).

**Why faster (pattern optimization: GEMM → SGEMM):** a BLAS-style GEMM kernel initialises
its accumulators with `β·C` and writes the result once, instead of writing the product and
then re-reading it for a separate Add; the transposes become a different memory access
order inside the kernel rather than a copy.

**Not fused:** MatMuls on 3-D or higher inputs (e.g. `[batch, seq, hidden]` in a
transformer): ONNX Gemm is strictly 2-D, and reshaping around it adds two nodes for a small
gain; onnxruntime's own *MatMulAddFusion* handles that case at its BASIC level, and on GPU
the bias add is fused into the GEMM epilogue by the execution provider. An Add whose other
operand would broadcast the product to a bigger shape, or whose shapes are unknown.
"""
    needs_shapes = False  # infers shapes itself, only when a MatMul feeds an Add

    def transform(self, model: ir.Model) -> None:
        mms = [n for n in model.graph if n.op_type == "MatMul"
               and any(u.op_type == "Add" for u, _ in n.outputs[0].uses())]
        if not mms:
            return
        infer_shapes_if_needed(model, [v for n in mms for v in n.inputs] + [
            a for n in mms for u, _ in n.outputs[0].uses() for a in u.inputs])
        rules = [
            _TransABMatMulAdd.rule(),
            _TransAMatMulAdd.rule(),
            _TransBMatMulAdd.rule(),
            _MatMulAdd.rule(),
        ]
        apply_rules(model, rules, commute=True)
