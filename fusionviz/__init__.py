"""fusionviz: see and measure what graph fusion and simplification do to an ONNX model."""

__version__ = "0.1.0"
