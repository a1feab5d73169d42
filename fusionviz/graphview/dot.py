"""DOT text: escaping, colours, labels, layout limits.

Escaping rules (every string that reaches the DOT text goes through one of these):

1. Quoted DOT strings (:func:`quote`): backslashes doubled, quotes escaped, line breaks become
   ``\\n`` (a centred line), other control characters dropped. Graphviz's escString sequences
   (``\\N``, ``\\G``, ``\\l``) therefore cannot be injected.
2. HTML-like labels (:func:`html_text`): ``& < > " '`` become entities, control characters are
   dropped, so a name cannot open a tag; the only tags are the ones this module writes.
3. Long texts are shortened (:func:`shorten`) before escaping; the full name is in the node
   details. SVG element ids carry the node key percent-encoded (:func:`element_id`), so any
   name survives the round trip through the SVG and back to the click handler.
"""

from __future__ import annotations

import html
import logging
import re
import urllib.parse

logger = logging.getLogger(__name__)

NODE_ID_PREFIX = "fv-n-"
SCOPE_ID_PREFIX = "fv-s-"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")

# Op families: fill colour per family.
FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "NchwcConv"),
    "matmul": ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "FusedGemm", "FusedMatMul",
               "MatMulNBits", "Einsum"),
    "norm": ("BatchNormalization", "LayerNormalization", "InstanceNormalization",
             "GroupNormalization", "LpNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
             "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "LRN", "MeanVarianceNormalization"),
    "activation": ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Gelu", "FastGelu", "BiasGelu",
                   "QuickGelu", "Erf", "Softmax", "LogSoftmax", "Elu", "Selu", "Celu", "HardSigmoid",
                   "HardSwish", "Mish", "Softplus", "Softsign", "Swish", "Clip", "ThresholdedRelu"),
    "elementwise": ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Neg",
                    "Abs", "Min", "Max", "Sum", "Mean", "Where", "Equal", "Less", "Greater", "Not",
                    "And", "Or", "Xor", "Cos", "Sin", "Floor", "Ceil", "Round", "Sign", "Mod",
                    "LessOrEqual", "GreaterOrEqual", "BitShift", "IsNaN", "IsInf"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "ReduceMean",
             "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1",
             "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK"),
    "layout": ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice",
               "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Shape", "Size",
               "Cast", "CastLike", "Identity", "Constant", "ConstantOfShape", "Range", "Resize",
               "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "ReorderInput",
               "ReorderOutput", "Dropout", "NonZero", "OneHot", "Trilu", "EyeLike"),
    "control": ("If", "Loop", "Scan"),
}
FAMILY_FILL = {
    "conv": "#cfe3f7", "matmul": "#e2d9f3", "norm": "#f6efc4", "activation": "#f9dcef",
    "elementwise": "#e4ecef", "pool": "#d4efe9", "layout": "#ededed", "control": "#fde2c8",
    "fused": "#c9f0fb", "other": "#ffffff",
}
FAMILY_TITLE = {
    "conv": "conv", "matmul": "matmul / gemm", "norm": "normalization", "activation": "activation",
    "elementwise": "elementwise", "pool": "pool / reduce", "layout": "shape / layout",
    "control": "control flow", "fused": "fused / contrib", "other": "other",
}
_FAMILY_OF = {op: fam for fam, ops in FAMILIES.items() for op in ops}

# Diff status → (fill, border, style). Unchanged keeps the family colour; lifted (a Constant
# node whose value is now an initializer: no change) is drawn quietly, grey and dotted.
STATUS_STYLE = {
    "fused": ("#b7efc5", "#1b873f", "rounded,filled,bold"),
    "added": ("#b7efc5", "#1b873f", "rounded,filled,bold"),
    "removed": ("#ffc9c9", "#c62828", "rounded,filled,dashed,bold"),
    "changed": ("#ffe2a8", "#d97706", "rounded,filled,bold"),
    "lifted": ("#f4f4f5", "#a1a1aa", "rounded,filled,dotted"),
}
#: Near-miss outlines (build rule 7): apart from the change colours, the selection and search marks.
NEAR_MISS_MATCHED = "#7c3aed"
NEAR_MISS_BLOCKER = "#db2777"
#: Node-value heat scale (build rule 8), low to high; NaN values are marked apart.
HEAT_FILLS = ("#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#e6550d")
#: The time overlay's palette (light to dark purple) and the memory overlay's (light to dark blue):
#: apart from the error heat, so a picture says which overlay it is.
TIME_FILLS = ("#f7fcfd", "#e0ecf4", "#bfd3e6", "#9ebcda", "#8c96c6", "#8c6bb1")
MEMORY_FILLS = ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6")
HEAT_NAN = "#67e8f9"
HEAT_BORDER = "#7a7a7a"
STATUS_TITLE = {"fused": "fused / new", "removed": "removed", "changed": "changed",
                "lifted": "lifted to initializer", "unchanged": "unchanged"}


def family(op: str, domain: str = "") -> str:
    """The colour family of an op; contrib-domain and Fused* ops are 'fused'."""
    if op.startswith("Fused") or domain not in ("", "ai.onnx"):
        if op in _FAMILY_OF and domain in ("", "ai.onnx"):
            return _FAMILY_OF[op]
        return "fused"
    return _FAMILY_OF.get(op, "other")


def clean(text: object) -> str:
    """Drop control characters (newlines become spaces)."""
    s = str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    return _CONTROL.sub("", s)


def shorten(text: str, limit: int = 40) -> str:
    """Keep head and tail of a long text: ``very_long_na…ame_end``."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    tail = limit - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def quote(text: object) -> str:
    """Rule 1: a quoted DOT string (with the quotes)."""
    s = _CONTROL.sub("", str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " "))
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def html_text(text: object) -> str:
    """Rule 2: text for inside an HTML-like label."""
    return html.escape(clean(text), quote=True)


def element_id(prefix: str, key: str) -> str:
    """Rule 3: SVG element id for a node key or scope (percent-encoded, ASCII only)."""
    return prefix + urllib.parse.quote(key, safe="")


def decode_element_id(elem_id: str) -> tuple[str, str] | None:
    """("node", key) or ("scope", path) for an id made by :func:`element_id`; None otherwise."""
    if elem_id.startswith(NODE_ID_PREFIX):
        return "node", urllib.parse.unquote(elem_id[len(NODE_ID_PREFIX):])
    if elem_id.startswith(SCOPE_ID_PREFIX):
        return "scope", urllib.parse.unquote(elem_id[len(SCOPE_ID_PREFIX):])
    return None


def attrs(**kv: object) -> str:
    """``[k="v", ...]`` with every value quoted (HTML labels passed as ``HtmlLabel``)."""
    parts = []
    for k, v in kv.items():
        if v is None:
            continue
        if isinstance(v, HtmlLabel):
            parts.append(f"{k}=<{v.markup}>")
        else:
            parts.append(f"{k}={quote(v)}")
    return "[" + ", ".join(parts) + "]"


class HtmlLabel:
    """Markup built only from :func:`html_label` lines (text already escaped)."""

    __slots__ = ("markup",)

    def __init__(self, markup: str) -> None:
        self.markup = markup


def html_label(lines: list[tuple[str, str | None, int | None, bool]]) -> HtmlLabel:
    """Lines of (text, colour, point size, bold) → an HTML-like label; text is escaped here."""
    out = []
    for text, color, size, bold in lines:
        t = html_text(text)
        if bold:
            t = f"<B>{t}</B>"
        font = []
        if color:
            font.append(f'COLOR="{html_text(color)}"')
        if size:
            font.append(f'POINT-SIZE="{int(size)}"')
        if font:
            t = f"<FONT {' '.join(font)}>{t}</FONT>"
        out.append(t)
    return HtmlLabel("<BR/>".join(out))


def graph_header(*, rankdir: str, big: bool) -> list[str]:
    """Graph, node and edge defaults. ``big`` bounds the layout work (``nslimit``: a tensor feeding many nodes otherwise blows up ``dot``'s ranking)."""
    g = dict(rankdir=rankdir, nodesep="0.25", ranksep="0.35", outputorder="edgesfirst",
             fontname="Helvetica", bgcolor="white")
    if big:
        g.update(nslimit="2", nslimit1="2", mclimit="0.5", searchsize="20")
    lines = ["digraph G {", f"  graph {attrs(**g)};",
             "  node " + attrs(shape="box", style="rounded,filled", fontname="Helvetica",
                                fontsize="11", penwidth="1", color="#7a7a7a", margin="0.12,0.04",
                                height="0.3") + ";",
             "  edge " + attrs(color="#8a8a8a", arrowsize="0.6", fontname="Helvetica",
                                fontsize="8", fontcolor="#555555") + ";"]
    return lines
