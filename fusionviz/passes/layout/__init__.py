"""Layout and memory passes: how tensors are stored, not what is computed.

One pass per module: onnxruntime's NCHWc blocked layout, captured as a visible rewrite
(:mod:`.nchwc`), and the flush of denormal weights that x86 CPUs compute slowly (:mod:`.denormal`).
A layout pass never changes a tensor's element type (:mod:`.dtypes`, their postcondition).
"""
