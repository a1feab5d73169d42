"""What onnxruntime's CPU provider offers for a group of ONNX ops a compiler runs as one layer:
a fused kernel a pass could target, or none (then no ONNX rewrite can hold the group in one node
that onnxruntime runs). The compiled view says it beside each layer our passes left apart, and
``benchmarks/bench_coverage.py`` counts the groups by it."""

from __future__ import annotations

from collections.abc import Iterable

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "Tanh", "Neg", "Abs", "Exp",
                          "Log", "Sqrt", "Pow", "Max", "Min", "LeakyRelu", "HardSigmoid", "HardSwish", "Erf",
                          "Cast", "Floor", "Ceil", "Round", "Reciprocal", "PRelu", "Where", "Equal", "Less",
                          "Greater", "Not", "And", "Or", "Softplus", "Elu", "Selu", "Mish", "Gelu"})
LAYOUT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})


def kernel_note(ops: Iterable[str]) -> str:
    """One phrase: the onnxruntime CPU kernel that could hold these op types, or "no kernel: why"."""
    s = set(ops)
    if "Conv" in s and "Sigmoid" in s and "Mul" in s:
        return "no kernel: FusedConv has no SiLU activation (the SiLU alone is one QuickGelu)"
    if s == {"Sigmoid", "Mul"}:
        return "QuickGelu (SiLU / Swish: a fusion could hold it)"
    if "Conv" in s and "HardSwish" in s:
        return "no kernel: FusedConv has no HardSwish activation"
    if s & {"Conv", "ConvTranspose"} and s <= {"Conv", "ConvTranspose", "Add", "Mul", "Sub", "Div",
                                               "BatchNormalization", "Relu", "Clip", "Sigmoid", "Tanh",
                                               "LeakyRelu", "HardSigmoid"}:
        return "FusedConv / weight folding (a fusion could hold it)"
    if "ReduceSum" in s or "ReduceMean" in s:
        if s <= {"Mul", "ReduceSum", "ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div"}:
            return "no kernel: no fused element-wise + reduce kernel"
    if s <= ELEMENTWISE | LAYOUT:
        if s <= {"Mul", "Add", "Sub", "Div"}:
            return "no kernel: no generic element-wise chain kernel"
        return "no kernel: no fused element-wise kernel for this chain"
    if "MatMul" in s and s <= {"MatMul", "Add", "Relu", "Transpose", "Mul", "Div"}:
        return "Gemm / FusedMatMul / FusedGemm (a fusion could hold part of it)"
    if "LSTM" in s or "GRU" in s:
        return "no kernel: recurrent cell with its surroundings"
    if "Softmax" in s and "MatMul" in s:
        return "Attention / MultiHeadAttention (part of an attention block; explain says why it stayed)"
    return "unclassified"
