"""Simplification passes: remove or precompute what does nothing at inference time.

One pass per module. They wrap library code where a well-kept library has the rule
(onnxscript's constant folder and rewrite rules, onnx-ir's common passes) and add small rules of
their own (``rules/``, one per module, in onnxscript's pattern language) where no library has
them. Shared conventions:

1. A pass only cleans up after itself (:mod:`fusionviz.passes.cleanup`), so turning one pass off
   really turns that simplification off.
2. Every rule checks static facts (:mod:`fusionviz.passes.facts`: constant values, static
   shapes, dtypes) and fails with a reason when they are unknown; a pass that finds nothing
   changes nothing and never raises.
3. Broadcasting is respected: ``x + 0`` is removed only when the zero tensor cannot enlarge
   ``x``'s shape, ``Expand`` only when the target shape cannot enlarge it.
"""
