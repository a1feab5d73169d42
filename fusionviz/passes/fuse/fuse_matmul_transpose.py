"""fuse_matmul_transpose: MatMul with a transposed operand and/or a scalar scale into ``FusedMatMul``."""

from __future__ import annotations

import onnx_ir as ir

from fusionviz.passes.base import Category, Pass
from fusionviz.passes.fuse.conv_common import MS_DOMAIN, ensure_ms_import
from fusionviz.passes.fuse.transformer_common import (
    float32_or_unknown,
    peel_scale,
    perm_of,
    produced_by,
    single_use,
    substitute,
)
from fusionviz.passes.hygiene import Namer


def _swap_last2(node: ir.Node, rank: int | None) -> bool:
    perm = perm_of(node)
    if perm is None:
        return rank == 2
    n = len(perm)
    return n >= 2 and perm[:-2] == list(range(n - 2)) and perm[-2:] == [n - 1, n - 2]


class FusedMatMulFusion(Pass, name="fuse_matmul_transpose", aliases=("fused_matmul",), category=Category.FUSE, order=330,
                        trigger_ops={"MatMul"}):
    title = "MatMul + Transpose/scale → FusedMatMul"
    needs_shapes = True
    explain = """\
**What:** a `MatMul` whose operand is a `Transpose` of its last two axes, and/or whose output or
operand is multiplied or divided by a scalar constant, becomes
`com.microsoft.FusedMatMul(A, B, transA, transB, alpha)`.

**Why faster:** GEMM kernels read a transposed operand for free (they just walk it by columns),
and scale the result while writing it; a separate Transpose copies the whole matrix and a
separate Mul reads and writes the product again.

**Math:** `FusedMatMul(A, B) = α · op(A) · op(B)`, `op(X) = Xᵀ` (last two axes) when the flag
is set. Only single-use intermediates are absorbed, so nothing else sees a changed tensor.
"""

    def transform(self, model: ir.Model) -> None:
        namer = Namer(model)
        fused = 0
        for mm in list(model.graph):
            if mm.op_type != "MatMul" or mm.domain != "" or mm.graph is None:
                continue
            a, b = mm.inputs[0], mm.inputs[1]
            if not (float32_or_unknown(a) and a.dtype is not None):
                continue
            ra = len(a.shape) if a.shape is not None else None
            rb = len(b.shape) if b.shape is not None else None
            if ra is None or rb is None or ra < 2 or rb < 2 or ra != rb:
                continue  # batch-transpose semantics need equal known ranks
            removed: list[ir.Node] = []
            alpha = 1.0
            trans = {"transA": 0, "transB": 0}
            new_in = []
            for key, v in (("transA", a), ("transB", b)):
                base, f, sn = peel_scale(v) if single_use(v) else (v, 1.0, [])
                if sn and not all(single_use(n.outputs[0]) for n in sn):
                    base, f, sn = v, 1.0, []
                alpha *= f
                removed += sn
                t = produced_by(base, "Transpose")
                if t is not None and single_use(base) and _swap_last2(t, len(base.shape) if base.shape else None):
                    trans[key] = 1
                    removed.append(t)
                    base = t.inputs[0]
                new_in.append(base)
            out = mm.outputs[0]
            final = out
            if single_use(out):
                user = out.uses()[0].node
                if user.op_type in ("Mul", "Div") and user.domain == "":
                    base, f, sn = peel_scale(user.outputs[0])
                    if base is out and sn == [user]:
                        alpha *= f
                        removed.append(user)
                        final = user.outputs[0]
            if not removed:
                continue
            new = ir.node("FusedMatMul", new_in, {"alpha": float(alpha), **trans}, domain=MS_DOMAIN, name="")
            substitute(model, new, [mm, *removed], final, namer, "fmm")
            fused += 1
        if fused:
            ensure_ms_import(model)
