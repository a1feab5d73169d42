"""Where a lossy pass (fp16, int8) loses the most: per-node error added, from a per-tensor
comparison, and the "keep these in float32" list the precision passes accept.

1. **Error added by a node.** :func:`fusionviz.compare.compare_models` gives each tensor of the
   reference model its cosine with the converted model's; its *relative error* here is
   ``sqrt(2 (1 - cosine))``, the distance between the two tensors scaled to unit length (for small
   errors the RMS error over the RMS value, less any common scale). It adds up through a chain of
   layers the way the error does, where the max-abs ratio jumps with each tensor's largest value.
   A node *adds* the error of its output less the largest error of the inputs it reads (graph
   inputs and weights: 0): a node that only passes on its inputs' error adds nothing, the node
   where the error appears adds all of it.
2. **The list.** The nodes that add the most, largest first, down to one tenth of the largest
   addition and at most ``top`` of them; nodes that add no more than the tolerance are left out.
   (A node that makes NaN/Inf is not ranked: ``compare`` names the first one.)
   ``optimize --keep-fp32 a,b`` (and :func:`fusionviz.passes.precision.keep.keeping_fp32`) keeps
   them in float32 in fp16, int8_dynamic and int8_static.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import onnx

from fusionviz.compare import CompareResult


@dataclasses.dataclass(frozen=True)
class NodeLoss:
    """Rule 1: one node of the reference model and the error it adds."""

    node: str
    op: str
    tensor: str
    error: float  # rule 1's relative error of the output
    added: float
    max_rel: float  # compare's max abs difference over the largest magnitude, for reference

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def node_losses(result: CompareResult, reference: onnx.ModelProto) -> list[NodeLoss]:
    """Rule 1: per compared tensor of ``reference`` (A of ``result``), the error its node adds,
    largest first."""
    rows = [r for r in result.compared if r.diff.cosine == r.diff.cosine and not r.new_nonfinite]
    err = {r.pair.name: math.sqrt(max(0.0, 2.0 * (1.0 - r.diff.cosine))) for r in rows}
    inputs_of: dict[str, list[str]] = {}
    for graph_node in reference.graph.node:
        for out in graph_node.output:
            inputs_of[out] = [i for i in graph_node.input if i]
    losses = []
    for r in rows:
        t = r.pair.name
        before = max((err.get(i, 0.0) for i in inputs_of.get(t, ())), default=0.0)
        losses.append(NodeLoss(r.pair.node_a, r.pair.op_a, t, err[t], max(0.0, err[t] - before), r.max_rel))
    losses.sort(key=lambda x: -x.added)
    return losses


def keep_fp32(losses: Sequence[NodeLoss], *, top: int = 5, rtol: float = 1e-4) -> list[str]:
    """Rule 2: the node names to keep in float32."""
    if not losses or losses[0].added <= rtol:
        return []
    cut = max(losses[0].added / 10.0, rtol)
    names: list[str] = []
    for loss in losses:
        if loss.added < cut or len(names) >= top:
            break
        if loss.node and loss.node not in names:
            names.append(loss.node)
    return names
