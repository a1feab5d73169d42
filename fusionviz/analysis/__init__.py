"""Static analysis: FLOPs/MACs/parameters per node, and the static memory plan.

Shapes come from onnx shape inference (with data propagation) after the graph inputs are fixed
the same way :func:`fusionviz.inputs.make_inputs` fixes them (``shapes`` overrides, then the
defaults for symbolic dims), so the plan describes the very inputs the benchmark feeds.

**Memory plan rules** (numbered; the code points back to them):

1. Execution order is the graph's node order when it is topological (ONNX requires it), else a
   stable topological sort.
2. An *activation* is a named output of a node other than ``Constant`` (Constant outputs are
   weights, as onnxruntime makes them initializers). Graph inputs are not activations.
3. A tensor is live from the step that produces it to the last step that reads it (a read inside
   a node's subgraph counts as a read by that node); a graph output stays live to the last step;
   an output nobody reads lives only at its own step.
4. ``sum_intermediate_bytes``: bytes of the activations that are not graph outputs (what fusion
   removes). ``peak_bytes_no_reuse``: every activation in its own buffer (the sum of all
   activation bytes, graph outputs included). ``peak_bytes_reuse``: the most bytes live at any one
   step, which is what an allocator that reuses dead buffers (or works in place) needs.
5. A tensor whose shape or type inference cannot give is counted in ``unknown_tensors`` and
   contributes 0 bytes; the figures are then lower bounds.
6. Control-flow bodies (If/Loop/Scan subgraphs) are planned the same way, and their tensors are
   live during the step of the node that holds them: an If counts its larger branch (by its
   peak; the branch not taken allocates nothing), a Loop or Scan its body once (one iteration's
   buffers, reused by the next), at any nesting depth. The body's peak adds to that step's live
   bytes; its tensors join ``tensors`` with ``body`` set to the body's path (``If_0/then_branch``,
   as ``graphview.bodies`` names it). Weights of every body count in ``weight_bytes`` (a runtime
   loads both branches). FLOPs follow the same choice: an If costs its larger branch, a Loop one
   iteration of its body.

**Cost conventions:** a MAC is one multiply-add; FLOPs count 2 per MAC plus one per element for
bias, activation, element-wise, normalization (BatchNorm 2, LayerNorm-family 5, Softmax 3 per
element) and reduction/pooling work. Ops that only move data cost 0.

(``tensors.py``: shapes and execution order; ``memory.py``: the memory plan; ``cost.py``: FLOPs.)
"""

from __future__ import annotations

from fusionviz.analysis.cost import Cost, model_cost, node_cost
from fusionviz.analysis.memory import MemoryPlan, TensorLife, memory_plan
from fusionviz.analysis.tensors import _execution_order, infer_tensor_info

__all__ = ["Cost", "MemoryPlan", "TensorLife", "_execution_order", "infer_tensor_info", "memory_plan", "model_cost",
           "node_cost"]
