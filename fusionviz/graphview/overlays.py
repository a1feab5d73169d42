"""Per-node overlays: one number per node of one side, drawn by ``build`` rule 8, each with its own
scale, palette and legend (as Model Explorer's node data).

Rules (the code points back to them):

1. One record for every overlay (:class:`Overlay`): what it measures, a value per node key, the
   scale's steps, the palette and the unit. ``render_options()`` is what ``RenderOptions`` takes,
   ``legend()`` the entries the page draws, ``text(key)`` the value as written in the side panel.
2. Kinds (:data:`KINDS`): ``change`` is the diff's colours (build rule 1; no values, the header's
   legend); ``time`` the median kernel time per node (``fusionviz.profile``, onnxruntime's
   optimizer off, so a fused node is timed as its own kernel); ``memory`` the bytes of the tensors a
   node writes, from shape inference with the inputs fixed (``analysis.infer_tensor_info``); a node
   whose outputs shape inference cannot size (onnxruntime's NCHWc and contrib ops) takes the bytes
   its kernel wrote in a profiled run when one is given (``profile.NodeTimes.output_bytes``), else
   it has no value; the note says how many of each; ``error`` the largest max
   rel error of a node's outputs against the other side (``fusionviz.compare``), NaN where a NaN/Inf
   appears.
3. Fixed scales, so two panes and two models read alike: time in decades of milliseconds from
   ≤ 0.01 ms to > 10 ms; memory in steps of 4× from ≤ 16 KB to > 4 MB (a feature map of a
   CNN's first layers and of its last ones fall in different steps); error on the comparison's
   own scale (given by the caller).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence

import onnx

from fusionviz.graphview import dot as D

#: Rule 2: the overlay kinds, in the order the page offers them, with their names.
KINDS = {"change": "Change class", "time": "Time per node", "memory": "Memory written", "error": "Error per tensor"}

#: Rule 3: the time scale (ms) and the memory scale (bytes).
TIME_SCALE = ((0.01, "≤ 0.01 ms"), (0.1, "≤ 0.1 ms"), (1.0, "≤ 1 ms"), (10.0, "≤ 10 ms"), (math.inf, "> 10 ms"))
MEMORY_SCALE = ((16384.0, "≤ 16 KB"), (65536.0, "≤ 64 KB"), (262144.0, "≤ 256 KB"), (1048576.0, "≤ 1 MB"),
                (4194304.0, "≤ 4 MB"), (math.inf, "> 4 MB"))


@dataclasses.dataclass(frozen=True)
class Overlay:
    """Rule 1: a number per node of one side.

    Attributes:
        kind: one of :data:`KINDS` (not ``change``, which has no values).
        title: what a value is, before it in labels and the legend ("time", "writes", "max rel").
        values: (node key, value) pairs; NaN is marked apart.
        scale: (upper bound, label) per step, ascending.
        fills: the palette, low to high.
        unit: "ms", "B" or "" (see ``build.format_value``).
        nan_label: the name of a NaN value in the legend ("" when the kind has none).
        note: one line on where the numbers come from (and what is missing).
        missing: nodes that should have a value and have none (memory: outputs of unknown size).
    """

    kind: str
    title: str
    values: tuple[tuple[str, float], ...]
    scale: tuple[tuple[float, str], ...]
    fills: tuple[str, ...]
    unit: str = ""
    nan_label: str = ""
    note: str = ""
    missing: int = 0

    def value(self, key: str) -> float | None:
        """The value of node ``key``, or None."""
        return self._map.get(key)

    @functools.cached_property
    def _map(self) -> dict[str, float]:
        return dict(self.values)

    def text(self, key: str) -> str | None:
        """The value of ``key`` as written in labels and the side panel, or None."""
        from fusionviz.graphview.build import format_value

        v = self.value(key)
        return None if v is None else format_value(v, self.unit)

    def render_options(self) -> dict:
        """``RenderOptions`` fields that draw this overlay (build rule 8)."""
        return {"node_values": self.values, "value_scale": self.scale, "value_title": self.title,
                "value_fills": self.fills, "value_unit": self.unit,
                "value_nan_label": self.nan_label or "NaN/Inf"}

    def legend(self) -> list[tuple[str, str, str]]:
        """(title, fill, border) per step, then NaN when the kind has one and a value is NaN."""
        from fusionviz.graphview.build import RenderOptions, value_legend

        has_nan = bool(self.nan_label) and any(math.isnan(v) for _, v in self.values)
        return value_legend(RenderOptions(**self.render_options()), with_nan=has_nan)


def time_overlay(times_ms: Mapping[str, float] | Iterable[tuple[str, float]], note: str = "") -> Overlay:
    """Rule 2: median kernel time per node (ms), e.g. ``profile.NodeTimes.node_values()``."""
    values = tuple(dict(times_ms).items())
    return Overlay("time", "time", values, TIME_SCALE, D.TIME_FILLS, unit="ms", note=note)


def written_bytes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None
                  ) -> tuple[dict[str, int], int]:
    """Rule 2: node key -> bytes of the tensors it writes, and how many nodes have an output of
    unknown size (left out)."""
    from fusionviz.analysis import infer_tensor_info
    from fusionviz.graphview.model_graph import node_keys

    info = infer_tensor_info(model, shapes)
    out: dict[str, int] = {}
    unknown = 0
    for node, key in zip(model.graph.node, node_keys(model.graph.node), strict=True):
        total = 0
        for t in node.output:
            if not t:
                continue
            ti = info.get(t)
            nb = ti.nbytes if ti is not None else None
            if nb is None:
                total = -1
                break
            total += nb
        if total < 0:
            unknown += 1
        else:
            out[key] = total
    return out, unknown


def memory_overlay(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                   measured: Mapping[str, int] | None = None) -> Overlay:
    """Rule 2: bytes each node writes, from shape inference with the inputs fixed by ``shapes``;
    ``measured`` (node key -> bytes written in a profiled run) sizes the nodes inference cannot."""
    got, unknown = written_bytes(model, shapes)
    filled = 0
    if unknown and measured:
        from fusionviz.graphview.model_graph import node_keys

        for key in node_keys(model.graph.node):
            if key not in got and key in measured:
                got[key] = int(measured[key])
                filled += 1
        unknown -= filled
    total = sum(got.values())
    from fusionviz.graphview.build import format_value

    note = f"{format_value(float(total), 'B')} written by {len(got):,} nodes"
    if filled:
        note += f" ({filled:,} sized by onnxruntime's profile: shape inference does not know their op)"
    if unknown:
        note += f"; {unknown:,} node(s) write a tensor of unknown size (not coloured)"
    return Overlay("memory", "writes", tuple((k, float(v)) for k, v in got.items()), MEMORY_SCALE,
                   D.MEMORY_FILLS, unit="B", note=note, missing=unknown)


def error_overlay(values: Iterable[tuple[str, float]], scale: tuple[tuple[float, str], ...], note: str = "") -> Overlay:
    """Rule 2: the largest max rel error of each node's outputs (``CompareResult.node_values``),
    on the comparison's scale."""
    return Overlay("error", "max rel", tuple(values), scale, D.HEAT_FILLS, nan_label="NaN/Inf introduced",
                   note=note)
