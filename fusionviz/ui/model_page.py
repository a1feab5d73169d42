"""Model page: pick a sample, upload a model, see its summary, set symbolic input dims once."""

from __future__ import annotations

import logging

import pandas as pd
import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)


def _load_sample(name: str) -> None:
    try:
        state.set_model(cache.load_sample(name), {"kind": "sample", "name": name})
    except errors.FusionvizError as exc:
        st.session_state[state.LOAD_ERROR] = str(exc)


def _gallery() -> None:
    from fusionviz import samples

    items = samples.list_samples()
    if not items:
        st.caption("No sample models are installed (run `make samples`).")
        return
    origin = st.session_state.get(state.ORIGIN) or {}
    cols = st.columns(3)
    for i, s in enumerate(items):
        with cols[i % 3].container(border=True):
            current = origin.get("kind") == "sample" and origin.get("name") == s.name
            st.markdown(f"**{s.title}**" + ("  :green-badge[:material/check: open]" if current else ""))
            st.caption(s.description)
            st.button("Open" if not current else "Open again", key=f"sample_{s.name}",
                      on_click=_load_sample, args=(s.name,), width="stretch",
                      type="secondary" if current else "primary")


def _upload() -> None:
    up = st.file_uploader("Upload an ONNX model (.onnx, or a .zip of a folder with external data)",
                          type=["onnx", "zip"], key="upload")
    if up is None:
        st.session_state["fv_upload_sha"] = None
        st.session_state["fv_upload_error"] = None
        return
    data = up.getvalue()
    sha = cache.bytes_sha(data)
    if st.session_state.get("fv_upload_sha") == sha:
        return  # this upload is already the current model (or already failed)
    st.session_state["fv_upload_sha"] = sha
    try:
        loaded = cache.load_bytes(sha, up.name, data)
    except errors.FusionvizError as exc:
        st.session_state["fv_upload_error"] = str(exc)
        return
    st.session_state["fv_upload_error"] = None
    state.set_model(loaded, {"kind": "upload", "name": loaded.name})


def _summary(loaded) -> None:
    s = cache.summary(loaded.sha256, loaded.proto)
    cost = None
    try:
        cost = cache.model_cost(loaded.sha256, state.shapes_key(), loaded.proto)
    except ImportError:
        pass
    except errors.FusionvizError as exc:
        st.caption(f"FLOPs not available: {exc}")
    c = st.columns(5)
    c[0].metric("Nodes", f"{s.node_count:,}")
    c[1].metric("Parameters", common.fmt_count(s.param_count))
    c[2].metric("Weights", common.fmt_bytes(s.param_bytes))
    flops = getattr(cost, "flops", None) if cost is not None else None
    c[3].metric("FLOPs", common.fmt_count(flops) if flops else "-",
                help="Multiply-adds count as two FLOPs; common ops only.")
    c[4].metric("Opsets", ", ".join(f"{k.replace('ai.onnx', 'onnx')} {v}" for k, v in s.opsets.items()))
    st.caption(f"Producer: {s.producer or '-'} · IR {s.ir_version} · source: {loaded.source} · "
               f"sha256 `{loaded.short_hash}`")
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Inputs**")
        st.dataframe(pd.DataFrame([{"name": i["name"], "dtype": i["dtype"],
                                    "shape": "[" + ", ".join(map(str, i["shape"])) + "]"}
                                   for i in s.inputs]), hide_index=True, width="stretch")
        st.markdown("**Outputs**")
        st.dataframe(pd.DataFrame([{"name": o["name"], "dtype": o["dtype"],
                                    "shape": "[" + ", ".join(map(str, o["shape"])) + "]"}
                                   for o in s.outputs]), hide_index=True, width="stretch")
    with right:
        st.markdown("**Op histogram**")
        hist = pd.DataFrame({"op": list(s.op_histogram), "count": list(s.op_histogram.values())})
        st.bar_chart(hist.head(25), x="op", y="count", horizontal=True, sort="-count", height=320)


def _on_dim(name: str) -> None:
    dims = dict(st.session_state.get(state.DIMS) or {})
    dims[name] = int(st.session_state[f"dim_{name}"])
    st.session_state[state.DIMS] = dims


def _dims(loaded) -> None:
    sym = state.symbolic_dims(loaded)
    if not sym:
        st.caption("All input dims are fixed: nothing to set.")
        return
    st.markdown("**Symbolic input dims** — set once here; passes, verification and the benchmark "
                "all use these values.")
    cols = st.columns(min(4, len(sym)))
    current = st.session_state.get(state.DIMS) or {}
    for i, (inp, name, default) in enumerate(sym):
        state.seed(f"dim_{name}", int(current.get(name, default)))
        cols[i % len(cols)].number_input(f"{name}  (input {inp})", min_value=1, max_value=100_000,
                                         step=1, key=f"dim_{name}", on_change=_on_dim, args=(name,))
    st.caption("Shapes used: " + ", ".join(f"`{k}` = {v}" for k, v in state.shapes().items()))


def body() -> None:
    """The Model page."""
    st.title("Model")
    st.markdown("Open a sample or upload your own model. Everything else in the app works on the "
                "model chosen here.")
    st.subheader("Samples")
    _gallery()
    st.subheader("Upload")
    _upload()
    err = st.session_state.get("fv_upload_error")
    if err:
        st.error(err)
    loaded = state.model()
    if loaded is None:
        return
    st.subheader(f"Summary: {loaded.name}")
    _summary(loaded)
    _dims(loaded)
    st.divider()
    c1, c2 = st.columns(2)
    if c1.button("See the graph before / after →", key="model_to_graph", type="primary",
                 width="stretch"):
        common.switch("graph")
    if c2.button("Toggle passes →", key="model_to_passes", width="stretch"):
        common.switch("passes")


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Model", body)


if __name__ == "__main__":
    render()
