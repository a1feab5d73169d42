"""Tiny Streamlit app for bench_render.py / screens_graph.py: draws one generated or sample model.

Settings come from environment variables (the benchmark starts this script):
FV_BENCH_MODEL (path to .onnx), FV_BENCH_MODE ("viewer" or "graphviz_chart"),
FV_BENCH_COLLAPSE ("1"/"0"), FV_BENCH_MAX_NODES, FV_BENCH_FOCUS, FV_BENCH_HOPS,
FV_BENCH_DIFF (path of the "after" model: draw it with the diff), FV_BENCH_SIDE.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx  # noqa: E402
import streamlit as st  # noqa: E402

from fusionviz.graphview import RenderOptions, diff_models, render_graph  # noqa: E402
from fusionviz.ui.graph_component import cached_svg, graph_viewer  # noqa: E402

st.set_page_config(layout="wide")


@st.cache_resource
def _load(path: str) -> onnx.ModelProto:
    return onnx.load(path)


model = _load(os.environ["FV_BENCH_MODEL"])
diff = None
side = os.environ.get("FV_BENCH_SIDE", "after")
if os.environ.get("FV_BENCH_DIFF"):
    other = _load(os.environ["FV_BENCH_DIFF"])
    diff = diff_models(model, other)
    if side == "after":
        model = other
opts = RenderOptions(
    collapse=os.environ.get("FV_BENCH_COLLAPSE", "1") == "1",
    max_nodes=int(os.environ.get("FV_BENCH_MAX_NODES", "400")),
    focus=os.environ.get("FV_BENCH_FOCUS") or None,
    hops=int(os.environ.get("FV_BENCH_HOPS", "2")),
    changed_only=os.environ.get("FV_BENCH_CHANGED_ONLY") == "1",
)
rendered = render_graph(model, diff=diff, side=side, options=opts)
st.caption(f"{rendered.drawn:,} of {rendered.total:,} nodes drawn" + (f" — {rendered.note}" if rendered.note else "")
           + (f" — {diff.summary()}" if diff else ""))
if os.environ.get("FV_BENCH_MODE", "viewer") == "graphviz_chart":
    st.graphviz_chart(rendered.dot, use_container_width=True)
else:
    clicked = graph_viewer(cached_svg(rendered.dot), key="g", height=int(os.environ.get("FV_BENCH_HEIGHT", "800")))
    st.write("clicked:", clicked)
