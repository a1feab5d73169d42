"""Tiny models for benchmark tests (built from ONNX text)."""

from __future__ import annotations

import onnx
import onnx.parser
import pytest

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def parse(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


@pytest.fixture
def tiny() -> onnx.ModelProto:
    return parse(HEADER + """
g (float[1,64] x) => (float[1,64] y) { a = Relu(x) b = Sigmoid(a) y = Add(a, b) }""")


@pytest.fixture
def tiny_fused() -> onnx.ModelProto:
    # The same function written differently (Add operands swapped, an extra Identity):
    # equal outputs, one more intermediate tensor.
    return parse(HEADER + """
g (float[1,64] x) => (float[1,64] y) { a = Relu(x) b = Sigmoid(a) c = Add(b, a) y = Identity(c) }""")


@pytest.fixture
def hog() -> onnx.ModelProto:
    """Allocates ~2.8 GB in ConstantOfShape: over any small memory cap."""
    return parse(HEADER + """
g (float[1,64] x) => (float[1,64] y) {
  s = Constant<value = int64[1] {700000000}>()
  big = ConstantOfShape<value = float[1] {1.0}>(s)
  r = ReduceSum<keepdims=0>(big)
  y = Add(x, r)
}""")


@pytest.fixture
def hang() -> onnx.ModelProto:
    """A Loop with 10^12 iterations: never finishes."""
    return parse(HEADER + """
g (float[1,64] x) => (float[1,64] y) {
  m = Constant<value = int64 {1000000000000}>()
  c = Constant<value = bool {1}>()
  y = Loop(m, c, x) <body = body (int64 i, bool cin, float[1,64] v) => (bool cout, float[1,64] w) {
    cout = Identity(cin)
    w = Relu(v)
  }>
}""")


@pytest.fixture
def rejected() -> onnx.ModelProto:
    """Valid ONNX that onnxruntime cannot load (an op nobody implements)."""
    return parse('<ir_version: 8, opset_import: ["" : 17, "custom.x": 1]>' + """
g (float[1,64] x) => (float[1,64] y) { y = custom.x.Foo(x) }""")
