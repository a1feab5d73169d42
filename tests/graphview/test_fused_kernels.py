"""What onnxruntime's CPU provider offers for a group a compiler fused, and the compiled view's
table saying it beside each layer our passes left apart."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fusionviz.backends.base import ExecutedLayer
from fusionviz.graphview.fused_kernels import kernel_note


@pytest.mark.parametrize("ops,says", [
    (["Conv", "Sigmoid", "Mul"], "no kernel: FusedConv has no SiLU activation (the SiLU alone is one QuickGelu)"),
    (["Conv", "HardSwish"], "no kernel: FusedConv has no HardSwish activation"),
    (["Conv", "BatchNormalization", "Relu"], "FusedConv / weight folding"),
    (["Mul", "Add", "Mul"], "no kernel: no generic element-wise chain kernel"),
    (["Mul", "ReduceSum"], "no kernel: no fused element-wise + reduce kernel"),
    (["MatMul", "Add"], "Gemm / FusedMatMul / FusedGemm"),
    (["MatMul", "Softmax", "MatMul", "Div"], "Attention / MultiHeadAttention"),
])
def test_kernel_note(ops, says):
    assert kernel_note(ops).startswith(says)


def test_the_compiled_table_says_why_a_group_stayed_apart():
    from fusionviz.ui.compiled_view import _table

    layers = [ExecutedLayer("conv_silu", "Convolution", absorbed=("c", "s", "m")),
              ExecutedLayer("conv_bn", "Convolution", absorbed=("c2", "bn")),
              ExecutedLayer("relu", "Eltwise", absorbed=("r",))]
    graph = SimpleNamespace(layers=layers)
    sources = {"c": {"c"}, "s": {"s"}, "m": {"m"}, "c2": {"c2", "bn"}, "r": {"r"}}  # ours fused Conv+BN only
    ops = {"c": "Conv", "s": "Sigmoid", "m": "Mul", "c2": "Conv", "bn": "BatchNormalization", "r": "Relu"}
    rows = {r["layer"]: r for r in _table(graph, sources, ops)}
    col = "onnxruntime (CPU) for the group"
    assert rows["conv_silu"]["our passes"] == "3 nodes"
    assert rows["conv_silu"][col] == "no kernel: FusedConv has no SiLU activation (the SiLU alone is one QuickGelu)"
    assert rows["conv_bn"]["our passes"] == "one node too" and rows["conv_bn"][col] == ""
    assert rows["relu"][col] == ""
