"""Graph view: model → display graph → DOT (→ SVG); diff of two snapshots; collapse/focus.

Public API::

    diff = diff_models(before, after)                      # GraphDiff
    rendered = render_graph(model, diff=diff, side="after", options=RenderOptions(collapse=True))
    svg = render_svg(rendered.dot)                         # pygraphviz, in-process (big: by parts)
    png = render_png(rendered.dot)                         # PNG of the same drawing
    links = Links(before, after, diff)                     # what a node became / came from
    details = node_details(model, "Conv_12")
"""

from fusionviz.graphview.build import Rendered, RenderOptions, render_graph, resolve_node
from fusionviz.graphview.details import node_details, weight_stats
from fusionviz.graphview.diff import GraphDiff, diff_models
from fusionviz.graphview.dot import NODE_ID_PREFIX, SCOPE_ID_PREFIX, decode_element_id, element_id
from fusionviz.graphview.links import Counterpart, Links, fates_from_reports
from fusionviz.graphview.svg import render_png, render_svg, svg_available

__all__ = [
    "Counterpart",
    "GraphDiff",
    "Links",
    "NODE_ID_PREFIX",
    "RenderOptions",
    "Rendered",
    "SCOPE_ID_PREFIX",
    "decode_element_id",
    "diff_models",
    "element_id",
    "fates_from_reports",
    "node_details",
    "render_graph",
    "render_png",
    "render_svg",
    "resolve_node",
    "svg_available",
    "weight_stats",
]
